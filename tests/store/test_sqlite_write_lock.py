"""SQLite writers queue for the write lock on a sidecar file (``<db>-wlock``) before
``BEGIN IMMEDIATE``, not in SQLite's sleeping busy handler: the lock is held for the
transaction and let go on every way out; another holder makes a writer wait no longer
than its deadline, and the never-waiting audit append give up at once."""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from interlock.core.deadline import deadline_scope
from interlock.errors import StoreError, StoreTimeout, StoreUnavailable
from interlock.store import open_store, sqlite_wlock
from interlock.store.sqlite import SQLiteStore
from interlock.store.sqlite_wlock import WriteLock, sidecar_path

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="fcntl is POSIX only")

EPSILON = 1.5  # a noisy shared machine: a bound is the deadline + EPSILON

_HOLDER = """
import fcntl, os, sys
fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT, 0o600)
fcntl.flock(fd, fcntl.LOCK_EX)
print("held", flush=True)
sys.stdin.read()  # until the test closes our stdin
"""


@pytest.fixture
def store(tmp_path: Path) -> Iterator[SQLiteStore]:
    opened = open_store(f"sqlite:///{tmp_path / 'interlock.db'}", busy_timeout=5)
    assert isinstance(opened, SQLiteStore)
    with opened:
        yield opened


@pytest.fixture
def other_process(store: SQLiteStore) -> Iterator[subprocess.Popen[str]]:
    """Another process holding the sidecar lock until the test ends."""
    proc = subprocess.Popen(
        [sys.executable, "-c", _HOLDER, str(sidecar_path(store.path))],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None and proc.stdout.readline().strip() == "held"
    yield proc
    assert proc.stdin is not None
    proc.stdin.close()
    proc.wait(timeout=10)


def _free(store: SQLiteStore) -> bool:
    """Whether another open file description can take the sidecar lock right now."""
    probe = WriteLock(store.path)
    try:
        if probe.try_acquire():
            probe.release()
            return True
        return False
    finally:
        probe.close()


def _note(store: SQLiteStore) -> None:
    store.append_audit([("acme", 1, "note", None, None, None, "{}")])


def test_a_write_transaction_holds_the_sidecar_lock_and_lets_it_go(store: SQLiteStore) -> None:
    with store.transaction() as cur:
        cur.execute("SELECT 1")
        assert not _free(store)
    assert _free(store)


def test_a_read_transaction_takes_no_lock(store: SQLiteStore) -> None:
    with store.transaction(write=False) as cur:
        cur.execute("SELECT 1")
        assert _free(store)


def test_the_lock_is_let_go_after_an_exception_in_the_body(store: SQLiteStore) -> None:
    with pytest.raises(ValueError), store.transaction() as cur:
        cur.execute("SELECT 1")
        raise ValueError("the caller's own")
    assert _free(store)
    _note(store)  # the next write in this process, too


def test_the_lock_is_let_go_after_a_failed_rolled_back_transaction(store: SQLiteStore) -> None:
    with pytest.raises(StoreError), store.transaction() as cur:
        cur.execute("INSERT INTO no_such_table VALUES (1)")
    assert _free(store)
    _note(store)


def test_the_lock_is_let_go_when_begin_fails(store: SQLiteStore) -> None:
    with store.transaction() as cur:  # a nested BEGIN on this thread's connection
        cur.execute("SELECT 1")
        started = time.monotonic()
        with pytest.raises(StoreUnavailable), store.transaction():
            pass
        assert time.monotonic() - started < EPSILON  # refused at once, not queued
    assert _free(store)
    _note(store)


@pytest.mark.usefixtures("other_process")
def test_another_process_holding_it_times_a_writer_out_at_its_deadline(
    store: SQLiteStore,
) -> None:
    started = time.monotonic()
    with deadline_scope(time.monotonic() + 0.3), pytest.raises(StoreTimeout):
        _note(store)
    elapsed = time.monotonic() - started
    assert 0.25 < elapsed < 0.3 + EPSILON
    assert not store._wlock.held_here()  # type: ignore[union-attr]


def test_another_process_holding_it_past_busy_timeout_is_unavailable(tmp_path: Path) -> None:
    path = tmp_path / "interlock.db"
    with open_store(f"sqlite:///{path}", busy_timeout=0.3) as store:
        holder = WriteLock(path)  # another open file description: as another process
        assert holder.try_acquire()
        try:
            with pytest.raises(StoreUnavailable):
                _note(store)
        finally:
            holder.release()
            holder.close()
        _note(store)


@pytest.mark.usefixtures("other_process")
def test_try_append_audit_gives_up_at_once_while_another_holds_it(store: SQLiteStore) -> None:
    started = time.monotonic()
    assert store.try_append_audit([("acme", 1, "note", None, None, None, "{}")]) is None
    assert time.monotonic() - started < EPSILON
    assert list(store.audit_rows(tenant="acme")) == []


def test_try_append_audit_takes_and_lets_go_of_the_lock(store: SQLiteStore) -> None:
    assert store.try_append_audit([("acme", 1, "note", None, None, None, "{}")]) == [1]
    assert _free(store)
    with store.transaction() as cur:  # held by this thread: the append does not wait
        cur.execute("SELECT 1")
        assert store.try_append_audit([("acme", 1, "note", None, None, None, "{}")]) is None
    assert store.try_append_audit([("acme", 1, "note", None, None, None, "{}")]) == [2]


def test_a_writer_waits_for_the_holder_and_then_writes(store: SQLiteStore) -> None:
    holder = WriteLock(store.path)
    assert holder.try_acquire()
    done = threading.Event()

    def write() -> None:
        _note(store)
        done.set()

    thread = threading.Thread(target=write)
    thread.start()
    assert not done.wait(0.2)  # queued behind the holder
    holder.release()
    holder.close()
    thread.join(timeout=10)
    assert done.is_set()
    assert len(list(store.audit_rows(tenant="acme"))) == 1


def test_without_fcntl_writes_go_through_sqlite_alone(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sqlite_wlock, "fcntl", None)
    path = tmp_path / "interlock.db"
    with open_store(f"sqlite:///{path}") as store:
        _note(store)
        assert store.try_append_audit([("acme", 1, "note", None, None, None, "{}")]) == [2]
    assert not sidecar_path(path).exists()


def test_a_memory_database_has_no_sidecar() -> None:
    with open_store("sqlite:///:memory:") as store:
        assert isinstance(store, SQLiteStore) and store._wlock is None
