"""Run every lesson on its own, the way Colab runs it: no repository, only installed packages.

For each lesson: copy the notebook alone into an empty temporary folder, then execute it top to
bottom with nbclient, in a kernel whose Python has attnlib installed from a wheel of this
repository plus what Colab ships (torch, numpy, pandas, plotly, ipywidgets, a Jupyter
kernel), with the temporary folder as working directory, no PYTHONPATH and no user or
IPython configuration. A lesson that reads a repository file, or relies on anything attnlib
does not install, fails here. attnlib's own dependencies (pyproject.toml) must all be among
what Colab ships: `pip check` in the environment fails otherwise, naming the package.

The environment lives in _build/standalone-venv and is rebuilt only when the pins change
(pip's cache makes that fast); attnlib is rebuilt and reinstalled on every run.

Usage: python tests/check_lessons_standalone.py [lessons/NN_slug.ipynb ...]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import venv
from importlib import metadata
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
VENV_DIR = REPO / "_build" / "standalone-venv"
# What Colab ships that attnlib and the lessons use, at the versions requirements.txt pins...
COLAB_PACKAGES = ("torch", "numpy", "pandas", "plotly", "ipywidgets", "ipykernel")
# ...and the executor, at the versions installed next to this script.
RUNNER_PACKAGES = ("nbclient", "nbformat")
CELL_TIMEOUT_S = 300

RUNNER = """
import sys

import nbclient
import nbclient.output_widget
import nbformat

# nbclient's stand-in for an Output widget syncs its state on the shell channel while the
# client is waiting there for the cell's reply, which can stall the cell until it times
# out (jupyter/nbclient#312). Nothing here reads that state back, so skip the sync.
nbclient.output_widget.OutputWidget.sync_state = lambda self: None

notebook = nbformat.read(sys.argv[1], as_version=4)
nbclient.NotebookClient(
    notebook, timeout=int(sys.argv[2]), kernel_name="python3", allow_errors=False
).execute()
"""


def _pins() -> list[str]:
    pinned = {}
    for line in (REPO / "requirements.txt").read_text(encoding="utf-8").splitlines():
        match = re.match(r"^([A-Za-z0-9_.-]+)==(\S+)", line.strip())
        if match:
            pinned[match[1].lower()] = match[2]
    missing = [name for name in COLAB_PACKAGES if name not in pinned]
    if missing:
        raise SystemExit(f"requirements.txt pins no exact version of {missing}")
    pins = [f"{name}=={pinned[name]}" for name in COLAB_PACKAGES]
    pins += [f"{name}=={metadata.version(name)}" for name in RUNNER_PACKAGES]
    return pins


def _python(venv_dir: Path) -> Path:
    return venv_dir / "bin" / "python"


def _ensure_venv(pins: list[str]) -> Path:
    """The cached environment with Colab's packages, rebuilt when the pins change."""
    stamp = VENV_DIR / "pins.txt"
    wanted = "\n".join([sys.version, *pins]) + "\n"
    if stamp.is_file() and stamp.read_text(encoding="utf-8") == wanted:
        return _python(VENV_DIR)
    print(f"creating {VENV_DIR.relative_to(REPO)} with {', '.join(pins)}", flush=True)
    venv.EnvBuilder(with_pip=True, clear=True).create(VENV_DIR)
    subprocess.run(
        [_python(VENV_DIR), "-m", "pip", "install", "--quiet", *pins], check=True
    )
    stamp.write_text(wanted, encoding="utf-8")
    return _python(VENV_DIR)


def _install_attnlib(python: Path, workdir: Path) -> None:
    """Build a wheel of the repository and install it (not editable) into the venv.

    The wheel goes in without its dependencies, so nothing is fetched; `pip check` then
    fails when pyproject.toml asks for a package (or a version) that the environment, that
    is Colab's packages, does not provide.
    """
    wheels = workdir / "wheels"
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "-w", wheels, REPO],
        check=True,
    )
    (wheel,) = wheels.glob("attnlib-*.whl")
    subprocess.run(
        [python, "-m", "pip", "install", "--quiet", "--no-deps", "--force-reinstall", wheel],
        check=True,
    )
    result = subprocess.run(
        [python, "-m", "pip", "check"], capture_output=True, text=True, check=False
    )
    if result.returncode != 0:
        raise SystemExit(
            "attnlib needs a package the standalone environment lacks; add it to "
            f"COLAB_PACKAGES (and requirements.txt) if Colab ships it:\n{result.stdout}"
        )


def _clean_env(python: Path, home: Path) -> dict[str, str]:
    """An environment that reaches nothing of the repository or of this user's setup."""
    env = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith(("PYTHON", "JUPYTER", "IPYTHON", "PLOTLY", "VIRTUAL_ENV"))
        and key not in {"HOME", "PATH", "ATTNLIB_DEVICE"}
    }
    env.update(
        HOME=str(home),
        PATH=f"{python.parent}{os.pathsep}/usr/bin{os.pathsep}/bin",
        PYTHONNOUSERSITE="1",
        # The kernel spec written below is the only one Jupyter finds first.
        JUPYTER_PATH=str(home / "jupyter"),
        IPYTHONDIR=str(home / "ipython"),
    )
    return env


def _write_kernel_spec(python: Path, home: Path) -> None:
    spec_dir = home / "jupyter" / "kernels" / "python3"
    spec_dir.mkdir(parents=True)
    spec = {
        "argv": [str(python), "-m", "ipykernel_launcher", "-f", "{connection_file}"],
        "display_name": "Python 3 (standalone check)",
        "language": "python",
    }
    (spec_dir / "kernel.json").write_text(json.dumps(spec), encoding="utf-8")


def check_lesson(python: Path, lesson: Path) -> str | None:
    """Run one lesson alone; return None when it ran top to bottom, else the error."""
    with tempfile.TemporaryDirectory(prefix="lesson-") as tmp:
        folder = Path(tmp) / "work"
        home = Path(tmp) / "home"
        folder.mkdir()
        home.mkdir()
        shutil.copy2(lesson, folder / lesson.name)
        _write_kernel_spec(python, home)
        env = _clean_env(python, home)
        where = subprocess.run(
            [python, "-c", "import attnlib; print(attnlib.__file__)"],
            cwd=folder, env=env, capture_output=True, text=True, check=True,
        ).stdout.strip()
        if not Path(where).is_relative_to(VENV_DIR):
            return f"attnlib was imported from {where}, not from the standalone venv"
        result = subprocess.run(
            [python, "-c", RUNNER, lesson.name, str(CELL_TIMEOUT_S)],
            cwd=folder, env=env, capture_output=True, text=True,
        )
        if result.returncode != 0:
            return (result.stdout + result.stderr).strip()[-4000:]
    return None


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("lessons", nargs="*", type=Path)
    args = parser.parse_args()
    lessons = [path.resolve() for path in args.lessons] or sorted(
        (REPO / "lessons").glob("*.ipynb")
    )
    if not lessons:
        print("no lesson to check in lessons/")
        return 1
    python = _ensure_venv(_pins())
    with tempfile.TemporaryDirectory(prefix="attnlib-wheel-") as tmp:
        _install_attnlib(python, Path(tmp))
    failed = 0
    for lesson in lessons:
        error = check_lesson(python, lesson)
        status = "ok" if error is None else "FAILED"
        print(f"{lesson.name}: {status}", flush=True)
        if error is not None:
            failed += 1
            print(error, flush=True)
    print(f"standalone lessons: {len(lessons) - failed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
