"""The shared back end: PostgreSQL through psycopg 3 and a connection pool.

Many processes and replicas use one database with no other coordination: every
contended change is one conditional statement under row locks, a tenant's audit head
is locked for the length of an append, and the reaper skips rows another replica
holds. A decided approval is announced with ``NOTIFY``; waiters in every replica
``LISTEN`` and wake within milliseconds.

The URL is a libpq one, plus Interlock's own query parameters: ``schema`` (created if
missing; default ``public``), ``pool_min`` and ``pool_max`` (connections; 1 and 10),
``audit_key_file`` (where the audit key is: see :mod:`.audit_keys` — a shared
database gets no key made up for it), ``grant_key_file`` (the grant signing keys: see
:mod:`.grant_keys`; never made up for a shared database either), and ``approval_poll``
(seconds; default 1): how often a waiter re-reads its approval as a safety net while it
listens — a ``NOTIFY`` missed while the listener reconnects delays a wake-up by at most
this; while it cannot listen, waiters poll with a fast backoff up to this interval::

    postgresql://interlock@db.internal:5432/interlock?schema=interlock&pool_max=20

Every wait is bounded (seconds; a check's deadline, when nearer, bounds each instead —
see :mod:`interlock.core.deadline`): ``connect_timeout`` (libpq's own; default 5) for
opening a connection, ``pool_timeout`` (default 10) for a free connection from the
pool, ``statement_timeout`` (default 30) for one transaction — its statements are
cut server-side, and a server that stops answering is cut client-side (the
connection's socket is shut down by :mod:`.watchdog`) — and ``lock_timeout`` (default
10) for a lock another session holds. An idle transaction left open by a frozen client
is ended by the server after ``statement_timeout`` too. A connection that cannot be
made is retried with backoff for at most ``pool_timeout``, then afresh on demand.
Migrations are exempt from the statement and lock bounds (an index build may take
long).

Needs ``pip install 'interlock[postgres]'``.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import logging
import math
import re
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, contextmanager
from typing import TYPE_CHECKING, Any, Final, TypeVar
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from interlock.core.deadline import current_deadline, time_left
from interlock.errors import StoreError, StoreTimeout, StoreUnavailable
from interlock.store.audit_keys import AuditKeys, AuditKeySetting
from interlock.store.grant_keys import GrantKeys
from interlock.store.migrate import apply_migrations, migration_status
from interlock.store.records import ApprovalRecord, ChainHead
from interlock.store.sql import AuditEntry, Cursor, SqlStore
from interlock.store.sql_audit import AuditJoin, _by_tenant, _seqs
from interlock.store.watchdog import WATCHDOG, socket_cutter

if TYPE_CHECKING:
    from interlock.store.checkpoints import CheckpointOption

try:
    import psycopg
    from psycopg import sql as psql
    from psycopg_pool import ConnectionPool, PoolTimeout
except ImportError as exc:  # pragma: no cover - exercised without the extra
    raise ImportError(
        "the PostgreSQL store needs psycopg 3 and psycopg-pool: pip install 'interlock[postgres]'"
    ) from exc

__all__ = ["PostgresStore"]

log = logging.getLogger("interlock.store")

CHANNEL = "interlock_approvals"
_MIGRATION_LOCK = "SELECT pg_advisory_xact_lock(7366101)"
_SCHEMA_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,62}$")
_OWN_PARAMS = (
    "schema",
    "pool_min",
    "pool_max",
    "approval_poll",
    "audit_key_file",
    "grant_key_file",
    "pool_timeout",
    "statement_timeout",
    "lock_timeout",
)

#: Defaults of the bounds (seconds); see the module's docstring.
CONNECT_TIMEOUT: Final = 5.0
POOL_TIMEOUT: Final = 10.0
STATEMENT_TIMEOUT: Final = 30.0
LOCK_TIMEOUT: Final = 10.0

#: Set while migrating: no statement or lock bound (an index build may take long).
_UNBOUNDED: contextvars.ContextVar[bool] = contextvars.ContextVar(
    "interlock_pg_unbounded", default=False
)
_NO_BOUNDS = "BEGIN; SET LOCAL statement_timeout = 0; SET LOCAL lock_timeout = 0"


class PostgresStore(SqlStore):
    """The store in PostgreSQL. Thread-safe; one per process."""

    dialect = "postgres"
    greatest = "GREATEST"
    least = "LEAST"
    for_update = " FOR UPDATE"
    skip_locked = " FOR UPDATE SKIP LOCKED"
    key_share = " FOR KEY SHARE"
    lease_batches = True

    def __init__(
        self,
        url: str,
        *,
        migrate: bool = True,
        connect_timeout: float = CONNECT_TIMEOUT,
        clock: Callable[[], int] | None = None,
        audit_key: AuditKeySetting = None,
        checkpoints: CheckpointOption = None,
    ) -> None:
        conninfo, own = _split_url(url)
        # Shared by replicas that must hold the same key: never a key made up here.
        keys = AuditKeys.resolve(
            audit_key, url_file=own.get("audit_key_file"), shared=True, where=_hide_password(url)
        )
        super().__init__(clock=clock, audit_keys=keys, checkpoints=checkpoints)
        # Shared too: the signing keys are a file every replica is given, never made here.
        self.grant_keys = GrantKeys.resolve(
            file=own.get("grant_key_file"), shared=True, where=_hide_password(url)
        )
        self.schema = own.get("schema", "public")
        if not _SCHEMA_NAME.match(self.schema):
            raise StoreError(f"invalid schema name {self.schema!r} in the database URL")
        self._display_url = _hide_password(url)
        pool_min = _number(own, "pool_min", 1, int, self._display_url)
        pool_max = _number(own, "pool_max", 10, int, self._display_url)
        if pool_min < 0 or pool_max < max(pool_min, 1):
            raise StoreError(
                f"invalid pool sizes in {self._display_url}: need 0 <= pool_min <= pool_max"
                f" and pool_max >= 1, got pool_min={pool_min}, pool_max={pool_max}"
            )
        self.approval_poll = _number(own, "approval_poll", 1.0, float, self._display_url)
        if not 0 < self.approval_poll < float("inf"):
            raise StoreError(
                f"invalid approval_poll in {self._display_url}: a positive number of seconds"
            )
        self.pool_timeout = _seconds(own, "pool_timeout", POOL_TIMEOUT, self._display_url)
        self.statement_timeout = _seconds(
            own, "statement_timeout", STATEMENT_TIMEOUT, self._display_url
        )
        self.lock_timeout = _seconds(own, "lock_timeout", LOCK_TIMEOUT, self._display_url)
        libpq = dict(parse_qsl(urlsplit(conninfo).query, keep_blank_values=True))
        if "connect_timeout" in libpq:  # libpq's own parameter: the URL's value stands
            _seconds(libpq, "connect_timeout", connect_timeout, self._display_url)
        self._conninfo = conninfo
        statement_ms = _ms(self.statement_timeout)
        # The session's bounds, for transactions no check's deadline bounds; a URL's own
        # ``options`` come last, so a setting there wins.
        options = (
            f"-c search_path={self.schema} -c statement_timeout={statement_ms} "
            f"-c lock_timeout={_ms(self.lock_timeout)} "
            f"-c idle_in_transaction_session_timeout={statement_ms} {libpq.get('options', '')}"
        )
        self._kwargs: dict[str, Any] = {"autocommit": True, "options": options.strip()}
        if "connect_timeout" not in libpq:
            self._kwargs["connect_timeout"] = max(2, math.ceil(connect_timeout))
        self._ensure_schema()
        try:
            self.pool: ConnectionPool[Any] = ConnectionPool(
                conninfo,
                kwargs=self._kwargs,
                min_size=pool_min,
                max_size=pool_max,
                timeout=self.pool_timeout,
                # A connection that cannot be made is retried with backoff (1, 2, 4 s…)
                # for this long, then given up; the next caller starts afresh at once.
                # Left at the pool's default (5 min), the backoff would grow past a
                # minute, and checks would stay refused long after the server is back.
                reconnect_timeout=self.pool_timeout,
                open=True,
                name="interlock",
            )
        except psycopg.Error as exc:
            raise StoreUnavailable(f"cannot connect to {self._display_url}: {exc}") from exc
        self._sql_cache: dict[str, str] = {}
        self._listener: _Listener | None = None
        self._listener_lock = threading.Lock()
        if migrate:
            self._migrate_on_open()

    @property
    def url(self) -> str:
        return self._display_url

    def _ensure_schema(self) -> None:
        try:
            with psycopg.connect(self._conninfo, **self._kwargs) as conn:
                conn.execute(
                    psql.SQL("CREATE SCHEMA IF NOT EXISTS {}").format(psql.Identifier(self.schema))
                )
        except psycopg.errors.UniqueViolation:
            pass  # another process created it at the same moment
        except psycopg.Error as exc:
            raise StoreUnavailable(f"cannot connect to {self._display_url}: {exc}") from exc

    def q(self, sql: str) -> str:
        converted = self._sql_cache.get(sql)
        if converted is None:
            converted = sql.replace("?", "%s")
            self._sql_cache[sql] = converted
        return converted

    def transaction(self, *, write: bool = True) -> AbstractContextManager[Cursor]:
        """A transaction bounded by the check's deadline (else ``statement_timeout``):
        the wait for a pooled connection, each statement and lock wait server-side, and
        the whole transaction client-side (a connection still busy at the bound is cut
        by the watchdog and discarded)."""
        return self._bounded(single=False)

    def single_statement(self) -> AbstractContextManager[Cursor]:
        """A cursor for ONE statement that is a transaction of its own (autocommit: no
        ``BEGIN``/``COMMIT``, so one round trip), bounded like :meth:`transaction`;
        when a check's deadline is nearer than the session's bounds it is an ordinary
        transaction instead (the bounds need ``SET LOCAL``)."""
        return self._bounded(single=True)

    @contextmanager
    def _bounded(self, *, single: bool) -> Iterator[Cursor]:
        unbounded = _UNBOUNDED.get()
        bound = math.inf if unbounded else time_left(self.statement_timeout)
        if bound <= 0:
            raise StoreTimeout(
                f"{self._display_url}: the deadline passed before the store was asked"
            )
        deadline = time.monotonic() + bound
        watch = None
        try:
            with self.pool.connection(timeout=min(bound, self.pool_timeout)) as conn:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise StoreTimeout(f"{self._display_url}: the deadline passed")
                if not unbounded:
                    cut, release = socket_cutter(conn.pgconn.socket)
                    watch = WATCHDOG.watch(deadline, cut)
                try:
                    begin = _NO_BOUNDS if unbounded else self._begin(left)
                    if single and begin == "BEGIN":  # autocommit: the statement is one
                        with conn.cursor() as cur:
                            yield cur
                    else:
                        conn.execute(begin)
                        try:
                            with conn.cursor() as cur:
                                yield cur
                        except BaseException:
                            with contextlib.suppress(psycopg.Error):  # broken: gone
                                conn.execute("ROLLBACK")
                            raise
                        conn.execute("COMMIT")
                finally:
                    if watch is not None:
                        if not watch.disarm():  # cut: the pool must not hand it out again
                            conn.close()
                        release()
        except PoolTimeout as exc:
            raise StoreTimeout(
                f"{self._display_url}: no connection within the bound: {exc}"
            ) from exc
        except (psycopg.errors.QueryCanceled, psycopg.errors.LockNotAvailable) as exc:
            raise StoreTimeout(f"{self._display_url}: {exc}") from exc
        except psycopg.OperationalError as exc:
            if watch is not None and watch.fired:
                raise StoreTimeout(
                    f"{self._display_url}: no answer within {bound:.2f} s (connection cut)"
                ) from exc
            raise StoreUnavailable(f"{self._display_url}: {exc}") from exc
        except psycopg.Error as exc:
            raise StoreError(f"{self._display_url}: {exc}") from exc
        except Exception as exc:
            if type(exc).__module__.startswith("psycopg_pool"):
                raise StoreUnavailable(f"{self._display_url}: {exc}") from exc
            raise

    def _begin(self, left: float) -> str:
        """``BEGIN``, with the statement and lock bounds of this transaction when the
        deadline is nearer than the session's (one round trip either way)."""
        if current_deadline() is None or left >= self.statement_timeout:
            return "BEGIN"  # the session's own bounds apply
        ms = _ms(left)
        return (
            f"BEGIN; SET LOCAL statement_timeout = {ms}; "
            f"SET LOCAL lock_timeout = {min(ms, _ms(self.lock_timeout))}"
        )

    def append_audit(
        self,
        entries: Sequence[AuditEntry],
        *,
        durable: bool = False,
        joins: Mapping[int, AuditJoin] | None = None,
    ) -> list[int]:
        """A batch of one chain whose head this process knows: one statement, one
        round trip (:meth:`_append_known`); else the head locked first. A batch with
        ``joins`` (session steps) is one transaction holding them — or, one step
        that can ride the record's statement (``in_statement``), that one statement."""
        if not durable:
            try:
                seqs = self._append_known(entries, joins)
            except StoreError as exc:
                if not joins or not _refused(exc):
                    raise
                # the server refused the statement whole (the step failed, or the
                # head moved): nothing was written; the transaction below runs the
                # step on its own (and tells its failure)
                self._known_heads.pop(entries[0][0], None)
                seqs = None
            if seqs is not None:
                return seqs
        return super().append_audit(entries, durable=durable, joins=joins)

    def _append_known(
        self, entries: Sequence[AuditEntry], joins: Mapping[int, AuditJoin] | None = None
    ) -> list[int] | None:
        """Append a batch of one tenant after the head this process last committed to
        its chain, in one autocommit statement — the head moved only if it is still
        that one, the rows inserted only if the head moved, so all or nothing. ``None``
        (nothing written) when the head is not known here, or another writer moved
        it: the caller then locks and reads it."""
        tenant = entries[0][0]
        head = self._known_heads.get(tenant)
        if head is None or len(entries) * 11 + 6 > _MAX_PARAMS:
            return None
        step: tuple[str, list[Any]] | None = None
        if joins:  # one session step riding the statement, or the transaction path
            join = next(iter(joins.values())) if len(joins) == 1 else None
            offer = getattr(join, "in_statement", None)
            step = offer() if offer is not None else None
            if step is None:
                return None
        if any(entry[0] != tenant for entry in entries):
            return None
        link = self._linker()
        if link.key_id is None and head.key_id is not None:
            return None  # the locked path refuses it, saying why
        rows, new = link(head, entries)
        params: list[Any] = [new.seq, new.hash, new.key_id, tenant, head.seq, head.hash]
        for row in rows:
            params += row
        if step is not None:
            with self.single_statement() as cur:
                cur.execute(_stepped_statement(len(rows), step[0]), step[1] + params)
                got = cur.fetchone()
            # (a head moved since is a division by zero: the step is undone with it)
            join.landed_in_statement(got[1:])  # type: ignore[union-attr]
            self._appended({tenant: new})
            return [row[1] for row in rows]
        with self.single_statement() as cur:
            cur.execute(_known_statement(len(rows)), params)
            landed = cur.rowcount
        if landed != len(rows):
            if landed:  # pragma: no cover - one statement: all or nothing
                raise StoreError(f"{self._display_url}: {landed} of {len(rows)} links landed")
            self._known_heads.pop(tenant, None)
            return None
        self._appended({tenant: new})
        return [row[1] for row in rows]

    def _append_chain(
        self, cur: Cursor, entries: Sequence[AuditEntry]
    ) -> tuple[list[int], dict[str, ChainHead]]:
        """Inside a transaction: every head of the batch locked and read first (one
        statement), then the links inserted and the heads moved in one more."""
        link = self._linker()
        groups = _by_tenant(entries)
        tenants = sorted(groups)
        olds = self._lock_heads(cur, tenants)
        if link.key_id is None:
            self._refuse_downgrade(olds)
        rows: list[tuple[Any, ...]] = []
        heads: dict[str, ChainHead] = {}
        for tenant in tenants:
            links, heads[tenant] = link(olds[tenant], groups[tenant])
            rows += links
        self._write_links(cur, rows, heads)
        return _seqs(entries, groups, heads), heads

    def _lock_heads(self, cur: Cursor, tenants: list[str]) -> dict[str, ChainHead]:
        """The heads of ``tenants`` (sorted), locked in that order by one statement;
        a tenant without one yet makes the heads be locked one by one, in order (a
        head made out of order could deadlock two writers)."""
        cur.execute(
            "SELECT tenant, seq, hash, key_id FROM audit_heads WHERE tenant = ANY(%s) "
            "ORDER BY tenant FOR UPDATE",
            (tenants,),
        )
        found = {
            str(tenant): ChainHead(str(tenant), int(seq), str(digest), key_id, 0)
            for tenant, seq, digest, key_id in cur.fetchall()
        }
        if len(found) == len(tenants):
            return found
        return {tenant: found.get(tenant) or self._lock_head(cur, tenant) for tenant in tenants}

    def _write_links(
        self, cur: Cursor, rows: list[tuple[Any, ...]], heads: Mapping[str, ChainHead]
    ) -> None:
        """One statement, one round trip, for the whole batch: the heads moved in a
        data-modifying ``WITH`` and the links inserted as one multi-row ``INSERT``
        (a batch too big for one statement's parameters: an INSERT per 64 links and
        the heads' UPDATE)."""
        if len(rows) * 11 + len(heads) * 4 > _MAX_PARAMS:
            super()._write_links(cur, rows, heads)
            return
        cur.execute(_links_statement(len(rows), len(heads)), _links_params(rows, heads))

    @contextmanager
    def audit_transaction(self, durable: bool) -> Iterator[Cursor]:
        with self.transaction(write=True) as cur:
            if durable:  # whatever the server's default: this commit waits for the disk
                cur.execute("SET LOCAL synchronous_commit TO on")
            yield cur

    def migrate(self) -> list[str]:
        token = _UNBOUNDED.set(True)  # an index build, a wait for another migrator
        try:
            return apply_migrations(self, self.dialect, lock=_MIGRATION_LOCK)
        finally:
            _UNBOUNDED.reset(token)

    def migration_status(self) -> list[tuple[int, str, bool]]:
        token = _UNBOUNDED.set(True)
        try:
            return migration_status(self, self.dialect)
        finally:
            _UNBOUNDED.reset(token)

    def notify_decided(self, cur: Cursor, approval_id: str) -> None:
        cur.execute("SELECT pg_notify(%s, %s)", (CHANNEL, approval_id))

    def _listening(self) -> float:
        """Start the listener (once) and wait until it listens; the delay a waiter's
        first re-read may take: the safety net's interval while notifications flow,
        a fast backoff while they do not (the listener cannot connect)."""
        with self._listener_lock:
            if self._listener is None or not self._listener.is_alive():
                self._listener = _Listener(self)
                self._listener.start()
            listener = self._listener
        listener.ready.wait(5.0)
        return self.approval_poll if listener.listening else 0.002

    def wait_for_approval(self, approval_id: str, timeout: float) -> ApprovalRecord:
        first = self._listening()  # LISTEN before the first read: no decision slips between
        return self.poll_for_approval(
            approval_id, timeout, max_delay=self.approval_poll, first_delay=first
        )

    async def await_approval(self, approval_id: str, timeout: float) -> ApprovalRecord:
        first = await asyncio.to_thread(self._listening)
        return await self.apoll_for_approval(
            approval_id, timeout, max_delay=self.approval_poll, first_delay=first
        )

    def close(self) -> None:
        super().close()
        listener = self._listener
        if listener is not None:
            listener.stop()
        self.pool.close()


