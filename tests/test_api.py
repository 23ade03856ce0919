"""The public face of attnlib: every exported name exists, is documented and points to a lesson."""

from __future__ import annotations

import inspect
import typing

import pytest

import attnlib

PUBLIC = [name for name in attnlib.__all__ if name != "__version__"]
CALLABLES = [n for n in PUBLIC if callable(getattr(attnlib, n))]


def test_all_names_resolve_and_are_unique():
    assert len(PUBLIC) == len(set(PUBLIC))
    for name in PUBLIC:
        assert hasattr(attnlib, name), name


@pytest.mark.parametrize("name", CALLABLES)
def test_every_public_callable_has_a_docstring_with_a_lesson(name):
    obj = getattr(attnlib, name)
    doc = inspect.getdoc(obj) or ""
    assert len(doc.splitlines()) >= 2, f"{name} needs a summary line and a body"
    module_doc = inspect.getdoc(inspect.getmodule(obj)) or ""
    assert "Lesson" in doc or "Lesson" in module_doc, name


@pytest.mark.parametrize("name", [n for n in CALLABLES if inspect.isfunction(getattr(attnlib, n))])
def test_public_functions_are_type_hinted(name):
    fn = getattr(attnlib, name)
    hints = typing.get_type_hints(fn)
    params = [p for p in inspect.signature(fn).parameters.values()
              if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)]
    missing = [p.name for p in params if p.name not in hints]
    assert not missing, f"{name}: parameters without type hints: {missing}"
    assert "return" in hints, f"{name}: no return annotation"


@pytest.mark.parametrize("module", [
    "core", "masks", "heads", "rope", "gqa", "mla", "cache", "norms", "layers", "memory", "flash",
    "device", "tokens",
])
def test_every_module_states_its_concept(module):
    """Each module has a docstring, and its ``__all__`` is exported at the top level.

    (``viz`` and ``widgets`` stay namespaces: ``attnlib.viz.<figure>``.)
    """
    mod = __import__(f"attnlib.{module}", fromlist=["_"])
    assert (mod.__doc__ or "").strip(), module
    for name in getattr(mod, "__all__", []):
        assert name in attnlib.__all__, f"attnlib.{module}.{name} is public but not exported"
