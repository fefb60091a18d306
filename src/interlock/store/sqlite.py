"""The embedded default: one SQLite file in WAL mode.

Safe across threads (a connection per thread) and across processes on one host (every
write transaction is ``BEGIN IMMEDIATE``: it takes the database's write lock first and
waits up to ``busy_timeout`` for it — or, inside a check, no longer than the check's
deadline; see :mod:`interlock.core.deadline`). Commits are ``synchronous=NORMAL``: in WAL mode a
committed transaction survives the process crashing; ``durable`` audit appends use
``synchronous=FULL`` and survive power loss too.

The WAL is checkpointed (copied into the database file, which is then synced) by a
background thread every ``CHECKPOINT_EVERY`` write transactions, not by whichever
commit happens to cross SQLite's threshold: a checkpoint costs milliseconds, and it
would land on one caller's decision. SQLite's own automatic checkpoint stays on at a
higher threshold as a backstop.

``sqlite:///:memory:`` is a store that lasts as long as the object: a private file in a
private temporary directory, removed on close (every thread sees the same database, as
with a file), with a random audit key.

Example::

    from interlock.store import open_store

    store = open_store("sqlite:///.interlock/interlock.db?busy_timeout=5")
"""

from __future__ import annotations

import logging
import shutil
import sqlite3
import tempfile
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractContextManager, suppress
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

from interlock.core.deadline import time_left
from interlock.errors import StoreError, StoreTimeout, StoreUnavailable
from interlock.store.audit_keys import AuditKeys, AuditKeySetting
from interlock.store.grant_keys import GrantKeys
from interlock.store.migrate import apply_migrations, migration_status
from interlock.store.records import ApprovalRecord
from interlock.store.sql import AuditEntry, Cursor, SqlStore
from interlock.store.sql_audit import AuditJoin, _joined

if TYPE_CHECKING:
    from interlock.store.checkpoints import CheckpointOption

__all__ = ["SQLiteStore"]

log = logging.getLogger("interlock.store")

#: write transactions (in this process) between two background checkpoints
CHECKPOINT_EVERY: Final = 256
#: How far a connection's busy timeout may be off the wanted one before it is set
#: again (seconds): a deadline a little nearer than the last one changes nothing, so a
#: steady stream of checks does not pay a PRAGMA each.
_BUSY_SLACK: Final = 0.05
#: WAL pages at which a commit checkpoints itself (SQLite's default is 1,000): the
#: backstop should the background checkpoints fall behind
_AUTOCHECKPOINT_PAGES: Final = 8_000


