"""``guard.protect`` without a mapper binds a call's arguments to the function's
signature. For a signature of named parameters only, a plain binder places them
without ``inspect.Signature.bind`` (≈ 5 µs a call); it must give the same arguments,
in the same order, or the same error, for every call — held here against
``inspect`` itself on random signatures and calls."""

from __future__ import annotations

import inspect
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from interlock.errors import MappingError
from interlock.guard import _signature_mapper

NAMES = ("a", "b", "c", "d", "e")


@st.composite
def signatures(draw: st.DrawFn) -> str:
    """Source of a function: positional-or-keyword parameters (defaults last), then
    keyword-only ones (with or without defaults), sometimes *args / **kwargs / a /."""
    count = draw(st.integers(0, 5))
    names = list(NAMES[:count])
    split = draw(st.integers(0, count))
    positional, keyword = names[:split], names[split:]
    first_default = draw(st.integers(0, len(positional)))
    parts = [p if i < first_default else f"{p}={i}" for i, p in enumerate(positional)]
    if positional and draw(st.booleans()) and draw(st.integers(0, 4)) == 0:
        parts.insert(draw(st.integers(1, len(parts))), "/")
    star = draw(st.sampled_from(["", "*", "*args"])) if keyword else ""
    if star or keyword:
        parts.append(star or "*")
    parts += [k if draw(st.booleans()) else f"{k}=None" for k in keyword]
    if draw(st.integers(0, 5)) == 0:
        parts.append("**extra")
    return f"def tool({', '.join(parts)}):\n    return None\n"


@st.composite
def calls(draw: st.DrawFn) -> tuple[tuple[Any, ...], dict[str, Any]]:
    args = tuple(draw(st.lists(st.integers(), max_size=6)))
    keys = draw(st.lists(st.sampled_from([*NAMES, "zz", "extra"]), max_size=6, unique=True))
    return args, {k: f"v-{k}" for k in keys}


def _reference(func: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> dict[str, Any]:
    signature = inspect.signature(func)
    bound = signature.bind(*args, **kwargs)
    bound.apply_defaults()
    out: dict[str, Any] = {}
    for name, value in bound.arguments.items():
        if signature.parameters[name].kind is inspect.Parameter.VAR_KEYWORD:
            out.update(value)
        else:
            out[name] = value
    return out


def _mapped(source: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> object:
    namespace: dict[str, Any] = {}
    exec(source, namespace)
    func = namespace["tool"]
    mapper = _signature_mapper(func, name=None, kind="tool", scope=None, description=None)
    try:
        mapped = list(mapper(*args, **kwargs).arguments.items())
    except MappingError:
        mapped = "MappingError"
    try:
        expected: object = list(_reference(func, args, kwargs).items())
    except TypeError:
        expected = "MappingError"
    return mapped, expected


@settings(max_examples=600, deadline=None)
@given(signatures(), calls())
def test_the_plain_binder_binds_as_inspect_does(
    source: str, call: tuple[tuple[Any, ...], dict[str, Any]]
) -> None:
    mapped, expected = _mapped(source, *call)  # type: ignore[misc]
    assert mapped == expected, source


@pytest.mark.parametrize(
    ("args", "kwargs", "expected"),
    [
        ((1,), {}, [("path", 1), ("mode", "r"), ("flag", None)]),
        ((), {"path": 1, "flag": 2}, [("path", 1), ("mode", "r"), ("flag", 2)]),
        ((1, "w"), {"flag": 3}, [("path", 1), ("mode", "w"), ("flag", 3)]),
        ((1,), {"path": 2}, "MappingError"),  # given twice
        ((), {}, "MappingError"),  # missing
        ((1,), {"other": 2}, "MappingError"),  # unknown
        ((1, "w", 3), {}, "MappingError"),  # flag is keyword-only
    ],
)
def test_the_usual_tool_signature(
    args: tuple[Any, ...], kwargs: dict[str, Any], expected: object
) -> None:
    source = "def tool(path, mode='r', *, flag=None):\n    return None\n"
    mapped, reference = _mapped(source, args, kwargs)  # type: ignore[misc]
    assert mapped == reference == expected
