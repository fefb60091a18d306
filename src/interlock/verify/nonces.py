"""Nonce stores: each grant id is accepted once, by one request, across threads,
processes and replicas that share the store.

``consume(nonce, keep_until=..., now=...)`` is the one operation: ``True`` for the
first caller, ``False`` for every later one. It is a single atomic write — an insert
that does nothing on a conflict — never a read followed by a write. An entry is kept
until ``keep_until`` (the grant's expiry plus the verifier's leeway: past it the grant
is refused as expired anyway) and one more leeway of margin for replicas whose clocks
disagree, then pruned.

- :class:`MemoryNonceStore`: one process (thread-safe).
- :class:`SqliteNonceStore`: processes on one host sharing a file (WAL,
  ``synchronous=FULL``: a consumed nonce survives a crash and a power cut).
- :class:`PostgresNonceStore`: replicas sharing a database (a table of its own, created
  when missing; needs ``interlock[postgres]``).

A store that fails raises :class:`~interlock.errors.StoreUnavailable`; the verifier
lets it through, and the request is refused (fail closed).

Example::

    from interlock.verify.nonces import MemoryNonceStore

    nonces = MemoryNonceStore()
    assert nonces.consume("g_1", keep_until=1_060, now=1_000)
    assert not nonces.consume("g_1", keep_until=1_060, now=1_001)
"""

from __future__ import annotations

import asyncio
import contextlib
import heapq
import re
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final, Literal, Protocol, runtime_checkable

from interlock.errors import StoreUnavailable

if TYPE_CHECKING:
    import os
    import sqlite3

__all__ = [
    "MemoryNonceStore",
    "NonceStore",
    "PostgresNonceStore",
    "SqliteNonceStore",
]

DEFAULT_TABLE: Final = "interlock_nonces"
_NAME: Final = re.compile(r"[a-z_][a-z0-9_]{0,62}")
_MAX_NONCE: Final = 512


@runtime_checkable
class NonceStore(Protocol):
    """Where consumed nonces are kept (see the module)."""

    def consume(self, nonce: str, *, keep_until: int, now: float) -> bool:
        """``True`` when ``nonce`` was not consumed before (it is now), else ``False``."""
        ...

    async def aconsume(self, nonce: str, *, keep_until: int, now: float) -> bool:
        """:meth:`consume` without blocking the event loop."""
        ...

    def close(self) -> None:
        """Release connections (the entries stay where they are durable)."""
        ...


def _checked(nonce: str, keep_until: int) -> None:
    if not isinstance(nonce, str) or not nonce or len(nonce) > _MAX_NONCE:
        raise ValueError(f"a nonce is a non-empty string of at most {_MAX_NONCE} characters")
    if not isinstance(keep_until, int) or isinstance(keep_until, bool):
        raise ValueError(f"keep_until must be whole seconds, not {keep_until!r}")


class MemoryNonceStore:
    """Nonces in this process's memory: right for a provider that runs one process; a
    provider with several workers or replicas needs a shared store (SQLite, PostgreSQL),
    or a grant replayed to another worker is accepted there. ``margin`` (seconds) is
    how long past ``keep_until`` an entry is kept."""

    def __init__(self, *, margin: int = 30) -> None:
        self._margin = margin
        self._lock = threading.Lock()
        self._seen: dict[str, int] = {}
        self._expiry: list[tuple[int, str]] = []

    def consume(self, nonce: str, *, keep_until: int, now: float) -> bool:
        _checked(nonce, keep_until)
        with self._lock:
            self._prune(now)
            if nonce in self._seen:
                return False
            self._seen[nonce] = keep_until
            heapq.heappush(self._expiry, (keep_until, nonce))
            return True

    async def aconsume(self, nonce: str, *, keep_until: int, now: float) -> bool:
        return self.consume(nonce, keep_until=keep_until, now=now)

    def _prune(self, now: float) -> None:
        horizon = now - self._margin
        while self._expiry and self._expiry[0][0] < horizon:
            _, nonce = heapq.heappop(self._expiry)
            self._seen.pop(nonce, None)

    def __len__(self) -> int:
        with self._lock:
            return len(self._seen)

    def close(self) -> None:
        pass


