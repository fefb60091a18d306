"""The grant tests' key ring: every store a test opens (SQLite or PostgreSQL) signs
with one ring made for the test, as replicas given the same file would."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from interlock.store.grant_keys import ENV_KEY_FILE, create_key_ring


@pytest.fixture(autouse=True)
def grant_key_ring(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    ring = tmp_path / "keys" / "grant-keys"
    create_key_ring(ring)
    monkeypatch.setenv(ENV_KEY_FILE, str(ring))
    yield ring
