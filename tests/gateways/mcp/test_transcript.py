"""The wire transcript: one scripted session run through the gateway and straight
into the upstream. What the client receives and what the upstream receives are the
same bytes, line for line — except the denied call, which the upstream never sees
and the gateway answers itself.

The upstream runs behind ``tee``, which records the exact bytes it is sent."""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path
from typing import Any

import pytest

from .support import (
    INIT,
    INITIALIZED,
    UPSTREAM,
    RawWire,
    base_env,
    gateway_command,
    reached,
    write_policy,
)

pytestmark = pytest.mark.skipif(shutil.which("tee") is None, reason="needs tee")

MODERN_META = {
    "io.modelcontextprotocol/protocolVersion": "2026-07-28",
    "io.modelcontextprotocol/clientInfo": {"name": "scripted", "version": "1"},
    "io.modelcontextprotocol/clientCapabilities": {"sampling": {}},
}

SAMPLED = {
    "role": "assistant",
    "content": {"type": "text", "text": "yes"},
    "model": "fake-model",
}


#: The client's answers to the server's requests.
ANSWERS: dict[str, Any] = {
    "sampling/createMessage": SAMPLED,
    "elicitation/create": {"action": "accept", "content": {"ok": True}},
    "roots/list": {"roots": [{"uri": "file:///work", "name": "work"}]},
}


def call(request_id: int, name: str, arguments: dict[str, Any], meta: Any = None) -> dict[str, Any]:
    params: dict[str, Any] = {"name": name, "arguments": arguments}
    if meta is not None:
        params["_meta"] = meta
    return {"jsonrpc": "2.0", "id": request_id, "method": "tools/call", "params": params}


def legacy_script() -> list[dict[str, Any]]:
    return [
        INIT,
        INITIALIZED,
        {"jsonrpc": "2.0", "id": 1, "method": "tools/list"},
        {"jsonrpc": "2.0", "id": 2, "method": "ping"},
        call(3, "echo", {"text": "héllo ✓ \u2028 wörld"}),
        call(4, "count", {"to": 3}, {"progressToken": "p-4"}),
        call(5, "ask", {"question": "ready?"}),
        call(6, "confirm", {"question": "sure?"}),
        call(7, "roots", {}),
        {"jsonrpc": "2.0", "id": 8, "method": "logging/setLevel", "params": {"level": "info"}},
        call(9, "chatty", {}),
        {"jsonrpc": "2.0", "method": "notifications/roots/list_changed"},
        {"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 99}},
        {"jsonrpc": "2.0", "id": 10, "method": "resources/list", "params": {}},
        {"jsonrpc": "2.0", "id": 11, "method": "no/such/method"},
        call(12, "delete_file", {"path": "/"}),  # denied: last, so the rest compare
    ]


def modern_script() -> list[dict[str, Any]]:
    meta = MODERN_META
    return [
        {"jsonrpc": "2.0", "id": 1, "method": "server/discover", "params": {"_meta": meta}},
        {"jsonrpc": "2.0", "id": 2, "method": "tools/list", "params": {"_meta": meta}},
        call(3, "echo", {"text": "modern"}, meta),
        call(4, "count", {"to": 2}, {**meta, "progressToken": 4}),
        call(5, "delete_file", {"path": "/"}, meta),  # denied
    ]


def run(wire: RawWire, script: list[dict[str, Any]]) -> list[bytes]:
    """Send each message; for a request, read up to its response, answering the
    server's sampling requests on the way. Every line received, in order."""
    received: list[bytes] = []
    for message in script:
        wire.send(message)
        if "id" not in message:
            continue
        while True:
            raw = wire.next_raw()
            received.append(raw)
            body = json.loads(raw)
            if body.get("method") in ANSWERS and "id" in body:
                wire.send({"jsonrpc": "2.0", "id": body["id"], "result": ANSWERS[body["method"]]})
            elif "method" not in body and body.get("id") == message["id"]:
                break
    assert wire.close() == 0
    return received


def upstream_behind_tee(wire_log: Path) -> list[str]:
    return ["sh", "-c", f'tee "{wire_log}" | exec "{sys.executable}" "{UPSTREAM}"']


@pytest.mark.parametrize("script", [legacy_script, modern_script], ids=["initialize", "discover"])
def test_allowed_traffic_is_byte_identical(tmp_path: Path, script: Any) -> None:
    policy = write_policy(tmp_path)
    direct_log, gated_log = tmp_path / "direct.jsonl", tmp_path / "gated.jsonl"
    direct_in, gated_in = tmp_path / "direct.in", tmp_path / "gated.in"

    direct = RawWire(
        upstream_behind_tee(direct_in),
        {**base_env(), "MCP_TEST_LOG": str(direct_log), "LC_ALL": "C.UTF-8"},
    )
    try:
        direct_out = run(direct, script())
    finally:
        direct.kill()
    command = gateway_command(
        policy, gated_log, "--env", "LC_ALL=C.UTF-8", upstream=upstream_behind_tee(gated_in)
    )
    gated = RawWire(command, base_env())
    try:
        gated_out = run(gated, script())
    finally:
        gated.kill()

    # The client side: everything but the last exchange (the denied call) identical.
    assert gated_out[:-1] == direct_out[:-1]
    refusal = json.loads(gated_out[-1])
    assert refusal["result"]["isError"] is True
    assert refusal["result"]["_meta"]["interlock/decision"]["verdict"] == "deny"
    assert "deleted" in direct_out[-1].decode()  # ungated, the upstream ran it
    seen = [json.loads(raw).get("method") for raw in gated_out]
    if script is legacy_script:  # every kind of message went through both ways
        for method in (
            "notifications/progress",
            "sampling/createMessage",
            "elicitation/create",
            "roots/list",
            "notifications/message",
            "notifications/tools/list_changed",
        ):
            assert method in seen, method
        answers = {body["id"]: body for body in map(json.loads, gated_out) if "result" in body}
        assert "accept" in json.dumps(answers[6]) and "file:///work" in json.dumps(answers[7])
        assert "said things" in json.dumps(answers[9])

    # The upstream side: the same bytes, minus the denied call.
    direct_lines = direct_in.read_bytes().splitlines(keepends=True)
    assert gated_in.read_bytes().splitlines(keepends=True) == direct_lines[:-1]
    assert b"delete_file" in direct_lines[-1]
    assert "delete_file" not in {entry["tool"] for entry in reached(gated_log)}
