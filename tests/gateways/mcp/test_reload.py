"""The policy reloaded while the gateway serves — the real ``interlock mcp-gateway``
command, on stdio and on HTTP, on SIGHUP and by polling (``--reload-interval``), as
``interlock serve`` and ``interlock llm-proxy`` reload theirs: a new policy decides
the very next call of the session already open (its upstream and, over HTTP, its
session id untouched), the listing of a ``--hide-denied-tools`` gateway follows it,
and a policy that does not load leaves the one in force serving and says why on
stderr."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from interlock.server.keys import KeyStore, Role
from interlock.store import open_store

from .http_support import RawHttp, wait_until
from .support import INTERLOCK, POLICY, UPSTREAM, WAIT, RawWire, base_env, reached, write_policy

#: The deletes rule turned around: one rule of four replaced (not held as a shrink).
DELETES_ALLOWED = POLICY.replace(
    "  - id: no-deletes\n    decision: deny\n    reason: deleting files is not allowed",
    "  - id: deletes-ok\n    decision: allow\n    reason: deleting is fine now",
)
#: Does not load: a rule with a decision that is none.
BROKEN = POLICY.replace("    decision: deny\n", "    decision: perhaps\n")

TRIGGERS = ["sighup", "interval"]


def options_for(trigger: str) -> list[str]:
    # 0: SIGHUP only, so a SIGHUP test cannot pass by the poll.
    return ["--reload-interval", "0" if trigger == "sighup" else "0.2"]


def replace_policy(path: Path, text: str) -> None:
    """A new policy renamed into place, as a deployment should write it."""
    fresh = path.with_name("next.yaml")
    fresh.write_text(text, encoding="utf-8")
    os.replace(fresh, path)


def said(stderr: Callable[[], bytes], words: bytes) -> bytes:
    """Wait (bounded) for ``words`` on the gateway's stderr; all of it, lines joined."""
    wait_until(lambda: words in stderr().replace(b"\n", b" "), f"{words!r} on stderr")
    return stderr().replace(b"\n", b" ")