class SQLiteStore(SqlStore):
    """The store in one SQLite file. ``busy_timeout`` (seconds) bounds how long a
    write waits for another process's write lock before it fails (a check's deadline,
    when nearer, bounds it instead). The audit key is ``audit_key``, else the file
    ``audit_key_file`` (the URL's parameter), else the environment's, else
    ``<path>.audit-key`` — see :mod:`.audit_keys`. The grant signing keys are in
    ``grant_key_file``, else ``<path>.grant-keys`` — see :mod:`.grant_keys`."""

    dialect = "sqlite"
    usual_statements = True

    def __init__(
        self,
        path: str | Path,
        *,
        busy_timeout: float = 10.0,
        migrate: bool = True,
        clock: Callable[[], int] | None = None,
        audit_key: AuditKeySetting = None,
        audit_key_file: str | None = None,
        grant_key_file: str | None = None,
        checkpoints: CheckpointOption = None,
    ) -> None:
        memory = str(path) == ":memory:"
        # Absolute now: connections open lazily, one per thread, and a relative path
        # must not follow a later change of working directory.
        self.path = Path(path) if memory else Path(path).absolute()
        # ``:memory:`` is a private file in a private directory, removed on close: a
        # SQLite in-memory database is one per connection, and the store opens one
        # connection per thread (the audit writer's, an executor's), which would each
        # see an empty database of their own.
        self._scratch = Path(tempfile.mkdtemp(prefix="interlock-memory-")) if memory else None
        self._db = self.path if self._scratch is None else self._scratch / "store.db"
        keys = AuditKeys.resolve(
            audit_key,
            url_file=audit_key_file,
            default_file=None if memory else self.path.with_name(self.path.name + ".audit-key"),
            ephemeral=memory,
            where=f"sqlite:///{self.path}",
        )
        super().__init__(clock=clock, audit_keys=keys, checkpoints=checkpoints)
        self.grant_keys = GrantKeys.resolve(
            file=grant_key_file,
            default_file=None if memory else self.path.with_name(self.path.name + ".grant-keys"),
            ephemeral=memory,
            where=f"sqlite:///{self.path}",
        )
        if not memory:  # private: it holds the log, and by default the keys beside it
            self.path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        if not 0 <= busy_timeout < float("inf"):
            raise StoreError(f"busy_timeout must be a number of seconds >= 0, not {busy_timeout!r}")
        self.busy_timeout = busy_timeout
        self._local = threading.local()
        self._all: list[sqlite3.Connection] = []
        self._all_lock = threading.Lock()
        self._writes = 0  # write transactions committed (approximate: not locked)
        self._inline: sqlite3.Connection | None = None  # try_append_audit's own
        self._inline_lock = threading.Lock()
        self._checkpointer: _Checkpointer | None = None
        if migrate:
            self._migrate_on_open()

    @property
    def url(self) -> str:
        return f"sqlite:///{self.path}"

    def q(self, sql: str) -> str:
        return sql

    def _connection(self) -> sqlite3.Connection:
        conn: sqlite3.Connection | None = getattr(self._local, "conn", None)
        if conn is not None:
            return conn
        if self._closed:
            raise StoreUnavailable(f"the store {self.url} is closed")
        conn = None
        try:
            conn = sqlite3.connect(
                self._db, isolation_level=None, check_same_thread=False, timeout=self.busy_timeout
            )
            self._enable_wal(conn)
            conn.execute("PRAGMA synchronous=NORMAL")
            conn.execute(f"PRAGMA busy_timeout={int(self.busy_timeout * 1000)}")
            conn.execute(f"PRAGMA wal_autocheckpoint={_AUTOCHECKPOINT_PAGES}")
        except sqlite3.Error as exc:
            if conn is not None:
                conn.close()
            raise StoreUnavailable(f"cannot open {self.path}: {exc}") from exc
        self._local.conn = conn
        self._local.full_sync = False
        self._local.busy = self.busy_timeout
        with self._all_lock:
            self._all.append(conn)
        return conn

    def _enable_wal(self, conn: sqlite3.Connection) -> None:
        # Turning a new file to WAL needs its write lock, and SQLite does not wait for
        # that one (no busy handler there): wait here, up to busy_timeout, so that
        # processes opening a new database at once do not fail.
        deadline = time.monotonic() + max(0.0, time_left(self.busy_timeout))
        delay = 0.005
        while True:
            try:
                conn.execute("PRAGMA journal_mode=WAL")
                return
            except sqlite3.OperationalError as exc:
                busy = exc.sqlite_errorcode in (sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED)
                remaining = deadline - time.monotonic()
                if not busy or remaining <= 0:
                    raise
            time.sleep(min(delay, remaining))
            delay = min(delay * 2, 0.1)

    def transaction(self, *, write: bool = True) -> AbstractContextManager[Cursor]:
        return _Transaction(self, write)

    def _begin(self, write: bool) -> sqlite3.Connection:
        """This thread's connection, in a transaction just begun (a write one waiting
        for the write lock no longer than the check's deadline)."""
        wait = time_left(self.busy_timeout)
        if wait <= 0:
            raise StoreTimeout(f"{self.path}: the deadline passed before the store was asked")
        conn = self._connection()
        if write:  # only a write waits for a lock (a WAL reader never does)
            self._bound_busy_wait(conn, wait)
        try:
            conn.execute("BEGIN IMMEDIATE" if write else "BEGIN")
        except sqlite3.OperationalError as exc:
            if wait < self.busy_timeout and exc.sqlite_errorcode == sqlite3.SQLITE_BUSY:
                raise StoreTimeout(
                    f"{self.path}: still locked by another writer at the deadline ({exc})"
                ) from exc
            raise StoreUnavailable(f"{self.path}: {exc}") from exc
        return conn

    def usual(self, sql: str, params: Sequence[Any]) -> bool:
        """In autocommit: one statement is one write transaction — it takes the
        write lock first, waiting like ``BEGIN IMMEDIATE`` (no longer than the
        check's deadline), and commits at its end."""
        wait = time_left(self.busy_timeout)
        if wait <= 0:
            raise StoreTimeout(f"{self.path}: the deadline passed before the store was asked")
        local = self._local
        cur: sqlite3.Cursor | None = getattr(local, "usual", None)
        if cur is None:  # one cursor per thread for these: none made per statement
            cur = local.usual = self._connection().cursor()
        if wait != local.busy:
            self._bound_busy_wait(local.conn, wait)
        try:
            cur.execute(sql, params)
        except sqlite3.IntegrityError:  # the trigger's RAISE(ABORT), or a unique key
            return False
        except sqlite3.OperationalError as exc:
            if wait < self.busy_timeout and exc.sqlite_errorcode == sqlite3.SQLITE_BUSY:
                raise StoreTimeout(
                    f"{self.path}: still locked by another writer at the deadline ({exc})"
                ) from exc
            raise StoreUnavailable(f"{self.path}: {exc}") from exc
        except sqlite3.Error as exc:
            raise StoreError(f"{self.path}: {exc}") from exc
        self._writes = writes = self._writes + 1  # self._committed(True), inlined
        if writes % CHECKPOINT_EVERY == 0:
            self._checkpoint_soon()
        return True

    def select(self, sql: str, params: Sequence[Any]) -> list[Any]:
        """In autocommit: one ``SELECT`` is a read snapshot of its own (a WAL reader
        never waits for the write lock)."""
        if time_left(self.busy_timeout) <= 0:
            raise StoreTimeout(f"{self.path}: the deadline passed before the store was asked")
        cur: sqlite3.Cursor | None = getattr(self._local, "usual", None)
        if cur is None:  # one cursor per thread (:meth:`usual`'s): none made per SELECT
            cur = self._local.usual = self._connection().cursor()
        try:
            return cur.execute(sql, params).fetchall()
        except sqlite3.Error as exc:
            raise StoreError(f"{self.path}: {exc}") from exc

    def usual_in(self, cur: Cursor, sql: str, params: Sequence[Any]) -> bool:
        try:
            cur.execute(sql, params)
        except sqlite3.IntegrityError:  # the statement is undone; the transaction goes on
            return False
        return True

    def file_path(self) -> Path | None:
        return None if str(self.path) == ":memory:" else self.path

    def _bound_busy_wait(self, conn: sqlite3.Connection, wait: float) -> None:
        """Make the connection wait for the write lock about ``wait`` seconds, setting
        its busy timeout only when it is off by more than the slack."""
        current: float = self._local.busy
        if abs(current - wait) > _BUSY_SLACK:
            conn.execute(f"PRAGMA busy_timeout={int(wait * 1000)}")
            self._local.busy = wait

    def try_append_audit(
        self, entries: Sequence[AuditEntry], joins: Mapping[int, AuditJoin] | None = None
    ) -> list[int] | None:
        """On a connection of its own that never waits (``busy_timeout=0``) and never
        checkpoints: ``None`` at once when another writer holds the lock."""
        if self._closed or str(self.path) == ":memory:":
            return None
        if not self._inline_lock.acquire(blocking=False):
            return None
        try:
            conn = self._inline_connection()
            try:
                conn.execute("BEGIN IMMEDIATE")
            except sqlite3.OperationalError as exc:
                if exc.sqlite_errorcode in (sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED):
                    return None
                raise StoreUnavailable(f"{self.path}: {exc}") from exc
            with self._begun(conn, write=True) as cur:
                if joins:
                    entries = _joined(cur, entries, joins)
                seqs, heads = self._append_chain(cur, entries)
        finally:
            self._inline_lock.release()
        self._appended(heads)
        return seqs

    def _inline_connection(self) -> sqlite3.Connection:
        conn = self._inline
        if conn is None:
            try:
                conn = sqlite3.connect(
                    self._db, isolation_level=None, check_same_thread=False, timeout=0
                )
                conn.execute("PRAGMA busy_timeout=0")
                conn.execute("PRAGMA synchronous=NORMAL")
                conn.execute("PRAGMA wal_autocheckpoint=0")  # the background thread's job
            except sqlite3.Error as exc:
                if conn is not None:
                    conn.close()
                raise StoreUnavailable(f"cannot open {self.path}: {exc}") from exc
            with self._all_lock:
                self._all.append(conn)
            self._inline = conn
        return conn

    def _begun(self, conn: sqlite3.Connection, write: bool) -> AbstractContextManager[Cursor]:
        """The rest of a transaction once ``BEGIN`` succeeded: commit, or roll back on
        any exception (raised as a StoreError)."""
        return _Begun(self, conn, write)

    def _committed(self, write: bool) -> None:
        if write:
            self._writes += 1
            if self._writes % CHECKPOINT_EVERY == 0:
                self._checkpoint_soon()

    def _checkpoint_soon(self) -> None:
        checkpointer = self._checkpointer
        if checkpointer is None and not self._closed and str(self.path) != ":memory:":
            with self._all_lock:
                if self._checkpointer is None:
                    self._checkpointer = _Checkpointer(self)
                    self._checkpointer.start()
                checkpointer = self._checkpointer
        if checkpointer is not None:
            checkpointer.due.set()

    def audit_transaction(self, durable: bool) -> AbstractContextManager[Cursor]:
        if getattr(self._local, "full_sync", False) != durable:
            conn = self._connection()
            conn.execute(f"PRAGMA synchronous={'FULL' if durable else 'NORMAL'}")
            self._local.full_sync = durable
        return self.transaction(write=True)

    def migrate(self) -> list[str]:
        try:
            return apply_migrations(self, self.dialect)
        except sqlite3.Error as exc:
            raise StoreError(f"{self.path}: {exc}") from exc

    def migration_status(self) -> list[tuple[int, str, bool]]:
        return migration_status(self, self.dialect)

    def wait_for_approval(self, approval_id: str, timeout: float) -> ApprovalRecord:
        return self.poll_for_approval(approval_id, timeout)

    async def await_approval(self, approval_id: str, timeout: float) -> ApprovalRecord:
        return await self.apoll_for_approval(approval_id, timeout)

    def close(self) -> None:
        super().close()
        checkpointer = self._checkpointer
        if checkpointer is not None:
            checkpointer.stop()
        with self._all_lock:
            connections, self._all = self._all, []
        with self._inline_lock:  # not while an append runs on it
            self._inline = None
            for conn in connections:
                with suppress(sqlite3.Error):
                    conn.close()
        self._local = threading.local()
        if self._scratch is not None:
            shutil.rmtree(self._scratch, ignore_errors=True)