_MAX_PARAMS: Final = 65_535  # the protocol's limit on one statement's parameters
_LINK_ROW: Final = "(%s, %s::bigint, %s::bigint, %s, %s, %s, %s, %s, %s, %s, %s)"
_HEAD_ROW: Final = "(%s, %s::bigint, %s, %s)"
_AUDIT_INSERT: Final = (
    "INSERT INTO audit_events "
    "(tenant, seq, ts_us, kind, decision_id, agent, decision, body, prev_hash, hash, key_id) "
)


def _links_statement(links: int, heads: int) -> str:
    """The batch's statement for ``links`` rows over ``heads`` chains (memoised: a
    steady load repeats a few sizes)."""
    key = (links, heads)
    sql = _LINKS_SQL.get(key)
    if sql is None:
        sql = (
            "WITH moved AS (UPDATE audit_heads AS h SET seq = v.seq, hash = v.hash, "
            "key_id = v.key_id FROM (VALUES "
            + ", ".join([_HEAD_ROW] * heads)
            + ") AS v (tenant, seq, hash, key_id) WHERE h.tenant = v.tenant) "
            + _AUDIT_INSERT
            + "VALUES "
            + ", ".join([_LINK_ROW] * links)
        )
        if len(_LINKS_SQL) < 512:
            _LINKS_SQL[key] = sql
    return sql


