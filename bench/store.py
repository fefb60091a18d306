"""What the store benchmarks share: the PostgreSQL server (found, isolated in a
schema of its own and dropped afterwards), temporary SQLite files, worker
subprocesses, and a timed loop that runs several subjects in alternating rounds.

The benchmarks themselves are ``bench/store_budget.py``, ``store_audit.py``,
``store_approval.py`` and ``store_check.py``; the code their subprocesses run is
``bench/store_workers.py``.

PostgreSQL is the server at ``$INTERLOCK_BENCH_POSTGRES_URL``, else
``$INTERLOCK_TEST_POSTGRES_URL``, else ``postgresql://postgres@127.0.0.1:5432/test``.
When it cannot be reached the PostgreSQL parts are skipped with a note; that never
fails the run.
"""

from __future__ import annotations

import contextlib
import gc
import json
import os
import queue
import secrets
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final
from urllib.parse import urlsplit

__all__ = [
    "REPO_ROOT",
    "WORKLOAD",
    "Call",
    "Worker",
    "decision_events",
    "example_policy",
    "pg_connect",
    "pg_schema",
    "pg_server_settings",
    "pg_server_url",
    "pg_unavailable",
    "rounds",
    "sqlite_dir",
    "sqlite_facts",
    "wall_now_ns",
    "with_schema",
    "workload_actions",
]

REPO_ROOT: Final = Path(__file__).resolve().parent.parent
DEFAULT_POSTGRES_URL: Final = "postgresql://postgres@127.0.0.1:5432/test"


# -- PostgreSQL ---------------------------------------------------------------------------


def pg_server_url() -> str:
    return (
        os.environ.get("INTERLOCK_BENCH_POSTGRES_URL")
        or os.environ.get("INTERLOCK_TEST_POSTGRES_URL")
        or DEFAULT_POSTGRES_URL
    )


def pg_unavailable() -> str | None:
    """Why PostgreSQL cannot be benchmarked (``None`` when it can)."""
    url = pg_server_url()
    try:
        import psycopg
        import psycopg_pool  # noqa: F401 - the store needs it too
    except ImportError as exc:
        return f"psycopg is not installed ({exc}); pip install 'interlock[postgres]'"
    try:
        with psycopg.connect(url, connect_timeout=2):
            pass
    except Exception as exc:
        why = " ".join(str(exc).split())
        return f"PostgreSQL at {_shown(url)} is unreachable: {type(exc).__name__}: {why}"
    return None