class _Begun:
    """A transaction on ``conn`` after its ``BEGIN``: the cursor in, then ``COMMIT``
    — or a rollback on any exception, an sqlite3 one raised as a StoreError. (A
    class, not a generator: this runs around every statement the store writes.)"""

    __slots__ = ("_conn", "_cur", "_store", "_write")

    def __init__(self, store: SQLiteStore, conn: sqlite3.Connection, write: bool) -> None:
        self._store = store
        self._conn = conn
        self._write = write
        self._cur: sqlite3.Cursor | None = None

    def __enter__(self) -> Cursor:
        self._cur = cur = self._conn.cursor()
        return cur

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: object
    ) -> None:
        conn, cur, store = self._conn, self._cur, self._store
        if exc is not None:
            with suppress(sqlite3.Error):  # the connection is gone: nothing was committed
                conn.rollback()
            if cur is not None:
                with suppress(sqlite3.Error):
                    cur.close()
            if isinstance(exc, sqlite3.OperationalError):
                raise StoreUnavailable(f"{store.path}: {exc}") from exc
            if isinstance(exc, sqlite3.Error):
                raise StoreError(f"{store.path}: {exc}") from exc
            return  # re-raised as it is
        try:
            (cur or conn).execute("COMMIT")  # the cursor's: no cursor made for it
        except sqlite3.Error as error:
            with suppress(sqlite3.Error):
                conn.rollback()
            raise StoreError(f"{store.path}: commit failed: {error}") from error
        finally:
            if cur is not None:
                cur.close()
        store._committed(self._write)


