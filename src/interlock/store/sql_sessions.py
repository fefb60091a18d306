"""Session history in SQL: the :class:`~interlock.session.history.SessionHistory` that
replicas on one database share (SQLite across processes, PostgreSQL across replicas).

The semantics are :class:`~interlock.session.history.MemoryHistory`'s, exactly: an
append gives the next ``seq``, attaches the step's labels to the session and then
removes its ``clears``, and drops the steps past the bound; a settle marks the newest
call step of a decision executed (or not), adding fingerprints and labels to it and
its labels to the session; an unknown session is empty.

Every method is ONE transaction. An append first upserts the session row
(``INSERT ... ON CONFLICT DO UPDATE SET next_seq = next_seq + 1 ... RETURNING``):
PostgreSQL keeps that row locked until the commit, and SQLite's write transactions
hold the database's write lock from ``BEGIN IMMEDIATE``, so two appends to one session
— threads, processes, replicas — take turns: distinct gapless seqs, and each reads
the labels the other wrote. A settle locks the session row the same way first (one
lock order: no deadlock between an append and a settle). On SQLite the usual append
(after a view this history keeps, the session unchanged since) is one statement
instead (schema 14's view ``session_step_usual``: the row moved on only from the
version known); on PostgreSQL a check's step can ride its decision record's
statement (:meth:`SqlHistory.step_statement`). A view is one ``SELECT``
(one snapshot). Any database failure is :class:`~interlock.errors.SessionUnavailable`
(chained), which a check reading the session turns into undetermined.

Fingerprints are stored packed (sorted little-endian uint64, 8 bytes each): a result's
bounded fingerprints (:data:`interlock.session.fingerprints.MAX_FINGERPRINTS`) take at
most 32 KiB.

Example::

    from interlock.session.history import NewStep
    from interlock.store import open_store

    store = open_store("sqlite:///:memory:")
    history = store.session_history(max_steps=100, expire_after=3600.0)
    history.append("acme", "s-1", NewStep(kind="tool", name="read_file", verdict="allow",
                                          decision_id="d-1", labels=frozenset({"secret"})))
    history.settle("acme", "s-1", "d-1", executed=True, fingerprints=frozenset({42}))
    view = history.view("acme", "s-1")
    assert view.labels == {"secret"} and view.steps[0].fingerprints == {42}
    store.close()
"""

from __future__ import annotations

import dataclasses
import functools
import json
import sqlite3
import threading
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Final, NamedTuple

from interlock.errors import SessionUnavailable, StoreError, describe
from interlock.session.history import (
    EMPTY_FINGERPRINTS,
    EXPIRE_AFTER,
    MAX_FINGERPRINTS,
    MAX_PAST,
    MAX_PAST_PRINTS,
    MAX_STEPS,
    NO_DATA,
    NO_PAST,
    DroppedData,
    FingerprintIndex,
    NewStep,
    PastCount,
    SessionPast,
    SessionView,
    Step,
    StepKind,
    frozen_prints,
)
from interlock.session.packing import pack, unpack, unpack_prints
from interlock.store.sql_base import Cursor, StoreBase

__all__ = ["PG_STEP_RESULT", "SessionStore", "SessionSummary", "SqlHistory", "Written"]

