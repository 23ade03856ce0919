"""Fixtures for the book checks: the book's sources, its lessons and the built site.

The book root defaults to the repository root; BOOK_ROOT points the checks at another
Jupyter Book folder (one with _config.yml, _toc.yml, lessons/ and _build/html). The checks
in site/ need a built site (`make book`); `make test` builds it and sets
BOOK_SITE_REQUIRED=1, which turns a missing build into a failure instead of a skip.
BOOK_SITE_DIR names the built HTML folder when it is not <book root>/_build/html, for a
build made elsewhere (`jupyter-book build . --path-output DIR` writes DIR/_build/html); the
build log is then read from the logs/ folder next to it.
"""

from __future__ import annotations

import functools
import http.server
import importlib.util
import os
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from types import ModuleType

import nbformat
import pytest
import yaml

REPO_ROOT = Path(__file__).resolve().parents[2]

# The first code cell of every lesson, word for word; {url} is _config.yml's repository.url.
SETUP_CELL = """\
# Setup: install attnlib when it is missing (Colab), seed the generators, pick the device.
import importlib.util

if importlib.util.find_spec("attnlib") is None:
    %pip install --quiet "attnlib @ git+{url}"

import torch

import attnlib

torch.manual_seed(0)
torch.set_printoptions(precision=4, sci_mode=False)
device = attnlib.default_device()"""


def _load_script(path: Path) -> ModuleType:
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="session")
def load_script() -> Callable[[Path], ModuleType]:
    """Imports a Python file that is not a module of a package (book/_ext/*.py,
    benchmarks/*.py) from its path."""
    return _load_script


@pytest.fixture(scope="session")
def book_root() -> Path:
    return Path(os.environ.get("BOOK_ROOT", REPO_ROOT)).resolve()


@pytest.fixture(scope="session")
def book_config(book_root: Path) -> dict:
    return yaml.safe_load((book_root / "_config.yml").read_text(encoding="utf-8"))


@pytest.fixture(scope="session")
def toc(book_root: Path) -> dict:
    return yaml.safe_load((book_root / "_toc.yml").read_text(encoding="utf-8"))


@pytest.fixture(scope="session")
def toc_files(toc: dict) -> list[str]:
    """Every document of the table of contents, root first, without suffix."""
    files = [toc["root"]]
    for part in toc.get("parts", []):
        files += [chapter["file"] for chapter in part.get("chapters", [])]
    return files


@pytest.fixture(scope="session")
def setup_cell(book_config: dict) -> str:
    """The setup cell for this book's repository URL."""
    return SETUP_CELL.format(url=book_config["repository"]["url"])


@pytest.fixture(scope="session")
def lesson_paths(book_root: Path) -> list[Path]:
    paths = sorted((book_root / "lessons").glob("*.ipynb"))
    assert paths, f"no lesson notebook in {book_root / 'lessons'}"
    return paths


@pytest.fixture(scope="session")
def lessons(lesson_paths: list[Path]) -> dict[str, nbformat.NotebookNode]:
    return {path.stem: nbformat.read(path, as_version=4) for path in lesson_paths}


@pytest.fixture(scope="session")
def html_dir(book_root: Path) -> Path:
    html = Path(os.environ.get("BOOK_SITE_DIR", book_root / "_build" / "html")).resolve()
    if not (html / "index.html").is_file():
        message = f"the book is not built in {html}: run `make book` first"
        if os.environ.get("BOOK_SITE_REQUIRED") == "1":
            pytest.fail(message)
        pytest.skip(message)
    return html


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.fixture(scope="session")
def site_url(html_dir: Path) -> Iterator[str]:
    """Serve the built site on 127.0.0.1, on a free port, for the whole session."""
    handler = functools.partial(_QuietHandler, directory=str(html_dir))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join()
