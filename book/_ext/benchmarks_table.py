"""The ``benchmark-table`` directive: the benchmarks' saved results as a table, at build time.

``benchmarks/run.py --save`` writes ``benchmarks/results/<device>.json`` (``cpu.json``, and
``cuda.json`` when someone measured on a GPU). The directive reads those files and writes,
in docutils nodes (so the table is a real ``<table>`` on the site and in the PDF):

- a line per results file saying where and when it was measured (device, CPU, threads,
  OS, versions, date), and which targets it met;
- when only CPU results exist, a sentence saying so, built from the file's device field;
- the table: ``benchmark`` and ``case`` as row headers, then run.py's columns (attnlib,
  baseline, ratio, target, check) once per device: a GPU's columns appear only when its
  file exists;
- the notes that say what each benchmark ran.

The ``benchmark-targets`` directive lists the targets of ``cpu.json`` as the checks
``run.py`` made (``report.targets_text``), bounds and sizes included, with their verdicts.

The rows come from ``benchmarks/report.py``, the module that formats run.py's printed table,
so the page and the terminal show the same cells. A missing ``cpu.json``, a file that is
not JSON or does not follow the schema of ``report.SCHEMA``, a file whose device disagrees
with its name, or the results of a ``--quick`` smoke run stop the build with an error that
names the file and the problem. The page is read again on every build, so a new or
updated results file always reaches it.

Configuration: ``benchmarks_dir`` (default ``benchmarks``), relative to the book's root.
"""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path
from types import ModuleType
from typing import Any

from docutils import nodes
from sphinx.application import Sphinx
from sphinx.errors import ExtensionError
from sphinx.util.docutils import SphinxDirective

# The results file that must exist; any other <device>.json adds its own columns.
REQUIRED_DEVICE = "cpu"
REPRODUCE = ".venv/bin/python benchmarks/run.py --save"
# A number keeps its unit on its line in a narrow column ("62.50 ms", not "62.50" / "ms").
UNIT_SPACE = re.compile(r"(?<=\d) (?=[A-Za-z])")


