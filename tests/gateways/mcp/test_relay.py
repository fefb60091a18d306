"""The gateway between a real MCP client and a real MCP server (the Python SDK's, over
stdio): every message relayed both ways, every ``tools/call`` judged first.

Both protocol generations: ``ClientSession`` negotiates with ``initialize``
(2025-11-25); ``mcp.Client`` opens with ``server/discover`` and puts ``_meta`` on every
request (2026-07-28)."""

from __future__ import annotations

import contextlib
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import mcp_types as types
import pytest
from mcp import Client, ClientSession, StdioServerParameters, stdio_client

from .support import gateway_params, gateway_wire, reached, write_policy

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def text_of(result: types.CallToolResult) -> str:
    return "".join(block.text for block in result.content if isinstance(block, types.TextContent))


@contextlib.asynccontextmanager
async def session_through(
    params: StdioServerParameters, **callbacks: Any
) -> AsyncIterator[ClientSession]:
    """A ``ClientSession`` over stdio to the process ``params`` launch."""
    async with stdio_client(params) as (read, write), ClientSession(read, write, **callbacks) as s:
        yield s


async def fake_model(
    context: Any, params: types.CreateMessageRequestParams
) -> types.CreateMessageResult:
    """The client's "model" for sampling: answers the question it was asked, in capitals."""
    question = params.messages[0].content
    assert isinstance(question, types.TextContent)
    return types.CreateMessageResult(
        role="assistant",
        content=types.TextContent(type="text", text=question.text.upper()),
        model="fake-model",
    )


async def test_a_client_session_through_the_gateway(tmp_path: Path) -> None:
    policy, log = write_policy(tmp_path), tmp_path / "upstream.jsonl"
    progress: list[tuple[float, float | None, str | None]] = []

    async def on_progress(done: float, total: float | None, message: str | None) -> None:
        progress.append((done, total, message))

    async with session_through(
        gateway_params(policy, log), sampling_callback=fake_model
    ) as session:
        init = await session.initialize()
        assert init.server_info.name == "gateway-upstream"

        listed = await session.list_tools()
        assert {tool.name for tool in listed.tools} >= {"echo", "delete_file", "count", "ask"}

        allowed = await session.call_tool("echo", {"text": "hello"})
        assert not allowed.is_error and text_of(allowed) == "hello"

        denied = await session.call_tool("delete_file", {"path": "/etc/passwd"})
        assert denied.is_error
        meta = (denied.meta or {})["interlock/decision"]
        assert meta["verdict"] == "deny" and meta["rule_ids"] == ["no-deletes"]
        assert "deleting files is not allowed" in text_of(denied)
        assert meta["decision_id"] in text_of(denied)

        counted = await session.call_tool("count", {"to": 3}, progress_callback=on_progress)
        assert text_of(counted) == "counted to 3"

        asked = await session.call_tool("ask", {"question": "are you there?"})
        assert text_of(asked) == "ARE YOU THERE?"

    assert progress == [(1, 3, "step 1"), (2, 3, "step 2"), (3, 3, "step 3")]
    assert [entry["tool"] for entry in reached(log)] == ["echo", "count", "ask"]


async def test_the_per_request_generation_through_the_gateway(tmp_path: Path) -> None:
    policy, log = write_policy(tmp_path), tmp_path / "upstream.jsonl"
    async with Client(gateway_params(policy, log), sampling_callback=fake_model) as client:
        assert client.protocol_version == "2026-07-28"
        listed = await client.list_tools()
        assert "echo" in {tool.name for tool in listed.tools}
        allowed = await client.call_tool("echo", {"text": "modern"})
        assert not allowed.is_error and text_of(allowed) == "modern"
        denied = await client.call_tool("delete_file", {"path": "/"})
        assert denied.is_error
        assert (denied.meta or {})["interlock/decision"]["verdict"] == "deny"
    assert reached(log) == [{"tool": "echo", "args": {"text": "modern"}}]


async def test_an_upstream_error_result_is_relayed_redacted(tmp_path: Path) -> None:
    policy, log = write_policy(tmp_path), tmp_path / "upstream.jsonl"
    secret = "sk-abcdefghijklmnopqrstuvwxyz0123456789"
    async with session_through(gateway_params(policy, log)) as session:
        await session.initialize()
        failed = await session.call_tool("fail", {"text": secret})
    assert failed.is_error
    assert "could not use" in text_of(failed) and secret not in text_of(failed)
    assert reached(log) == [{"tool": "fail", "args": {"text": secret}}]


def test_malformed_params_are_invalid_params(tmp_path: Path) -> None:
    policy, log = write_policy(tmp_path), tmp_path / "upstream.jsonl"
    wire = gateway_wire(policy, log)
    try:
        wire.handshake()
        cases: list[Any] = [
            {"arguments": {"path": "/"}},  # no name
            {"name": "delete_file", "arguments": ["/"]},  # arguments not an object
            {"name": "delete_file", "arguments": "/"},
            {"name": 7, "arguments": {}},
            ["delete_file"],  # params not an object
        ]
        for number, params in enumerate(cases, start=1):
            wire.send({"jsonrpc": "2.0", "id": number, "method": "tools/call", "params": params})
            reply, _ = wire.until(number)
            assert reply["error"]["code"] == -32602, params
        assert wire.close() == 0
    finally:
        wire.kill()
    assert reached(log) == []


def test_an_approval_link_only_where_an_approval_exists(tmp_path: Path) -> None:
    policy, log = write_policy(tmp_path), tmp_path / "upstream.jsonl"
    call = {"name": "echo", "arguments": {"text": "LOUD hello"}}

    def refusal(*options: str) -> dict[str, Any]:
        wire = gateway_wire(policy, log, *options)
        try:
            wire.handshake()
            wire.send({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": call})
            reply, _ = wire.until(1)
            assert wire.close() == 0
        finally:
            wire.kill()
        result: dict[str, Any] = reply["result"]
        assert result["isError"] is True
        return result

    without_store = refusal()
    assert "approvals.example.com" not in json.dumps(without_store)
    assert "pending" not in without_store["content"][0]["text"]

    with_store = refusal("--database", f"sqlite:///{tmp_path / 'interlock.db'}")
    meta = with_store["_meta"]["interlock/decision"]
    assert meta["approval_url"] == f"https://approvals.example.com/a/{meta['approval_id']}"
    assert meta["approval_url"] in with_store["content"][0]["text"]
    assert reached(log) == []