class _Transaction(_Begun):
    """:meth:`SQLiteStore.transaction`: ``BEGIN`` on entering, then as :class:`_Begun`."""

    __slots__ = ()

    def __init__(self, store: SQLiteStore, write: bool) -> None:
        self._store = store
        self._write = write
        self._cur = None

    def __enter__(self) -> Cursor:
        self._conn = self._store._begin(self._write)
        return super().__enter__()


class _Checkpointer(threading.Thread):
    """Runs a passive WAL checkpoint each time it is told one is due: it copies what
    no reader still needs, never blocks a writer, and gives up quietly when busy (the
    next one, or SQLite's backstop, catches up)."""

    def __init__(self, store: SQLiteStore) -> None:
        super().__init__(name="interlock-sqlite-checkpoint", daemon=True)
        self.store = store
        self.due = threading.Event()
        self._stopping = False
        self.checkpoints = 0  # run so far (for tests)

    def stop(self) -> None:
        self._stopping = True
        self.due.set()
        self.join(timeout=10.0)

    def run(self) -> None:
        while True:
            self.due.wait()
            self.due.clear()
            if self._stopping:
                return
            try:
                self.store._connection().execute("PRAGMA wal_checkpoint(PASSIVE)")
                self.checkpoints += 1
            except (sqlite3.Error, StoreError) as exc:  # closed meanwhile, or busy
                log.debug("interlock: WAL checkpoint skipped: %s", exc)