_STEP_COLUMNS: Final = (
    "seq, at_us, kind, name, verdict, decision_id, labels, fingerprints, trusted, executed"
)
#: The past's upsert (schema 15): a kind, name and labels already counted adds up.
_PAST_UPSERT: Final = (
    "ON CONFLICT (tenant, session_id, kind, name, labels) DO UPDATE SET "
    "n = session_past.n + excluded.n, "
    "first_us = {least}(session_past.first_us, excluded.first_us), "
    "last_us = {greatest}(session_past.last_us, excluded.last_us)"
)
#: SQLite's general append: the steps past the bound counted into the past (then
#: deleted), as the usual step's trigger does.
_SQLITE_FOLD: Final = (
    "INSERT INTO session_past (tenant, session_id, kind, name, labels, n, first_us, last_us) "
    "SELECT tenant, session_id, kind, name, labels, count(*), min(at_us), max(at_us) "
    "FROM session_steps WHERE tenant = ? AND session_id = ? AND seq <= ? AND executed = 1 "
    "AND kind <> 'input' GROUP BY tenant, session_id, kind, name, labels "
    + _PAST_UPSERT.format(least="min", greatest="max")
)
#: The bound on a session's dropped data (schema 16), in bytes: 8 a fingerprint.
_PAST_DATA_BYTES: Final = 8 * MAX_PAST_PRINTS
#: SQLite's general append: the data of the steps past the bound kept (schema 16), as
#: the usual step's trigger does.
_SQLITE_FOLD_DATA: Final = (
    "INSERT INTO session_past_data (tenant, session_id, seq, kind, name, labels, trusted, "
    "fingerprints, total) SELECT tenant, session_id, seq, kind, name, labels, trusted, "
    "fingerprints, "
    "coalesce((SELECT d.total FROM session_past_data d WHERE d.tenant = ?1 "
    "AND d.session_id = ?2 ORDER BY d.id DESC LIMIT 1), 0) "
    "+ sum(length(fingerprints)) OVER (ORDER BY seq) "
    "FROM session_steps WHERE tenant = ?1 AND session_id = ?2 AND seq <= ?3 "
    "AND length(fingerprints) > 0 "
    "AND coalesce((SELECT d.total FROM session_past_data d WHERE d.tenant = ?1 "
    f"AND d.session_id = ?2 ORDER BY d.id DESC LIMIT 1), 0) < {_PAST_DATA_BYTES} ORDER BY seq"
)
#: Rows a view reads of a past at most (a kind, name and labels in the past table and
#: among the steps below the view's window, each once, and the overflow mark): more
#: and the past is overflowed.
_PAST_ROWS: Final = 2 * MAX_PAST + 2
#: Sessions forgotten per expiry transaction (a long backlog goes in batches).
_EXPIRE_BATCH: Final = 500
#: PostgreSQL's append in one statement (one round trip, autocommit): the session row
#: upserted — locked to the end of the statement, its labels merged in SQL (the step's
#: attached, then its clears removed) — the step inserted with the seq and version it
#: returned, the steps past the bound deleted — and counted into the session's past
#: (schema 15: the executed call steps among them, per kind, name and labels).
_PG_STEP: Final = (
    "s{n} AS (INSERT INTO sessions "
    "(tenant, session_id, labels, next_seq, touched_us, created_us, version) "
    "VALUES (%s, %s, %s, 2, %s, %s, 1) ON CONFLICT (tenant, session_id) DO UPDATE SET "
    "next_seq = sessions.next_seq + 1, touched_us = excluded.touched_us, "
    "version = sessions.version + 1, labels = ("
    "SELECT COALESCE(json_agg(l ORDER BY l), '[]')::text FROM ("
    "SELECT json_array_elements_text(sessions.labels::json) UNION "
    "SELECT unnest(%s::text[])) AS x(l) WHERE NOT (l = ANY(%s::text[]))) "
    "RETURNING next_seq - 1 AS seq, version, created_us, labels), "
    "i{n} AS (INSERT INTO session_steps (tenant, session_id, seq, at_us, kind, name, verdict, "
    "decision_id, labels, fingerprints, trusted, executed, changed) "
    "SELECT %s, %s, s{n}.seq, %s, %s, %s, %s, %s, %s, %s, %s, %s::integer, s{n}.version "
    "FROM s{n}), "
    "d{n} AS (DELETE FROM session_steps WHERE tenant = %s AND session_id = %s "
    "AND seq <= (SELECT seq FROM s{n}) - %s "
    "RETURNING tenant, session_id, seq, kind, name, labels, at_us, executed, fingerprints, "
    "trusted), "
    "q{n} AS (INSERT INTO session_past_data "
    "(tenant, session_id, seq, kind, name, labels, trusted, fingerprints, total) "
    "SELECT tenant, session_id, seq, kind, name, labels, trusted, fingerprints, "
    "coalesce((SELECT x.total FROM session_past_data x WHERE x.tenant = d{n}.tenant "
    "AND x.session_id = d{n}.session_id ORDER BY x.id DESC LIMIT 1), 0) "
    "+ sum(octet_length(fingerprints)) OVER (ORDER BY seq) FROM d{n} "
    "WHERE octet_length(fingerprints) > 0 "
    "AND coalesce((SELECT x.total FROM session_past_data x WHERE x.tenant = d{n}.tenant "
    "AND x.session_id = d{n}.session_id ORDER BY x.id DESC LIMIT 1), 0) "
    f"< {8 * MAX_PAST_PRINTS} ORDER BY seq), "
    "p{n} AS (INSERT INTO session_past "
    "(tenant, session_id, kind, name, labels, n, first_us, last_us) "
    "SELECT tenant, session_id, kind, name, labels, count(*), min(at_us), max(at_us) "
    "FROM d{n} WHERE executed = 1 AND kind <> 'input' "
    "GROUP BY tenant, session_id, kind, name, labels "
    f"{_PAST_UPSERT.format(least='LEAST', greatest='GREATEST')})"
)
_PG_APPEND: Final = (
    "WITH " + _PG_STEP.format(n="") + " SELECT seq, version, created_us, labels FROM s"
)
#: The session row a step's CTEs (:meth:`SqlHistory.step_statement`) leave, for the
#: statement they ride to return.
PG_STEP_RESULT: Final = "s0.seq, s0.version, s0.created_us, s0.labels"
#: SQLite's usual append: one statement (schema 14's view ``session_step_usual``,
#: whose trigger aborts with :data:`_UNUSUAL` when the session is not as the caller
#: knows it).
_USUAL_APPEND: Final = (
    "INSERT INTO session_step_usual VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
)
_UNUSUAL: Final = "interlock-unusual"
#: SQLite's general append runs in a savepoint: in the decision record's transaction,
#: a step that fails leaves nothing behind and the record goes on.
_SAVEPOINT: Final = "SAVEPOINT interlock_step"
_ROLLBACK: Final = "ROLLBACK TO SAVEPOINT interlock_step"
_RELEASE: Final = "RELEASE SAVEPOINT interlock_step"
#: Past every seq: the steps of a session unchanged since a view are not read.
_NO_SEQ: Final = 2**63 - 1
#: Views kept per history, to read only what changed since (least recently used out).
_VIEWS_KEPT: Final = 1024
#: And the fingerprints they hold, all together, counted as the in-memory history
#: counts its own (each step's set whole, plus the view's index: ~12 bytes each with
#: the C extension, so ~50 MB; ~71 without): 1,024 sessions of 200 steps with 2 KB
#: results would count ~200 million (~2.4 GB; ~14 GB without). Past it the least
#: recently used views go first (a view read again is read whole from the store:
#: slower, never wrong).
_FINGERPRINTS_KEPT: Final = MAX_FINGERPRINTS


class Written(NamedTuple):
    """A step appended in a caller's transaction, and the session as it left it."""

    step: Step
    version: int
    created_us: int
    labels: frozenset[str]