class SqliteNonceStore:
    """Nonces in a SQLite file shared by the processes of one host. One connection per
    thread; ``busy_timeout`` (seconds) bounds the wait for another writer; expired
    entries are pruned every ``prune_every`` consumes. ``synchronous="NORMAL"`` skips
    the fsync of each consume (≈22 µs instead of ≈1.1 ms here): a consumed nonce survives
    a crash of the process but not a power cut, which could let a replay in within the
    grant's lifetime after the host comes back."""

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        table: str = DEFAULT_TABLE,
        busy_timeout: float = 10.0,
        margin: int = 30,
        prune_every: int = 1000,
        synchronous: Literal["FULL", "NORMAL"] = "FULL",
    ) -> None:
        if synchronous not in ("FULL", "NORMAL"):
            raise ValueError(f"synchronous is 'FULL' or 'NORMAL', not {synchronous!r}")
        if not _NAME.fullmatch(table):
            raise ValueError(f"{table!r} is not a table name (lower case, digits, _)")
        self.path = Path(path)
        self._table = table
        self._busy_timeout = busy_timeout
        self._synchronous = synchronous
        self._margin = margin
        self._prune_every = max(1, prune_every)
        self._local = threading.local()
        self._connections: list[sqlite3.Connection] = []
        self._lock = threading.Lock()
        self._count = 0
        self._closed = False
        self._connection()  # create the table now: a bad path fails here, not mid-request

    def _connection(self) -> sqlite3.Connection:
        conn: sqlite3.Connection | None = getattr(self._local, "conn", None)
        if conn is not None:
            return conn
        if self._closed:
            raise StoreUnavailable(f"the nonce store {self.path} is closed")
        import sqlite3

        try:
            conn = sqlite3.connect(
                self.path,
                timeout=self._busy_timeout,
                isolation_level=None,
                check_same_thread=False,
            )
            _enable_wal(conn, self._busy_timeout)
            conn.execute(f"PRAGMA synchronous={self._synchronous}")
            conn.execute(
                f"CREATE TABLE IF NOT EXISTS {self._table} "
                "(nonce TEXT PRIMARY KEY, keep_until INTEGER NOT NULL) WITHOUT ROWID"
            )
            conn.execute(
                f"CREATE INDEX IF NOT EXISTS {self._table}_keep_until ON {self._table} (keep_until)"
            )
        except sqlite3.Error as exc:
            raise StoreUnavailable(f"the nonce store {self.path} cannot be opened: {exc}") from exc
        self._local.conn = conn
        with self._lock:
            self._connections.append(conn)
        return conn

    def consume(self, nonce: str, *, keep_until: int, now: float) -> bool:
        _checked(nonce, keep_until)
        import sqlite3

        conn = self._connection()
        try:
            cursor = conn.execute(
                f"INSERT INTO {self._table} (nonce, keep_until) VALUES (?, ?) "
                "ON CONFLICT (nonce) DO NOTHING",
                (nonce, keep_until),
            )
        except sqlite3.Error as exc:
            raise StoreUnavailable(f"the nonce store {self.path} failed: {exc}") from exc
        if self._due():
            # Housekeeping: a failure here loses nothing (the entries are pruned later).
            with contextlib.suppress(sqlite3.Error):
                conn.execute(
                    f"DELETE FROM {self._table} WHERE keep_until < ?", (int(now) - self._margin,)
                )
        return cursor.rowcount == 1

    async def aconsume(self, nonce: str, *, keep_until: int, now: float) -> bool:
        return await asyncio.to_thread(self.consume, nonce, keep_until=keep_until, now=now)

    def _due(self) -> bool:
        with self._lock:
            self._count += 1
            return self._count % self._prune_every == 0

    def close(self) -> None:
        with self._lock:
            self._closed = True
            connections, self._connections = self._connections, []
        for conn in connections:
            conn.close()


