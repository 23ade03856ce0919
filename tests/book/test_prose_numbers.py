"""Every number the prose states comes from a cell, or from a cited source.

A lesson's markdown (prose and math) may only quote a number that the reader can trace:

- an output of the same lesson that nbval checks (stream, text/plain, text/html, and the
  text a plotly figure shows: titles, labels, annotations, slider steps, trace names, but
  not its data arrays; outputs of cells tagged `nbval-ignore-output` do not count), or
- the source of one of its code cells (an input the reader sees), or
- a given constant listed in the notebook's metadata with the work it comes from:
  ``nb.metadata["attnbook"]["given"] = [{"value": "128,000", "source": "<key of
  book/references.bib>", "what": "..."}]``.

The front pages (book/*.md) follow the same rule, with the outputs and code of every lesson
as the pool, plus a ``given:`` list of the same form in the page's YAML front matter.

What counts as a number. Digit runs in prose, in math (``$...$``, ``$$...$$``, math
directives and roles) and in inline code spans, after normalising how numbers are written:
thousands separators (``128,256``, ``8{,}192``, ``128\\,256``, thin spaces), decimals,
scientific notation (``1e-6``, ``1.05 \\times 10^{9}``, ``10^9``), multiplier suffixes
(``128K``, ``70B``, ``128\\mathrm{k}``, "1.05 billion") and units (``%``, ``GiB``, ``×``...,
which do not change the value). Only numbers with two or more significant digits are
checked: leading zeros never count, trailing zeros count after a decimal point only
(``0.05`` and ``100`` have one, ``0.50`` and ``5120`` have two and three).

Not numbers: digits inside identifiers (``W_2``, ``bfloat16``, ``DeepSeek-V2``), subscripts
in math (``T_{12}``), ordered-list markers, years (a four-digit integer from 1900 to 2100
written in prose, without separator, decimals or unit; write ``2{,}048`` or use math for a
quantity in that range), chapter, lesson, section and exercise numbers ("chapter 08",
"lessons 01–02"), version numbers after a software name or dotted in three parts
("Python 3.11", "2.13.0"), model versions after a model family ("Llama 3", "Gemma 3"; the
size in "Llama 3 70B" is still checked), citation roles, cross-reference roles, targets and
directive options, link targets, URLs, arXiv identifiers, references to GitHub threads
("pytorch/pytorch#41508"), and fenced code blocks
(code, not prose; in a lesson their numbers join the pool like a code cell's).
Spelled-out numbers ("two or three") are not read.

When two numbers match. The prose number must equal a pool number rounded to the prose's
precision: ``15.6`` matches ``15.6405``, ``0.576`` matches ``0.5760``, ``128K`` (precision
one thousand) matches ``128,256``, but ``128,000`` does not. Signs are ignored. A
percentage ``p%`` also matches the fraction ``p/100`` at the matching precision
(``6.6%`` matches ``0.0659``).

A failure names the page or notebook, the cell index and the number as written.
"""

from __future__ import annotations

import bisect
import math
import os
import re
from dataclasses import dataclass
from pathlib import Path

import nbformat
import pytest
import yaml

# The book root, as in conftest.py: the repository, or the folder BOOK_ROOT names.
BOOK_ROOT = Path(os.environ.get("BOOK_ROOT", Path(__file__).resolve().parents[2])).resolve()
BOOK_DIR = BOOK_ROOT / "book"
BIBLIOGRAPHY = BOOK_DIR / "references.bib"
LESSONS_DIR = BOOK_ROOT / "lessons"
# Front pages whose prose is checked; api.md and bibliography.md are generated listings.
SKIPPED_PAGES = {"api.md", "bibliography.md"}
IGNORE_TAG = "nbval-ignore-output"  # nbval runs the cell and does not compare its output
PLOTLY = "application/vnd.plotly.v1+json"
TEXT_MIMES = ("text/plain", "text/html", "text/markdown", "text/latex")

# ---------------------------------------------------------------------------------------
# Reading markdown: what is prose, what is math, what is code
# ---------------------------------------------------------------------------------------