_LINKS_SQL: dict[tuple[int, int], str] = {}


def _known_statement(links: int) -> str:
    """:meth:`PostgresStore._append_known`'s statement for ``links`` rows: the head
    moved if it is still the one known, and the rows inserted only if it was."""
    sql = _KNOWN_SQL.get(links)
    if sql is None:
        sql = (
            "WITH moved AS (UPDATE audit_heads SET seq = %s::bigint, hash = %s, key_id = %s "
            "WHERE tenant = %s AND seq = %s::bigint AND hash = %s RETURNING 1) "
            + _AUDIT_INSERT
            + "SELECT * FROM (VALUES "
            + ", ".join([_LINK_ROW] * links)
            + ") AS r WHERE EXISTS (SELECT 1 FROM moved)"
        )
        if len(_KNOWN_SQL) < 512:
            _KNOWN_SQL[links] = sql
    return sql


_KNOWN_SQL: dict[int, str] = {}


def _stepped_statement(links: int, step: str) -> str:
    """:func:`_known_statement` with a session step's CTEs riding it (they write first:
    the session row is locked before the head, the order of the transaction path).
    The head moves only after the step, and a head moved meanwhile fails the whole
    statement (a division by zero), the step undone with it."""
    sql = _STEPPED_SQL.get((links, step))
    if sql is not None:
        return sql
    from interlock.store.sql_sessions import PG_STEP_RESULT

    sql = (
        f"WITH {step}, "
        "moved AS (UPDATE audit_heads SET seq = %s::bigint, hash = %s, key_id = %s "
        "WHERE tenant = %s AND seq = %s::bigint AND hash = %s "
        "AND EXISTS (SELECT 1 FROM s0) RETURNING 1), "
        "a AS ("
        + _AUDIT_INSERT
        + "SELECT * FROM (VALUES "
        + ", ".join([_LINK_ROW] * links)
        + ") AS r WHERE EXISTS (SELECT 1 FROM moved) RETURNING 1) "
        f"SELECT 1 / (SELECT count(*) FROM a), {PG_STEP_RESULT} FROM s0"
    )
    if len(_STEPPED_SQL) < 512:
        _STEPPED_SQL[links, step] = sql
    return sql


