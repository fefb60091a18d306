"""Benchmark ``session-store``: what durable session history and fingerprints cost.

Run: ``python -m bench.session_store [--quick] [--postgres URL]`` (under the machine's
bench lock). Every figure is a median of per-call times, and each is printed beside a
baseline measured in the same run, as a ratio:

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


def step_floor(folder: Path, calls: int) -> None:
    """What a session step adds to a decision's transaction in SQL alone, on a bare
    ``sqlite3`` connection to a file of the store's schema (WAL, ``synchronous=NORMAL``):
    the decision's own statements (BEGIN IMMEDIATE, the audit head UPDATE, the record
    INSERT, COMMIT) against the same with the step — through the view and trigger the
    store uses (one statement), and as plain statements (the session row UPDATE, the
    step INSERT, the DELETE past the bound). No Python of Interlock's runs: it is the
    floor under the durable check's target of ≤ 1.2×, interleaved, best of three
    rounds."""
    path = folder / "floor.db"
    open_store(f"sqlite:///{path}").close()
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("PRAGMA synchronous=NORMAL")
    conn.execute("INSERT INTO audit_heads (tenant, seq, hash, key_id) VALUES ('t', 0, 'h', 'k')")
    conn.execute(
        "INSERT INTO sessions (tenant, session_id, labels, next_seq, touched_us, created_us, "
        "version) VALUES ('t', 's', '[]', 1, 0, 0, 0)"
    )
    body = '{"decision": "allow", "rule_ids": ["reads"], "tool": "read_file"}' * 6
    state = {"audit": 0, "seq": 0}

    def decision() -> None:
        state["audit"] += 1
        n = state["audit"]
        conn.execute(
            "UPDATE audit_heads SET seq = ?, hash = ?, key_id = 'k' WHERE tenant = 't'",
            (n, f"{n:064x}"),
        )
        conn.execute(
            "INSERT INTO audit_events (tenant, seq, ts_us, kind, decision_id, agent, decision, "
            "body, prev_hash, hash, key_id) VALUES ('t', ?, ?, 'decision', ?, 'a', 'allow', ?, "
            "?, ?, 'k')",
            (n, n, f"dec_{n:024x}", body, f"{n - 1:064x}", f"{n:064x}"),
        )

    def plain() -> None:
        conn.execute("BEGIN IMMEDIATE")
        decision()
        conn.execute("COMMIT")

    def through_view() -> None:
        state["seq"] += 1
        q = state["seq"]
        conn.execute("BEGIN IMMEDIATE")
        conn.execute(
            "INSERT INTO session_step_usual VALUES (?, ?, ?, ?, 0, ?, 'tool', 'read_file', "
            "'allow', ?, '[]', ?, 0, NULL, NULL, ?)",
            ("t", "s", q, q, q, f"dec_{q:024x}", b"", q - 200),
        )
        decision()
        conn.execute("COMMIT")

    def statements() -> None:
        state["seq"] += 1
        q = state["seq"]
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
        decision()
        conn.execute("COMMIT")

    best = {"plain": float("inf"), "view": float("inf"), "statements": float("inf")}
    for _ in range(3):
        for name, fn in (("plain", plain), ("view", through_view), ("statements", statements)):
            best[name] = min(best[name], median_us(fn, calls))
    conn.close()
    base = best["plain"]
    print(f"  decision's transaction     {base:8.1f} µs")
    for name, label in (("view", "with the step (view)"), ("statements", "with the step (stmts)")):
        print(f"  {label:<26} {best[name]:8.1f} µs  {best[name] / base:5.2f}×")


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
    args = parser.parse_args()
    calls = 300 if args.quick else 2000
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
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
