"""Fixtures shared by the adapter tests."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from interlock import Context, Guard, load_policy_text

from .conformance import STATEFUL_POLICY


@pytest.fixture
def stateful_guard(tmp_path: Path) -> Iterator[Guard]:
    """A guard on :data:`STATEFUL_POLICY` with a fresh SQLite store, as agent "bot"."""
    with Guard(
        load_policy_text(STATEFUL_POLICY),
        store=f"sqlite:///{tmp_path / 'state.db'}",
        context=Context(agent="bot"),
    ) as guard:
        yield guard
