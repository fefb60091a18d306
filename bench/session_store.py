"""Benchmark ``session-store``: what durable session history and fingerprints cost.

Run: ``python -m bench.session_store [--quick] [--postgres URL] [--floor | --split]``
(under the machine's bench lock). Every figure is a median of per-call times, and each
is printed beside a baseline measured in the same run, as a ratio:

1. **The durable check** (SQLite file, durability ``process``): a policy with session
   rules (a label rule, a ``session: labels`` rule; the history in the store: the view
   read before, the step appended after) against the same policy without them, on the
   same kind of store. The issue's target: ≤ 1.2×. On a PostgreSQL server whose
   commits wait for its disk (``synchronous_commit`` on, the default) the disk's
   flush dominates both sides; to see what the statements and round trips cost,
   give the URL ``options=-c%20synchronous_commit%3Doff``.
2. **The history's operations** against raw SQL doing the same statements on a bare
   connection (``sqlite3`` / ``psycopg``): ``view`` of a 20-step session (each step
   with 250 fingerprints) and ``append``.
3. **Fingerprints**: ``of_data`` per KiB of an ordinary result (prose and a few
   tokens) and ``probe`` of a 200-character argument, against ``hashlib.sha256`` of
   the same bytes.
"""

# ruff: noqa: E501  (tables of figures and raw SQL read best on one line)
from __future__ import annotations

import argparse
import hashlib
import sqlite3
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Final
from urllib.parse import parse_qsl, urlsplit

from interlock import Action, Guard
from interlock.core.action import Context
from interlock.policy.loader import load_policy_text
from interlock.session.fingerprints import of_data, probe
from interlock.session.history import MemoryHistory, NewStep
from interlock.session.packing import pack
from interlock.store import open_store

PLAIN = """\
version: 1
default: deny
audit: {durability: process}
rules:
  - id: reads
    decision: allow
    reason: reads are fine
    name: read_file
  - id: mail
    decision: allow
    reason: mail is fine
    name: send_email
"""
SESSIONS = (
    PLAIN
    + """\
  - id: no-mail-after-secret
    decision: deny
    reason: no mail after a secret read
    name: send_email
    session:
      labels: [secret]
labels:
  - id: secrets
    attach: [secret]
    name: read_file
    params:
      path: {glob: ["**/.env"]}
"""
)