def _shown(url: str) -> str:
    """The URL with any password hidden."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    return url.replace(f":{parts.password}@", ":***@", 1)


def with_schema(url: str, schema: str) -> str:
    return f"{url}{'&' if '?' in url else '?'}schema={schema}"


@contextlib.contextmanager
def pg_schema() -> Iterator[tuple[str, str]]:
    """A fresh schema ``bench_<hex>`` on the server: yields (store URL, schema name)
    and drops the schema (CASCADE) afterwards, whatever happened."""
    import psycopg
    from psycopg import sql

    server = pg_server_url()
    schema = f"bench_{secrets.token_hex(6)}"
    try:
        yield with_schema(server, schema), schema
    finally:
        with psycopg.connect(server, autocommit=True, connect_timeout=5) as conn:
            conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema)))


def pg_connect(schema: str) -> Any:
    """A raw connection with the store's own settings: autocommit, the schema first on
    the search path."""
    import psycopg

    return psycopg.connect(
        pg_server_url(), autocommit=True, options=f"-c search_path={schema}", connect_timeout=5
    )


def pg_server_settings() -> dict[str, Any]:
    """The server facts a reader needs to weigh PostgreSQL figures."""
    import psycopg

    names = (
        "server_version",
        "synchronous_commit",
        "fsync",
        "wal_sync_method",
        "commit_delay",
        "shared_buffers",
        "max_connections",
    )
    where = urlsplit(pg_server_url())  # never the password
    out: dict[str, Any] = {"host": where.hostname, "port": where.port, "database": where.path[1:]}
    with psycopg.connect(pg_server_url(), autocommit=True, connect_timeout=5) as conn:
        for name in names:
            row = conn.execute(f"SHOW {name}").fetchone()
            out[name] = row[0] if row else None
    return out


# -- SQLite --------------------------------------------------------------------------------


@contextlib.contextmanager
def sqlite_dir() -> Iterator[Path]:
    """A temporary directory for SQLite files, removed afterwards."""
    with tempfile.TemporaryDirectory(prefix="interlock-bench-") as path:
        yield Path(path)


def sqlite_facts(directory: Path) -> dict[str, Any]:
    return {
        "sqlite_version": sqlite3.sqlite_version,
        "directory": str(directory),
        "journal_mode": "wal",
        "filesystem_device": os.stat(directory).st_dev,
    }


# -- the small policy and workload ----------------------------------------------------------


@dataclass(frozen=True)
class Call:
    """One workload action and the verdict the example policy gives it."""

    tool: str
    arguments: dict[str, Any]
    expect: str


#: Allowed and denied calls only: a require_approval call would open an approval in
#: the store, which is the approvals benchmark's subject, not this one's.
WORKLOAD: Final = (
    Call("shell", {"command": "ls -la /workspace"}, "allow"),
    Call("shell", {"command": "cd /tmp && rm -rf build"}, "deny"),
    Call("read_file", {"path": "/workspace/notes.md"}, "allow"),
    Call("read_file", {"path": "/workspace/../etc/passwd"}, "deny"),
    Call("fetch_url", {"url": "https://docs.example.com/refunds"}, "allow"),
    Call("fetch_url", {"url": "https://pastebin.example.net/x"}, "deny"),
    Call("refund_order", {"order_id": 1, "amount": 20, "currency": "EUR"}, "allow"),
    Call("refund_order", {"order_id": 3, "amount": 5, "currency": "GBP"}, "deny"),
    Call("send_email", {"to": "x@partner.example.net", "subject": "hi", "body": "hi"}, "allow"),
)


def example_policy() -> Any:
    """The policy ``interlock demo`` runs under (``examples/interlock.yaml``)."""
    from interlock import load_policy_text
    from interlock.demo import example_policy_text

    return load_policy_text(example_policy_text(), file="examples/interlock.yaml")


def workload_actions(tenant: str = "acme") -> list[Any]:
    from interlock import Action, Context

    context = Context(tenant=tenant, agent="support-bot", session_id="sess-1")
    return [Action.tool(c.tool, c.arguments, context=context) for c in WORKLOAD]


def decision_events(tenant: str = "acme") -> list[Any]:
    """One realistic decision event per workload action, as the guard would record."""
    from interlock import Guard
    from interlock.core.events import Event

    guard = Guard(example_policy())
    return [
        Event("decision", time.time(), action, guard.check(action), 9_000)
        for action in workload_actions(tenant)
    ]


# -- timing --------------------------------------------------------------------------------


#: One subject of :func:`rounds`: a label and ``run(count) -> (samples by label, wall ns)``.
Chunk = Callable[[int], tuple[dict[str, list[int]], int]]


def rounds(
    subjects: Sequence[tuple[str, Chunk]], calls: int, count: int = 5
) -> dict[str, tuple[list[int], int]]:
    """Run every subject ``calls`` times in all, split into ``count`` alternating rounds
    (A B C A B C ...), so that slow drift in the machine's load lands on every subject
    alike. Returns, per sample label, the samples and the summed wall time of the
    rounds that produced them. The garbage collector is off inside each round."""
    out: dict[str, tuple[list[int], int]] = {}
    per_round = [calls // count + (1 if i < calls % count else 0) for i in range(count)]
    for size in per_round:
        if not size:
            continue
        for _, run in subjects:
            gc.collect()
            was_enabled = gc.isenabled()
            gc.disable()
            try:
                samples, wall = run(size)
            finally:
                if was_enabled:
                    gc.enable()
            for label, values in samples.items():
                previous, previous_wall = out.get(label, ([], 0))
                previous.extend(values)
                out[label] = (previous, previous_wall + wall)
    return out


# -- worker subprocesses ---------------------------------------------------------------------


@dataclass
class Worker:
    """A ``python -m bench.store_workers <mode> <json>`` subprocess that speaks one JSON
    object per line on stdout and takes commands on stdin. Its lines are read by a
    thread, so a hung worker is a timeout, never a hung benchmark."""

    proc: subprocess.Popen[str]
    lines: queue.Queue[str | None]

    @classmethod
    def start(cls, mode: str, args: dict[str, Any]) -> Worker:
        proc = subprocess.Popen(
            [sys.executable, "-m", "bench.store_workers", mode, json.dumps(args)],
            cwd=REPO_ROOT,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            bufsize=1,
        )
        lines: queue.Queue[str | None] = queue.Queue()

        def pump() -> None:
            assert proc.stdout is not None
            for line in proc.stdout:
                lines.put(line)
            lines.put(None)

        threading.Thread(target=pump, name=f"bench-{mode}-reader", daemon=True).start()
        return cls(proc, lines)

    def send(self, message: dict[str, Any]) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps(message) + "\n")
        self.proc.stdin.flush()

    def receive(self, timeout: float) -> dict[str, Any]:
        try:
            line = self.lines.get(timeout=timeout)
        except queue.Empty:
            raise TimeoutError(f"worker gave no answer within {timeout:.0f} s") from None
        if line is None:
            raise RuntimeError(f"worker exited: {self.stderr()}")
        message: dict[str, Any] = json.loads(line)
        if "error" in message:
            raise RuntimeError(f"worker failed: {message['error']}")
        return message

    def stderr(self) -> str:
        with contextlib.suppress(Exception):
            self.proc.wait(timeout=5)
        if self.proc.stderr is None:
            return ""
        with contextlib.suppress(Exception):
            return self.proc.stderr.read()[-2000:]
        return ""

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self.send({"op": "quit"})
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(timeout=5)
        for stream in (self.proc.stdin, self.proc.stdout, self.proc.stderr):
            if stream is not None:
                with contextlib.suppress(Exception):
                    stream.close()


def wall_now_ns() -> int:
    """The machine's wall clock (CLOCK_REALTIME), comparable across processes."""
    return time.time_ns()
