"""An async caller's wait for its record: bounded, cancellable, and the record still
lands.

``AuditWriter.awrite_event`` waits for its batch's commit on a future of the loop,
bounded by one timer (the writer's ``timeout``, or the check's deadline when nearer).
Past the bound the caller gets an AuditFailure; cancelled, it stops waiting; either
way its record stays queued and is committed once the store answers.
"""

from __future__ import annotations

import asyncio
import sqlite3
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from interlock import Action
from interlock.core.deadline import deadline_scope
from interlock.core.events import Event
from interlock.errors import AuditFailure
from interlock.store import AuditWriter, SqlStore, open_store

WAIT_S = 30.0  # a hang guard


def _event() -> Event:
    return Event("decision", time.time(), Action.tool("read_file", {"path": "a"}), None, 0)


@pytest.fixture
def database(tmp_path: Path) -> Path:
    return tmp_path / "db.sqlite"


@pytest.fixture
def store(database: Path) -> Iterator[SqlStore]:
    opened = open_store(f"sqlite:///{database}")
    yield opened
    opened.close()


def _lock_out(database: Path) -> sqlite3.Connection:
    """Another connection holding the write lock (another process's write, say)."""
    other = sqlite3.connect(database, isolation_level=None)
    other.execute("BEGIN IMMEDIATE")
    return other


async def test_a_wait_past_its_bound_fails_and_the_record_lands_later(
    store: SqlStore, database: Path
) -> None:
    writer = AuditWriter(store, timeout=0.3)
    other = _lock_out(database)
    began = time.monotonic()
    with pytest.raises(AuditFailure, match=r"not durable within 0\.30 s"):
        await asyncio.wait_for(writer.awrite_event("acme", _event()), WAIT_S)
    assert 0.25 <= time.monotonic() - began < WAIT_S
    other.execute("COMMIT")
    other.close()
    assert writer.flush(WAIT_S)
    writer.close()
    assert store.verify_audit().checked == {"acme": 1}  # committed once the lock was free


async def test_a_nearer_check_deadline_bounds_the_wait(store: SqlStore, database: Path) -> None:
    writer = AuditWriter(store, timeout=WAIT_S)
    other = _lock_out(database)
    began = time.monotonic()
    with deadline_scope(time.monotonic() + 0.2), pytest.raises(AuditFailure):
        await writer.awrite_event("acme", _event())
    assert time.monotonic() - began < 5
    other.execute("COMMIT")
    other.close()
    assert writer.flush(WAIT_S)
    writer.close()
    assert store.verify_audit().checked == {"acme": 1}


async def test_a_cancelled_wait_stops_waiting_and_the_record_still_lands(
    store: SqlStore, database: Path
) -> None:
    writer = AuditWriter(store, timeout=WAIT_S)
    other = _lock_out(database)
    task = asyncio.ensure_future(writer.awrite_event("acme", _event()))
    await asyncio.sleep(0.05)
    assert not task.done()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    other.execute("COMMIT")
    other.close()
    assert writer.flush(WAIT_S)
    writer.close()
    assert store.verify_audit().checked == {"acme": 1}


async def test_waiters_settled_on_the_loop_get_their_own_positions(store: SqlStore) -> None:
    """Under load most callers wait on a batch another task commits in the same turn."""
    writer = AuditWriter(store)
    seqs = await asyncio.wait_for(
        asyncio.gather(*(writer.awrite_event("acme", _event()) for _ in range(12))), WAIT_S
    )
    writer.close()
    assert sorted(seqs) == list(range(1, 13))
    assert writer.batches == 1  # one commit, every waiter resolved by it