def median_us(fn: Callable[[], object], calls: int) -> float:
    for _ in range(min(calls // 10, 200)):
        fn()
    samples = []
    for _ in range(calls):
        start = time.perf_counter_ns()
        fn()
        samples.append(time.perf_counter_ns() - start)
    return statistics.median(samples) / 1000


def durable_check(calls: int, folder: Path, postgres: str | None = None) -> None:
    results = {}
    subjects = (
        ("stateless", PLAIN, False),
        ("session rules", SESSIONS, False),
        # the same, the history in memory: what the engine's side costs without the store's
        ("sessions, memory", SESSIONS, True),
    )
    for name, text, in_memory in subjects:
        url = f"sqlite:///{folder / (name.replace(' ', '-').replace(',', '') + '.db')}"
        if postgres is not None:  # one schema for all: the sessions run in their own
            url = postgres
        guard = Guard(
            load_policy_text(text),
            store=url,
            reap_interval=None,
            context=Context(session_id=f"s-bench-{name}"),
            sessions=MemoryHistory() if in_memory else None,
        )
        actions = [
            Action.tool("read_file", {"path": "/srv/notes.txt"}),
            Action.tool("send_email", {"to": "a@b.example", "body": "hello"}),
        ]
        i = 0

        def one(guard: Guard = guard, actions: list[Action] = actions) -> None:
            nonlocal i
            guard.check(actions[i % 2])
            i += 1

        results[name] = median_us(one, calls)
        guard.close()
    base = results["stateless"]
    for name, value in results.items():
        print(f"  durable check, {name:<17} {value:9.1f} µs  {value / base:5.2f}×")


IN_PROCESS = """\
version: 1
default: allow
labels:
  - id: secrets
    attach: [secret]
    name: read_file
    params:
      path: {glob: ["**/.env"]}
tools:
  fetch_url:
    labels: [untrusted]
rules:
  - id: no-post-after-secret
    decision: deny
    reason: no post after a secret read
    name: http_post
    session:
      labels: [secret]
  - id: no-secret-in-mail
    decision: deny
    reason: no secret in a mail
    name: send_email
    session:
      flows_from: {labels: [secret]}
  - id: recipient-not-from-pages
    decision: deny
    reason: the recipient came from a page
    name: send_email
    session:
      provenance: {args: [to], from: [untrusted]}
"""
IN_PROCESS_PLAIN = """\
version: 1
default: allow
rules:
  - id: no-post
    decision: deny
    reason: no post
    name: http_post
"""


def in_process(calls: int) -> None:
    """The in-process session check (the history in memory at its bound of 200 steps,
    20 of them with results; a label rule, a labels, a flows_from and a provenance
    rule) against the plain check with the same guard context (target: ≤ 2×). Best
    of 5 rounds of ``calls`` checks each, the two subjects interleaved."""
    context = Context(session_id="s", agent="a")
    action = Action.tool("send_email", {"to": "bob@corp.example", "body": "the weekly report"})
    plain = Guard(load_policy_text(IN_PROCESS_PLAIN), context=context)
    history = MemoryHistory()
    for i in range(200):
        data = of_data(f"result {i} holding the token ABCD{i:08d}EFGH") if i % 10 == 0 else None
        history.append(
            "default",
            "s",
            NewStep(
                kind="tool",
                name="read_file",
                verdict="allow",
                decision_id=f"d{i}",
                executed=True,
                fingerprints=data or frozenset(),
            ),
        )
    sessions = Guard(load_policy_text(IN_PROCESS), context=context, sessions=history)
    best = {"plain": float("inf"), "session": float("inf")}
    for _ in range(5):
        for name, guard in (("plain", plain), ("session", sessions)):
            start = time.perf_counter_ns()
            for _ in range(calls):
                guard.check(action)
            best[name] = min(best[name], (time.perf_counter_ns() - start) / calls / 1000)
    for name, value in best.items():
        print(f"  in-process check, {name:<8} {value:8.2f} µs  {value / best['plain']:5.2f}×")


def history_ops(
    url: str, raw: Callable[[], tuple[Callable[[], object], Callable[[], object]]], calls: int
) -> None:
    store = open_store(url)
    history = store.session_history(max_steps=20)
    fps = frozenset(range(1, 251))
    for i in range(20):
        history.append("t", "viewed", NewStep("tool", f"n{i}", "allow", f"d{i}", fingerprints=fps))
    view = median_us(lambda: history.view("t", "viewed"), calls)
    cold = median_us(
        lambda: store.session_history(max_steps=20).view("t", "viewed"), max(calls // 4, 50)
    )
    seq = iter(range(10**9))
    append = median_us(
        lambda: history.append("t", f"a{next(seq) % 50}", NewStep("tool", "x", "allow", "d")),
        calls,
    )
    raw_view, raw_append = raw()
    base_view = median_us(raw_view, calls)
    base_append = median_us(raw_append, calls)
    store.close()
    print(
        f"  view   {view:8.1f} µs   raw SQL {base_view:8.1f} µs   {view / base_view:5.2f}×  (kept view, nothing new)"
    )
    print(
        f"  view   {cold:8.1f} µs   raw SQL {base_view:8.1f} µs   {cold / base_view:5.2f}×  (cold: 20 steps read)"
    )
    print(
        f"  append {append:8.1f} µs   raw SQL {base_append:8.1f} µs   {append / base_append:5.2f}×"
    )


#: The step's columns on the audit row, for the floor's layouts (b) and (c): the session,
#: the step's seq in it and the step's own fields the record does not already hold.
_STEP_ON_ROW: Final = (
    "ALTER TABLE audit_events ADD COLUMN session_id TEXT",
    "ALTER TABLE audit_events ADD COLUMN step_seq INTEGER",
    "ALTER TABLE audit_events ADD COLUMN step_kind TEXT",
    "ALTER TABLE audit_events ADD COLUMN step_name TEXT",
    "ALTER TABLE audit_events ADD COLUMN step_labels TEXT",
    "ALTER TABLE audit_events ADD COLUMN step_fingerprints BLOB",
    "ALTER TABLE audit_events ADD COLUMN step_trusted INTEGER",
    "ALTER TABLE audit_events ADD COLUMN step_executed INTEGER",
)
_STEP_INDEX: Final = (
    "CREATE INDEX audit_events_by_step ON audit_events (tenant, session_id, step_seq) "
    "WHERE session_id IS NOT NULL"
)
_STEP_INDEXED: Final = (*_STEP_ON_ROW, _STEP_INDEX)
#: (d): the session's steps packed in its own row (no step table).
_STEPS_ON_SESSION: Final = ("ALTER TABLE sessions ADD COLUMN steps BLOB",)
_SESSION_ALONE: Final = (
    "CREATE TABLE session_heads (tenant TEXT NOT NULL, session_id TEXT NOT NULL, "
    "next_seq INTEGER NOT NULL, version INTEGER NOT NULL, steps BLOB, "
    "PRIMARY KEY (tenant, session_id)) WITHOUT ROWID",
)


class _Floor:
    """One layout's database (the store's schema, migrated, plus ``extra``) on a bare
    ``sqlite3`` connection (WAL, ``synchronous=NORMAL``, as the store opens it), and
    the decision's own statements on it."""

    BODY: Final = '{"decision": "allow", "rule_ids": ["reads"], "tool": "read_file"}' * 6

    def __init__(self, path: Path, extra: tuple[str, ...] = ()) -> None:
        open_store(f"sqlite:///{path}").close()
        conn = sqlite3.connect(path, isolation_level=None)
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute("PRAGMA synchronous=NORMAL")
        for sql in extra:
            conn.execute(sql)
        conn.execute(
            "INSERT INTO audit_heads (tenant, seq, hash, key_id) VALUES ('t', 0, 'h', 'k')"
        )
        conn.execute(
            "INSERT INTO sessions (tenant, session_id, labels, next_seq, touched_us, "
            "created_us, version) VALUES ('t', 's', '[]', 1, 0, 0, 0)"
        )
        self.conn = conn
        self.audit = 0
        self.seq = 0

    def head(self) -> int:
        self.audit += 1
        n = self.audit
        self.conn.execute(
            "UPDATE audit_heads SET seq = ?, hash = ?, key_id = 'k' WHERE tenant = 't'",
            (n, f"{n:064x}"),
        )
        return n

    def record(self) -> None:
        n = self.head()
        self.conn.execute(
            "INSERT INTO audit_events (tenant, seq, ts_us, kind, decision_id, agent, decision, "
            "body, prev_hash, hash, key_id) VALUES ('t', ?, ?, 'decision', ?, 'a', 'allow', ?, "
            "?, ?, 'k')",
            (n, n, f"dec_{n:024x}", self.BODY, f"{n - 1:064x}", f"{n:064x}"),
        )

    def record_with_step(self, q: int) -> None:
        n = self.head()
        self.conn.execute(
            "INSERT INTO audit_events (tenant, seq, ts_us, kind, decision_id, agent, decision, "
            "body, prev_hash, hash, key_id, session_id, step_seq, step_kind, step_name, "
            "step_labels, step_fingerprints, step_trusted, step_executed) VALUES "
            "('t', ?, ?, 'decision', ?, 'a', 'allow', ?, ?, ?, 'k', 's', ?, 'tool', "
            "'read_file', '[]', ?, 0, NULL)",
            (n, n, f"dec_{n:024x}", self.BODY, f"{n - 1:064x}", f"{n:064x}", q, b""),
        )


def step_floor(folder: Path, calls: int, rounds: int = 3) -> None:
    """What a session step adds to a decision's transaction in SQL alone, on a bare
    ``sqlite3`` connection to a file of the store's schema (WAL, ``synchronous=NORMAL``):
    the decision's own statements (BEGIN IMMEDIATE, the audit head UPDATE, the record
    INSERT, COMMIT) against the same with the step, in candidate layouts, each in a
    database of its own (issue 18: which layout can reach ≤ 1.2×?):

    - (a) today's (schema 14): through the view and trigger the store uses (one
      statement), and as plain statements (the session row UPDATE, the step INSERT,
      the DELETE past the bound); and taken apart: the bound kept every 32nd step
      only (the oldest steps' page not written each time), ``touched_us`` (indexed:
      expiry's) not rewritten, the step row alone, the session row alone;
    - (b) the step's columns on the decision record's own row, found by a partial index
      on (tenant, session_id, step_seq); with the session row moved on (version,
      next_seq, touched_us: what a view validates and expiry reads), and without;
    - (c) the step's columns on the record's row, no index: the session row keeps the
      list of its steps' audit seqs (packed, rewritten each step); and the columns
      alone (a lower bound: a step nobody can find);
    - (d) the step packed into the session row's own blob (20 steps of 60 bytes: no
      fingerprints; a step with them rewrites kilobytes), in the ``sessions`` row and
      in a narrow ``WITHOUT ROWID`` row with no index by time.

    No Python of Interlock's runs: the floor under the durable check's target of
    ≤ 1.2×. Each layout is a median of ``calls`` transactions; the layouts interleaved
    over ``rounds`` rounds; each round's ratio to the plain transaction of that round,
    and the median of the rounds' ratios, are printed."""
    plain = _Floor(folder / "floor-plain.db")
    today = _Floor(folder / "floor-a.db")
    on_row = _Floor(folder / "floor-b.db", _STEP_INDEXED)
    on_row_alone = _Floor(folder / "floor-b0.db", _STEP_INDEXED)
    listed = _Floor(folder / "floor-c.db", _STEP_ON_ROW + _STEPS_ON_SESSION)
    columns = _Floor(folder / "floor-c0.db", _STEP_ON_ROW)
    packed = _Floor(folder / "floor-d.db", _STEPS_ON_SESSION)
    narrow = _Floor(folder / "floor-d1.db", _SESSION_ALONE)
    narrow.conn.execute("INSERT INTO session_heads VALUES ('t', 's', 1, 0, NULL)")
    step_blob = bytes(60)

    def decision() -> None:
        plain.conn.execute("BEGIN IMMEDIATE")
        plain.record()
        plain.conn.execute("COMMIT")

    def through_view() -> None:
        today.seq += 1
        q = today.seq
        today.conn.execute("BEGIN IMMEDIATE")
        today.conn.execute(
            "INSERT INTO session_step_usual VALUES (?, ?, ?, ?, 0, ?, 'tool', 'read_file', "
            "'allow', ?, '[]', ?, 0, NULL, NULL, ?)",
            ("t", "s", q, q, q, f"dec_{q:024x}", b"", q - 200),
        )
        today.record()
        today.conn.execute("COMMIT")

    def statements() -> None:
        today.seq += 1
        q = today.seq
        conn = today.conn
        conn.execute("BEGIN IMMEDIATE")
        conn.execute(
            "UPDATE sessions SET next_seq = ?, version = ?, touched_us = ? "
            "WHERE tenant = 't' AND session_id = 's'",
            (q + 1, q, q),
        )
        conn.execute(
            "INSERT INTO session_steps (tenant, session_id, seq, at_us, kind, name, verdict, "
            "decision_id, labels, fingerprints, trusted, executed, changed) VALUES "
            "('t', 's', ?, ?, 'tool', 'read_file', 'allow', ?, '[]', ?, 0, NULL, ?)",
            (q, q, f"dec_{q:024x}", b"", q),
        )
        conn.execute(
            "DELETE FROM session_steps WHERE tenant = 't' AND session_id = 's' AND seq <= ?",
            (q - 200,),
        )
        today.record()
        conn.execute("COMMIT")

    def trimmed(touch: bool) -> Callable[[], None]:
        """(a) with the steps past the bound dropped every 32nd step (the oldest
        steps' page written once in 32, not every time), and ``touched_us`` (the
        session row's indexed column) rewritten or not."""

        def run() -> None:
            today.seq += 1
            q = today.seq
            conn = today.conn
            conn.execute("BEGIN IMMEDIATE")
            if touch:
                conn.execute(
                    "UPDATE sessions SET next_seq = ?, version = ?, touched_us = ? "
                    "WHERE tenant = 't' AND session_id = 's'",
                    (q + 1, q, q),
                )
            else:
                conn.execute(
                    "UPDATE sessions SET next_seq = ?, version = ? "
                    "WHERE tenant = 't' AND session_id = 's'",
                    (q + 1, q),
                )
            conn.execute(
                "INSERT INTO session_steps (tenant, session_id, seq, at_us, kind, name, "
                "verdict, decision_id, labels, fingerprints, trusted, executed, changed) "
                "VALUES ('t', 's', ?, ?, 'tool', 'read_file', 'allow', ?, '[]', ?, 0, NULL, ?)",
                (q, q, f"dec_{q:024x}", b"", q),
            )
            if q % 32 == 0:
                conn.execute(
                    "DELETE FROM session_steps WHERE tenant = 't' AND session_id = 's' "
                    "AND seq <= ?",
                    (q - 200,),
                )
            today.record()
            conn.execute("COMMIT")

        return run

    def step_row_only() -> None:
        today.seq += 1
        q = today.seq
        conn = today.conn
        conn.execute("BEGIN IMMEDIATE")
        conn.execute(
            "INSERT INTO session_steps (tenant, session_id, seq, at_us, kind, name, verdict, "
            "decision_id, labels, fingerprints, trusted, executed, changed) VALUES "
            "('t', 's', ?, ?, 'tool', 'read_file', 'allow', ?, '[]', ?, 0, NULL, ?)",
            (q, q, f"dec_{q:024x}", b"", q),
        )
        conn.execute(
            "DELETE FROM session_steps WHERE tenant = 't' AND session_id = 's' AND seq <= ?",
            (q - 200,),
        )
        today.record()
        conn.execute("COMMIT")

    def session_row_only() -> None:
        today.seq += 1
        q = today.seq
        conn = today.conn
        conn.execute("BEGIN IMMEDIATE")
        conn.execute(
            "UPDATE sessions SET next_seq = ?, version = ?, touched_us = ? "
            "WHERE tenant = 't' AND session_id = 's'",
            (q + 1, q, q),
        )
        today.record()
        conn.execute("COMMIT")

    def session_row_untouched() -> None:
        today.seq += 1
        q = today.seq
        conn = today.conn
        conn.execute("BEGIN IMMEDIATE")
        conn.execute(
            "UPDATE sessions SET next_seq = ?, version = ? WHERE tenant = 't' AND session_id = 's'",
            (q + 1, q),
        )
        today.record()
        conn.execute("COMMIT")

    def row_and_session() -> None:
        on_row.seq += 1
        q = on_row.seq
        on_row.conn.execute("BEGIN IMMEDIATE")
        on_row.conn.execute(
            "UPDATE sessions SET next_seq = ?, version = ?, touched_us = ? "
            "WHERE tenant = 't' AND session_id = 's' AND version = ?",
            (q + 1, q, q, q - 1),
        )
        on_row.record_with_step(q)
        on_row.conn.execute("COMMIT")

    def row_alone() -> None:
        on_row_alone.seq += 1
        on_row_alone.conn.execute("BEGIN IMMEDIATE")
        on_row_alone.record_with_step(on_row_alone.seq)
        on_row_alone.conn.execute("COMMIT")

    def row_listed() -> None:
        listed.seq += 1
        q = listed.seq
        listed.conn.execute("BEGIN IMMEDIATE")
        # the audit seqs of the session's last 20 steps, packed (8 bytes each)
        listed.conn.execute(
            "UPDATE sessions SET next_seq = ?, version = ?, touched_us = ?, "
            "steps = substr(COALESCE(steps, x''), -152) || ? "
            "WHERE tenant = 't' AND session_id = 's' AND version = ?",
            (q + 1, q, q, (listed.audit + 1).to_bytes(8, "little"), q - 1),
        )
        listed.record_with_step(q)
        listed.conn.execute("COMMIT")

    def row_columns() -> None:
        columns.seq += 1
        columns.conn.execute("BEGIN IMMEDIATE")
        columns.record_with_step(columns.seq)
        columns.conn.execute("COMMIT")

    def session_blob() -> None:
        packed.seq += 1
        q = packed.seq
        packed.conn.execute("BEGIN IMMEDIATE")
        packed.conn.execute(
            "UPDATE sessions SET next_seq = ?, version = ?, touched_us = ?, "
            "steps = substr(COALESCE(steps, x''), -1140) || ? "
            "WHERE tenant = 't' AND session_id = 's' AND version = ?",
            (q + 1, q, q, step_blob, q - 1),
        )
        packed.record()
        packed.conn.execute("COMMIT")

    def narrow_blob() -> None:
        narrow.seq += 1
        q = narrow.seq
        narrow.conn.execute("BEGIN IMMEDIATE")
        narrow.conn.execute(
            "UPDATE session_heads SET next_seq = ?, version = ?, "
            "steps = substr(COALESCE(steps, x''), -1140) || ? "
            "WHERE tenant = 't' AND session_id = 's' AND version = ?",
            (q + 1, q, step_blob, q - 1),
        )
        narrow.record()
        narrow.conn.execute("COMMIT")

    subjects: dict[str, Callable[[], None]] = {
        "plain": decision,
        "(a) view + trigger": through_view,
        "(a) statements": statements,
        "(a) bound kept every 32nd step": trimmed(True),
        "(a) that, touched_us kept": trimmed(False),
        "(a) its step row alone": step_row_only,
        "(a) its session row alone": session_row_only,
        "(a) session row, touched_us kept": session_row_untouched,
        "(b) row + index + session": row_and_session,
        "(b) row + index": row_alone,
        "(c) row + session list": row_listed,
        "(c) row columns alone": row_columns,
        "(d) steps in session row": session_blob,
        "(d) narrow session row": narrow_blob,
    }
    times: dict[str, list[float]] = {name: [] for name in subjects}
    for _ in range(rounds):
        for name, fn in subjects.items():
            times[name].append(median_us(fn, calls))
    for floor in (plain, today, on_row, on_row_alone, listed, columns, packed, narrow):
        floor.conn.close()
    print(f"  decision's transaction               {statistics.median(times['plain']):8.1f} µs")
    for name, values in times.items():
        if name == "plain":
            continue
        ratios = [v / p for v, p in zip(values, times["plain"], strict=True)]
        each = " ".join(f"{r:4.2f}" for r in ratios)
        print(
            f"  {name:<34} {statistics.median(values):8.1f} µs  "
            f"{statistics.median(ratios):5.2f}×  (+{statistics.median(values) - statistics.median(times['plain']):.1f} µs; rounds {each})"
        )


def raw_sqlite(path: Path) -> tuple[Callable[[], object], Callable[[], object]]:
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("PRAGMA synchronous=NORMAL")
    blob = pack(range(1, 251))
    counter = iter(range(10**9))

    def view() -> object:
        conn.execute("BEGIN")
        rows = conn.execute(
            "SELECT s.labels, s.next_seq, t.* FROM sessions s LEFT JOIN session_steps t "
            "ON t.tenant = s.tenant AND t.session_id = s.session_id "
            "WHERE s.tenant = 't' AND s.session_id = 'viewed' ORDER BY t.seq"
        ).fetchall()
        conn.execute("COMMIT")
        return rows

    def append() -> object:
        n = next(counter)
        conn.execute("BEGIN IMMEDIATE")
        conn.execute(
            "INSERT INTO session_steps VALUES ('raw', ?, ?, 0, 'tool', 'x', 'allow', 'd', '[]', ?, 0, NULL, 0)",
            (f"r{n % 50}", n, blob[:0]),
        )
        conn.execute(
            "UPDATE sessions SET next_seq = next_seq + 1 WHERE tenant = 't' AND session_id = 'viewed'"
        )
        conn.execute("COMMIT")
        return n

    return view, append


def raw_postgres(url: str) -> tuple[Callable[[], object], Callable[[], object]]:
    import psycopg

    query = dict(parse_qsl(urlsplit(url).query))
    conn = psycopg.connect(
        url.split("?", maxsplit=1)[0],
        autocommit=True,
        # the URL's own options too (synchronous_commit off, say): the same settings
        options=f"-c search_path={query['schema']} {query.get('options', '')}".strip(),
    )
    counter = iter(range(10**9))

    def view() -> object:
        with conn.transaction():
            return conn.execute(
                "SELECT s.labels, s.next_seq, t.* FROM sessions s LEFT JOIN session_steps t "
                "ON t.tenant = s.tenant AND t.session_id = s.session_id "
                "WHERE s.tenant = 't' AND s.session_id = 'viewed' ORDER BY t.seq"
            ).fetchall()

    def append() -> object:
        n = next(counter)
        with conn.transaction():
            conn.execute(
                "INSERT INTO session_steps VALUES ('raw', %s, %s, 0, 'tool', 'x', 'allow', 'd', '[]', %s, 0, NULL, 0)",
                (f"r{n % 50}", n, b""),
            )
            conn.execute(
                "UPDATE sessions SET next_seq = next_seq + 1 WHERE tenant = 't' AND session_id = 'viewed'"
            )
        return n

    return view, append


def split(calls: int, folder: Path) -> None:
    """Where the durable session check's time goes (``--split``): the medians of the
    store's parts of it, each timed in place (a wrapper around the method: ~0.2 µs
    each), beside the whole check — what is SQL (the view's one ``SELECT``, the
    step's one statement, the commit) and what is the history's Python around it."""
    import interlock.store.sql_sessions as sql_sessions
    import interlock.store.sqlite as sqlite_store
    from interlock.store import sql_audit

    times: dict[str, list[int]] = {}

    def timed(owner: object, name: str, label: str) -> Callable[[], None]:
        method = getattr(owner, name)

        def wrapper(*args: object, **kwargs: object) -> object:
            start = time.perf_counter_ns()
            try:
                return method(*args, **kwargs)
            finally:
                times.setdefault(label, []).append(time.perf_counter_ns() - start)

        setattr(owner, name, wrapper)
        return lambda: setattr(owner, name, method)

    history = sql_sessions.SqlHistory
    parts = [
        (history, "view", "view (kept, validated)"),
        (sqlite_store.SQLiteStore, "select", "  its SELECT (SQL)"),
        (history, "append_joined", "step appended"),
        (history, "_append_usual", "  the usual statement (SQL + the Step)"),
        (history, "joined", "kept view moved on"),
        (sql_audit.AuditStore, "append_audit", "record's transaction"),
        (sqlite_store._Begun, "__exit__", "  its COMMIT"),
    ]
    guard = Guard(
        load_policy_text(SESSIONS),
        store=f"sqlite:///{folder / 'split.db'}",
        reap_interval=None,
        context=Context(session_id="s-split"),
    )
    actions = [
        Action.tool("read_file", {"path": "/srv/notes.txt"}),
        Action.tool("send_email", {"to": "a@b.example", "body": "hello"}),
    ]
    for i in range(200):
        guard.check(actions[i % 2])
    undo = [timed(owner, name, label) for owner, name, label in parts]
    try:
        whole = []
        for i in range(calls):
            start = time.perf_counter_ns()
            guard.check(actions[i % 2])
            whole.append(time.perf_counter_ns() - start)
    finally:
        for restore in undo:
            restore()
        guard.close()
    print(f"  the check                                {statistics.median(whole) / 1000:7.1f} µs")
    for _, _, label in parts:
        print(f"  {label:<40} {statistics.median(times[label]) / 1000:7.1f} µs")


def fingerprints(calls: int) -> None:
    words = [
        "the",
        "report",
        "for",
        "march",
        "shows",
        "revenue",
        "up",
        "four",
        "percent",
        "over",
        "plan",
        "while",
        "costs",
        "held",
    ]
    text = " ".join(words[i % len(words)] for i in range(170)) + " token ab12cd34ef56 x@y.example"
    kib = len(text.encode()) / 1024
    data = text.encode()
    per_kib = median_us(lambda: of_data(text), calls) / kib
    sha = median_us(lambda: hashlib.sha256(data).digest(), calls) / kib
    argument = {"to": "bob@corp.example", "body": text[:200]}
    body = (argument["to"] + argument["body"]).encode()
    probed = median_us(lambda: probe(argument), calls)
    sha_arg = median_us(lambda: hashlib.sha256(body).digest(), calls)
    print(f"  of_data   {per_kib:8.1f} µs/KiB   sha256 {sha:6.2f} µs/KiB   {per_kib / sha:7.0f}×")
    print(
        f"  probe     {probed:8.1f} µs/arg    sha256 {sha_arg:6.2f} µs/arg   {probed / sha_arg:7.0f}×"
    )
    print(
        f"  kept      {len(of_data(text)) / kib:8.0f} fingerprints/KiB ({8 * len(of_data(text)) / kib:.0f} B/KiB)"
    )


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--postgres", default=None, help="a database URL with ?schema=")
    parser.add_argument(
        "--floor",
        action="store_true",
        help="only the SQL alone: the step's layouts on a bare connection (7 rounds)",
    )
    parser.add_argument(
        "--split",
        action="store_true",
        help="only where the durable session check's time goes (SQL and Python, in place)",
    )
    args = parser.parse_args()
    calls = 300 if args.quick else 2000
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        if args.split:
            print("where the durable session check's time goes (medians)")
            split(calls * 5, folder)
            return
        if args.floor:
            print("the SQL alone: a decision's transaction with and without a step")
            step_floor(folder, calls, rounds=7)
            return
        print("session-store benchmark (medians; ratios to the baseline of the same run)")
        print("1. the durable check (SQLite, durability process)")
        durable_check(calls, folder)
        print("   the SQL alone: a decision's transaction with and without a step")
        step_floor(folder, calls)
        print("   the check in process (history in memory)")
        in_process(calls * 10)
        print("2. the history on SQLite")
        path = folder / "history.db"
        history_ops(f"sqlite:///{path}", lambda: raw_sqlite(path), calls)
        if args.postgres:
            print("   the durable check on PostgreSQL")
            durable_check(max(calls // 4, 100), folder, args.postgres)
            print("   the history on PostgreSQL")
            history_ops(args.postgres, lambda: raw_postgres(args.postgres), calls)
        print("3. fingerprints")
        fingerprints(calls)


if __name__ == "__main__":
    main()