# Directives whose body is code or generated listings, not prose.
CODE_DIRECTIVES = {
    "eval-rst", "code", "code-block", "sourcecode", "code-cell", "literalinclude",
    "bibliography", "toctree", "raw", "tableofcontents", "include",
}
MATH_DIRECTIVES = {"math"}
FENCE = re.compile(r"^(?P<indent>\s*)(?P<fence>`{3,}|~{3,}|:{3,})(?P<info>.*)$")
DIRECTIVE = re.compile(r"^\{(?P<name>[\w:.-]+)\}\s*(?P<argument>.*)$")
OPTION = re.compile(r"^\s*:[\w-]+:.*$")
TARGET = re.compile(r"^\s*\([^()\s]+\)=\s*$")
LIST_MARKER = re.compile(r"^(\s*)\d+[.)](\s)", re.MULTILINE)
FOOTNOTE_MARK = re.compile(r"\[\^[^\]]*\]:?")
HTML_COMMENT = re.compile(r"<!--.*?-->", re.DOTALL)
ROLE = re.compile(r"\{(?P<name>[\w:.-]+)\}(?P<ticks>`+)(?P<content>.*?)(?P=ticks)", re.DOTALL)
CODE_SPAN = re.compile(r"(?P<ticks>`+)(?P<content>.+?)(?P=ticks)", re.DOTALL)
IMAGE_OR_LINK = re.compile(r"(!?)\[(?P<text>[^\]]*)\]\((?P<target>[^)]*)\)")
AUTOLINK = re.compile(r"<(?:https?|ftp|mailto|file):[^>]*>")
URL = re.compile(r"\b(?:https?|ftp|file)://\S+|\bwww\.\S+")
HTML_TAG = re.compile(r"</?[A-Za-z][^>]*>")
ARXIV = re.compile(r"\barXiv[:\s]*\d{4}\.\d{4,5}(?:v\d+)?", re.IGNORECASE)
# A thread named the way GitHub names it, owner/repository#number: a label, not a quantity.
GITHUB_THREAD = re.compile(r"(?<![\w/.-])[\w.-]+/[\w.-]+#\d+(?!\w)")
DISPLAY_MATH = re.compile(r"\$\$(?P<math>.+?)\$\$|\\\[(?P<math2>.+?)\\\]", re.DOTALL)
INLINE_MATH = re.compile(r"(?<![\\$])\$(?P<math>[^$]+?)\$|\\\((?P<math2>.+?)\\\)", re.DOTALL)
AMS_ENV = re.compile(r"\\begin\{(?P<env>[\w*]+)\}(?P<math>.*?)\\end\{(?P=env)\}", re.DOTALL)

CHAPTER_WORDS = r"(?:chapters?|lessons?|sections?|exercises?|appendix|§)"
CHAPTER_NUMBER = r"\d+(?:\.\d+)?"
CHAPTER_REF = re.compile(
    rf"\b{CHAPTER_WORDS}\s+{CHAPTER_NUMBER}"
    rf"(?:\s*(?:[–—-]|,|\band\b|\bor\b|\bto\b)\s*{CHAPTER_NUMBER})*",
    re.IGNORECASE,
)
SOFTWARE = (
    r"Python|PyTorch|torch|NumPy|numpy|plotly|ipywidgets|JupyterLab|Jupyter\s+Book|"
    r"Jupyter|Sphinx|CUDA|Node(?:\.js)?|npm|MathJax|pandas|transformers|version|release"
)
SOFTWARE_VERSION = re.compile(rf"\b(?:{SOFTWARE})\s+\d+(?:\.\d+)*", re.IGNORECASE)
DOTTED_VERSION = re.compile(r"(?<![\w.])\d+\.\d+\.\d+(?:\.\d+)*(?![\w.])")
MODELS = r"Llama|Gemma|Qwen|Mistral|Mixtral|GPT|Phi|Kimi|DeepSeek|Claude|Falcon|OLMo|Grok|BERT"
MODEL_VERSION = re.compile(rf"\b(?:{MODELS})[ -]?(?:[VK]|-)?\d+(?:\.\d+)?(?![\w.])")


@dataclass(frozen=True)
class Segment:
    """A stretch of text the reader sees, and whether it is math."""

    text: str
    math: bool


