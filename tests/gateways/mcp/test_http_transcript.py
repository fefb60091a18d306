"""The wire transcript over HTTP: one scripted session run through the HTTP gateway
(each message one POST; what the server sends unasked read from the GET stream) and
straight into the stdio upstream. The client receives the same JSON messages — each
response on its request's POST, the progress of a call on that call's stream, the
rest on the GET stream in the upstream's order — and the upstream receives the same
bytes, line for line, except the denied call, which it never sees."""

from __future__ import annotations

import json
import shutil
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from interlock.gateways.mcp.config import GatewayConfig, UpstreamSpec

from .http_support import HTTP_POLICY, INIT, INITIALIZED, Gateway, RawHttp, events_of
from .support import UPSTREAM, RawWire, base_env

pytestmark = pytest.mark.skipif(shutil.which("tee") is None, reason="needs tee")


def call(request_id: int, name: str, arguments: dict[str, Any], meta: Any = None) -> dict[str, Any]:
    params: dict[str, Any] = {"name": name, "arguments": arguments}
    if meta is not None:
        params["_meta"] = meta
    return {"jsonrpc": "2.0", "id": request_id, "method": "tools/call", "params": params}


SCRIPT: list[dict[str, Any]] = [
    INIT,
    INITIALIZED,
    {"jsonrpc": "2.0", "id": 1, "method": "tools/list"},
    {"jsonrpc": "2.0", "id": 2, "method": "ping"},
    call(3, "echo", {"text": "héllo ✓ \u2028 wörld"}),
    call(4, "count", {"to": 3}, {"progressToken": "p-4"}),
    {"jsonrpc": "2.0", "id": 5, "method": "logging/setLevel", "params": {"level": "info"}},
    call(6, "chatty", {}),
    {"jsonrpc": "2.0", "method": "notifications/roots/list_changed"},
    {"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 99}},
    {"jsonrpc": "2.0", "id": 7, "method": "resources/list", "params": {}},
    {"jsonrpc": "2.0", "id": 8, "method": "no/such/method"},
    call(9, "delete_file", {"path": "/"}),  # denied: last, so the rest compare
]


def behind_tee(wire_log: Path) -> list[str]:
    return ["sh", "-c", f'tee "{wire_log}" | exec "{sys.executable}" "{UPSTREAM}"']


def direct(tmp: Path) -> tuple[list[dict[str, Any]], bytes]:
    wire = RawWire(
        behind_tee(tmp / "direct.in"),
        {**base_env(), "MCP_TEST_LOG": str(tmp / "direct.jsonl"), "LC_ALL": "C.UTF-8"},
    )
    received: list[dict[str, Any]] = []
    try:
        for message in SCRIPT:
            wire.send(message)
            if "id" in message:
                reply, before = wire.until(message["id"])
                received += [json.loads(raw) for raw in before] + [reply]
        assert wire.close() == 0
    finally:
        wire.kill()
    return received, (tmp / "direct.in").read_bytes()


@pytest.fixture(scope="module")
def gated_gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Gateway, Path]]:
    tmp = tmp_path_factory.mktemp("http-transcript")
    spec = UpstreamSpec(
        None, command=tuple(behind_tee(tmp / "gated.in")), env={"LC_ALL": "C.UTF-8"}
    )
    running = Gateway(tmp, HTTP_POLICY, GatewayConfig((spec,)))
    yield running, tmp
    running.close()


def test_the_same_messages_over_http_and_the_same_bytes_upstream(
    gated_gateway: tuple[Gateway, Path], tmp_path: Path
) -> None:
    direct_out, direct_in = direct(tmp_path)
    gateway, tmp = gated_gateway
    raw = RawHttp(gateway.url, gateway.keys.bot)
    on_posts: dict[Any, list[dict[str, Any]]] = {}
    try:
        for message in SCRIPT:
            response, messages = raw.call(message)
            if message is INIT:
                raw.session_id = response.headers["mcp-session-id"]
                raw.version = messages[-1]["result"]["protocolVersion"]
            if "id" in message:
                on_posts[message["id"]] = messages
            else:
                assert response.status_code == 202
        unasked = [
            m for m in direct_out if "method" in m and m["method"] != "notifications/progress"
        ]
        on_get: list[dict[str, Any]] = []
        headers = {**raw.headers(), "accept": "text/event-stream"}
        with raw.http.stream("GET", raw.url, headers=headers) as stream:
            buffer = ""
            for text in stream.iter_text():
                buffer += text
                on_get = [json.loads(e["data"]) for e in events_of(buffer) if e.get("data")]
                if len(on_get) >= len(unasked):
                    break
        assert raw.delete().status_code == 204
    finally:
        raw.close()

    responses = {m["id"]: m for m in direct_out if "method" not in m}
    for request_id, messages in on_posts.items():
        *before, answer = messages
        assert answer["id"] == request_id
        if request_id != 9:
            assert answer == responses[request_id]
        progress = [m for m in direct_out if m.get("method") == "notifications/progress"]
        assert before == (progress if request_id == 4 else [])
    assert on_get == unasked
    assert {"notifications/message", "notifications/tools/list_changed"} <= {
        m["method"] for m in unasked
    }
    refusal = on_posts[9][-1]["result"]
    assert refusal["isError"] and refusal["_meta"]["interlock/decision"]["verdict"] == "deny"
    assert "deleted" in json.dumps(responses[9])  # ungated, the upstream ran it

    direct_lines = direct_in.splitlines(keepends=True)
    gated_lines = (tmp / "gated.in").read_bytes().splitlines(keepends=True)
    assert gated_lines == direct_lines[:-1]
    assert b"delete_file" in direct_lines[-1]
