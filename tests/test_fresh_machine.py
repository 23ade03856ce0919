"""What a run of make test leaves behind cannot break the next one.

attnlib's wheel for the standalone lessons is built from a fresh copy of its sources, never in
the repository, where setuptools keeps ``build/`` between runs and would still ship a module
deleted since; ``.ci/fresh-machine``, the script that tries the README's promise on a clean
clone (interrupted, then again, then beside a CPU load), refuses a step it does not know.
"""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))
import check_lessons_standalone as standalone  # noqa: E402


@pytest.mark.slow
def test_the_wheel_holds_exactly_the_modules_of_the_sources(tmp_path):
    stale = REPO / "build" / "lib" / "attnlib" / "stale_module_from_an_old_build.py"
    made = not stale.parent.exists()
    stale.parent.mkdir(parents=True, exist_ok=True)
    stale.write_text("x = 1\n")  # what an earlier in-tree build would have left
    try:
        wheel = standalone.build_wheel(tmp_path)
    finally:
        stale.unlink()
        if made:
            for folder in (stale.parent, stale.parent.parent, REPO / "build"):
                if folder.exists() and not any(folder.iterdir()):
                    folder.rmdir()
    shipped = {n for n in zipfile.ZipFile(wheel).namelist()
               if n.startswith("attnlib/") and n.endswith(".py")}
    sources = {p.relative_to(REPO).as_posix() for p in (REPO / "attnlib").rglob("*.py")
               if "__pycache__" not in p.parts}
    assert shipped == sources


def test_fresh_machine_refuses_an_unknown_step():
    done = subprocess.run([str(REPO / ".ci" / "fresh-machine"), "nap:10"],
                          capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 2
    assert "unknown step 'nap:10'" in done.stderr
