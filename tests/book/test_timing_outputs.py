"""Timings in the lessons carry their spread and their provenance.

A wall-clock figure is the one output another machine, or this one a minute later, does not
reproduce. So a lesson cell that times something (``attnlib.analysis.timing``, or a clock of
its own) must: keep its output out of nbval's comparison (the cell tag
``nbval-ignore-output``); print every time with its range and the number of repeats
(``Timing``'s form, "range a-b, median of n"); print every ratio with its range over
interleaved repeats; name the machine
(``attnlib.analysis.timing.machine``); and label a ratio that times Triton's interpreter as
such. And no markdown cell quotes a time, since the page cannot know the reader's machine.
"""

from __future__ import annotations

import re

import pytest

TIMES = re.compile(r"time_side_by_side|perf_counter|time\.time\(|timeit|time\.monotonic")
# A number with a unit of time: "7.17 ms", "354 µs", "1.2 s".
A_TIME = re.compile(r"\b\d[\d.,]*\s?(ns|µs|us|ms|s)\b")
# A ratio of two timings as Ratio prints it, or written out: "a / b: 1.78", "3x faster".
A_RATIO = re.compile(r"\S / \S.*:\s*[\d.,]+|\b[\d.,]+\s?[x×]\s(faster|slower)")
MACHINE = re.compile(r"torch \d+\.\d+")


def _text(output) -> str:
    return "".join(output.get("text", "")) + "".join(output.get("data", {}).get("text/plain", ""))


def _timing_cells(lessons):
    for stem, lesson in sorted(lessons.items()):
        for index, cell in enumerate(lesson.cells):
            if cell.cell_type == "code" and TIMES.search(cell.source):
                yield stem, index, cell


def test_some_lessons_time_something(lessons):
    """The checks below have cells to read (lessons 05, 13 and 14 time their kernels)."""
    assert {stem for stem, _, _ in _timing_cells(lessons)} >= {"13_attention_as_a_kernel",
                                                              "14_your_model"}


def test_each_timing_cell_prints_spread_and_provenance(lessons):
    problems = []
    for stem, index, cell in _timing_cells(lessons):
        where = f"{stem} c{index}"
        if "nbval-ignore-output" not in cell.metadata.get("tags", []):
            problems.append(f"{where}: times something but nbval compares its output")
        text = "\n".join(_text(o) for o in cell.get("outputs", []))
        if text and not MACHINE.search(text):
            problems.append(f"{where}: prints timings without the machine that ran them")
        on_cpu = "+cpu" in text or "cuda" not in text.lower()  # the machine line says so
        problems += [f"{where}: {problem}: {line!r}" for line in text.splitlines()
                     for problem in _line_problems(line, on_cpu)]
    assert not problems, "\n".join(problems)


def _line_problems(line: str, on_cpu: bool) -> list[str]:
    """What one printed line of a timing cell leaves out."""
    problems = []
    if A_TIME.search(line) and not ("range" in line and "median of" in line):
        problems.append("a time without its range and repeats")
    if A_RATIO.search(line) and "range" not in line:
        problems.append("a ratio without its range")
    if (A_RATIO.search(line) and on_cpu and re.search(r"\bkernel\b", line)
            and "interpreter" not in line.lower()):
        problems.append("a kernel ratio on the CPU (Triton's interpreter) that does not say so")
    return problems


@pytest.mark.parametrize("line, bad", [
    ("yours / attnlib: 1.78 (range 1.76-1.8 over 5 interleaved repeats)", False),
    ("yours / attnlib: 3.0", True),
    ("yours         7.17 ms (range 7.15-7.32, median of 5) for 16 tokens", False),
    ("yours         7.17 ms for 16 tokens", True),
    ("kernel / SDPA: 637 (range 588-668 over 5 interleaved repeats)", True),
    ("interpreter / SDPA, the interpreter's: 637 (range 588-668 over 5 repeats)", False),
])
def test_the_checks_tell_a_bare_figure_from_a_reported_one(line, bad):
    assert bool(_line_problems(line, on_cpu=True)) == bad


def test_a_time_in_the_prose_is_printed_by_a_cell_that_does_not_time(lessons):
    """A markdown cell may quote a time only where a cell computes it without a clock (a
    card's recorded training time, a traffic model's bound): never a live measurement,
    which the page cannot know for the reader's machine."""
    quoted = []
    for stem, lesson in sorted(lessons.items()):
        printed = "\n".join(_text(o) for c in lesson.cells
                            if c.cell_type == "code" and not TIMES.search(c.source)
                            for o in c.get("outputs", []))
        printed = printed.replace("us", "µs")
        for i, cell in enumerate(lesson.cells):
            if cell.cell_type != "markdown":
                continue
            for m in A_TIME.finditer(re.sub(r"\$[^$]*\$", "", cell.source)):
                if m[0].replace("us", "µs") not in printed:
                    quoted.append(f"{stem} c{i}: {m[0]!r}")
    assert not quoted, quoted
