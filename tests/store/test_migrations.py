"""Migrations: applied when a store opens, each once, safe to race, and a database
migrated by a newer Interlock is refused."""

from __future__ import annotations

import contextlib
import os
import secrets
import sqlite3
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from interlock.errors import MigrationError, StoreUnavailable
from interlock.store import SqlStore, open_store
from interlock.store.migrate import known_migrations

TABLES = ("audit_events", "audit_heads", "approvals", "budgets", "reservations", "rate_counters")


def known(store: SqlStore) -> list[tuple[int, str]]:
    return [(m.version, m.name) for m in known_migrations(store.dialect)]


def applied_versions(store: SqlStore) -> list[int]:
    with store.transaction(write=False) as cur:
        cur.execute("SELECT version FROM schema_migrations ORDER BY version")
        return [int(row[0]) for row in cur.fetchall()]


def test_opening_a_store_applies_every_migration(store: SqlStore) -> None:
    assert store.migration_status() == [(v, n, True) for v, n in known(store)]
    with store.transaction(write=False) as cur:
        for table in TABLES:
            cur.execute(f"SELECT COUNT(*) FROM {table}")
            assert cur.fetchone()[0] == 0


def test_a_store_opened_without_migrating_reports_nothing_applied(store_url: str) -> None:
    with open_store(store_url, migrate=False) as fresh:
        assert fresh.migration_status() == [(v, n, False) for v, n in known(fresh)]
        assert fresh.migrate() == [f"{v:04d}_{n}" for v, n in known(fresh)]
        assert fresh.migration_status() == [(v, n, True) for v, n in known(fresh)]


def test_opening_again_applies_nothing(
    store: SqlStore, open_replica: Callable[..., SqlStore]
) -> None:
    again = open_replica()
    assert again.migrate() == []
    assert store.migrate() == []
    assert applied_versions(again) == [v for v, _ in known(again)]


@pytest.mark.parametrize("shared", [False, True], ids=["store-per-thread", "one-store"])
def test_concurrent_migrations_apply_each_migration_once(store_url: str, shared: bool) -> None:
    threads = 8
    first = open_store(store_url, migrate=False)
    if shared:
        stores = [first] * threads
    else:
        stores = [first] + [open_store(store_url, migrate=False) for _ in range(threads - 1)]
    barrier = threading.Barrier(threads)
    results: list[list[str]] = []
    errors: list[BaseException] = []

    def migrate(store: SqlStore) -> None:
        try:
            barrier.wait(10)
            results.append(store.migrate())
        except BaseException as exc:
            errors.append(exc)

    workers = [threading.Thread(target=migrate, args=(s,)) for s in stores]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(60)
    try:
        assert errors == []
        everything = [f"{v:04d}_{n}" for v, n in known(first)]
        assert sorted(name for applied in results for name in applied) == everything
        assert applied_versions(first) == [v for v, _ in known(first)]
    finally:
        for store in set(stores):
            store.close()


