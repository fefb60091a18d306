"""Loading a package's compiled extension without running the package's ``__init__``.

Two bindings Interlock uses put more in their ``__init__`` than their extension:
``cel`` imports its own command line (typer, prompt_toolkit, pygments) and
``tree_sitter_bash`` imports ``importlib.resources`` (with ``tempfile``, ``shutil``...)
to read a query file Interlock never asks for. The extension alone is what compiles
and runs the expressions, or parses bash, so it is loaded by its spec and registered
under its own name; a later ``import cel`` (or ``import tree_sitter_bash``) finds it
registered and runs as before (ADR 0014)::

    binding = load_extension("tree_sitter_bash", "_binding")
    language = binding.language()
"""

from __future__ import annotations

import importlib.machinery
import importlib.util
import os
import sys
from importlib import import_module
from types import ModuleType

__all__ = ["load_extension", "switched_off"]


def load_extension(package: str, extension: str) -> ModuleType:
    """``package.extension``, loaded by its spec (the package itself is located, never
    run). With a layout other than expected, the package is imported the ordinary way
    and returned: it re-exports its extension's names."""
    name = f"{package}.{extension}"
    loaded = sys.modules.get(name)
    if loaded is not None:
        return loaded
    found = importlib.util.find_spec(package)  # locates the package; runs none of it
    locations = found.submodule_search_locations if found is not None else None
    spec = importlib.machinery.PathFinder.find_spec(name, locations) if locations else None
    if spec is None or spec.loader is None:  # an unexpected layout: the ordinary way
        return import_module(package)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        del sys.modules[name]
        raise
    return module


def switched_off() -> bool:
    """Whether ``INTERLOCK_NO_SPEEDUPS`` asks for the Python reference instead of
    Interlock's own optional C accelerators: set to anything but empty or ``0`` (each
    accelerated module reads it once, when it is imported; see
    :mod:`interlock.accelerators`)."""
    return os.environ.get("INTERLOCK_NO_SPEEDUPS", "") not in ("", "0")