def _step_row(step: NewStep) -> tuple[Any, ...]:
    """A step's columns as the tables hold them, kind to executed (fingerprints packed;
    an input has run). Not cached: a check's step is new every time (its decision id),
    so a cache only missed, and kept up to its size of steps (and their fingerprints)
    alive."""
    executed = True if step.kind == "input" else step.executed
    return (
        step.kind,
        step.name,
        step.verdict,
        step.decision_id,
        _labels_text(step.labels),
        pack(step.fingerprints) if step.fingerprints else b"",
        int(step.trusted),
        None if executed is None else int(executed),
    )


def _labels_text(labels: frozenset[str]) -> str:
    """Labels as the tables hold them: a sorted JSON array (``[]`` without a call to
    ``json``: most steps attach none, and most sessions keep the same few)."""
    return _labels_json(labels) if labels else "[]"


@functools.lru_cache(maxsize=1024)
def _labels_json(labels: frozenset[str]) -> str:
    return json.dumps(sorted(labels), separators=(",", ":"))


@functools.lru_cache(maxsize=4096)
def _labels_of(text: str | None) -> frozenset[str]:
    return frozenset(json.loads(text)) if text else frozenset()


@dataclass(frozen=True, slots=True)
class SessionSummary:
    """One session as ``interlock sessions list`` shows it."""

    tenant: str
    session_id: str
    labels: frozenset[str]
    steps: int  # appended so far (the oldest may have been dropped past the bound)
    touched_us: int

    def as_dict(self) -> dict[str, Any]:
        return {
            "tenant": self.tenant,
            "session_id": self.session_id,
            "labels": sorted(self.labels),
            "steps": self.steps,
            "touched_us": self.touched_us,
        }


class SessionStore(StoreBase):
    """The store's session operations; :meth:`session_history` is what a guard uses."""

    #: The idle bound (seconds) of the histories made on this store, for the reaper:
    #: the longest asked for (a session one guard keeps is not expired under another).
    session_expiry: float | None = None

    def session_history(
        self,
        max_steps: int = MAX_STEPS,
        expire_after: float = EXPIRE_AFTER,
        *,
        max_fingerprints_kept: int = _FINGERPRINTS_KEPT,
    ) -> SqlHistory:
        """A :class:`SqlHistory` over this store keeping ``max_steps`` steps per session;
        the store's reaper forgets sessions idle for ``expire_after`` seconds. The
        views it keeps in process (to read only what changed since) hold at most
        ``max_fingerprints_kept`` fingerprints together (~50 bytes each)."""
        if max_fingerprints_kept < 0:
            raise ValueError(
                f"max_fingerprints_kept must be 0 or more, not {max_fingerprints_kept!r}"
            )
        if max_steps < 1:
            raise ValueError(f"max_steps must be at least 1, not {max_steps!r}")
        if not 0 < expire_after < float("inf"):
            raise ValueError(
                f"expire_after must be a positive number of seconds, not {expire_after!r}"
            )
        if self.session_expiry is None or expire_after > self.session_expiry:
            self.session_expiry = expire_after
        return SqlHistory(self, max_steps=max_steps, max_fingerprints_kept=max_fingerprints_kept)

    def expire_sessions(self, idle_for: float, *, now_us: int | None = None) -> int:
        """Forget sessions (and their steps) idle for longer than ``idle_for`` seconds,
        of every tenant; returns how many. Replicas share the work (rows another is
        deleting are skipped on PostgreSQL)."""
        cutoff = (self.clock() if now_us is None else now_us) - int(idle_for * 1_000_000)
        total = 0
        while True:
            with self.transaction(write=True) as cur:
                cur.execute(
                    self.q(
                        "SELECT tenant, session_id FROM sessions WHERE touched_us < ? "
                        f"ORDER BY touched_us LIMIT {_EXPIRE_BATCH}{self.skip_locked}"
                    ),
                    (cutoff,),
                )
                stale = [(str(row[0]), str(row[1])) for row in cur.fetchall()]
                for tenant, session_id in stale:
                    # re-checked: an append may have touched it since the SELECT (SQLite
                    # cannot lock rows, but holds the write lock for the transaction)
                    cur.execute(
                        self.q(
                            "DELETE FROM sessions WHERE tenant = ? AND session_id = ? "
                            "AND touched_us < ?"
                        ),
                        (tenant, session_id, cutoff),
                    )
                    if cur.rowcount:
                        for table in ("session_steps", "session_past", "session_past_data"):
                            cur.execute(
                                self.q(f"DELETE FROM {table} WHERE tenant = ? AND session_id = ?"),
                                (tenant, session_id),
                            )
                        total += 1
            if len(stale) < _EXPIRE_BATCH:
                return total

    def reap_sessions(self) -> int:
        """The reaper's pass: expire sessions idle past :attr:`session_expiry` (none
        when no history was made on this store)."""
        if self.session_expiry is None:
            return 0
        return self.expire_sessions(self.session_expiry)

    def list_sessions(self, *, tenant: str | None = None, limit: int = 100) -> list[SessionSummary]:
        """Sessions, the most recently touched first."""
        sql = "SELECT tenant, session_id, labels, next_seq, touched_us FROM sessions"
        params: list[Any] = []
        if tenant is not None:
            sql += " WHERE tenant = ?"
            params.append(tenant)
        sql += f" ORDER BY touched_us DESC, tenant, session_id LIMIT {int(limit)}"
        with self.transaction(write=False) as cur:
            cur.execute(self.q(sql), params)
            rows = cur.fetchall()
        return [
            SessionSummary(str(r[0]), str(r[1]), _labels_of(r[2]), int(r[3]) - 1, int(r[4]))
            for r in rows
        ]


