"""The local Sphinx extension book/_ext/benchmarks_table.py, without a build: which results
files it reads, what it refuses, and the table it makes from them."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from types import ModuleType

import pytest
from docutils import nodes
from sphinx.errors import ExtensionError

ROOT = Path(__file__).resolve().parents[2]
EXTENSION = ROOT / "book" / "_ext" / "benchmarks_table.py"
SAMPLE = ROOT / "tests" / "benchmark_results_sample.json"


@pytest.fixture(scope="module")
def extension(load_script) -> ModuleType:
    return load_script(EXTENSION)


@pytest.fixture(scope="module")
def report(extension: ModuleType) -> ModuleType:
    return extension.load_report(ROOT / "benchmarks")


@pytest.fixture
def results_dir(tmp_path: Path) -> Path:
    """A results folder holding the sample as cpu.json."""
    folder = tmp_path / "results"
    folder.mkdir()
    shutil.copy(SAMPLE, folder / "cpu.json")
    return folder


def _gpu_run(folder: Path, **changes: object) -> dict:
    """Write the sample, measured on cuda:0 with one attention size, as cuda.json."""
    results = json.loads(SAMPLE.read_text(encoding="utf-8"))
    results.update(device="cuda:0", attention=results["attention"][1:], **changes)
    results["machine"]["gpu"] = "Example GPU"
    (folder / "cuda.json").write_text(json.dumps(results), encoding="utf-8")
    return results


def test_cpu_only_table_has_run_py_columns(extension, report, results_dir) -> None:
    runs = extension.load_runs(report, results_dir)
    assert list(runs) == ["cpu"]
    header, body = extension.table_cells(report, runs)
    assert header == list(report.HEADER)
    assert body == [list(row) for row in report.rows(runs["cpu"])]


def test_gpu_columns_appear_with_a_gpu_file(extension, report, results_dir) -> None:
    _gpu_run(results_dir)
    runs = extension.load_runs(report, results_dir)
    assert list(runs) == ["cpu", "cuda"]
    header, body = extension.table_cells(report, runs)
    assert header[:2] == ["benchmark", "case"]
    assert header[2:7] == [f"{name} (cpu)" for name in report.HEADER[2:]]
    assert header[7:] == [f"{name} (cuda)" for name in report.HEADER[2:]]
    assert all(len(row) == len(header) for row in body)
    only_cpu = body[0]  # N=1024 was measured on the CPU only
    assert only_cpu[:2] == ["attention auto / SDPA", "N=1024"]
    assert only_cpu[7:] == ["\u2013"] * 5


@pytest.mark.parametrize(
    ("setup", "message"),
    [
        (lambda folder: (folder / "cpu.json").unlink(), r"cpu\.json is missing.*--save"),
        (lambda folder: (folder / "cpu.json").write_text("{"), r"cpu\.json: not a JSON file"),
        (lambda folder: (folder / "cpu.json").write_text("{}"),
         r"(?s)cpu\.json: not a results file.*missing field 'date'"),
        (lambda folder: _gpu_run(folder, quick=True), r"cuda\.json holds a --quick smoke run"),
        (lambda folder: shutil.copy(folder / "cpu.json", folder / "cuda.json"),
         r"cuda\.json holds results measured on 'cpu'.*cpu\.json"),
    ],
)
def test_bad_results_stop_the_build(extension, report, results_dir, setup, message) -> None:
    setup(results_dir)
    with pytest.raises(ExtensionError, match=message):
        extension.load_runs(report, results_dir)


def test_table_node_is_a_captioned_table_with_row_headers(extension, report) -> None:
    results = json.loads(SAMPLE.read_text(encoding="utf-8"))
    header, body = extension.table_cells(report, {"cpu": results})
    table = extension.table_node(header, body, "The benchmarks.")
    assert isinstance(table[0], nodes.title) and table[0].astext() == "The benchmarks."
    group = table[1]
    assert [spec["stub"] for spec in group.findall(nodes.colspec)] == [1, 1, 0, 0, 0, 0, 0]
    (thead,) = group.findall(nodes.thead)
    assert [entry.astext() for entry in thead.findall(nodes.entry)] == header
    (tbody,) = group.findall(nodes.tbody)
    assert len(tbody.children) == len(body)


def _build(tmp_path: Path, benchmarks: Path) -> str:
    """Build a one-page Sphinx project whose page holds the directive; return its HTML."""
    from sphinx.application import Sphinx
    from sphinx.util.docutils import docutils_namespace

    src = tmp_path / "src"
    src.mkdir(parents=True)
    (src / "index.md").write_text("# Performance\n\n```{benchmark-table}\n```\n\n"
                                  "```{benchmark-targets}\n```\n")
    (src / "conf.py").write_text(
        "import sys\n"
        f"sys.path.insert(0, {str(EXTENSION.parent)!r})\n"
        "extensions = ['myst_parser', 'benchmarks_table']\n"
        f"benchmarks_dir = {str(benchmarks)!r}\n"
    )
    out = tmp_path / "out"
    with docutils_namespace():  # each build registers its directives and nodes afresh
        app = Sphinx(str(src), str(src), str(out), str(tmp_path / "doctrees"), "html",
                     status=None, warning=None, freshenv=True, warningiserror=True)
        app.build()
    return (out / "index.html").read_text(encoding="utf-8")


def test_a_build_shows_the_table_or_stops(tmp_path: Path, results_dir: Path) -> None:
    """In a real build the page gets the table; without cpu.json the build stops, naming
    the file and the command that writes it (not a page with nothing on it)."""
    benchmarks = results_dir.parent
    shutil.copy(ROOT / "benchmarks" / "report.py", benchmarks / "report.py")
    page = _build(tmp_path / "good", benchmarks)
    assert '<table class="benchmark-table' in page
    assert "these are CPU figures" in page
    assert 'class="benchmark-targets' in page and "at most 0.6 times" in page
    (results_dir / "cpu.json").unlink()
    with pytest.raises(ExtensionError, match=r"cpu\.json is missing.*benchmarks/run\.py --save"):
        _build(tmp_path / "bad", benchmarks)
