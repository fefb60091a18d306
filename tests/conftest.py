"""Shared fixtures: a fake clock, the store on each back end, and store subprocesses.

The ``store`` fixture runs a test on SQLite and on PostgreSQL. PostgreSQL is the one at
``$INTERLOCK_TEST_POSTGRES_URL`` (default ``postgresql://postgres@127.0.0.1:5432/test``);
when it cannot be reached its tests are skipped, unless ``INTERLOCK_REQUIRE_POSTGRES=1``
(CI), which turns that into a failure. Each PostgreSQL test gets a schema of its own,
dropped afterwards.
"""

from __future__ import annotations

import contextlib
import json
import os
import queue
import secrets
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import settings

from interlock.store import SqlStore, open_store

# `interlock check` keeps parsed policies in a per-user cache (interlock.policy.cache):
# the tests, and the processes they start, use a directory of their own.
os.environ.setdefault(
    "INTERLOCK_POLICY_CACHE", tempfile.mkdtemp(prefix="interlock-test-policy-cache-")
)

# Property tests: random draws where a developer runs them (a failure found is saved in
# .hypothesis/ and replayed first next time); in CI (``INTERLOCK_CI=1``, set by .ci/run)
# the same draws on every run, so that a red CI means a change broke something, not a
# new draw: the exploring happens locally.
settings.register_profile("ci", derandomize=True, print_blob=True)
if os.environ.get("INTERLOCK_CI") == "1":
    settings.load_profile("ci")

DEFAULT_POSTGRES_URL = "postgresql://postgres@127.0.0.1:5432/test"
WORKERS = Path(__file__).parent / "store" / "_workers.py"


class FakeClock:
    """A clock that moves only when told. ``now`` is microseconds since the epoch (it
    starts at the real time, so subprocesses on the real clock agree with it)."""

    def __init__(self, start_us: int | None = None) -> None:
        self.now = time.time_ns() // 1000 if start_us is None else start_us

    def __call__(self) -> int:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += round(seconds * 1_000_000)


# -- PostgreSQL ---------------------------------------------------------------------------


def _with_schema(url: str, schema: str) -> str:
    return f"{url}{'&' if '?' in url else '?'}schema={schema}"


@pytest.fixture(scope="session")
def postgres_server_url() -> str:
    """The test server's URL, once it answered within 2 s; else skip (or fail when
    ``INTERLOCK_REQUIRE_POSTGRES=1``)."""
    url = os.environ.get("INTERLOCK_TEST_POSTGRES_URL", DEFAULT_POSTGRES_URL)
    try:
        import psycopg

        with psycopg.connect(url, connect_timeout=2):
            return url
    except Exception as exc:
        detail = " ".join(str(exc).split())
        problem = f"PostgreSQL at {url} is unreachable: {type(exc).__name__}: {detail}"
    if os.environ.get("INTERLOCK_REQUIRE_POSTGRES") == "1":
        pytest.fail(
            f"{problem} (INTERLOCK_REQUIRE_POSTGRES=1 requires it; point "
            "INTERLOCK_TEST_POSTGRES_URL at a server)",
            pytrace=False,
        )
    pytest.skip(f"{problem} (set INTERLOCK_TEST_POSTGRES_URL to run these tests)")


@pytest.fixture
def postgres_url(postgres_server_url: str) -> Iterator[str]:
    """A store URL on a fresh schema of the test server, dropped after the test."""
    import psycopg
    from psycopg import sql

    schema = f"t_{secrets.token_hex(6)}"
    yield _with_schema(postgres_server_url, schema)
    with psycopg.connect(postgres_server_url, autocommit=True, connect_timeout=2) as conn:
        conn.execute("SET lock_timeout = '10s'")
        conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema)))


# -- the store on each back end -----------------------------------------------------------