def _split_fences(markdown: str) -> tuple[list[str], list[str], list[str]]:
    """Split markdown into prose lines, math-directive lines and code lines."""
    prose: list[str] = []
    math_lines: list[str] = []
    code: list[str] = []
    stack: list[tuple[str, str]] = []  # open fences: (fence, "code" | "math" | "prose")
    options = ""  # "" outside a directive's options, "fields" or "yaml" inside them
    for line in markdown.splitlines():
        match = FENCE.match(line)
        if match and stack and _closes(match, stack[-1][0]) and not match["info"].strip():
            stack.pop()
            options = ""
            continue
        kind = stack[-1][1] if stack else "prose"
        if kind == "code":
            code.append(line)
            continue
        if match:
            directive = DIRECTIVE.match(match["info"].strip())
            if directive is None:
                stack.append((match["fence"], "code"))  # ```python, ```bash, plain ```
                continue
            name = directive["name"].split(":")[0]
            if name in CODE_DIRECTIVES:
                stack.append((match["fence"], "code"))
                continue
            kind = "math" if name in MATH_DIRECTIVES else "prose"
            stack.append((match["fence"], kind))
            (math_lines if kind == "math" else prose).append(directive["argument"])
            options = "fields"
            continue
        if options == "fields" and line.strip() == "---":
            options = "yaml"
            continue
        if options == "yaml":
            options = "fields" if line.strip() == "---" else "yaml"
            continue
        if options == "fields" and OPTION.match(line):
            continue
        options = ""
        if TARGET.match(line) or line.lstrip().startswith("%"):
            continue
        (math_lines if kind == "math" else prose).append(line)
    return prose, math_lines, code


def _closes(match: re.Match, opening: str) -> bool:
    fence = match["fence"]
    return fence[0] == opening[0] and len(fence) >= len(opening)


def segments(markdown: str) -> tuple[list[Segment], str]:
    """The text a reader sees, cut into prose and math segments; plus the code it shows."""
    prose_lines, math_lines, code_lines = _split_fences(markdown)
    found: list[Segment] = [Segment("\n".join(math_lines), True)] if math_lines else []
    text = "\n".join(prose_lines)
    text = HTML_COMMENT.sub(" ", text)
    text = LIST_MARKER.sub(r"\1\2", text)
    text = FOOTNOTE_MARK.sub(" ", text)

    def role(match: re.Match) -> str:
        if match["name"] == "math":
            found.append(Segment(match["content"], True))
        return " "

    text = ROLE.sub(role, text)
    # Code spans are read as prose, but nothing inside them is math or a link.
    spans: list[str] = []

    def span(match: re.Match) -> str:
        spans.append(match["content"])
        return " "

    text = CODE_SPAN.sub(span, text)
    text = IMAGE_OR_LINK.sub(lambda m: f" {m['text']} ", text)
    text = AUTOLINK.sub(" ", text)

    def math(match: re.Match) -> str:
        found.append(Segment(match["math"] or match["math2"], True))
        return " "

    text = DISPLAY_MATH.sub(math, text)
    text = AMS_ENV.sub(math, text)
    text = INLINE_MATH.sub(math, text)
    text = HTML_TAG.sub(" ", text)
    found.append(Segment(text, False))
    found += [Segment(content, False) for content in spans]
    return found, "\n".join(code_lines)


# ---------------------------------------------------------------------------------------
# Numbers
# ---------------------------------------------------------------------------------------

MULTIPLIERS = {
    "k": 1e3, "K": 1e3, "M": 1e6, "B": 1e9, "T": 1e12,
    "thousand": 1e3, "million": 1e6, "billion": 1e9, "trillion": 1e12,
}
NUMBER = re.compile(
    r"(?<![\w.])"  # not the tail of an identifier or of a longer number
    r"(?P<int>\d{1,3}(?:,\d{3})+|\d+)(?:\.(?P<frac>\d+))?"
    r"(?:[eE](?P<exp>[+-]?\d+)(?![A-Za-z]))?"
    r"(?:(?P<suffix>[kKMBT])(?![A-Za-z])|\s+(?P<word>thousand|million|billion|trillion)\b)?"
    r"(?P<percent>\s?(?:%|percent\b))?"
)
SUPERSCRIPTS = str.maketrans("⁰¹²³⁴⁵⁶⁷⁸⁹⁻", "0123456789-")


