"""``interlock serve`` as a real process, on a TCP port and on a Unix socket, spoken
to with httpx: the same API, keys made beforehand in the same database, a clean exit
on SIGTERM."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from interlock.server import KeyStore, Role
from interlock.store import open_store

from .harness import POLICY, bearer, legacy_key

pytestmark = pytest.mark.slow

STARTUP = 60.0  # seconds: generous; reaching it fails the test with the server's output


def interlock_exe() -> str:
    exe = shutil.which("interlock", path=str(Path(sys.executable).parent))
    assert exe is not None
    return exe


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def make_keys(url: str) -> dict[str, str]:
    with open_store(url) as store:
        keys = KeyStore(store)
        return {
            "agent": keys.create(tenant="acme", role=Role.AGENT, name="ops-bot").token,
            "approver": keys.create(tenant="acme", role=Role.APPROVER, name="alice").token,
        }


@contextlib.contextmanager
def serving(tmp_path: Path, *where: str) -> Iterator[subprocess.Popen[str]]:
    (tmp_path / "interlock.yaml").write_text(POLICY)
    env = {k: v for k, v in os.environ.items() if not k.startswith("INTERLOCK_")}
    proc = subprocess.Popen(
        [interlock_exe(), "serve", "-d", f"sqlite:///{tmp_path / 'i.db'}", *where],
        cwd=tmp_path,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        yield proc
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait(10)
        assert proc.stdout is not None
        proc.stdout.close()


def wait_until_up(proc: subprocess.Popen[str], client: httpx.Client) -> None:
    deadline = time.monotonic() + STARTUP
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            assert proc.stdout is not None
            pytest.fail(f"interlock serve exited {proc.returncode}:\n{proc.stdout.read()}")
        with contextlib.suppress(httpx.TransportError):
            if client.get("/v1/health").status_code == 200:
                return
        time.sleep(0.05)
    pytest.fail(f"interlock serve did not answer within {STARTUP} s")


def stop(proc: subprocess.Popen[str]) -> str:
    """SIGTERM, as a supervisor stops it: a clean shutdown and exit 0."""
    proc.send_signal(signal.SIGTERM)
    output, _ = proc.communicate(timeout=STARTUP)
    assert proc.returncode == 0, output
    assert "the audit log and the store are closed" in output
    return output


def exercise(client: httpx.Client, tokens: dict[str, str]) -> None:
    """Check, approve, retry: the approval is used exactly once."""
    agent, approver = bearer(tokens["agent"]), bearer(tokens["approver"])
    body = {"name": "refund_order", "arguments": {"amount": 250}}
    asked = client.post("/v1/check", json=body, headers=agent).json()
    assert asked["verdict"] == "require_approval"
    approval_id = asked["approval"]["id"]
    approved = client.post(
        f"/v1/approvals/{approval_id}/approve", json={"reason": "checked"}, headers=approver
    )
    assert approved.json()["decided_by"] == "alice"
    waited = client.get(f"/v1/approvals/{approval_id}/wait?timeout=60", headers=agent)
    assert waited.json()["status"] == "approved"
    assert client.post("/v1/check", json=body, headers=agent).json()["verdict"] == "allow"
    again = client.post("/v1/check", json=body, headers=agent).json()
    assert again["verdict"] == "require_approval"
    assert client.get("/v1/whoami").status_code == 401
    metrics = client.get("/metrics").text
    assert 'interlock_decisions_total{verdict="allow"} 1.0' in metrics


def test_serve_warns_of_look_alike_key_names_at_startup(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'i.db'}"
    make_keys(url)
    with open_store(url) as store:
        legacy_key(store, tenant="acme", role="approver", name="\u043eps-bot")  # Cyrillic o
    port = free_port()
    with serving(tmp_path, "--port", str(port)) as proc:
        with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=STARTUP) as client:
            wait_until_up(proc, client)
        output = stop(proc)
    assert "WARNING: look-alike key names, tenant 'acme'" in output
    assert "'ops-bot'" in output and "\\u043eps-bot" in output


def test_serve_on_a_tcp_port(tmp_path: Path) -> None:
    tokens = make_keys(f"sqlite:///{tmp_path / 'i.db'}")
    port = free_port()
    with serving(tmp_path, "--host", "127.0.0.1", "--port", str(port)) as proc:
        with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=STARTUP) as client:
            wait_until_up(proc, client)
            exercise(client, tokens)
        output = stop(proc)
    assert f"serving http://127.0.0.1:{port}/v1" in output


def test_serve_on_a_unix_socket(tmp_path: Path) -> None:
    tokens = make_keys(f"sqlite:///{tmp_path / 'i.db'}")
    sock = tmp_path / "interlock.sock"
    with serving(tmp_path, "--uds", str(sock)) as proc:
        transport = httpx.HTTPTransport(uds=str(sock))
        with httpx.Client(transport=transport, base_url="http://interlock", timeout=STARTUP) as c:
            wait_until_up(proc, c)
            exercise(c, tokens)
        stop(proc)
    assert not sock.exists()  # removed on a clean shutdown


def test_serve_refuses_a_missing_policy(tmp_path: Path) -> None:
    result = subprocess.run(
        [interlock_exe(), "serve", "--policy", str(tmp_path / "none.yaml")],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=STARTUP,
        check=False,
    )
    assert result.returncode == 2
    assert "policy file not found" in result.stderr
