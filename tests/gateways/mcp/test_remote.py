"""The gateway deciding through the shared server (``--server``, the key in
``$INTERLOCK_API_KEY``): the server's verdicts, its approvals (with links that
exist); the key's tenant is the caller."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("uvicorn")
pytest.importorskip("httpx")

from remote.test_remote_guard import Server  # the real app under uvicorn, in a thread

from .support import INTERLOCK, POLICY, UPSTREAM, WAIT, RawWire, base_env, reached

CALLS: list[tuple[str, dict[str, Any]]] = [
    ("echo", {"text": "hi"}),
    ("delete_file", {"path": "/"}),
    ("echo", {"text": "LOUD hi"}),
]


def test_decisions_come_from_the_server(tmp_path: Path) -> None:
    server = Server(tmp_path, policy=POLICY)
    log = tmp_path / "upstream.jsonl"
    command = [INTERLOCK, "mcp-gateway", "--server", server.url, "--env", f"MCP_TEST_LOG={log}"]
    command += ["--", sys.executable, str(UPSTREAM)]
    wire = RawWire(command, {**base_env(), "INTERLOCK_API_KEY": server.agent_key})
    try:
        wire.handshake()
        replies = []
        for number, (name, arguments) in enumerate(CALLS, start=1):
            params = {"name": name, "arguments": arguments}
            wire.send({"jsonrpc": "2.0", "id": number, "method": "tools/call", "params": params})
            reply, _ = wire.until(number)
            replies.append(reply["result"])
        assert wire.close() == 0
        assert server.guard.store is not None
        pending = server.guard.store.list_approvals(status="pending")
    finally:
        wire.kill()
        server.close()

    assert replies[0]["content"][0]["text"] == "hi"
    assert replies[1]["_meta"]["interlock/decision"]["verdict"] == "deny"
    approval = replies[2]["_meta"]["interlock/decision"]
    assert approval["verdict"] == "require_approval"
    assert approval["approval_url"] == f"https://approvals.example.com/a/{approval['approval_id']}"
    assert [(record.id, record.tenant) for record in pending] == [(approval["approval_id"], "acme")]
    assert reached(log) == [{"tool": "echo", "args": {"text": "hi"}}]


def test_the_key_comes_from_the_environment_only(tmp_path: Path) -> None:
    server = [INTERLOCK, "mcp-gateway", "--server", "http://127.0.0.1:9"]
    for command in (
        [*server, "--", "true"],  # no key in the environment
        [*server, "--policy", str(tmp_path / "x.yaml"), "--", "true"],  # local and remote
    ):
        env = {**base_env(), "INTERLOCK_API_KEY": "k"} if "--policy" in command else base_env()
        done = subprocess.run(command, capture_output=True, env=env, timeout=WAIT, check=False)
        assert done.returncode == 2, done.stderr
        assert done.stdout == b""


def test_a_malformed_call_is_recorded_on_the_server_as_the_callers_undetermined(
    tmp_path: Path,
) -> None:
    """The gateway keeps no record of its own with ``--server``: a call it cannot read
    is answered ``-32602`` and recorded by the server — undetermined, the key's tenant
    and agent, the problem named — and never reaches the upstream."""
    server = Server(tmp_path, policy=POLICY)
    log = tmp_path / "upstream.jsonl"
    command = [INTERLOCK, "mcp-gateway", "--server", server.url, "--env", f"MCP_TEST_LOG={log}"]
    command += ["--", sys.executable, str(UPSTREAM)]
    wire = RawWire(command, {**base_env(), "INTERLOCK_API_KEY": server.agent_key})
    try:
        wire.handshake()
        params = {"name": "echo", "arguments": "not an object"}
        wire.send({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": params})
        reply, _ = wire.until(1)
        assert wire.close() == 0
        assert server.guard.store is not None
        rows = [r for r in server.guard.store.audit_rows() if r.kind == "decision"]
    finally:
        wire.kill()
        server.close()

    assert reply["error"]["code"] == -32602
    decision_id = reply["error"]["data"]["decision_id"]
    (row,) = [r for r in rows if r.decision_id == decision_id]
    assert (row.decision, row.tenant, row.agent) == ("undetermined", "acme", "ops-bot")
    assert "malformed" in json.loads(row.body)["reason"]
    assert reached(log) == []