@dataclass(frozen=True)
class Number:
    """A number as written: its value, the half-width of its last digit, and its form."""

    text: str
    value: float
    tolerance: float
    significant: int
    percent: bool = False
    plain_integer: bool = False  # no separator, decimals, exponent, suffix or unit

    def matches(self, pool: list[float]) -> bool:
        """True when some pool value rounds to this number at its precision."""
        targets = [(abs(self.value), self.tolerance)]
        if self.percent:
            targets.append((abs(self.value) / 100, self.tolerance / 100))
        for value, tolerance in targets:
            slack = tolerance * (1 + 1e-9) + 1e-12 * value
            start = bisect.bisect_left(pool, value - slack)
            if start < len(pool) and pool[start] <= value + slack:
                return True
        return False


def _significant(integer: str, fraction: str) -> int:
    if fraction:
        return len((integer + fraction).lstrip("0"))
    return len(integer.lstrip("0").rstrip("0"))


def _number(match: re.Match) -> Number:
    integer = match["int"].replace(",", "")
    fraction = match["frac"] or ""
    exponent = int(match["exp"]) if match["exp"] else 0
    scale = 10.0**exponent * MULTIPLIERS.get(match["suffix"] or match["word"] or "", 1.0)
    value = float(f"{integer}.{fraction or '0'}") * scale
    plain = not (
        fraction or match["exp"] or match["suffix"] or match["word"] or match["percent"]
        or "," in match["int"]
    )
    return Number(
        text=match.group(0).strip(),
        value=value,
        tolerance=0.5 * 10.0 ** -len(fraction) * scale,
        significant=_significant(integer, fraction),
        percent=bool(match["percent"]),
        plain_integer=plain,
    )


def _normalise_math(tex: str) -> str:
    tex = re.sub(r"\\(?:label|tag|ref|eqref)\{[^{}]*\}", " ", tex)
    tex = tex.replace("{,}", ",")
    tex = re.sub(r"(?<=\d)\s*(?:\\[,;:! ]|~)\s*(?=\d{3}(?!\d))", "", tex)  # 128\,256
    tex = tex.replace("\\%", "%")
    # Subscripts are indices, not quantities.
    tex = re.sub(r"_\s*\{[^{}]*\}|_\s*\\?\w", " ", tex)
    number = r"\d+(?:[.,]\d+)*"
    power = r"10\s*\^\s*\{?\s*(-?\d+)\s*\}?"
    tex = re.sub(rf"({number})\s*\\(?:times|cdot)\s*{power}", r"\1e\2", tex)
    tex = re.sub(rf"(?<![\w.]){power}", r"1e\1", tex)
    tex = re.sub(r"(?<=\d)\s*\\(?:mathrm|text|textrm|mathit)\s*\{\s*([kKMBT])\s*\}", r"\1", tex)
    tex = re.sub(r"\\[A-Za-z]+", " ", tex)  # commands: \sqrt, \mathbb, \times ...
    return tex


def _normalise_prose(text: str) -> str:
    text = re.sub(r"(?<=\d)[\u2009\u202f\u00a0](?=\d{3}(?!\d))", "", text)
    text = re.sub(r"10([⁰¹²³⁴⁵⁶⁷⁸⁹⁻]+)", lambda m: "1e" + m[1].translate(SUPERSCRIPTS), text)
    return text.replace("\u2212", "-")


def _strip_exempt(text: str) -> str:
    text = ARXIV.sub(" ", text)
    text = GITHUB_THREAD.sub(" ", text)
    text = URL.sub(" ", text)
    text = CHAPTER_REF.sub(" ", text)
    text = SOFTWARE_VERSION.sub(" ", text)
    text = DOTTED_VERSION.sub(" ", text)
    return MODEL_VERSION.sub(" ", text)


def numbers_in(segment: Segment) -> list[Number]:
    """Numbers with two or more significant digits that the reader sees in `segment`."""
    if segment.math:
        text = _normalise_math(segment.text)
    else:
        text = _normalise_prose(segment.text)
    text = _strip_exempt(text)
    found = []
    for match in NUMBER.finditer(text):
        number = _number(match)
        if number.significant < 2:
            continue
        is_year = (
            not segment.math
            and number.plain_integer
            and len(match["int"]) == 4
            and 1900 <= number.value <= 2100
        )
        if not is_year:
            found.append(number)
    return found