class PostgresNonceStore:
    """Nonces in a PostgreSQL table shared by replicas (``table`` in ``schema``, both
    created when missing). ``conninfo`` is a libpq URL or DSN; a URL's ``schema=``
    parameter (as Interlock's store URLs carry it) is taken as ``schema``. Connections
    come from a small pool (``max_connections``), in autocommit: each consume is one
    statement. Expired entries are pruned every ``prune_every`` consumes (by whichever
    replica counts to it)."""

    def __init__(
        self,
        conninfo: str,
        *,
        schema: str | None = None,
        table: str = DEFAULT_TABLE,
        max_connections: int = 4,
        connect_timeout: float = 5.0,
        margin: int = 30,
        prune_every: int = 1000,
    ) -> None:
        try:
            import psycopg_pool
        except ImportError as exc:  # pragma: no cover - the extra is installed in tests
            raise ImportError(
                "PostgresNonceStore needs psycopg: pip install 'interlock[postgres]'"
            ) from exc
        conninfo, schema = _schema_of(conninfo, schema)
        for name in (table, schema):
            if name is not None and not _NAME.fullmatch(name):
                raise ValueError(f"{name!r} is not a table or schema name (lower case, digits, _)")
        self._name = f"{schema}.{table}" if schema else table
        self._schema = schema
        self._table = table
        self._margin = margin
        self._prune_every = max(1, prune_every)
        self._lock = threading.Lock()
        self._count = 0
        self._pool = psycopg_pool.ConnectionPool(
            conninfo,
            min_size=1,
            max_size=max_connections,
            kwargs={"autocommit": True, "connect_timeout": max(1, round(connect_timeout))},
            timeout=connect_timeout,
            open=False,
        )
        try:
            self._pool.open(wait=True, timeout=connect_timeout)
            self._create()
        except Exception as exc:
            self._pool.close()
            raise StoreUnavailable(f"the nonce store cannot be opened: {exc}") from exc

    def _create(self) -> None:
        with self._pool.connection() as conn, conn.transaction():
            # One creator at a time: concurrent CREATE ... IF NOT EXISTS can still collide.
            conn.execute("SELECT pg_advisory_xact_lock(hashtext(%s))", (self._name,))
            if self._schema:
                conn.execute(f"CREATE SCHEMA IF NOT EXISTS {self._schema}")
            conn.execute(
                f"CREATE TABLE IF NOT EXISTS {self._name} "
                "(nonce text PRIMARY KEY, keep_until bigint NOT NULL)"
            )
            conn.execute(
                f"CREATE INDEX IF NOT EXISTS {self._table}_keep_until ON {self._name} (keep_until)"
            )

    def consume(self, nonce: str, *, keep_until: int, now: float) -> bool:
        _checked(nonce, keep_until)
        try:
            with self._pool.connection() as conn:
                cursor = conn.execute(
                    f"INSERT INTO {self._name} (nonce, keep_until) VALUES (%s, %s) "
                    "ON CONFLICT (nonce) DO NOTHING",
                    (nonce, keep_until),
                )
                first = cursor.rowcount == 1
        except Exception as exc:
            raise StoreUnavailable(f"the nonce store failed: {type(exc).__name__}: {exc}") from exc
        if self._due():
            # Housekeeping: a failure here loses nothing (the entries are pruned later).
            with contextlib.suppress(Exception), self._pool.connection() as conn:
                conn.execute(
                    f"DELETE FROM {self._name} WHERE keep_until < %s", (int(now) - self._margin,)
                )
        return first

    async def aconsume(self, nonce: str, *, keep_until: int, now: float) -> bool:
        return await asyncio.to_thread(self.consume, nonce, keep_until=keep_until, now=now)

    def _due(self) -> bool:
        with self._lock:
            self._count += 1
            return self._count % self._prune_every == 0

    def close(self) -> None:
        self._pool.close()


def _schema_of(conninfo: str, schema: str | None) -> tuple[str, str | None]:
    """``conninfo`` without a ``schema=`` URL parameter (libpq knows none), and the
    schema: the one given, else the parameter's."""
    from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

    if "://" not in conninfo:
        return conninfo, schema
    parts = urlsplit(conninfo)
    query = parse_qsl(parts.query, keep_blank_values=True)
    named = [value for key, value in query if key == "schema"]
    if not named:
        return conninfo, schema
    rest = urlencode([(key, value) for key, value in query if key != "schema"])
    return urlunsplit(parts._replace(query=rest)), schema or named[-1]


def _enable_wal(conn: Any, timeout: float) -> None:
    """Turn the file to WAL, waiting up to ``timeout`` seconds for it: that needs the
    file's write lock, and SQLite does not wait for that one (no busy handler there),
    so providers opening a new nonce file at once would fail (as the store's own
    ``SQLiteStore._enable_wal``; ``interlock.verify`` imports nothing of the store)."""
    import sqlite3

    deadline = time.monotonic() + max(0.0, timeout)
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