def load_report(benchmarks: Path) -> ModuleType:
    """``benchmarks/report.py``, imported from its path (it needs only the standard library)."""
    path = benchmarks / "report.py"
    if not path.is_file():
        raise ExtensionError(f"benchmark-table: {path} is missing; it formats the results")
    spec = importlib.util.spec_from_file_location("_book_benchmarks_report", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def load_runs(report: ModuleType, folder: Path) -> dict[str, dict]:
    """Every results file in ``folder`` by device type, CPU first; an error when one is bad."""
    required = report.results_path(REQUIRED_DEVICE, folder)
    if not required.is_file():
        raise ExtensionError(
            f"benchmark-table: {required} is missing. The performance page shows the saved "
            f"results of the benchmarks: run `{REPRODUCE}` and commit the file."
        )
    paths = [required, *sorted(p for p in folder.glob("*.json") if p != required)]
    runs = {}
    for path in paths:
        try:
            results = report.load(path)
        except ValueError as error:
            raise ExtensionError(f"benchmark-table: {error}") from None
        device_type = results["device"].partition(":")[0]
        if device_type != path.stem:
            raise ExtensionError(
                f"benchmark-table: {path} holds results measured on {results['device']!r}; "
                f"results of device type {device_type!r} belong in "
                f"{report.results_path(device_type, folder).name}"
            )
        if results["quick"]:
            raise ExtensionError(
                f"benchmark-table: {path} holds a --quick smoke run, not a measurement: "
                f"run `{REPRODUCE}` (without --quick) and commit the file."
            )
        runs[path.stem] = results
    return runs


def table_cells(report: ModuleType, runs: dict[str, dict]) -> tuple[list[str], list[list[str]]]:
    """The header and rows: ``benchmark`` and ``case``, then run.py's columns per device.

    With one device the header is run.py's; with more, each device's columns carry its name
    ("ratio (cuda)"), and a row measured on one device only shows a dash in the others.
    """
    key_columns, per_device = list(report.HEADER[:2]), list(report.HEADER[2:])
    merged: dict[tuple[str, ...], dict[str, tuple[str, ...]]] = {}
    for device, results in runs.items():
        for row in report.rows(results):
            merged.setdefault(row[:2], {})[device] = row[2:]
    if len(runs) == 1:
        header = key_columns + per_device
    else:
        header = key_columns + [f"{name} ({device})" for device in runs for name in per_device]
    dash = ("\u2013",) * len(per_device)
    body = [
        [*key, *(cell for device in runs for cell in cells.get(device, dash))]
        for key, cells in merged.items()
    ]
    return header, body


def _row(cells: list[str]) -> nodes.row:
    row = nodes.row()
    for text in cells:
        entry = nodes.entry()
        entry += nodes.paragraph(text=UNIT_SPACE.sub("\u00a0", text))
        row += entry
    return row


def table_node(header: list[str], body: list[list[str]], caption: str) -> nodes.table:
    """A docutils table with a caption; the first two columns are row headers (stubs)."""
    table = nodes.table(classes=["benchmark-table", "colwidths-auto"])
    table += nodes.title(text=caption)
    group = nodes.tgroup(cols=len(header))
    table += group
    for i in range(len(header)):
        group += nodes.colspec(colwidth=1, stub=int(i < 2))
    thead = nodes.thead()
    thead += _row(header)
    tbody = nodes.tbody()
    for cells in body:
        tbody += _row(cells)
    group += thead
    group += tbody
    return table


class BenchmarkTable(SphinxDirective):
    """``benchmark-table``: no argument, no content; see the module's docstring."""

    has_content = False
    required_arguments = 0
    optional_arguments = 0

    def run(self) -> list[nodes.Node]:
        # Read again on every build: the set of results files may change without this page.
        self.env.note_reread()
        benchmarks = Path(self.env.srcdir) / self.config.benchmarks_dir
        report = load_report(benchmarks)
        runs = load_runs(report, benchmarks / "results")
        out: list[nodes.Node] = [
            nodes.paragraph(
                text=f"{report.machine_line(results)}. {report.targets_line(results)}.",
                classes=["benchmark-machine"],
            )
            for results in runs.values()
        ]
        devices = ", ".join(results["device"] for results in runs.values())
        if set(runs) == {REQUIRED_DEVICE}:
            device = runs[REQUIRED_DEVICE]["device"]
            out.append(nodes.paragraph(
                text=f"Every figure below was measured on the {device} device: these are CPU "
                     "figures. No GPU results are saved, so the table has no GPU columns."
            ))
        header, body = table_cells(report, runs)
        out.append(table_node(header, body, f"The benchmarks, measured on {devices}."))
        legend = nodes.bullet_list(classes=["benchmark-notes"])
        seen: set[str] = set()
        for device, results in runs.items():
            for note in report.notes(results):
                if note not in seen:
                    seen.add(note)
                    item = nodes.list_item()
                    prefix = "" if device == next(iter(runs)) else f"({device}) "
                    item += nodes.paragraph(text=prefix + note)
                    legend += item
        out.append(legend)
        return out


class BenchmarkTargets(SphinxDirective):
    """``benchmark-targets``: each target of the CPU results as the check run.py made."""

    has_content = False
    required_arguments = 0
    optional_arguments = 0

    def run(self) -> list[nodes.Node]:
        self.env.note_reread()
        benchmarks = Path(self.env.srcdir) / self.config.benchmarks_dir
        report = load_report(benchmarks)
        results = load_runs(report, benchmarks / "results")[REQUIRED_DEVICE]
        targets = nodes.bullet_list(classes=["benchmark-targets"])
        for text in report.targets_text(results):
            item = nodes.list_item()
            item += nodes.paragraph(text=text)
            targets += item
        return [targets]


def setup(app: Sphinx) -> dict[str, Any]:
    app.add_config_value("benchmarks_dir", "benchmarks", "env", [str])
    app.add_directive("benchmark-table", BenchmarkTable)
    app.add_directive("benchmark-targets", BenchmarkTargets)
    return {"version": "1.0", "parallel_read_safe": True, "parallel_write_safe": True}