@pytest.fixture(params=["sqlite", "postgres"], ids=["sqlite", "postgres"])
def backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def store_url(backend: str, request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """The URL of an empty database on the test's back end."""
    if backend == "sqlite":
        return f"sqlite:///{tmp_path / 'interlock.db'}"
    return str(request.getfixturevalue("postgres_url"))


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def store(store_url: str, clock: FakeClock) -> Iterator[SqlStore]:
    """An open, migrated store on the fake clock."""
    opened = open_store(store_url, clock=clock)
    yield opened
    opened.close()


@pytest.fixture
def open_replica(store_url: str, clock: FakeClock) -> Iterator[Callable[..., SqlStore]]:
    """Opens more store objects on the same database (other threads' or replicas'
    view), on the fake clock unless told otherwise; all closed after the test."""
    opened: list[SqlStore] = []

    def open_one(**options: Any) -> SqlStore:
        options.setdefault("clock", clock)
        replica = open_store(store_url, **options)
        opened.append(replica)
        return replica

    yield open_one
    for replica in opened:
        replica.close()


# -- subprocesses -------------------------------------------------------------------------


class Worker:
    """One ``tests/store/_workers.py`` subprocess, speaking JSON lines on stdout."""

    def __init__(self, *args: str) -> None:
        self.args = args
        self.proc = subprocess.Popen(
            [sys.executable, str(WORKERS), *args],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            bufsize=1,
        )
        self._lines: queue.Queue[str | None] = queue.Queue()
        self._stderr: list[str] = []
        self._pumps = [
            threading.Thread(target=self._pump_stdout, daemon=True),
            threading.Thread(target=self._pump_stderr, daemon=True),
        ]
        for pump in self._pumps:
            pump.start()

    def _pump_stdout(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            if line.endswith("\n"):  # a line cut short by a kill is not a message
                self._lines.put(line)
        self._lines.put(None)

    def _pump_stderr(self) -> None:
        assert self.proc.stderr is not None
        self._stderr.extend(self.proc.stderr)

    @property
    def stderr(self) -> str:
        return "".join(self._stderr)

    def read(self, timeout: float = 30.0) -> dict[str, Any] | None:
        """The next message; None once the process closed its stdout."""
        try:
            line = self._lines.get(timeout=timeout)
        except queue.Empty:
            raise AssertionError(
                f"worker {self.args[0]} said nothing for {timeout} s; stderr:\n{self.stderr}"
            ) from None
        if line is None:
            self._lines.put(None)
            return None
        message: dict[str, Any] = json.loads(line)
        return message

    def expect(self, key: str, timeout: float = 30.0) -> dict[str, Any]:
        """The next message, which must carry ``key``."""
        message = self.read(timeout)
        assert message is not None and key in message, (
            f"worker {self.args[0]}: expected {key!r}, got {message!r}; stderr:\n{self.stderr}"
        )
        return message

    def read_all(self, timeout: float = 60.0) -> list[dict[str, Any]]:
        """Every message until the process closes its stdout."""
        messages = []
        while (message := self.read(timeout)) is not None:
            messages.append(message)
        return messages

    def send(self, line: str) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(line + "\n")
        self.proc.stdin.flush()

    def finish(self, timeout: float = 60.0) -> None:
        """Wait for a clean exit."""
        code = self.proc.wait(timeout)
        assert code == 0, f"worker {self.args[0]} exited {code}; stderr:\n{self.stderr}"

    def kill(self) -> None:
        """SIGKILL: no cleanup of any kind runs in the process."""
        self.proc.kill()
        self.proc.wait(10)

    def dispose(self) -> None:
        if self.proc.poll() is None:
            self.kill()
        for pump in self._pumps:
            pump.join(5)
        for stream in (self.proc.stdin, self.proc.stdout, self.proc.stderr):
            if stream is not None:
                with contextlib.suppress(OSError):
                    stream.close()


@pytest.fixture
def spawn_worker() -> Iterator[Callable[..., Worker]]:
    """Starts ``tests/store/_workers.py COMMAND ARGS...``; kills leftovers after the test."""
    started: list[Worker] = []

    def spawn(*args: str) -> Worker:
        worker = Worker(*args)
        started.append(worker)
        return worker

    yield spawn
    for worker in started:
        worker.dispose()