def prose_numbers(markdown: str) -> list[Number]:
    """Every checked number in a markdown cell or page, in reading order of its segments."""
    found_segments, _ = segments(markdown)
    return [number for segment in found_segments for number in numbers_in(segment)]


POOL_NUMBER = re.compile(
    r"(?<![\d.])(?P<int>\d+(?:,\d{3})*)(?:\.(?P<frac>\d+))?(?:[eE](?P<exp>[+-]?\d+))?"
    r"(?P<suffix>[kKMBT](?![A-Za-z]))?"
)


def pool_values(text: str) -> set[float]:
    """Every number written anywhere in `text` (outputs, code, given values), generously.

    Grouped digits count both joined and group by group ("129,191" in a printed list could
    be two numbers); a multiplier suffix counts with and without its multiplier.
    """
    values: set[float] = set()
    for match in POOL_NUMBER.finditer(text.replace("\u2212", "-")):
        fraction = match["frac"] or "0"
        exponent = f"e{match['exp']}" if match["exp"] else ""
        groups = match["int"].split(",")
        candidates = [f"{''.join(groups)}.{fraction}"]
        if len(groups) > 1:
            candidates += [*groups[:-1], f"{groups[-1]}.{fraction}"]
        for candidate in candidates:
            value = float(candidate + exponent)  # inf when out of range, never an error
            if math.isfinite(value):
                values.add(value)
                if match["suffix"]:
                    values.add(value * MULTIPLIERS[match["suffix"]])
    return values


# ---------------------------------------------------------------------------------------
# Lessons and pages
# ---------------------------------------------------------------------------------------


def bibliography_keys() -> set[str]:
    text = BIBLIOGRAPHY.read_text(encoding="utf-8")
    return set(re.findall(r"^\s*@\w+\s*\{\s*([^,\s]+)\s*,", text, flags=re.MULTILINE))


def given_problems(given: object, keys: set[str], where: str) -> list[str]:
    """What is wrong with a list of given constants (empty when nothing is)."""
    if not isinstance(given, list):
        return [f"{where}: 'given' must be a list of {{value, source, what}}, got {given!r}"]
    problems = []
    for entry in given:
        if not isinstance(entry, dict) or set(entry) != {"value", "source", "what"}:
            problems.append(f"{where}: given entry {entry!r} needs exactly value, source, what")
            continue
        if not str(entry["what"]).strip():
            problems.append(f"{where}: given {entry['value']!r} says nothing in 'what'")
        if entry["source"] not in keys:
            problems.append(
                f"{where}: given {entry['value']!r} cites {entry['source']!r}, "
                "which is not a key of book/references.bib"
            )
        if not pool_values(str(entry["value"])):
            problems.append(f"{where}: given value {entry['value']!r} holds no number")
    return problems


def _output_text(output: dict) -> str:
    if output.get("output_type") == "stream":
        text = output.get("text", "")
        return "".join(text) if isinstance(text, list) else text
    data = output.get("data", {})
    parts = []
    for mime in TEXT_MIMES:
        value = data.get(mime, "")
        parts.append("".join(value) if isinstance(value, list) else value)
    if PLOTLY in data:
        parts += _figure_strings(data[PLOTLY])
    return "\n".join(parts)


# Figure strings that style the figure rather than say something: colours, fonts, formats.
FIGURE_STYLE_KEYS = {"template", "colorscale", "hovertemplate", "texttemplate", "family"}
COLOUR = re.compile(r"^\s*(?:#[0-9a-fA-F]{3,8}|(?:rgba?|hsla?)\([^)]*\))\s*$")


def _figure_strings(figure: object, key: str = "") -> list[str]:
    """The text a plotly figure shows: titles, labels, annotations, slider steps, names.

    Data arrays are left out: a figure holds thousands of floats, and rounded to two digits
    they would vouch for almost any number. Prose quotes what a figure labels or a cell prints.
    """
    if key in FIGURE_STYLE_KEYS or "color" in key:
        return []
    if isinstance(figure, dict):
        return [text for name, value in figure.items() for text in _figure_strings(value, name)]
    if isinstance(figure, list):
        return [text for value in figure for text in _figure_strings(value, key)]
    if isinstance(figure, str) and not COLOUR.match(figure):
        return [figure]
    return []


