"""Run every lesson on its own, the way Colab runs it: no repository, only installed packages.

For each lesson: copy the notebook alone into an empty temporary folder, then execute it top to
bottom with nbclient, in a kernel whose Python has attnlib installed from a wheel of this
repository plus what Colab ships (torch, numpy, pandas, plotly, ipywidgets, a Jupyter kernel,
transformers, triton), with the temporary folder as working directory, no PYTHONPATH and no user or
IPython configuration. A lesson that reads a repository file, or relies on anything attnlib
does not install, fails here. After its last cell, every control of every live explorer the
lesson built is moved once and must redraw its figure.

Both ends of the supported range of versions are tested, each in its own environment:

- ``colab``: the versions of Colab's own runtime (``tests/colab-constraints.txt``); there the
  lesson's setup cell must change nothing: ``pip install`` of attnlib's wheel, with its
  dependencies, would install attnlib alone;
- ``newest``: the versions ``requirements.txt`` pins for the book's own environment.

``make test`` runs both, beside its other parts.

In both, attnlib's dependencies (pyproject.toml) must all be among what the environment
holds: ``pip check`` fails otherwise, naming the package.

The environments live in ``_build/standalone-<name>`` and are rebuilt only when their pins
change (pip's cache makes that fast); attnlib's wheel is rebuilt on every run and installed in
each. The lessons of both environments share one queue, a kernel per CPU.

Usage: python tests/check_lessons_standalone.py [--env colab|newest] [lessons/NN_slug.ipynb ...]
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
from concurrent.futures import ThreadPoolExecutor
from importlib import metadata
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
COLAB_CONSTRAINTS = REPO / "tests" / "colab-constraints.txt"
# What Colab ships that attnlib and the lessons use; the newest environment takes these
# packages at the versions requirements.txt pins.
COLAB_PACKAGES = ("torch", "numpy", "pandas", "plotly", "ipywidgets", "ipykernel", "transformers",
                  "triton")
# ...and the executor, at the versions installed next to this script.
RUNNER_PACKAGES = ("nbclient", "nbformat")
CELL_TIMEOUT_S = 300

# Appended to the lesson for the run (the lesson file is not changed): every control of every
# live explorer on the page is moved to another value, which must redraw the figure.
EXPLORER_CHECK = """
import ipywidgets as _widgets
import attnlib.viz.explore as _explore

_shown = []
_explore.display = lambda obj, **kw: _shown.append(obj)
_moved = 0
for _box in [v for v in Out.values() if isinstance(v, _widgets.VBox)]:
    for _control in _box.children[0].children:
        _start, _count = _control.value, len(_shown)
        _control.value = next(o for o in _control.options if o != _start)
        assert len(_shown) == _count + 1, f"control {_control.description!r} did not redraw"
        _control.value = _start
        _moved += 1
print(f"explorer controls redrawn: {_moved}")
"""

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
notebook.cells.append(nbformat.v4.new_code_cell(sys.argv[3]))
nbclient.NotebookClient(
    notebook, timeout=int(sys.argv[2]), kernel_name="python3", allow_errors=False
).execute()
print("".join(o.get("text", "") for o in notebook.cells[-1].outputs).strip())
"""


def _read_pins(path: Path) -> dict[str, str]:
    """``name -> version`` of every ``name==version`` line of a requirements file."""
    pinned = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        match = re.match(r"^([A-Za-z0-9_.-]+)==(\S+)", line.strip())
        if match:
            pinned[match[1].lower()] = match[2]
    return pinned


def _pins(env: str) -> list[str]:
    """The packages of environment ``env``, then the executor's."""
    if env == "colab":
        pinned = _read_pins(COLAB_CONSTRAINTS)
        names = list(pinned)
    else:
        pinned = _read_pins(REPO / "requirements.txt")
        names = list(COLAB_PACKAGES)
    missing = [name for name in COLAB_PACKAGES if name not in pinned]
    if missing:
        source = COLAB_CONSTRAINTS.name if env == "colab" else "requirements.txt"
        raise SystemExit(f"{source} pins no exact version of {missing}")
    pins = [f"{name}=={pinned[name]}" for name in names]
    pins += [f"{name}=={metadata.version(name)}" for name in RUNNER_PACKAGES]
    return pins


def _python(venv_dir: Path) -> Path:
    return venv_dir / "bin" / "python"


def _ensure_venv(env: str, pins: list[str]) -> Path:
    """The cached environment ``env``, rebuilt when its pins change."""
    venv_dir = REPO / "_build" / f"standalone-{env}"
    stamp = venv_dir / "pins.txt"
    wanted = "\n".join([sys.version, *pins]) + "\n"
    if stamp.is_file() and stamp.read_text(encoding="utf-8") == wanted:
        return _python(venv_dir)
    print(f"creating {venv_dir.relative_to(REPO)} with {', '.join(pins)}", flush=True)
    venv.EnvBuilder(with_pip=True, clear=True).create(venv_dir)
    subprocess.run(
        [_python(venv_dir), "-m", "pip", "install", "--quiet", *pins], check=True
    )
    stamp.write_text(wanted, encoding="utf-8")
    return _python(venv_dir)


# What attnlib's wheel is built from (pyproject.toml names the packages and their data).
WHEEL_SOURCES = ("pyproject.toml", "README.md", "LICENSE", "attnlib")