class SqlHistory:
    """A :class:`~interlock.session.history.SessionHistory` in a SQL store (see the
    module docstring). Made by :meth:`SessionStore.session_history`."""

    def __init__(
        self,
        store: SessionStore,
        *,
        max_steps: int = MAX_STEPS,
        max_fingerprints_kept: int = _FINGERPRINTS_KEPT,
    ) -> None:
        self.store = store
        self.max_steps = max_steps
        #: (tenant, session) -> (created_us, version, view, held): the last view read
        #: here, and the fingerprints it holds (each step's set and its index, counted
        #: toward :data:`_FINGERPRINTS_KEPT`); a read asks only for the steps written
        #: since its version
        self._views: OrderedDict[tuple[str, str], tuple[int, int, SessionView, int]] = OrderedDict()
        self._views_lock = threading.Lock()
        #: the fingerprints the kept views hold, all together
        self._held = 0
        self.max_fingerprints_kept = max_fingerprints_kept

    def __repr__(self) -> str:
        return f"SqlHistory({self.store.url!r}, max_steps={self.max_steps})"

    # -- reading -------------------------------------------------------------------------

    def view(self, tenant: str, session_id: str) -> SessionView:
        """The session as it stands: one statement (one snapshot) reading the session
        row and the steps written since the view this history last read of it — when
        it keeps one, the session row's version first (an index look-up, no join):
        unchanged, the kept view is the session."""
        key = (tenant, session_id)
        with self._views_lock:
            cached = self._views.get(key)
        since = 0
        if cached is not None:
            since = cached[1]
            if self._read(self._select_version, (tenant, session_id)) == [(since, cached[0])]:
                return cached[2]
        rows = self._read(self._select, (since, self.max_steps, since, tenant, session_id))
        if not rows:
            with self._views_lock:
                gone = self._views.pop(key, None)
                if gone is not None:
                    self._held -= gone[3]
            return SessionView(tenant, session_id)
        labels, next_seq, created, version = rows[0][:4]
        created, version = int(created), int(version)
        if cached is not None and (cached[0] != created or version < cached[1]):
            # the session was expired and begun again meanwhile: read it whole
            rows = self._read(self._select, (0, self.max_steps, 0, tenant, session_id))
            if not rows:
                return SessionView(tenant, session_id)
            labels, next_seq, created, version = rows[0][:4]
            created, version = int(created), int(version)
            cached = None
        if cached is not None and version == cached[1]:
            return cached[2]
        oldest = int(next_seq) - self.max_steps
        fresh = [_step(row[4:]) for row in rows if row[4] is not None]
        kept = cached[2].steps if cached is not None else ()
        if not kept or not fresh or fresh[0].seq > kept[-1].seq:
            # only new steps (the usual case: a check appended one): no merge; the
            # oldest cut off (seqs ascend: only the first few can be)
            cut = 0
            while cut < len(kept) and kept[cut].seq < oldest:
                cut += 1
            merged = (kept[cut:] if cut else kept) + tuple(fresh)
        else:
            by_seq = {s.seq: s for s in kept if s.seq >= oldest}
            by_seq.update((s.seq, s) for s in fresh)
            merged = tuple(by_seq[seq] for seq in sorted(by_seq))
        next_seq = int(next_seq)
        oldest_kept = merged[0].seq if merged else next_seq
        # a session within its bound dropped nothing: no past to read
        past = NO_PAST
        if oldest_kept > 1:
            # the dropped data read before (of this session as created): only rows since
            data = cached[2].past.data if cached is not None else None
            past = self._past(tenant, session_id, oldest_kept, data)
        index = cached[2].index if cached is not None else None
        if index is not None and index.added <= 2 * self.max_steps + 16:
            # the kept view's index holds its sources: with the fresh ones, it holds
            # every source of this view (more, maybe: a filter, never an answer)
            for step in fresh:
                index.add(step)
        else:  # none kept, or mostly of dropped steps: made afresh (it takes only sources)
            index = FingerprintIndex(merged)
        view = SessionView(
            tenant, session_id, merged, _labels_of(labels), next_seq, index=index, past=past
        )
        held = sum([len(step.fingerprints) for step in view.sources]) + len(index.prints)
        data = past.data
        if data is not None and not data.blind:
            held += len(data.prints) + len(data.trusted)
        with self._views_lock:
            self._keep(key, (created, version, view, held))
        return view

    @property
    def kept(self) -> tuple[int, int]:
        """How many views of sessions this history keeps, and the fingerprints they hold
        (counted as ``max_fingerprints_kept`` bounds them: an upper bound)."""
        with self._views_lock:
            return len(self._views), self._held

    def _keep(self, key: tuple[str, str], entry: tuple[int, int, SessionView, int]) -> None:
        """Keep ``entry`` as the session's view (under ``_views_lock``), the least
        recently used views out past :data:`_VIEWS_KEPT` views or
        ``max_fingerprints_kept`` fingerprints (never the one just kept)."""
        views = self._views
        old = views.get(key)
        if old is not None:
            self._held -= old[3]
        views[key] = entry
        views.move_to_end(key)
        self._held += entry[3]
        while len(views) > _VIEWS_KEPT or (
            self._held > self.max_fingerprints_kept and len(views) > 1
        ):
            self._held -= views.popitem(last=False)[1][3]

    def _past(
        self, tenant: str, session_id: str, oldest_kept: int, data: DroppedData | None
    ) -> SessionPast:
        """The session's past (schema 15), and the executed call steps still stored
        below ``oldest_kept`` (kept by a history with a larger bound), counted alike;
        with its dropped data (schema 16): ``data`` (a kept view's) with the rows
        added since it was read, else read whole. Read after the steps, by a statement
        of its own: a step dropped meanwhile is then counted twice (a count too high
        asks a human), never missed, and its data is in the kept steps or here."""
        if data is None or data is NO_DATA:
            data = DroppedData()
        upto = _NO_SEQ if data.blind else data.upto
        rows = self._read(
            self._select_past,
            (oldest_kept, tenant, session_id, tenant, session_id, tenant, session_id, upto),
        )
        dropped = [row for row in rows if row[4] == -1]
        if dropped:
            rows = [row for row in rows if row[4] != -1]
            with self._views_lock:  # the kept views share it: one writer at a time
                for kind, name, labels, row_id, _, seq, trusted, prints in dropped:
                    if row_id <= data.upto:
                        continue  # another thread read it in meanwhile
                    if prints is None:  # the mark: dropped before schema 16
                        data.go_blind()
                    else:
                        data.add(
                            str(kind),
                            str(name),
                            _labels_of(labels),
                            unpack(prints),
                            None if seq == -1 else int(seq),
                            bool(trusted),
                        )
                    data.upto = max(data.upto, int(row_id))
        elif not data.upto and not data.blind:
            data = NO_DATA  # nothing dropped brought data in
        counts = self._counts(rows)
        if counts is None:
            return SessionPast((), True, data)
        return SessionPast(counts, False, data)

    def _counts(self, rows: list[Any]) -> tuple[PastCount, ...] | None:
        """The past's counts from its rows (None: overflowed)."""
        if len(rows) >= _PAST_ROWS:
            return None
        counts: dict[tuple[str, str, str], PastCount] = {}
        for kind, name, labels, found, first_us, last_us, _, _ in rows:
            if not kind:  # the overflow mark
                return None
            key = (str(kind), str(name), str(labels))
            n, first, last = int(found), int(first_us) / 1_000_000, int(last_us) / 1_000_000
            had = counts.get(key)
            if had is not None:
                n += had.n
                first, last = min(first, had.first_at), max(last, had.last_at)
            counts[key] = PastCount(key[0], key[1], _labels_of(key[2]), n, first, last)
        if len(counts) > MAX_PAST:
            return None
        return tuple(counts.values())

    @functools.cached_property
    def _select_past(self) -> str:
        # the counts (at most _PAST_ROWS: more is overflowed), then the dropped data's
        # rows since the last read (first_us -1 marks them: n is the row's id, last_us
        # its seq or -1)
        blob = "NULL::bytea" if self.store.dialect == "postgres" else "NULL"
        return self.store.q(
            "SELECT * FROM (SELECT kind, name, labels, count(*) AS n, min(at_us) AS first_us, "
            f"max(at_us) AS last_us, 0 AS trusted, {blob} AS prints FROM session_steps "
            "WHERE seq < ? AND tenant = ? AND session_id = ? AND executed = 1 "
            "AND kind <> 'input' GROUP BY kind, name, labels UNION ALL "
            f"SELECT kind, name, labels, n, first_us, last_us, 0, {blob} FROM session_past "
            f"WHERE tenant = ? AND session_id = ? LIMIT {_PAST_ROWS}) AS c UNION ALL "
            "SELECT kind, name, labels, id, -1, coalesce(seq, -1), trusted, fingerprints "
            "FROM session_past_data WHERE tenant = ? AND session_id = ? AND id > ?"
        )

    def _read(self, sql: str, params: tuple[Any, ...]) -> list[Any]:
        try:
            # one SELECT is a snapshot of its own: no BEGIN/COMMIT around it (on
            # PostgreSQL one round trip, not three)
            return self.store.select(sql, params)
        except StoreError as exc:
            raise _unavailable("read", str(params[-2]), str(params[-1]), exc) from exc

    @functools.cached_property
    def _select_version(self) -> str:
        return self.store.q(
            "SELECT version, created_us FROM sessions WHERE tenant = ? AND session_id = ?"
        )

    @functools.cached_property
    def _select(self) -> str:
        return self.store.q(
            "SELECT s.labels, s.next_seq, s.created_us, s.version, "
            + ", ".join(f"t.{c.strip()}" for c in _STEP_COLUMNS.split(","))
            + " FROM sessions s LEFT JOIN session_steps t "
            "ON t.tenant = s.tenant AND t.session_id = s.session_id "
            # nothing changed since the kept view: no step row is even looked at
            f"AND t.seq >= (CASE WHEN s.version > ? THEN s.next_seq - ? ELSE {_NO_SEQ} END) "
            "AND t.changed > ? "
            "WHERE s.tenant = ? AND s.session_id = ? ORDER BY t.seq"
        )

    # -- writing -------------------------------------------------------------------------

    def append(self, tenant: str, session_id: str, step: NewStep) -> Step:
        store = self.store
        # on PostgreSQL the whole append is one statement, sent alone in autocommit
        opened = (
            store.single_statement()
            if store.dialect == "postgres"
            else store.transaction(write=True)
        )
        try:
            with opened as cur:
                written = self.append_joined(cur, tenant, session_id, step)
        except StoreError as exc:
            raise _unavailable("append to", tenant, session_id, exc) from exc
        self.joined(tenant, session_id, written)
        return written.step

    def append_in(self, cur: Cursor, tenant: str, session_id: str, step: NewStep) -> Step:
        """:meth:`append` inside the caller's write transaction on this store (the
        audit record's: the guard's step rides its decision's commit). The step is
        in the history exactly when that transaction commits."""
        return self.append_joined(cur, tenant, session_id, step).step

    def append_joined(self, cur: Cursor, tenant: str, session_id: str, step: NewStep) -> Written:
        """:meth:`append_in`, with the session as the append left it: once the
        transaction has committed, :meth:`joined` moves this history's kept view on.

        All or nothing within the caller's transaction: when it raises, nothing of the
        step was written and (on SQLite) the transaction goes on — the usual step is
        one statement, the general one runs in a savepoint. On PostgreSQL a failure
        aborts the transaction (the append is one statement there too)."""
        store = self.store
        if store.dialect == "postgres":  # one statement (a data-modifying CTE)
            row = _step_row(step)  # a bad value: ValueError, before any write
            now = store.clock()
            cur.execute(_PG_APPEND, self._pg_params(tenant, session_id, step, now, row))
            return _written(step, now, _pg_result(cur.fetchone()))
        now = store.clock()
        usual = self._append_usual(cur, tenant, session_id, step, now)
        if usual is not None:
            return usual
        row = _step_row(step)  # a bad value: ValueError, before any write
        cur.execute(_SAVEPOINT)
        try:
            session = self._append_general(cur, tenant, session_id, step, now, row)
        except BaseException:
            cur.execute(_ROLLBACK)  # (the connection is gone: the transaction fails)
            cur.execute(_RELEASE)
            raise
        cur.execute(_RELEASE)
        return _written(step, now, session)

    def step_statement(
        self, tenant: str, session_id: str, step: NewStep
    ) -> tuple[str, list[Any], Callable[[Sequence[Any]], Written]]:
        """PostgreSQL: :meth:`append_joined` as data-modifying CTEs (``s0``, ``i0``,
        ``d0``: the session row upserted, the step inserted, the steps past the bound
        dropped) to ride another statement — the decision record's own, one round trip
        for both. Returns them, their parameters, and what makes the :class:`Written`
        of the row :data:`PG_STEP_RESULT` names once that statement has run."""
        row = _step_row(step)  # a bad value: ValueError, before any write
        now = self.store.clock()
        params = self._pg_params(tenant, session_id, step, now, row)

        def written(got: Sequence[Any]) -> Written:
            return _written(step, now, _pg_result(got))

        return _PG_STEP.format(n="0"), params, written

    def _pg_params(
        self, tenant: str, session_id: str, step: NewStep, now: int, row: tuple[Any, ...]
    ) -> list[Any]:
        return [
            tenant,
            session_id,
            _labels_text(step.labels - step.clears),
            now,
            now,
            list(step.labels),
            list(step.clears),
            tenant,
            session_id,
            now,
            *row,
            tenant,
            session_id,
            self.max_steps,
        ]

    def _append_usual(
        self, cur: Cursor, tenant: str, session_id: str, step: NewStep, now: int
    ) -> Written | None:
        """SQLite: the step appended by one statement (the view ``session_step_usual``,
        schema 14) after the view this history keeps of the session, when the session
        is still that one; None (nothing written) when it is not kept here, or moved on
        since (another writer, a settle, an expiry): the general path appends then.

        The statement's parameters and the :class:`Written` are made in one pass over
        the step, no row tuple between (:func:`_step_row` and :func:`_written` are the
        general path's, and the reference: ``tests/session/test_usual_step.py``)."""
        with self._views_lock:
            cached = self._views.get((tenant, session_id))
        if cached is None:
            return None
        created, version, kept, _ = cached
        seq = kept.next_seq
        labels = kept.labels
        attach = step.labels
        clears = step.clears
        merged = (labels | attach) - clears if attach or clears else labels
        kind = step.kind
        executed = True if kind == "input" else step.executed  # an input has run
        fingerprints = step.fingerprints
        version += 1
        try:
            cur.execute(
                _USUAL_APPEND,
                (
                    tenant,
                    session_id,
                    seq,
                    version,
                    created,
                    now,
                    kind,
                    step.name,
                    step.verdict,
                    step.decision_id,
                    _labels_json(attach) if attach else "[]",
                    pack(fingerprints) if fingerprints else b"",  # a bad value: ValueError
                    int(step.trusted),
                    None if executed is None else int(executed),
                    None if merged is labels or merged == labels else _labels_text(merged),
                    seq - self.max_steps,
                ),
            )
        except sqlite3.IntegrityError as exc:
            if str(exc) != _UNUSUAL:
                raise
            return None
        appended = Step(
            seq,
            now / 1_000_000,
            kind,
            step.name,
            step.verdict,
            step.decision_id,
            attach,
            frozen_prints(fingerprints) if fingerprints else EMPTY_FINGERPRINTS,
            step.trusted,
            executed,
        )
        return Written(appended, version, created, merged)

    def _append_general(
        self,
        cur: Cursor,
        tenant: str,
        session_id: str,
        step: NewStep,
        now: int,
        row: tuple[Any, ...],
    ) -> tuple[int, int, int, frozenset[str]]:
        """SQLite: the step appended whatever this history knows of the session (the
        session row upserted first: the seq, labels and version it holds)."""
        store = self.store
        seq, labels, version, created = self._claim_seq(cur, tenant, session_id, now)
        merged = (labels | step.labels) - step.clears
        if merged != labels:
            cur.execute(
                store.q("UPDATE sessions SET labels = ? WHERE tenant = ? AND session_id = ?"),
                (_labels_text(merged), tenant, session_id),
            )
        cur.execute(
            store.q(
                f"INSERT INTO session_steps (tenant, session_id, {_STEP_COLUMNS}, "
                "changed) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
            ),
            (tenant, session_id, seq, now, *row, version),
        )
        if seq > self.max_steps:
            cur.execute(_SQLITE_FOLD, (tenant, session_id, seq - self.max_steps))
            cur.execute(_SQLITE_FOLD_DATA, (tenant, session_id, seq - self.max_steps))
            cur.execute(
                store.q(
                    "DELETE FROM session_steps WHERE tenant = ? AND session_id = ? AND seq <= ?"
                ),
                (tenant, session_id, seq - self.max_steps),
            )
        return seq, version, created, merged

    def joined(self, tenant: str, session_id: str, written: Written) -> None:
        """After the commit of :meth:`append_joined`: the kept view of the session moved
        on by its step when that view was the session just before it (nobody else
        wrote between), so the next :meth:`view` reads the session row and no step."""
        step, version, created, labels = written
        key = (tenant, session_id)
        views = self._views
        held = 2 * len(step.fingerprints)  # its set, and its index's share
        with self._views_lock:
            if version == 1:  # the session's first step
                view = SessionView(
                    tenant,
                    session_id,
                    (step,),
                    labels,
                    step.seq + 1,
                    index=FingerprintIndex((step,)),
                )
            else:
                cached = views.get(key)
                if cached is None or cached[1] != version - 1 or cached[0] != created:
                    return
                kept = cached[2]
                steps = kept.steps
                oldest = step.seq + 1 - self.max_steps
                cut = 0  # (seqs ascend: only the first few can be past the bound)
                while cut < len(steps) and steps[cut].seq < oldest:
                    cut += 1
                # (the steps it drops stay counted: a count too high, until read again)
                view = kept.followed_by(step, labels, len(steps) - cut + 1)
                held += cached[3]
            self._keep(key, (created, version, view, held))

    def _claim_seq(
        self, cur: Cursor, tenant: str, session_id: str, now: int
    ) -> tuple[int, frozenset[str], int, int]:
        """The session's next seq, its labels, its new version and when it was
        created, the row made or moved on (and, on PostgreSQL, locked until the
        commit)."""
        cur.execute(
            self.store.q(
                "INSERT INTO sessions "
                "(tenant, session_id, labels, next_seq, touched_us, created_us, version) "
                "VALUES (?, ?, '[]', 2, ?, ?, 1) ON CONFLICT (tenant, session_id) DO UPDATE "
                "SET next_seq = sessions.next_seq + 1, touched_us = excluded.touched_us, "
                "version = sessions.version + 1 "
                "RETURNING next_seq - 1, labels, version, created_us"
            ),
            (tenant, session_id, now, now),
        )
        row = cur.fetchone()
        return int(row[0]), _labels_of(row[1]), int(row[2]), int(row[3])

    def settle(
        self,
        tenant: str,
        session_id: str,
        decision_id: str,
        *,
        executed: bool,
        fingerprints: frozenset[int] = EMPTY_FINGERPRINTS,
        labels: frozenset[str] = frozenset(),
    ) -> None:
        self.settle_step(
            tenant,
            session_id,
            decision_id,
            executed=executed,
            fingerprints=fingerprints,
            labels=labels,
        )

    def settle_step(
        self,
        tenant: str,
        session_id: str,
        decision_id: str,
        *,
        executed: bool,
        fingerprints: frozenset[int] = EMPTY_FINGERPRINTS,
        labels: frozenset[str] = frozenset(),
    ) -> bool:
        """:meth:`settle`, saying whether the session had a call step of
        ``decision_id`` (False: nothing was written)."""
        store = self.store
        packed = pack(fingerprints)  # a bad value: ValueError, before any write
        try:
            with store.transaction(write=True) as cur:
                # the session row first, locked (the order an append takes too)
                cur.execute(
                    store.q(
                        "SELECT labels, version, created_us, next_seq FROM sessions "
                        f"WHERE tenant = ? AND session_id = ?{store.for_update}"
                    ),
                    (tenant, session_id),
                )
                session = cur.fetchone()
                if session is None:
                    return False
                version = int(session[1]) + 1
                cur.execute(
                    store.q(
                        "SELECT seq, labels, fingerprints, verdict, executed FROM session_steps "
                        "WHERE tenant = ? AND session_id = ? AND decision_id = ? "
                        "AND kind <> 'input' ORDER BY seq DESC LIMIT 1"
                    ),
                    (tenant, session_id, decision_id),
                )
                found = cur.fetchone()
                if found is None and (executed or fingerprints):
                    self._uncounted(
                        cur, tenant, session_id, int(session[3]), version, executed, packed
                    )
                if found is None or found[3] != "allow":  # a refused call never ran
                    return False
                now = store.clock()
                step_labels = _labels_of(found[1]) | labels
                ran = executed or bool(found[4])  # ran stays ran
                cur.execute(
                    store.q(
                        "UPDATE session_steps SET executed = ?, labels = ?, fingerprints = ?, "
                        "changed = ? WHERE tenant = ? AND session_id = ? AND seq = ?"
                    ),
                    (
                        int(ran),
                        _labels_text(step_labels),
                        _merged_prints(found[2], fingerprints, packed),
                        version,
                        tenant,
                        session_id,
                        int(found[0]),
                    ),
                )
                session_labels = _labels_of(session[0]) | labels
                cur.execute(
                    store.q(
                        "UPDATE sessions SET labels = ?, touched_us = ?, version = ? "
                        "WHERE tenant = ? AND session_id = ?"
                    ),
                    (_labels_text(session_labels), now, version, tenant, session_id),
                )
        except StoreError as exc:
            raise _unavailable("settle in", tenant, session_id, exc) from exc
        self._settled(
            tenant,
            session_id,
            (int(session[2]), version),
            int(found[0]),
            ran,
            step_labels,
            fingerprints,
            session_labels,
        )
        return True

    def _uncounted(
        self,
        cur: Cursor,
        tenant: str,
        session_id: str,
        next_seq: int,
        version: int,
        executed: bool,
        packed: bytes,
    ) -> None:
        """A call reported run (or with a result) whose step is not stored: when the
        session dropped steps, it may be one of them — uncounted, so the past is marked
        overflowed, and what it returned kept as dropped data of a step not known (and
        the session's version moved on: kept views read it again)."""
        store = self.store
        cur.execute(
            store.q("SELECT min(seq) FROM session_steps WHERE tenant = ? AND session_id = ?"),
            (tenant, session_id),
        )
        oldest = cur.fetchone()[0]
        if (next_seq if oldest is None else int(oldest)) <= 1:
            return  # nothing dropped: an unknown decision
        if executed:
            cur.execute(
                store.q(
                    "INSERT INTO session_past "
                    "(tenant, session_id, kind, name, labels, n, first_us, last_us) "
                    "VALUES (?, ?, '', '', '', 0, 0, 0) "
                    "ON CONFLICT (tenant, session_id, kind, name, labels) DO NOTHING"
                ),
                (tenant, session_id),
            )
        if packed:
            length = "octet_length" if store.dialect == "postgres" else "length"
            cur.execute(
                store.q(
                    "INSERT INTO session_past_data "
                    "(tenant, session_id, seq, kind, name, labels, trusted, fingerprints, total) "
                    f"SELECT ?, ?, NULL, '', '', '[]', 0, ?, last.total + {length}(?) FROM "
                    "(SELECT coalesce((SELECT total FROM session_past_data WHERE tenant = ? "
                    "AND session_id = ? ORDER BY id DESC LIMIT 1), 0) AS total) AS last "
                    f"WHERE last.total < {_PAST_DATA_BYTES}"
                ),
                (tenant, session_id, packed, packed, tenant, session_id),
            )
        cur.execute(
            store.q("UPDATE sessions SET version = ? WHERE tenant = ? AND session_id = ?"),
            (version, tenant, session_id),
        )

    def _settled(
        self,
        tenant: str,
        session_id: str,
        at: tuple[int, int],
        seq: int,
        ran: bool,
        step_labels: frozenset[str],
        fingerprints: frozenset[int],
        labels: frozenset[str],
    ) -> None:
        """After a settle's commit: the kept view of the session moved on by it when
        that view was the session just before it (``at``: its creation and the
        version the settle gave it), so the next :meth:`view` reads no step."""
        key = (tenant, session_id)
        created, version = at
        with self._views_lock:
            cached = self._views.get(key)
            if cached is None or cached[0] != created or cached[1] != version - 1:
                return
            kept = cached[2]
            steps = kept.steps
            index = kept.index
            held = cached[3]
            at_index = next((i for i in range(len(steps) - 1, -1, -1) if steps[i].seq == seq), None)
            if at_index is not None:
                old = steps[at_index]
                kept_fingerprints = old.fingerprints
                if fingerprints:
                    kept_fingerprints = frozen_prints(kept_fingerprints | fingerprints)
                    held += len(kept_fingerprints) - len(old.fingerprints) + len(fingerprints)
                new = dataclasses.replace(
                    old, executed=ran, labels=step_labels, fingerprints=kept_fingerprints
                )
                steps = (*steps[:at_index], new, *steps[at_index + 1 :])
                if index is not None:
                    index.add(new)  # before a view that holds it is handed out
            view = SessionView(
                tenant, session_id, steps, labels, kept.next_seq, index=index, past=kept.past
            )
            self._keep(key, (created, version, view, held))

    def expire(self, idle_for: float) -> int:
        try:
            return self.store.expire_sessions(idle_for)
        except StoreError as exc:
            raise SessionUnavailable(f"cannot expire sessions: {describe(exc)}") from exc


