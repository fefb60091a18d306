"""The optional C accelerators are optional for an install, not for CI: there their
tests (which skip where no compiler was at install time) must run, so a build that
silently failed fails here instead."""

from __future__ import annotations

import importlib
import os

import pytest


@pytest.mark.parametrize(
    "module",
    [
        "interlock.session._speedups",
        "interlock.session._history",
        "interlock.core._redaction",
        "interlock.store._chain",
    ],
)
def test_the_accelerator_is_built_in_ci(module: str) -> None:
    if not os.environ.get("INTERLOCK_CI"):
        pytest.skip("only CI requires the accelerators (INTERLOCK_CI=1)")
    importlib.import_module(module)