def build_wheel(workdir: Path) -> Path:
    """attnlib's wheel, built from a fresh copy of its sources in ``workdir``.

    setuptools builds in the source folder and keeps ``build/`` from one run to the next, so
    a wheel built in the repository would still ship a module deleted since the last build
    (and a build killed half-way would leave its files behind). The copy starts empty.
    """
    source = workdir / "source"
    source.mkdir()
    for name in WHEEL_SOURCES:
        if (REPO / name).is_dir():
            shutil.copytree(REPO / name, source / name,
                            ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
        else:
            shutil.copy2(REPO / name, source / name)
    wheels = workdir / "wheels"
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "-w", wheels, source],
        check=True,
    )
    (wheel,) = wheels.glob("attnlib-*.whl")
    return wheel


def setup_cell_changes(python: Path, wheel: Path, workdir: Path) -> list[str]:
    """What installing attnlib with its dependencies would change besides attnlib itself.

    That is what a lesson's setup cell does in Colab (``%pip install "attnlib @ git+..."``):
    pip resolves attnlib's dependencies against the packages already there. The dry run
    (attnlib uninstalled first) lists every package pip would install or upgrade.
    """
    pip = [python, "-m", "pip"]
    subprocess.run([*pip, "uninstall", "--quiet", "--yes", "attnlib"], check=False,
                   capture_output=True)
    report = workdir / f"dry-run-{python.parents[1].name}.json"  # one per environment
    subprocess.run(
        [*pip, "install", "--quiet", "--dry-run", "--report", report, wheel], check=True
    )
    planned = json.loads(report.read_text(encoding="utf-8"))["install"]
    return [
        f"{item['metadata']['name']}=={item['metadata']['version']}"
        for item in planned
        if item["metadata"]["name"].lower() != "attnlib"
    ]


def _install_attnlib(python: Path, wheel: Path) -> None:
    """Install the wheel (not editable) without its dependencies, then ``pip check``.

    Nothing is fetched; ``pip check`` fails when pyproject.toml asks for a package (or a
    version) that the environment does not provide.
    """
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
        # One lesson per CPU runs at once (main's queue), so one thread each: more
        # would only compete for the same cores.
        OMP_NUM_THREADS="1",
        MKL_NUM_THREADS="1",
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


def check_lesson(python: Path, lesson: Path) -> tuple[bool, str]:
    """Run one lesson alone: ``(True, what the explorer check printed)`` or ``(False, error)``."""
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
        if not Path(where).is_relative_to(python.parents[1]):
            return False, f"attnlib was imported from {where}, not from the standalone venv"
        result = subprocess.run(
            [python, "-c", RUNNER, lesson.name, str(CELL_TIMEOUT_S), EXPLORER_CHECK],
            cwd=folder, env=env, capture_output=True, text=True,
        )
        if result.returncode != 0:
            return False, (result.stdout + result.stderr).strip()[-4000:]
    return True, result.stdout.strip().splitlines()[-1]


def prepare_environment(env: str, wheel: Path, workdir: Path) -> Path | None:
    """Environment ``env`` with attnlib installed from ``wheel``: its Python, or None when
    the setup cell would change one of Colab's packages."""
    python = _ensure_venv(env, _pins(env))
    changes = setup_cell_changes(python, wheel, workdir)
    if env == "colab" and changes:
        print(f"[{env}] the setup cell would change Colab's packages: "
              f"{', '.join(changes)}; relax attnlib's requirements in pyproject.toml")
        return None
    _install_attnlib(python, wheel)
    print(f"[{env}] the setup cell would install attnlib and "
          f"{', '.join(changes) if changes else 'nothing else'}", flush=True)
    return python


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--env", choices=("colab", "newest"), action="append",
                        help="the environment(s) to use; default: both")
    parser.add_argument("lessons", nargs="*", type=Path)
    args = parser.parse_args()
    lessons = [path.resolve() for path in args.lessons] or sorted(
        (REPO / "lessons").glob("*.ipynb")
    )
    if not lessons:
        print("no lesson to check in lessons/")
        return 1
    envs = args.env or ["colab", "newest"]
    failed = 0
    pythons = {}
    with tempfile.TemporaryDirectory(prefix="attnlib-wheel-") as tmp:
        wheel = build_wheel(Path(tmp))
        # The environments are made side by side: pip is one process on one CPU, and
        # waits for the network where the packages are not cached.
        with ThreadPoolExecutor(max_workers=len(envs)) as pool:
            prepared = pool.map(lambda env: prepare_environment(env, wheel, Path(tmp)), envs)
            for env, python in zip(envs, prepared, strict=True):
                if python is None:
                    failed += len(lessons)
                else:
                    pythons[env] = python
    # One kernel per lesson, as many at once as there are CPUs, the lessons of both
    # environments in one queue; results print in order.
    runs = [(env, lesson) for env in pythons for lesson in lessons]
    with ThreadPoolExecutor(max_workers=os.cpu_count() or 1) as pool:
        results = pool.map(lambda run: check_lesson(pythons[run[0]], run[1]), runs)
        for (env, lesson), (ok, said) in zip(runs, results, strict=True):
            print(f"[{env}] {lesson.name}: {'ok, ' + said if ok else 'FAILED'}", flush=True)
            if not ok:
                failed += 1
                print(said, flush=True)
    total = len(lessons) * len(envs)
    print(f"standalone lessons: {total - failed} passed, {failed} failed "
          f"({len(lessons)} lessons in {' and '.join(envs)})")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