_STEPPED_SQL: dict[tuple[int, str], str] = {}


def _refused(exc: StoreError) -> bool:
    """Whether the server answered a statement with an error (so, in autocommit or
    rolled back, nothing of it was written) — not a connection lost with the outcome
    unknown."""
    cause = exc.__cause__
    state = getattr(cause, "sqlstate", None)
    return isinstance(state, str) and not state.startswith("08")


def _links_params(rows: list[tuple[Any, ...]], heads: Mapping[str, ChainHead]) -> list[Any]:
    params: list[Any] = []
    for tenant, head in heads.items():
        params += (tenant, head.seq, head.hash, head.key_id)
    for row in rows:
        params += row
    return params


class _Listener(threading.Thread):
    """LISTENs on one connection and wakes the store's waiters for each decision;
    reconnects with backoff when the connection drops."""

    def __init__(self, store: PostgresStore) -> None:
        super().__init__(name="interlock-approval-listener", daemon=True)
        self.store = store
        self.ready = threading.Event()  # set once it listens, or once it could not
        self.listening = False  # LISTEN is active on a live connection
        self._stopping = threading.Event()

    def stop(self) -> None:
        self._stopping.set()
        self.join(timeout=3.0)

    def run(self) -> None:
        backoff = 0.1
        while not self._stopping.is_set():
            try:
                with psycopg.connect(self.store._conninfo, **self.store._kwargs) as conn:
                    conn.execute(f"LISTEN {CHANNEL}")
                    self.listening = True
                    self.ready.set()
                    # decisions announced while nobody listened: every waiter re-reads
                    self.store._approval_waiters.wake_all()
                    backoff = 0.1
                    while not self._stopping.is_set():
                        for notify in conn.notifies(timeout=0.5):
                            self.store._approval_waiters.wake(notify.payload)
            except psycopg.Error as exc:
                self.listening = False
                if self._stopping.is_set():
                    return
                log.warning("interlock: approval listener lost its connection: %s", exc)
                self.ready.set()  # waiters fall back to polling meanwhile
                time.sleep(backoff)
                backoff = min(backoff * 2, 5.0)


