"""Fixtures of the server tests (see :mod:`harness` for what they hold).

``api`` runs a test on SQLite and on PostgreSQL (the ``store_url`` fixture of
``tests/conftest.py``: a fresh schema per test); ``sqlite_api`` on SQLite only.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from .harness import POLICY, Api, open_api


@pytest.fixture
def policy_file(tmp_path: Path) -> Path:
    path = tmp_path / "interlock.yaml"
    path.write_text(POLICY)
    return path


@pytest.fixture
def sqlite_url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'server.db'}"


@pytest.fixture
async def api(store_url: str, policy_file: Path) -> AsyncIterator[Api]:
    """The server on each back end (SQLite, PostgreSQL)."""
    async for opened in open_api(store_url, policy_file):
        yield opened


@pytest.fixture
async def sqlite_api(sqlite_url: str, policy_file: Path) -> AsyncIterator[Api]:
    """The server on SQLite only."""
    async for opened in open_api(sqlite_url, policy_file):
        yield opened