def call(request_id: int, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
    params = {"name": name, "arguments": arguments}
    return {"jsonrpc": "2.0", "id": request_id, "method": "tools/call", "params": params}


def listed(request_id: int) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": request_id, "method": "tools/list", "params": {}}


def deletes(log: Path) -> list[str]:
    return [entry["args"]["path"] for entry in reached(log) if entry["tool"] == "delete_file"]


# -- stdio -------------------------------------------------------------------------------


@pytest.mark.parametrize("trigger", TRIGGERS)
def test_stdio_a_new_policy_decides_the_next_call_of_the_open_session(
    tmp_path: Path, trigger: str
) -> None:
    policy, log = write_policy(tmp_path), tmp_path / "upstream.jsonl"
    command = [INTERLOCK, "mcp-gateway", "--policy", str(policy), "--hide-denied-tools"]
    command += [*options_for(trigger), "--env", f"MCP_TEST_LOG={log}", "--"]
    wire = RawWire([*command, sys.executable, str(UPSTREAM)], base_env())

    def stderr() -> bytes:
        return b"".join(wire.stderr)

    def tools(request_id: int) -> set[str]:
        wire.send(listed(request_id))
        reply, _ = wire.until(request_id)
        return {tool["name"] for tool in reply["result"]["tools"]}

    def delete(request_id: int, path: str) -> dict[str, Any]:
        wire.send(call(request_id, "delete_file", {"path": path}))
        return wire.until(request_id)[0]["result"]  # type: ignore[no-any-return]

    def kick() -> None:
        if trigger == "sighup":
            wire.process.send_signal(signal.SIGHUP)

    try:
        wire.handshake()
        assert "delete_file" not in tools(1)
        before = delete(2, "/before")
        replace_policy(policy, DELETES_ALLOWED)
        kick()
        said(stderr, b"reloaded (4 rules)")
        after = delete(3, "/after")
        shown = tools(4)
        replace_policy(policy, BROKEN)
        kick()
        told = said(stderr, b"NOT reloaded")
        still = delete(5, "/still")
        code = wire.close()
    finally:
        wire.kill()
    assert before["isError"] and before["_meta"]["interlock/decision"]["rule_ids"] == ["no-deletes"]
    assert not after.get("isError") and not still.get("isError")
    assert "delete_file" in shown
    assert deletes(log) == ["/after", "/still"]
    assert b"field 'decision'" in told and b"interlock.yaml:16" in told  # why, and where
    assert code == 0, stderr()
    assert stderr().count(b"reloaded (4 rules)") == 1


def test_stdio_sighup_with_nothing_changed_changes_nothing(tmp_path: Path) -> None:
    """The look-alike: a SIGHUP over the same file reloads it, the verdicts as they were."""
    policy, log = write_policy(tmp_path), tmp_path / "upstream.jsonl"
    command = [INTERLOCK, "mcp-gateway", "--policy", str(policy), "--reload-interval", "0"]
    command += ["--env", f"MCP_TEST_LOG={log}", "--", sys.executable, str(UPSTREAM)]
    wire = RawWire(command, base_env())
    try:
        wire.handshake()
        wire.process.send_signal(signal.SIGHUP)
        said(lambda: b"".join(wire.stderr), b"reloaded (4 rules)")
        wire.send(call(1, "delete_file", {"path": "/x"}))
        refused, _ = wire.until(1)
        wire.send(call(2, "echo", {"text": "still here"}))
        echoed, _ = wire.until(2)
        assert wire.close() == 0
    finally:
        wire.kill()
    assert refused["result"]["isError"]
    assert echoed["result"]["content"][0]["text"] == "still here"
    assert deletes(log) == []


def test_reload_interval_is_refused_with_server(tmp_path: Path) -> None:
    command = [INTERLOCK, "mcp-gateway", "--server", "http://127.0.0.1:9"]
    command += ["--reload-interval", "1", "--", "true"]
    env = {**base_env(), "INTERLOCK_API_KEY": "ilk_x"}
    done = subprocess.run(command, capture_output=True, env=env, timeout=WAIT, check=False)
    assert done.returncode == 2, done.stderr
    assert b"--reload-interval" in done.stderr


# -- HTTP --------------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class HttpCommand:
    """``interlock mcp-gateway --http`` running, its stderr collected."""

    def __init__(self, tmp: Path, policy: Path, log: Path, *options: str) -> None:
        database = f"sqlite:///{tmp / 'gateway.db'}"
        store = open_store(database)
        self.key = KeyStore(store).create(tenant="acme", role=Role.AGENT, name="bot").token
        store.close()
        self.port = free_port()
        command = [INTERLOCK, "mcp-gateway", "--http", "--port", str(self.port), "-d", database]
        command += ["--policy", str(policy), *options, "--env", f"MCP_TEST_LOG={log}", "--"]
        command += [sys.executable, str(UPSTREAM)]
        self.process = subprocess.Popen(command, stderr=subprocess.PIPE, env=base_env())
        self.lines: list[bytes] = []
        threading.Thread(target=self._read, daemon=True).start()
        said(self.stderr, b"Uvicorn running on")

    def _read(self) -> None:
        assert self.process.stderr is not None
        for line in self.process.stderr:
            self.lines.append(line)

    def stderr(self) -> bytes:
        return b"".join(self.lines)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/mcp"

    def stop(self) -> int:
        self.process.send_signal(signal.SIGTERM)
        return self.process.wait(WAIT)

    def kill(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait(WAIT)


MODERN = "2026-07-28"


def modern_call(raw: RawHttp, request_id: int, name: str, arguments: dict[str, Any]) -> Any:
    """A call of the per-request generation (no session)."""
    message = call(request_id, name, arguments)
    message["params"]["_meta"] = {
        "io.modelcontextprotocol/protocolVersion": MODERN,
        "io.modelcontextprotocol/clientCapabilities": {},
    }
    headers = {**raw.headers(), "mcp-protocol-version": MODERN, "mcp-method": "tools/call"}
    headers["mcp-name"] = name
    headers.pop("mcp-session-id", None)
    response = raw.http.post(raw.url, content=json.dumps(message).encode(), headers=headers)
    return response.json()


@pytest.mark.parametrize("trigger", TRIGGERS)
def test_http_a_new_policy_decides_the_next_call_of_every_open_session(
    tmp_path: Path, trigger: str
) -> None:
    policy, http_log = write_policy(tmp_path), tmp_path / "upstream.jsonl"
    gateway = HttpCommand(tmp_path, policy, http_log, *options_for(trigger))
    raw = RawHttp(gateway.url, gateway.key)
    try:
        raw.handshake()
        session = raw.session_id
        _, (before,) = raw.call(call(1, "delete_file", {"path": "/before"}))
        modern_before = modern_call(raw, 2, "delete_file", {"path": "/modern-before"})
        replace_policy(policy, DELETES_ALLOWED)
        if trigger == "sighup":
            gateway.process.send_signal(signal.SIGHUP)
        said(gateway.stderr, b"reloaded (4 rules)")
        _, (after,) = raw.call(call(3, "delete_file", {"path": "/after"}))
        modern_after = modern_call(raw, 4, "delete_file", {"path": "/modern-after"})
        replace_policy(policy, BROKEN)
        if trigger == "sighup":
            gateway.process.send_signal(signal.SIGHUP)
        told = said(gateway.stderr, b"NOT reloaded")
        _, (still,) = raw.call(call(5, "delete_file", {"path": "/still"}))
        assert raw.session_id == session
        raw.delete()
        code = gateway.stop()
    finally:
        raw.close()
        gateway.kill()
    assert before["result"]["isError"] and modern_before["result"]["isError"]
    assert not after["result"].get("isError") and not modern_after["result"].get("isError")
    assert not still["result"].get("isError")
    assert deletes(http_log) == ["/after", "/modern-after", "/still"]
    assert b"field 'decision'" in told and b"interlock.yaml:16" in told
    assert code == 0, gateway.stderr()
    # one handshake session and one per-request lane: neither was dropped by a reload
    assert gateway.stderr().count(b"opened for bot") == 2, gateway.stderr()