def _split_url(url: str) -> tuple[str, dict[str, str]]:
    """The libpq URL without Interlock's own parameters, and those parameters."""
    parts = urlsplit(url)
    scheme = "postgresql" if parts.scheme in ("postgres", "postgresql") else parts.scheme
    query = parse_qsl(parts.query, keep_blank_values=True)
    own = {k: v for k, v in query if k in _OWN_PARAMS}
    rest = [(k, v) for k, v in query if k not in _OWN_PARAMS]
    return urlunsplit((scheme, parts.netloc, parts.path, urlencode(rest), parts.fragment)), own


_N = TypeVar("_N", int, float)


def _number(own: dict[str, str], name: str, default: _N, kind: type[_N], url: str) -> _N:
    """One of Interlock's numeric URL parameters, or a StoreError naming it."""
    raw = own.get(name)
    if raw is None:
        return default
    try:
        return kind(raw)
    except ValueError:
        what = "an integer" if kind is int else "a number"
        raise StoreError(f"invalid {name}={raw!r} in {url}: expected {what}") from None


def _seconds(params: dict[str, str], name: str, default: float, url: str) -> float:
    """A positive, finite number of seconds from the URL, or a StoreError naming it."""
    value = _number(params, name, default, float, url)
    if not 0 < value < math.inf:
        raise StoreError(
            f"invalid {name}={params.get(name)!r} in {url}: a positive number of seconds"
        )
    return value


def _ms(seconds: float) -> int:
    """Seconds as PostgreSQL's milliseconds, at least 1 (0 would mean no bound)."""
    return max(1, int(seconds * 1000))


def _hide_password(url: str) -> str:
    parts = urlsplit(url)
    if parts.password is None:
        return url
    netloc = parts.netloc.replace(f":{parts.password}@", ":***@", 1)
    return urlunsplit((parts.scheme, netloc, parts.path, parts.query, parts.fragment))
