"""Execute lessons top to bottom in a fresh kernel and save them with their outputs.

    .venv/bin/python tests/execute_lessons.py lessons/01_attention_as_lookup.ipynb
    make execute NB=lessons/01_attention_as_lookup.ipynb   # the same, through make
    make execute                                           # every lesson

Lessons are committed executed, because the book build never runs them and nbval compares
each output with the committed one. Nothing reads widget state (the site shows each
explorer's kernel-free twin), so the saved notebook carries none. nbclient cannot run a live
explorer with ``store_widget_state=False`` (its Output-widget stand-in then fails), so the
state is stored during the run and dropped before saving, with the cells' run timestamps.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import nbclient
import nbclient.output_widget
import nbformat

# nbclient's stand-in for an Output widget syncs its state on the shell channel while the
# client waits there for the cell's reply, which can stall a live explorer's cell until the
# timeout (jupyter/nbclient#312). The saved notebook keeps no widget state, so skip the sync.
nbclient.output_widget.OutputWidget.sync_state = lambda self: None

LESSONS = Path(__file__).resolve().parent.parent / "lessons"


def execute(path: Path) -> float:
    """Run ``path`` in a fresh ``python3`` kernel from the lessons folder; return seconds."""
    nb = nbformat.read(path, as_version=4)
    start = time.perf_counter()
    nbclient.NotebookClient(
        nb, timeout=600, kernel_name="python3", record_timing=False,
        resources={"metadata": {"path": str(LESSONS)}},
    ).execute()
    seconds = time.perf_counter() - start
    nb.metadata.pop("widgets", None)
    for cell in nb.cells:  # run timestamps would make every execution a diff
        cell.metadata.pop("execution", None)
    nbformat.write(nb, path)
    return seconds


def main(argv: list[str]) -> int:
    paths = [Path(a) for a in argv] or sorted(LESSONS.glob("[0-9][0-9]_*.ipynb"))
    for path in paths:
        if path.suffix != ".ipynb" or not path.is_file():
            print(f"not a notebook: {path}", file=sys.stderr)
            return 2
        print(f"{path.name}: executed in {execute(path):.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
