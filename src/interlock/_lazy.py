"""Public names imported on first use (PEP 562), for the packages that re-export them.

``import interlock`` (and ``interlock.policy``, ``.store``, ``.facts``) must cost a few
milliseconds: each package names where its public names live and imports one only when
it is first read (ADR 0014). This module imports nothing but :mod:`importlib`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, MutableMapping
from importlib import import_module
from typing import Any

__all__ = ["lazy_attributes"]


def lazy_attributes(
    package: str, namespace: MutableMapping[str, Any], where: Mapping[str, str | tuple[str, str]]
) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """The ``__getattr__`` and ``__dir__`` of ``package``: ``where`` maps each public
    name to its module (or to its module and the name it has there). A name read once
    is kept in ``namespace``, so the next read is a plain attribute."""

    def attribute_of(name: str) -> Any:
        found = where.get(name)
        if found is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        module, attribute = (found, name) if isinstance(found, str) else found
        value = getattr(import_module(module), attribute)
        namespace[name] = value
        return value

    def names() -> list[str]:
        return sorted(set(namespace) | set(where))

    return attribute_of, names
