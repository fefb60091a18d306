"""Several real ``interlock serve`` processes on one database, as a fleet behind a load
balancer runs them: each on its own free port, all with the same policy file, all
started before any of them is waited for, each stopped with SIGTERM.

Each replica's output goes to a file (a pipe nobody reads would fill up and stall the
server); a replica that fails shows that output in the failure.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import httpx

__all__ = ["STARTUP", "Replica", "start_replicas", "stop_replicas"]

STARTUP = 60.0  # seconds: a hang guard for starting and stopping, never a measurement
_PORT_ATTEMPTS = 3  # a free port can be taken by someone else before the server binds it


def interlock_exe() -> str:
    exe = shutil.which("interlock", path=str(Path(sys.executable).parent))
    assert exe is not None, f"no interlock script next to {sys.executable}"
    return exe


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def replica_env() -> dict[str, str]:
    """The environment without the caller's INTERLOCK_* settings (the command line says
    everything), except the audit key: the test verifies the chain the replicas wrote,
    so both sides must hash with the same key."""
    return {
        name: value
        for name, value in os.environ.items()
        if not name.startswith("INTERLOCK_") or name == "INTERLOCK_AUDIT_KEY"
    }


@dataclass
class Replica:
    """One ``interlock serve`` process."""

    name: str
    port: int
    proc: subprocess.Popen[bytes]
    log_path: Path

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def describe(self) -> str:
        return f"replica {self.name} ({self.url}, exit {self.proc.poll()}); its output:\n{self.log}"


def _launch(name: str, database: str, policy: Path, workdir: Path) -> Replica:
    port = free_port()
    log_path = workdir / f"replica-{name}.log"
    with log_path.open("wb") as log:
        proc = subprocess.Popen(
            [
                interlock_exe(),
                "serve",
                "--policy",
                str(policy),
                "--database",
                database,
                "--host",
                "127.0.0.1",
                "--port",
                str(port),
                "--log-level",
                "warning",
            ],
            cwd=workdir,
            env=replica_env(),
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    return Replica(name, port, proc, log_path)


def _wait_ready(replica: Replica, deadline: float) -> bool:
    """True once ``/v1/ready`` says ready; False when the process exited first."""
    with httpx.Client(base_url=replica.url, timeout=5.0) as client:
        while time.monotonic() < deadline:
            if replica.proc.poll() is not None:
                return False
            with contextlib.suppress(httpx.TransportError):
                answer = client.get("/v1/ready")
                if answer.status_code == 200 and answer.json().get("status") == "ready":
                    return True
            time.sleep(0.05)
    raise AssertionError(f"not ready within {STARTUP} s: {replica.describe()}")


def start_replicas(count: int, database: str, policy: Path, workdir: Path) -> list[Replica]:
    """``count`` servers on ``database``, each ready on its own port. All are launched
    before any is waited for, so they start (and migrate) at the same moment."""
    names = [chr(ord("A") + i) for i in range(count)]
    replicas = [_launch(name, database, policy, workdir) for name in names]
    deadline = time.monotonic() + STARTUP
    try:
        for index in range(count):
            for attempt in range(1, _PORT_ATTEMPTS + 1):
                replica = replicas[index]
                if _wait_ready(replica, deadline):
                    break
                lost_port = "address already in use" in replica.log.lower()
                if not lost_port or attempt == _PORT_ATTEMPTS:
                    raise AssertionError(f"did not start: {replica.describe()}")
                replicas[index] = _launch(replica.name, database, policy, workdir)
    except BaseException:
        for started in replicas:
            _kill(started)
        raise
    return replicas


def _kill(replica: Replica) -> None:
    if replica.proc.poll() is None:
        replica.proc.kill()
    with contextlib.suppress(subprocess.TimeoutExpired):
        replica.proc.wait(10)


def stop_replicas(replicas: list[Replica]) -> dict[str, int | None]:
    """SIGTERM to every replica at once, as a supervisor stops a fleet; each one's exit
    code (``None``: it hung and was killed)."""
    for replica in replicas:
        if replica.proc.poll() is None:
            replica.proc.send_signal(signal.SIGTERM)
    codes: dict[str, int | None] = {}
    for replica in replicas:
        try:
            codes[replica.name] = replica.proc.wait(STARTUP)
        except subprocess.TimeoutExpired:
            _kill(replica)
            codes[replica.name] = None
    return codes
