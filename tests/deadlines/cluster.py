"""A throwaway PostgreSQL cluster a test may stop, freeze and break.

The machine's shared test server is never touched: each :class:`Cluster` is its own
``initdb`` in a temporary directory, on a free port, started with ``pg_ctl``. When the
tests run as root (initdb refuses root) the server binaries run as the ``postgres``
OS user through ``runuser``.
"""

from __future__ import annotations

import contextlib
import glob
import os
import pwd
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

__all__ = ["Blackhole", "Cluster", "ClusterUnavailable", "free_port", "wait_until"]


class ClusterUnavailable(Exception):
    """No PostgreSQL server binaries here, or no way to run them."""


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _bindir() -> Path:
    found = sorted(
        glob.glob("/usr/lib/postgresql/*/bin/initdb"),
        key=lambda p: (
            int(Path(p).parent.parent.name) if Path(p).parent.parent.name.isdigit() else 0
        ),
    )
    if found:
        return Path(found[-1]).parent
    initdb = shutil.which("initdb")
    if initdb:
        return Path(initdb).parent
    raise ClusterUnavailable("no initdb found (/usr/lib/postgresql/*/bin or PATH)")


class Cluster:
    """One PostgreSQL server of its own: ``start``, ``stop`` (``-m immediate``: a
    crash), ``freeze`` / ``thaw`` (SIGSTOP / SIGCONT of every server process: a hung
    server that still holds its sockets), and ``destroy``."""

    def __init__(self) -> None:
        self.bindir = _bindir()
        self._as: list[str] = []
        owner = -1
        if os.geteuid() == 0:  # initdb refuses root: run the server as ``postgres``
            try:
                owner = pwd.getpwnam("postgres").pw_uid
            except KeyError:
                raise ClusterUnavailable("running as root and no 'postgres' user") from None
            if shutil.which("runuser") is None:
                raise ClusterUnavailable("running as root and no runuser")
            self._as = ["runuser", "-u", "postgres", "--"]
        self.dir = Path(tempfile.mkdtemp(prefix="interlock-pg-"))
        if owner != -1:
            os.chown(self.dir, owner, -1)
        self.data = self.dir / "data"
        self.port = free_port()
        self._frozen: list[int] = []
        self._lock = threading.Lock()
        self._run("initdb", "-D", str(self.data), "-A", "trust", "-U", "postgres", "--no-sync")

    @property
    def url(self) -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/postgres"

    def _run(self, program: str, *args: str) -> None:
        command = [*self._as, str(self.bindir / program), *args]
        done = subprocess.run(command, check=False, capture_output=True, text=True, timeout=120)
        if done.returncode != 0:
            log = (self.dir / "log").read_text() if (self.dir / "log").exists() else ""
            raise ClusterUnavailable(
                f"{program} failed ({done.returncode}): {done.stderr.strip()}\n{log[-2000:]}"
            )

    def start(self) -> None:
        options = (
            f"-p {self.port} -k {self.dir} -c listen_addresses=127.0.0.1 "
            "-c fsync=off -c full_page_writes=off"
        )
        log = str(self.dir / "log")
        self._run("pg_ctl", "-D", str(self.data), "-o", options, "-l", log, "-w", "start")

    def stop(self) -> None:
        """A crash: the server dies at once, connections are reset."""
        self.thaw()
        self._run("pg_ctl", "-D", str(self.data), "-m", "immediate", "-w", "stop")

    def _server_pids(self) -> list[int]:
        pid_file = self.data / "postmaster.pid"
        try:
            postmaster = int(pid_file.read_text().split()[0])
        except (OSError, ValueError, IndexError):
            return []
        pids = [postmaster]
        for stat in glob.glob("/proc/[0-9]*/stat"):
            with contextlib.suppress(OSError, ValueError, IndexError):
                fields = Path(stat).read_text().rsplit(")", 1)[1].split()
                if int(fields[1]) == postmaster:  # field 4 of stat: the parent pid
                    pids.append(int(Path(stat).parent.name))
        return pids

    def freeze(self) -> None:
        """Every server process stopped (SIGSTOP): sockets stay open, nothing answers,
        new connections wait in the listen backlog."""
        with self._lock:
            pids = self._server_pids()
            for pid in pids:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGSTOP)
            self._frozen.extend(pids)

    def thaw(self) -> None:
        with self._lock:
            pids, self._frozen = self._frozen, []
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGCONT)

    def destroy(self) -> None:
        self.thaw()
        if (self.data / "postmaster.pid").exists():
            with contextlib.suppress(ClusterUnavailable, subprocess.TimeoutExpired):
                self._run("pg_ctl", "-D", str(self.data), "-m", "immediate", "-w", "stop")
        shutil.rmtree(self.dir, ignore_errors=True)


class Blackhole:
    """A listening TCP socket that never accepts: a connection is queued by the
    kernel and then nothing ever answers (a server behind a dead path)."""

    def __init__(self) -> None:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(1)
        self.port = int(self.sock.getsockname()[1])

    @property
    def url(self) -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/postgres"

    def close(self) -> None:
        self.sock.close()


def wait_until(predicate: Callable[[], object], timeout: float, interval: float = 0.1) -> bool:
    """Poll ``predicate()`` until true or ``timeout`` seconds pass."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(interval)
    return False