def _given(entries: object) -> list[dict]:
    return [entry for entry in entries if isinstance(entry, dict)] if isinstance(
        entries, list
    ) else []


def lesson_pool(notebook: nbformat.NotebookNode) -> set[float]:
    """Numbers in the lesson's checked outputs, code cells, code blocks and given list."""
    values: set[float] = set()
    for cell in notebook.cells:
        if cell.cell_type == "code":
            values |= pool_values(cell.source)
            if IGNORE_TAG in cell.get("metadata", {}).get("tags", []):
                continue  # nbval does not check this output
            for output in cell.get("outputs", []):
                values |= pool_values(_output_text(output))
        elif cell.cell_type == "markdown":
            values |= pool_values(segments(cell.source)[1])
    given = notebook.metadata.get("attnbook", {}).get("given", [])
    for entry in _given(given):
        values |= pool_values(str(entry.get("value", "")))
    return values


def front_matter(text: str) -> tuple[dict, str]:
    """A page's YAML front matter (empty when it has none) and the rest of the page."""
    match = re.match(r"^---\s*\n(.*?)\n---\s*\n", text, flags=re.DOTALL)
    if not match:
        return {}, text
    return yaml.safe_load(match[1]) or {}, text[match.end():]


def _lesson_paths() -> list[Path]:
    return sorted(LESSONS_DIR.glob("*.ipynb"))


def _page_paths() -> list[Path]:
    return [path for path in sorted(BOOK_DIR.glob("*.md")) if path.name not in SKIPPED_PAGES]


def _unmatched(markdown: str, pool: list[float]) -> list[str]:
    return [number.text for number in prose_numbers(markdown) if not number.matches(pool)]


@pytest.mark.parametrize("path", _lesson_paths(), ids=lambda path: path.stem)
def test_lesson_numbers_come_from_cells(path: Path) -> None:
    notebook = nbformat.read(path, as_version=4)
    pool = sorted(lesson_pool(notebook))
    problems = [
        f"{path.name}, cell {index}: {text!r}"
        for index, cell in enumerate(notebook.cells)
        if cell.cell_type == "markdown"
        for text in _unmatched(cell.source, pool)
    ]
    assert not problems, (
        "numbers in the prose that no output, code cell or given constant of the lesson "
        "shows (compute them in a cell, or list them under metadata.attnbook.given with a "
        "source):\n" + "\n".join(problems)
    )


@pytest.mark.parametrize("path", _lesson_paths(), ids=lambda path: path.stem)
def test_lesson_given_constants_cite_a_source(path: Path) -> None:
    notebook = nbformat.read(path, as_version=4)
    attnbook = notebook.metadata.get("attnbook", {})
    if "given" not in attnbook:
        return
    problems = given_problems(attnbook["given"], bibliography_keys(), path.name)
    assert not problems, "\n".join(problems)


@pytest.fixture(scope="module")
def all_lessons_pool() -> list[float]:
    values: set[float] = set()
    for path in _lesson_paths():
        values |= lesson_pool(nbformat.read(path, as_version=4))
    return sorted(values)


@pytest.mark.parametrize("path", _page_paths(), ids=lambda path: path.name)
def test_page_numbers_come_from_lessons_or_sources(path: Path, all_lessons_pool) -> None:
    meta, body = front_matter(path.read_text(encoding="utf-8"))
    given = meta.get("given", [])
    problems = given_problems(given, bibliography_keys(), f"book/{path.name}")
    values = set(all_lessons_pool)
    for entry in _given(given):
        values |= pool_values(str(entry.get("value", "")))
    pool = sorted(values)
    # Report by paragraph, so a failure can be found in the page.
    for index, block in enumerate(re.split(r"\n\s*\n", body)):
        problems += [f"book/{path.name}, block {index}: {text!r}"
                     for text in _unmatched(block, pool)]
    assert not problems, (
        "numbers on a front page that no lesson shows (list them under `given:` in the "
        "page's front matter, with a source):\n" + "\n".join(problems)
    )


# ---------------------------------------------------------------------------------------
# The extractor itself
# ---------------------------------------------------------------------------------------


def _texts(markdown: str) -> list[str]:
    return [number.text for number in prose_numbers(markdown)]


