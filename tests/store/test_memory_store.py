"""``sqlite:///:memory:``: one database for every thread of the store, gone on close.

SQLite gives each connection to ``:memory:`` a database of its own, and the store opens
a connection per thread: before the fix a check made on an event loop's executor, or a
record written by the audit writer's thread, met an empty database ("no such table")
and every such decision came out undetermined.
"""

from __future__ import annotations

import asyncio
import threading

from interlock import Action, Guard, load_policy_text
from interlock.store import open_store

POLICY = load_policy_text(
    """
version: 1
default: deny
budgets:
  - id: calls
    limit: 100
    unit: tokens
    kind: tool
    default_estimate: 1
rules:
  - id: lookups
    decision: allow
    reason: lookups are fine
    name: lookup
""",
    file="test_memory_store.py",
)


def test_every_thread_of_an_in_memory_store_sees_one_database() -> None:
    with open_store("sqlite:///:memory:") as store:
        guard = Guard(POLICY, store=store)
        verdicts: list[str] = []

        def check() -> None:
            verdicts.append(guard.check(Action.tool("lookup", {"q": "x"})).verdict.value)

        threads = [threading.Thread(target=check) for _ in range(4)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        check()
        assert verdicts == ["allow"] * 5
        (row,) = store.budget_rows(budget_id="calls")
        assert row.spent + row.reserved == 5
        guard.close()


def test_an_async_guard_on_an_in_memory_store_decides_and_records() -> None:
    guard = Guard(POLICY, store="sqlite:///:memory:")

    async def main() -> list[str]:
        decisions = await asyncio.gather(
            *(guard.acheck(Action.tool("lookup", {"q": str(i)})) for i in range(3))
        )
        return [d.verdict.value for d in decisions]

    store = guard.store
    assert store is not None and guard.audit is not None
    try:
        assert asyncio.run(main()) == ["allow"] * 3
        assert guard.audit.flush()  # the writer's thread appends on a connection of its own
        assert [row.decision for row in store.audit_rows()] == ["allow"] * 3
    finally:
        guard.close()


def test_closing_an_in_memory_store_leaves_nothing_behind() -> None:
    store = open_store("sqlite:///:memory:")
    scratch = store.file_path()
    assert scratch is None  # nothing a user should point another process at
    directory = store._scratch  # type: ignore[attr-defined]
    assert directory is not None and directory.exists()
    store.close()
    assert not directory.exists()
