"""``interlock serve --workers N``: N server processes sharing one listening socket and
one store.

The supervisor (the process the command started) binds the socket once, starts N
workers — each an ordinary ``interlock serve`` handed the socket's file descriptor —
and waits. The kernel spreads connections over the workers. Everything a decision
needs is in the store, which the workers share as replicas do (SQLite in WAL mode or
PostgreSQL): the audit chains (each append reads and extends its tenant's head inside
the store's own write transaction), budgets, rate limits, approvals, API keys. What
is per process:

| state | with N workers |
| --- | --- |
| audit writer, checkpointer | one each; a file sink is appended to with ``O_APPEND`` |
| key cache | one each (a revoked key is refused by all within the cache TTL) |
| approval long-polls | woken by the store (NOTIFY on PostgreSQL, polling on SQLite) |
| reaper | worker 0 only (it is safe on several, each skipping rows another holds) |
| webhook dispatcher | worker 0 only (notices are leased in the store either way) |
| policy watcher | one each, on the same file; SIGHUP to the supervisor reaches all |

A held policy reload (``--reload-max-removed``) is held by each worker, and
``POST /v1/policy/reload/confirm`` reaches only the one that answers it: with several
workers, confirm by restarting the supervisor.

SIGTERM or SIGINT to the supervisor stops every worker gracefully (each writes its
pending audit records and closes its store) and exits 0. A worker that exits on its
own stops the others and the supervisor exits 1: a process manager restarts the
whole server, never a partial one. A worker whose supervisor disappears (``kill -9``)
stops itself within a second.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from types import FrameType
from typing import Final

__all__ = [
    "WORKER_HEADER",
    "WORKER_WEBHOOK_ENV",
    "Supervisor",
    "bind",
    "watch_parent",
    "worker_command",
]

log = logging.getLogger("interlock.server")

#: The response header naming the worker that answered (``--workers`` above 1 only):
#: ``<index>:<pid>``.
WORKER_HEADER: Final = "x-interlock-worker"

#: The variable that hands worker 0 the webhook URL (it may hold a token: never argv).
WORKER_WEBHOOK_ENV: Final = "INTERLOCK_WORKER_WEBHOOK_URL"

#: seconds a worker has to stop after SIGTERM before it is killed
STOP_TIMEOUT: Final = 30.0
_BACKLOG: Final = 2048


def bind(host: str, port: int, uds: Path | None) -> socket.socket:
    """The listening socket every worker shares (inheritable)."""
    if uds is not None:
        if uds.is_socket():
            uds.unlink()  # a stale socket file of a server that is gone
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.bind(str(uds))
        os.chmod(uds, 0o666)
    else:
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        sock = socket.socket(family, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
    sock.listen(_BACKLOG)
    sock.set_inheritable(True)
    return sock


class Supervisor:
    """Starts the workers' command lines with the socket's descriptor, forwards
    SIGTERM, SIGINT and SIGHUP to them, and waits."""

    def __init__(
        self,
        sock: socket.socket,
        argvs: Sequence[Sequence[str]],
        envs: Sequence[Mapping[str, str]] | None = None,
    ) -> None:
        self.sock = sock
        self.argvs = [list(argv) for argv in argvs]
        self.envs: list[dict[str, str] | None] = (
            [dict(env) for env in envs] if envs is not None else [None] * len(self.argvs)
        )
        self.workers: list[subprocess.Popen[bytes]] = []
        self._stopping = False

    def _forward(self, signum: int, frame: FrameType | None) -> None:
        if signum in (signal.SIGTERM, signal.SIGINT):
            self._stopping = True
            signum = signal.SIGTERM  # a worker's graceful stop; SIGINT twice would force it
        for worker in self.workers:
            if worker.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    worker.send_signal(signum)

    def run(self) -> int:
        """Serve until stopped; the exit code (0: every worker stopped cleanly when
        asked)."""
        handled = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)
        previous = {signum: signal.signal(signum, self._forward) for signum in handled}
        fd = self.sock.fileno()
        try:
            # The workers start with SIGHUP ignored (an ignored signal survives exec)
            # until their policy watcher handles it: one forwarded before that must
            # not kill a worker that is still starting.
            signal.signal(signal.SIGHUP, signal.SIG_IGN)
            for argv, env in zip(self.argvs, self.envs, strict=True):
                self.workers.append(subprocess.Popen(argv, pass_fds=(fd,), env=env))
            signal.signal(signal.SIGHUP, self._forward)
            if self._stopping:  # asked to stop while they were starting: all of them
                self._forward(signal.SIGTERM, None)
            return self._wait()
        finally:
            self._stop_all()
            for signum, handler in previous.items():
                signal.signal(signum, handler)
            self.sock.close()

    def _wait(self) -> int:
        while True:
            codes = [worker.poll() for worker in self.workers]
            if all(code is not None for code in codes):
                return 0 if self._stopping and all(map(_stopped_cleanly, codes)) else 1
            if not self._stopping and any(code is not None for code in codes):
                died = [i for i, code in enumerate(codes) if code is not None]
                log.error(
                    "interlock: worker(s) %s exited on their own (%s); stopping the others",
                    died,
                    [codes[i] for i in died],
                )
                self._stopping = True
                self._forward(signal.SIGTERM, None)
                self._stop_all()
                return 1
            time.sleep(0.1)

    def _stop_all(self) -> None:
        for worker in self.workers:
            if worker.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    worker.terminate()
        deadline = time.monotonic() + STOP_TIMEOUT
        for worker in self.workers:
            try:
                worker.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                log.error("interlock: worker %d did not stop in time; killing it", worker.pid)
                worker.kill()
                worker.wait()


def _stopped_cleanly(code: int | None) -> bool:
    """Whether a worker asked to stop ended as it should: exit 0 — or killed by that
    SIGTERM itself, which is a worker still starting (its graceful handler is installed
    when it begins to serve, so it had served nothing and holds nothing to write)."""
    return code in (0, -signal.SIGTERM)


def watch_parent(interval: float = 1.0) -> threading.Thread:
    """In a worker: SIGTERM to itself once its supervisor is gone (its parent changes),
    so a supervisor killed outright leaves no orphan serving on its socket."""
    parent = os.getppid()

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(interval)
        os.kill(os.getpid(), signal.SIGTERM)

    thread = threading.Thread(target=watch, name="interlock-parent-watch", daemon=True)
    thread.start()
    return thread


def worker_command(index: int, fd: int, options: Sequence[str]) -> list[str]:
    """The command line of worker ``index``: ``interlock serve`` with ``options`` and
    the shared socket's descriptor."""
    runner = "import sys; from interlock.cli import main; sys.argv[0] = 'interlock'; main()"
    return [sys.executable, "-c", runner, "serve", *options, "--worker-fd", str(fd),
            "--worker-index", str(index)]  # fmt: skip
