"""Count attnlib's code lines and how many of them are input checks, per module.

    python benchmarks/count_lines.py            # the table per module
    python benchmarks/count_lines.py --guards   # also each public function's guard and math

A *code line* is a physical line holding part of a statement: blank lines, comments and
docstrings (of modules, classes, functions and attributes) do not count. A code line is a
*check line* when it belongs to

* a check function: any function in ``attnlib/_checks.py``, or one whose name starts
  with ``check_`` or ``_check``, from its ``def`` to its last line;
* a check statement inside another function: a ``raise``; an ``if`` that only raises or
  checks (``if not in_checked_call(): self.check(...)``, the check a module skips inside a
  decoder's call); a statement whose value is a call of a check function
  (``self.d = check_positive_int("d", d)``).

With ``--guards``, every public function (a name in its module's ``__all__``) and every
public class's ``forward`` is listed with its *guard* (its check lines, plus the lines of
the check functions of its own module it calls, directly or through them, a method named
``check`` included, while a call of a check in ``_checks.py`` such as ``check_tensor``
counts as the line of the call) and its *mathematics* (the rest of its body, plus the
bodies of the other functions of its own module that it calls, directly or through them; a
call into another module counts as the line of the call). Signatures are in neither.
"""

from __future__ import annotations

import argparse
import ast
import io
import tokenize
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "attnlib"
SKIP = {tokenize.COMMENT, tokenize.NL, tokenize.NEWLINE, tokenize.INDENT, tokenize.DEDENT,
        tokenize.ENDMARKER, tokenize.ENCODING}


def _token_lines(source: str) -> set[int]:
    lines: set[int] = set()
    for tok in tokenize.generate_tokens(io.StringIO(source).readline):
        if tok.type not in SKIP:
            lines.update(range(tok.start[0], tok.end[0] + 1))
    return lines


def _span(node: ast.AST) -> set[int]:
    return set(range(node.lineno, node.end_lineno + 1))


def _docstring_lines(tree: ast.Module) -> set[int]:
    out: set[int] = set()
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if not isinstance(body, list):
            continue
        for stmt in body:  # any bare string statement: docstrings, attribute docstrings
            if (isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Constant)
                    and isinstance(stmt.value.value, str)):
                out |= _span(stmt)
    return out


def _called_name(node: ast.AST) -> str | None:
    if isinstance(node, ast.Call):
        f = node.func
        return f.id if isinstance(f, ast.Name) else f.attr if isinstance(f, ast.Attribute) else None
    return None


def _is_check_name(name: str | None) -> bool:
    return bool(name) and (name == "check" or name.startswith(("check_", "_check")))


def _is_check_stmt(stmt: ast.stmt) -> bool:
    if isinstance(stmt, ast.Raise):
        return True
    value = getattr(stmt, "value", None)
    if isinstance(stmt, (ast.Expr, ast.Assign, ast.AnnAssign, ast.Return)) and value is not None:
        calls = [_called_name(n) for n in ast.walk(value) if isinstance(n, ast.Call)]
        if calls and _is_check_name(_called_name(value)):
            return True
    if isinstance(stmt, ast.If):
        body = stmt.body + stmt.orelse
        return all(_is_check_stmt(s) for s in body)
    return False


def _functions(tree: ast.Module):
    """Every function and method, with its qualified name."""
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            yield node.name, node
        elif isinstance(node, ast.ClassDef):
            for item in node.body:
                if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    yield f"{node.name}.{item.name}", item


def analyse(path: Path) -> dict:
    source = path.read_text()
    tree = ast.parse(source)
    code = _token_lines(source) - _docstring_lines(tree)
    imports = set().union(*(_span(n) for n in tree.body
                            if isinstance(n, (ast.Import, ast.ImportFrom))), set())
    checks: set[int] = set()
    in_checks_module = path.name == "_checks.py"
    if in_checks_module:
        checks = code - imports
    functions = dict(_functions(tree))
    for name, fn in functions.items():
        short = name.split(".")[-1]
        if _is_check_name(short):
            checks |= _span(fn) & code
            continue
        for node in ast.walk(fn):
            if isinstance(node, ast.stmt) and node is not fn and _is_check_stmt(node):
                checks |= _span(node) & code
    return {"code": code, "checks": checks, "tree": tree, "functions": functions}