def _merged_prints(stored: bytes | None, fingerprints: frozenset[int], packed: bytes) -> Any:
    """A settled step's packed fingerprints: those stored with ``fingerprints``
    (``packed``: theirs, packed once) added — no unpacking when either side is empty
    (the usual settle: a step appended without any gets its result's)."""
    if not fingerprints:
        return stored
    if not stored:
        return packed
    return pack(unpack(stored) | fingerprints)


def _pg_result(got: Sequence[Any]) -> tuple[int, int, int, frozenset[str]]:
    """The seq, version, creation and labels of the session row a step left."""
    return int(got[0]), int(got[1]), int(got[2]), _labels_of(got[3])


def _written(
    step: NewStep,
    now: int,
    session: tuple[int, int, int, frozenset[str]],
) -> Written:
    executed = True if step.kind == "input" else step.executed  # as _step_row writes it
    seq, version, created, labels = session
    appended = Step(
        seq,
        now / 1_000_000,
        step.kind,
        step.name,
        step.verdict,
        step.decision_id,
        step.labels,
        frozen_prints(step.fingerprints) if step.fingerprints else EMPTY_FINGERPRINTS,
        step.trusted,
        executed,
    )
    return Written(appended, version, created, labels)


def _step(row: Any) -> Step:
    kind: StepKind = row[2]
    return Step(
        int(row[0]),
        int(row[1]) / 1_000_000,
        kind,
        str(row[3]),
        str(row[4]),
        row[5],
        _labels_of(row[6]),
        unpack_prints(row[7]) if row[7] else EMPTY_FINGERPRINTS,  # packed: FrozenPrints
        bool(row[8]),
        None if row[9] is None else bool(row[9]),
    )


def _unavailable(what: str, tenant: str, session_id: str, exc: StoreError) -> SessionUnavailable:
    """A database failure as SessionUnavailable naming the session."""
    return SessionUnavailable(
        f"cannot {what} session {session_id!r} of tenant {tenant!r}: {describe(exc)}"
    )
