"""Durability ``none`` from an event loop: a turn that queued one request's records
(``_LONE``) leaves their commit to the writer thread — the loop is not loaded, and a
commit on it, after the answer, would hold up the client's next request — while a
turn of several requests is committed by the loop itself (ADR 0033). Either way every
record lands, in order, on one verifying chain."""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any

import pytest

from interlock import Action
from interlock.core.decision import Decision, Verdict
from interlock.core.events import Event
from interlock.store import AuditWriter, SqlStore

WAIT_S = 30.0


def _event(i: int = 0) -> Event:
    action = Action.tool("read_file", {"path": f"docs/{i}.md"})
    decision = Decision(verdict=Verdict.ALLOW, reason=f"reason {i}", rule_ids=(f"r{i}",))
    return Event("decision", time.time(), action, decision, 0)


def _committers(store: SqlStore) -> list[tuple[str, int]]:
    """(thread, records) of each commit, as they happen."""
    commits: list[tuple[str, int]] = []
    real, real_try = store.append_audit, store.try_append_audit

    def append(entries: Any, **options: Any) -> list[int]:
        commits.append((threading.current_thread().name, len(entries)))
        return real(entries, **options)

    def try_append(entries: Any, *args: Any) -> list[int] | None:
        seqs = real_try(entries, *args)
        if seqs is not None:
            commits.append((threading.current_thread().name, len(entries)))
        return seqs

    store.append_audit = append  # type: ignore[method-assign]
    store.try_append_audit = try_append  # type: ignore[method-assign]
    return commits


async def _turns(n: int = 3) -> None:
    for _ in range(n):
        await asyncio.sleep(0)


@pytest.mark.parametrize("records", [1, 2])
async def test_one_requests_records_are_committed_by_the_writer_thread(
    store: SqlStore, records: int
) -> None:
    commits = _committers(store)
    writer = AuditWriter(store, durability="none", checkpoints=False)
    loop_thread = threading.current_thread().name
    for turn in range(3):
        for i in range(records):
            assert await writer.awrite_event("acme", _event(turn * records + i)) is None
        await _turns()
        assert writer.flush(WAIT_S)
    writer.close()
    assert [size for _, size in commits] == [records] * 3
    assert loop_thread not in {thread for thread, _ in commits}
    assert store.verify_audit().checked == {"acme": 3 * records}


async def test_a_turn_of_several_requests_is_committed_by_the_loop(store: SqlStore) -> None:
    commits = _committers(store)
    writer = AuditWriter(store, durability="none", checkpoints=False)
    loop_thread = threading.current_thread().name
    await asyncio.gather(*(writer.awrite_event("acme", _event(i)) for i in range(3)))
    await _turns()
    if store.dialect == "sqlite":  # the loop commits only where it cannot wait
        assert commits == [(loop_thread, 3)]
    writer.close()
    assert sum(size for _, size in commits) == 3
    assert store.verify_audit().checked == {"acme": 3}


async def test_lone_and_loaded_turns_keep_one_chain_in_order(store: SqlStore) -> None:
    writer = AuditWriter(store, durability="none", checkpoints=False)
    sizes = [1, 5, 1, 2, 4, 1]
    n = 0
    for size in sizes:
        await asyncio.gather(*(writer.awrite_event("acme", _event(n + i)) for i in range(size)))
        n += size
        await _turns()
    writer.close()
    paths = [row.body for row in store.audit_rows(tenant="acme")]
    assert [f"docs/{i}.md" in body for i, body in enumerate(paths)] == [True] * n
    assert store.verify_audit().checked == {"acme": n}