def _body_lines(fn: ast.FunctionDef, code: set[int]) -> set[int]:
    first = fn.body[0]
    return set(range(first.lineno, fn.end_lineno + 1)) & code


def _calls(fn: ast.AST) -> list[str]:
    return [c for c in (_called_name(n) for n in ast.walk(fn) if isinstance(n, ast.Call)) if c]


def _guards(path: Path, info: dict) -> list[tuple[str, int, int]]:
    """(name, guard lines, mathematics lines) of each public function and forward."""
    tree, code, checks = info["tree"], info["code"], info["checks"]
    functions = info["functions"]
    public: list[str] = []
    for node in tree.body:
        if (isinstance(node, ast.Assign) and any(getattr(t, "id", "") == "__all__"
                                                 for t in node.targets)):
            public = [e.value for e in node.value.elts]
    out = []
    for name in public:
        target = name if name in functions else f"{name}.forward"
        fn = functions.get(target)
        if fn is None:
            continue
        owner = target.rpartition(".")[0]  # self._check(...) inside a method of this class
        body = _body_lines(fn, code)
        guard = {(target, n) for n in body & checks}
        math_ = {(target, n) for n in body - checks}
        seen = {target}
        todo = _calls(fn)
        while todo:
            callee = todo.pop()
            if owner and f"{owner}.{callee}" in functions:
                callee = f"{owner}.{callee}"
            elif callee not in functions and callee.startswith("_"):  # state._step(...)
                methods = [k for k in functions if k.endswith(f".{callee}")]
                callee = methods[0] if len(methods) == 1 else callee
            if callee in seen or callee not in functions:
                continue  # another module's function: the line of the call counts
            short = callee.split(".")[-1]
            seen.add(callee)
            sub = functions[callee]
            if _is_check_name(short):  # a check of this module: all of it
                guard |= {(callee, n) for n in _body_lines(sub, code)}
                todo += _calls(sub)
            elif not short.startswith("__"):  # a function of this module it calls
                sub_body = _body_lines(sub, code)
                math_ |= {(callee, n) for n in sub_body - checks}
                guard |= {(callee, n) for n in sub_body & checks}
                todo += _calls(sub)
        out.append((f"{path.stem}.{target}", len(guard), len(math_)))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--guards", action="store_true", help="each public function too")
    parser.add_argument("--package", type=Path, default=PACKAGE,
                        help="the attnlib folder to count (default: this repository's)")
    args = parser.parse_args()
    package = args.package.resolve()
    paths = sorted(p for p in package.rglob("*.py") if "viz" not in p.parts)
    rows, guards = [], []
    for path in paths:
        info = analyse(path)
        rows.append((str(path.relative_to(package.parent)), len(info["code"]),
                     len(info["checks"])))
        guards += _guards(path, info)
    width = max(len(r[0]) for r in rows)
    print(f"{'module':<{width}}  code  checks  share")
    for name, code, checks in rows:
        print(f"{name:<{width}}  {code:>4}  {checks:>6}  {checks / max(code, 1):>5.0%}")
    total_code, total_checks = sum(r[1] for r in rows), sum(r[2] for r in rows)
    print(f"{'total (attnlib without viz)':<{width}}  {total_code:>4}  {total_checks:>6}  "
          f"{total_checks / total_code:>5.0%}")
    if args.guards:
        print()
        width = max(len(g[0]) for g in guards)
        print(f"{'public function':<{width}}  guard  math")
        for name, guard, math_ in guards:
            flag = "  <- guard longer" if guard > math_ else ""
            print(f"{name:<{width}}  {guard:>5}  {math_:>4}{flag}")
        longer = sum(g > m for _, g, m in guards)
        print(f"{longer} of {len(guards)} public functions have a guard longer than their math")


if __name__ == "__main__":
    main()
