"""Every twin in every lesson's committed outputs names each parameter and shows each value
by a label short enough to read whole on its control: a long value (a prompt) gets a short
name through twin's ``texts``, never its first characters cut mid-word."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

LESSONS = sorted((Path(__file__).resolve().parents[2] / "lessons").glob("*.ipynb"))
PLOTLY_MIME = "application/vnd.plotly.v1+json"
# The longest value label a control shows whole at a phone's width beside its name.
MAX_TEXT = 20
# Parameters whose values are text the model reads (prompts end mid-word, to be continued):
# their controls show short names instead.
TEXT_PARAMS = {"prompt", "text"}


def _twins(path: Path) -> list[dict]:
    cells = json.loads(path.read_text(encoding="utf-8"))["cells"]
    found = []
    for cell in cells:
        for output in cell.get("outputs", []):
            figure = output.get("data", {}).get(PLOTLY_MIME)
            twin = ((figure or {}).get("layout", {}).get("meta") or {}).get("twin")
            if twin:
                found.append(twin)
    return found


@pytest.mark.parametrize("path", LESSONS, ids=[p.name for p in LESSONS])
def test_twin_controls_have_whole_labels(path: Path) -> None:
    for k, twin in enumerate(_twins(path)):
        for param in twin["params"]:
            where = f"twin {k + 1}, parameter {param['name']!r}"
            assert param["label"].strip(), f"{where} has no label"
            assert len(param["text"]) == len(param["values"]), where
            long = [t for t in param["text"] if len(t) > MAX_TEXT]
            assert not long, (
                f"{where}: value labels over {MAX_TEXT} characters {long}; give them short "
                "names with twin(..., texts={name: {value: short name}})"
            )


@pytest.mark.parametrize("path", LESSONS, ids=[p.name for p in LESSONS])
def test_prompts_are_shown_by_short_names(path: Path) -> None:
    for k, twin in enumerate(_twins(path)):
        for param in twin["params"]:
            if param["name"] in TEXT_PARAMS:
                same = [t for t, v in zip(param["text"], param["values"], strict=True) if t == v]
                assert not same, f"twin {k + 1} shows prompts as their text: {same}"


def test_lesson_12_twins_name_their_prompts() -> None:
    (path,) = [p for p in LESSONS if p.name.startswith("12_")]
    prompts = [p for twin in _twins(path) for p in twin["params"] if p["name"] == "prompt"]
    assert len(prompts) == 2, "lesson 12's two walk twins move the prompt"
