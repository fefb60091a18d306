"""SQLite's WAL is checkpointed by a background thread every ``CHECKPOINT_EVERY`` write
transactions, so no caller's commit pays for a checkpoint; SQLite's own automatic
checkpoint remains as a backstop at a higher threshold; closing the store stops the
thread; nothing written is lost or reordered."""

from __future__ import annotations

import sqlite3
import threading
import time
from pathlib import Path

from interlock.store import open_store
from interlock.store.chain import encode_body
from interlock.store.sqlite import CHECKPOINT_EVERY, SQLiteStore

WAIT_S = 30.0  # a hang guard


def append(store: SQLiteStore, count: int) -> None:
    for n in range(count):
        store.append_audit([("acme", n, "note", None, None, None, encode_body({"n": n}))])


def test_the_checkpoint_runs_on_its_own_thread_after_enough_writes(tmp_path: Path) -> None:
    store = open_store(f"sqlite:///{tmp_path / 'db.sqlite'}")
    assert isinstance(store, SQLiteStore)
    append(store, CHECKPOINT_EVERY - 1 - store._writes)  # migrating wrote some already
    assert store._writes == CHECKPOINT_EVERY - 1
    assert store._checkpointer is None  # not yet due: no thread at all
    append(store, 1)
    checkpointer = store._checkpointer
    assert checkpointer is not None and checkpointer.is_alive()
    deadline = time.monotonic() + WAIT_S
    while checkpointer.checkpoints < 1:
        assert time.monotonic() < deadline, "no checkpoint ran"
        time.sleep(0.01)
    assert checkpointer.name == "interlock-sqlite-checkpoint"
    assert checkpointer is not threading.current_thread()

    # what the checkpoint copied is in the database file itself, before any close: a
    # reader that ignores the WAL (immutable=1 reads the main file only) finds it
    reader = sqlite3.connect(f"file:{tmp_path / 'db.sqlite'}?immutable=1", uri=True)
    (count,) = reader.execute("SELECT count(*) FROM audit_events").fetchone()
    reader.close()
    (written,) = store._connection().execute("SELECT count(*) FROM audit_events").fetchone()
    assert count == written > CHECKPOINT_EVERY // 2  # every record, none left only in the WAL
    store.close()
    assert not checkpointer.is_alive()  # close stops it


def test_every_connection_keeps_sqlites_own_checkpoint_as_a_higher_backstop(
    tmp_path: Path,
) -> None:
    store = open_store(f"sqlite:///{tmp_path / 'db.sqlite'}")
    assert isinstance(store, SQLiteStore)
    (pages,) = store._connection().execute("PRAGMA wal_autocheckpoint").fetchone()
    store.close()
    assert pages > 1000  # SQLite's default, which a commit would otherwise pay for


def test_many_writes_across_checkpoints_keep_the_chain_whole(tmp_path: Path) -> None:
    store = open_store(f"sqlite:///{tmp_path / 'db.sqlite'}")
    threads, each = 4, CHECKPOINT_EVERY
    start = threading.Barrier(threads)

    def work() -> None:
        start.wait(WAIT_S)
        append(store, each)  # type: ignore[arg-type]

    workers = [threading.Thread(target=work) for _ in range(threads)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(WAIT_S * 2)
    assert store.verify_audit().checked == {"acme": threads * each}
    store.close()
    reopened = open_store(f"sqlite:///{tmp_path / 'db.sqlite'}")
    assert reopened.verify_audit().checked == {"acme": threads * each}
    reopened.close()
