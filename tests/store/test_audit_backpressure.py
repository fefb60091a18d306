"""Durability ``none`` does not wait for each record, but its backlog is bounded."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

from interlock.store import AuditWriter, open_store


def test_a_full_backlog_makes_callers_wait_for_the_writer(tmp_path: Path) -> None:
    store = open_store(f"sqlite:///{tmp_path / 'a.db'}")
    gate = threading.Event()
    real_append = store.append_audit

    def slow_append(entries: Any, *, durable: bool = False) -> list[int]:
        gate.wait(10)  # the database is slow until the gate opens
        return real_append(entries, durable=durable)

    store.append_audit = slow_append  # type: ignore[method-assign]
    writer = AuditWriter(store, durability="none", max_pending=5)
    writer.write_record("acme", "note", {"n": 0})  # taken by the writer, which blocks
    time.sleep(0.1)
    for n in range(1, 6):  # fill the open batch up to the bound: nobody waits
        writer.write_record("acme", "note", {"n": n})
    blocked = threading.Thread(target=writer.write_record, args=("acme", "note", {"n": 6}))
    blocked.start()
    blocked.join(0.3)
    assert blocked.is_alive()  # over the bound: the caller waits
    gate.set()
    blocked.join(10)
    assert not blocked.is_alive()
    writer.close()
    assert store.verify_audit().checked == {"acme": 7}
    store.close()