@pytest.mark.parametrize(
    ("markdown", "expected"),
    [
        ("Llama 3 has 128,256 rows in $d = 8{,}192$ dimensions.", ["128,256", "8,192"]),
        ("A spread of 0.05, or 1/√d, and 3 draws.", []),
        ("The share is 6.6%, about 15.6 times 0.50.", ["6.6%", "15.6", "0.50"]),
        ("Llama 3 70B and Gemma 3 27B use 128K and 262K tokens.", ["27B", "128K", "262K"]),
        ("In 2025 and 2026, {cite:p}`llama2024herd` chose $d = 2048$.", ["2048"]),
        ("Chapter 08 and lessons 01–02 use Python 3.11 and torch 2.13.0.", []),
        ("See [arXiv:2604.00965](https://arxiv.org/abs/2604.00965) and <https://x.org/123>.", []),
        ("(sliders)=\n## Title\n\n1. first\n12. twelfth item", []),
        (
            "$W_{12} \\in \\mathbb{R}^{8192}$, $1.05 \\times 10^{9}$ and $10^{9}$",
            ["8192", "1.05e9"],
        ),
        ("```python\nx = 12345\n```\nThen `n_merges=500` and `E[0]`, and 1.5 billion.",
         ["1.5 billion"]),
        (":::{exercise} Count to 42\n:label: ex00-count\n\nFind 17.5.\n:::", ["42", "17.5"]),
        ("```{eval-rst}\n.. automodule:: attnlib.core 123\n```", []),
        ("identifiers W_2, bfloat16, DeepSeek-V2 and x86, then 3.1e-06", ["3.1e-06"]),
        ("asked in [pytorch/pytorch#41508](https://github.com/pytorch/pytorch/issues/41508)"
         " and ggml-org/llama.cpp#4648, by 12 readers", ["12"]),
    ],
)
def test_extractor_finds_the_numbers_a_reader_sees(markdown: str, expected: list[str]) -> None:
    assert sorted(_texts(markdown)) == sorted(expected)


def test_extractor_values_and_precision() -> None:
    (number,) = prose_numbers("about 1.05 billion entries")
    assert number.value == pytest.approx(1.05e9)
    assert number.tolerance == pytest.approx(0.005e9)
    (number,) = prose_numbers("$128{,}256$")
    assert (number.value, number.tolerance, number.significant) == (128256, 0.5, 6)
    assert [n.significant for n in prose_numbers("0.50 and 5120 and 128,000")] == [2, 3, 3]


@pytest.mark.parametrize(
    ("prose", "pool_text", "matches"),
    [
        ("15.6", "15.6405", True),
        ("0.576", "0.5760", True),
        ("15.7", "15.6405", False),
        ("128,256", "128256", True),
        ("128,256", "Llama 3 70B  128,256  8,192", True),
        ("128,000", "128,256", False),
        ("128K", "128,256", True),
        ("262K", "N_T = 262144", True),
        ("6.6%", "share 0.0659", True),
        ("6.6%", "6.6%", True),
        ("27B", "Gemma 3 27B", True),
        ("27B", "27", False),
        ("1.96 GiB", "1.9570 GiB", True),
        ("1.05 billion", "1,050,673,152", True),
        ("32,640", "[129,191,17]", False),
        ("191", "[129,191,17]", True),
    ],
)
def test_matching_rounds_the_pool_to_the_prose_precision(
    prose: str, pool_text: str, matches: bool
) -> None:
    (number,) = prose_numbers(prose)
    assert number.matches(sorted(pool_values(pool_text))) is matches


def test_given_constants_must_cite_a_bibliography_key() -> None:
    keys = {"llama2024herd"}
    good = [{"value": "128,000", "source": "llama2024herd", "what": "BPE tokens"}]
    assert given_problems(good, keys, "x") == []
    bad_key = [{"value": "128,000", "source": "nobody2030", "what": "BPE tokens"}]
    assert "not a key" in given_problems(bad_key, keys, "x")[0]
    no_what = [{"value": "128,000", "source": "llama2024herd"}]
    assert "exactly value, source, what" in given_problems(no_what, keys, "x")[0]
    assert given_problems("128,000", keys, "x")


def test_front_matter_is_read() -> None:
    meta, body = front_matter("---\ngiven:\n  - value: '60'\n---\n# Title\n")
    assert meta == {"given": [{"value": "60"}]}
    assert body == "# Title\n"