def test_stores_opened_at_once_on_a_new_database_all_open(store_url: str) -> None:
    threads = 8
    barrier = threading.Barrier(threads)
    opened: list[SqlStore] = []
    errors: list[BaseException] = []

    def open_one() -> None:
        try:
            barrier.wait(10)
            opened.append(open_store(store_url))
        except BaseException as exc:
            errors.append(exc)

    workers = [threading.Thread(target=open_one) for _ in range(threads)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(60)
    try:
        assert errors == []
        assert len(opened) == threads
        assert applied_versions(opened[0]) == [v for v, _ in known(opened[0])]
    finally:
        for store in opened:
            store.close()


def test_a_database_from_a_newer_interlock_is_refused_naming_both_versions(
    store: SqlStore, store_url: str
) -> None:
    newest = known(store)[-1][0]
    future = newest + 98
    with store.transaction() as cur:
        cur.execute(
            store.q("INSERT INTO schema_migrations (version, name, applied_us) VALUES (?, ?, ?)"),
            (future, "from_the_future", 0),
        )
    with pytest.raises(MigrationError) as refused:
        open_store(store_url)
    message = str(refused.value)
    assert f"version {future}" in message
    assert f"({newest})" in message
    with pytest.raises(MigrationError):
        store.migrate()


def test_a_refused_open_leaves_no_connection_behind(
    store: SqlStore, store_url: str, backend: str
) -> None:
    newest = known(store)[-1][0]
    with store.transaction() as cur:
        cur.execute(
            store.q("INSERT INTO schema_migrations (version, name, applied_us) VALUES (?, ?, ?)"),
            (newest + 1, "from_the_future", 0),
        )
    store.close()
    # The caller keeps the error (to log or report it), and with it the half-open store.
    if backend == "sqlite":
        with pytest.raises(MigrationError) as refused:
            open_store(store_url)
        assert open_files_named(store_url.removeprefix("sqlite:///")) == []
    else:
        import psycopg

        tag = "refused_open_" + secrets.token_hex(4)
        with pytest.raises(MigrationError) as refused:
            open_store(f"{store_url}&application_name={tag}")
        with psycopg.connect(store_url.split("?", 1)[0], autocommit=True) as conn:
            left = conn.execute(
                "SELECT COUNT(*) FROM pg_stat_activity WHERE application_name = %s", (tag,)
            ).fetchone()
        assert left == (0,)
    assert "upgrade Interlock" in str(refused.value)


def open_files_named(path: str) -> list[str]:
    fds = Path("/proc/self/fd")
    if not fds.exists():
        pytest.skip("needs /proc to list open files")
    target = os.path.realpath(path)
    found = []
    for fd in fds.iterdir():
        with contextlib.suppress(OSError):
            if os.readlink(fd) == target:
                found.append(str(fd))
    return found


# -- SQLite: a new file opened while another connection writes --------------------------


def hold_write_lock(path: Path, seconds: float) -> threading.Thread:
    """Another connection takes the write lock of a new (not yet WAL) database file
    and keeps it for ``seconds``, as a process mid-way through its first open does."""
    other = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    other.execute("CREATE TABLE elsewhere (x)")
    other.execute("BEGIN IMMEDIATE")

    def release() -> None:
        time.sleep(seconds)
        other.execute("COMMIT")
        other.close()

    holder = threading.Thread(target=release)
    holder.start()
    return holder


def test_opening_a_new_sqlite_file_waits_for_another_writer(tmp_path: Path) -> None:
    path = tmp_path / "interlock.db"
    holder = hold_write_lock(path, 0.3)
    try:
        with open_store(f"sqlite:///{path}", busy_timeout=10) as opened:
            assert all(applied for *_, applied in opened.migration_status())
            with opened.transaction(write=False) as cur:
                cur.execute("PRAGMA journal_mode")
                assert cur.fetchone()[0] == "wal"
    finally:
        holder.join()


def test_opening_a_new_sqlite_file_gives_up_after_the_busy_timeout(tmp_path: Path) -> None:
    path = tmp_path / "interlock.db"
    holder = hold_write_lock(path, 1.5)
    try:
        started = time.monotonic()
        with pytest.raises(StoreUnavailable, match="locked"):  # before the holder let go
            open_store(f"sqlite:///{path}", busy_timeout=0.3)
        assert time.monotonic() - started >= 0.3  # it did wait for the lock first
    finally:
        holder.join()


def test_a_relative_sqlite_path_does_not_follow_a_later_chdir(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    first, second = tmp_path / "a", tmp_path / "b"
    first.mkdir()
    second.mkdir()
    monkeypatch.chdir(first)
    store = open_store("sqlite:///state.db")
    monkeypatch.chdir(second)
    # a thread's first connection opens after the chdir, as the audit writer's does
    worker = threading.Thread(target=store.audit_tenants)
    worker.start()
    worker.join()
    store.close()
    assert (first / "state.db").exists() and not (second / "state.db").exists()
