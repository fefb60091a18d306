"""Approvals through elicitation (``--approve-by-elicitation``): a ``tools/call`` the
policy sends to a human is put to the MCP client's user, and their answer decides the
Interlock approval — accepted, the call runs once and the approval names the channel;
declined, it is refused and the tool never runs; dismissed, it stays pending and the
refusal carries the approval URL; a client without form elicitation gets that refusal
straight away.

Real parts: the SDK's server (``echo``; the policy requires approval for a ``LOUD``
echo) and clients (``ClientSession`` on 2025-11-25, ``mcp.Client`` on 2026-07-28),
through the real gateway, transparent and merged, with a SQLite store read by the
test. The raw-wire tests play a misbehaving client in front of the scripted
upstream, which records every line it is sent."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import mcp_types as types
import pytest
from mcp import Client, ClientSession, StdioServerParameters, stdio_client

from interlock.store.url import open_store

from .support import (
    INTERLOCK,
    UPSTREAM,
    WAIT,
    RawWire,
    base_env,
    gateway_params,
    reached,
    write_policy,
)

pytestmark = pytest.mark.anyio

LOUD = {"text": "LOUD hello sk_live_abcdefghijklmnopqrstuvwx"}


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def database(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'interlock.db'}"


def approvals(tmp_path: Path) -> list[Any]:
    store = open_store(database(tmp_path))
    try:
        return store.list_approvals()
    finally:
        store.close()


def text_of(result: types.CallToolResult) -> str:
    return "".join(b.text for b in result.content if isinstance(b, types.TextContent))


class User:
    """The human at the client: answers every approval question with ``answer``,
    and keeps what they were shown."""

    def __init__(self, answer: types.ElicitResult) -> None:
        self.answer = answer
        self.shown: list[types.ElicitRequestFormParams] = []

    async def __call__(self, context: Any, params: Any) -> types.ElicitResult:
        assert isinstance(params, types.ElicitRequestFormParams)
        self.shown.append(params)
        return self.answer


APPROVE = types.ElicitResult(action="accept", content={"approve": True})
SAY_NO = types.ElicitResult(action="accept", content={"approve": False})
DECLINE = types.ElicitResult(action="decline")
DISMISS = types.ElicitResult(action="cancel")


def gated(tmp_path: Path, *options: str) -> StdioServerParameters:
    policy, log = write_policy(tmp_path), tmp_path / "upstream.jsonl"
    return gateway_params(
        policy, log, "--database", database(tmp_path), "--approve-by-elicitation", *options
    )


def merged(tmp_path: Path) -> StdioServerParameters:
    policy = write_policy(tmp_path)
    args = [
        "mcp-gateway",
        "--policy",
        str(policy),
        "--database",
        database(tmp_path),
        "--approve-by-elicitation",
        "--env",
        f"MCP_TEST_LOG={tmp_path / 'upstream.jsonl'}",
        "--upstream",
        f"files={sys.executable} {UPSTREAM}",
    ]
    return StdioServerParameters(command=INTERLOCK, args=args, env=base_env())


@contextlib.asynccontextmanager
async def session_through(
    params: StdioServerParameters, **callbacks: Any
) -> AsyncIterator[ClientSession]:
    async with stdio_client(params) as (read, write), ClientSession(read, write, **callbacks) as s:
        await s.initialize()
        yield s


def echoes(tmp_path: Path) -> list[str]:
    log = tmp_path / "upstream.jsonl"
    return [entry["args"]["text"] for entry in reached(log) if entry["tool"] == "echo"]


@pytest.mark.parametrize("generation", ["2025-11-25", "2026-07-28"])
@pytest.mark.parametrize("transport", ["transparent", "merged"])
async def test_an_approval_accepted_in_the_client_runs_the_call_once(
    tmp_path: Path, generation: str, transport: str
) -> None:
    user = User(APPROVE)
    params = gated(tmp_path) if transport == "transparent" else merged(tmp_path)
    name = "echo" if transport == "transparent" else "files__echo"
    if generation == "2025-11-25":
        async with session_through(params, elicitation_callback=user) as s:
            result = await s.call_tool(name, LOUD)
    else:
        async with Client(params, elicitation_callback=user) as client:
            assert client.protocol_version == generation
            result = await client.call_tool(name, LOUD)
    assert not result.is_error and text_of(result) == LOUD["text"]
    assert echoes(tmp_path) == [LOUD["text"]]
    (question,) = user.shown
    assert repr(name) in question.message and "LOUD hello" in question.message
    assert "a human reads loud echoes first" in question.message
    assert "sk_live_" not in question.message  # the arguments as the approvals page shows them
    assert question.requested_schema["properties"]["approve"]["type"] == "boolean"
    (approval,) = approvals(tmp_path)
    assert approval.status.value == "claimed" and approval.decided_by == "mcp-elicitation"
    assert approval.id in question.message


@pytest.mark.parametrize("generation", ["2025-11-25", "2026-07-28"])
@pytest.mark.parametrize("answer", [DECLINE, SAY_NO], ids=["decline", "approve=false"])
async def test_an_approval_refused_in_the_client_never_runs_the_call(
    tmp_path: Path, generation: str, answer: types.ElicitResult
) -> None:
    user = User(answer)
    if generation == "2025-11-25":
        async with session_through(gated(tmp_path), elicitation_callback=user) as s:
            result = await s.call_tool("echo", LOUD)
    else:
        async with Client(gated(tmp_path), elicitation_callback=user) as client:
            result = await client.call_tool("echo", LOUD)
    assert result.is_error
    assert "denied by mcp-elicitation" in text_of(result)
    assert (result.meta or {})["interlock/decision"]["verdict"] == "deny"
    assert echoes(tmp_path) == [] and len(user.shown) == 1
    (approval,) = approvals(tmp_path)
    assert approval.status.value == "denied" and approval.decided_by == "mcp-elicitation"


@pytest.mark.parametrize("generation", ["2025-11-25", "2026-07-28"])
async def test_a_dismissed_question_leaves_the_approval_pending(
    tmp_path: Path, generation: str
) -> None:
    user = User(DISMISS)
    if generation == "2025-11-25":
        async with session_through(gated(tmp_path), elicitation_callback=user) as s:
            result = await s.call_tool("echo", LOUD)
    else:
        async with Client(gated(tmp_path), elicitation_callback=user) as client:
            result = await client.call_tool("echo", LOUD)
    (approval,) = approvals(tmp_path)
    assert result.is_error and approval.status.value == "pending"
    assert f"https://approvals.example.com/a/{approval.id}" in text_of(result)
    assert echoes(tmp_path) == [] and len(user.shown) == 1  # asked once, not round after round


@pytest.mark.parametrize("generation", ["2025-11-25", "2026-07-28"])
async def test_a_client_without_elicitation_gets_the_approval_url(
    tmp_path: Path, generation: str
) -> None:
    if generation == "2025-11-25":
        async with session_through(gated(tmp_path)) as s:
            result = await s.call_tool("echo", LOUD)
    else:
        async with Client(gated(tmp_path)) as client:
            result = await client.call_tool("echo", LOUD)
    (approval,) = approvals(tmp_path)
    assert result.is_error and approval.status.value == "pending"
    assert f"https://approvals.example.com/a/{approval.id}" in text_of(result)
    assert echoes(tmp_path) == []


def run_gateway(tmp_path: Path, *options: str) -> subprocess.CompletedProcess[str]:
    policy = write_policy(tmp_path)
    command = [INTERLOCK, "mcp-gateway", "--policy", str(policy), *options]
    command += ["--approve-by-elicitation", "--", sys.executable, str(UPSTREAM)]
    return subprocess.run(
        command, check=False, input="", capture_output=True, text=True, timeout=WAIT, env=base_env()
    )


def test_the_option_is_refused_without_a_store(tmp_path: Path) -> None:
    done = run_gateway(tmp_path)
    assert done.returncode == 2 and "need a store" in done.stderr


def test_the_option_is_refused_for_a_remote_guard(tmp_path: Path) -> None:
    env = {**base_env(), "INTERLOCK_API_KEY": "ik_test"}
    command = [INTERLOCK, "mcp-gateway", "--server", "http://127.0.0.1:9"]
    command += ["--approve-by-elicitation", "--", sys.executable, str(UPSTREAM)]
    done = subprocess.run(
        command, check=False, input="", capture_output=True, text=True, timeout=WAIT, env=env
    )
    assert done.returncode == 2 and "remote guard" in done.stderr


# -- a misbehaving client, on the raw wire -------------------------------------------------

SCRIPTED = Path(__file__).with_name("scripted_server.py")
SCRIPT_NEEDS_A_HUMAN = """\
version: 1
default: deny
approvals:
  url: https://approvals.example.com/a/{id}
rules:
  - id: scripts-need-a-human
    decision: require_approval
    reason: a human reads every script first
    name: script
"""
MODERN_META = {
    "io.modelcontextprotocol/protocolVersion": "2026-07-28",
    "io.modelcontextprotocol/clientInfo": {"name": "raw", "version": "1"},
    "io.modelcontextprotocol/clientCapabilities": {"elicitation": {"form": {}}},
}


def scripted(tmp_path: Path) -> RawWire:
    policy = write_policy(tmp_path, SCRIPT_NEEDS_A_HUMAN)
    command = [INTERLOCK, "mcp-gateway", "--policy", str(policy), "--database"]
    command += [database(tmp_path), "--approve-by-elicitation"]
    command += ["--env", f"MCP_TEST_LOG={tmp_path / 'upstream.jsonl'}"]
    command += ["--", sys.executable, str(SCRIPTED)]
    return RawWire(command, base_env())


def call(request_id: int, note: str, meta: Any = None, **extra: Any) -> dict[str, Any]:
    params: dict[str, Any] = {"name": "script", "arguments": {"steps": [], "note": note}, **extra}
    if meta is not None:
        params["_meta"] = meta
    return {"jsonrpc": "2.0", "id": request_id, "method": "tools/call", "params": params}


def upstream_lines(tmp_path: Path) -> list[dict[str, Any]]:
    log = tmp_path / "upstream.jsonl"
    return [json.loads(line)["received"] for line in log.read_text().splitlines()]


def test_stray_and_replayed_answers_approve_nothing(tmp_path: Path) -> None:
    wire = scripted(tmp_path)
    accept = {"action": "accept", "content": {"approve": True}}
    try:
        wire.handshake()
        wire.send(call(1, "first"))
        question = wire.next()
        assert question["method"] == "elicitation/create"
        # an answer under another id approves nothing: the call still waits
        wire.send({"jsonrpc": "2.0", "id": "interlock-elicitation-0-1", "result": accept})
        wire.send({"jsonrpc": "2.0", "id": 1, "result": accept})  # its own call's id
        wire.send({"jsonrpc": "2.0", "id": 9, "method": "ping"})  # the lines before are read
        wire.until(9)
        assert approvals(tmp_path)[0].status.value == "pending"
        # a yes that is not a boolean is nobody's yes
        wire.send(
            {
                "jsonrpc": "2.0",
                "id": question["id"],
                "result": {**accept, "content": {"approve": "true"}},
            }
        )
        refused, _ = wire.until(1)
        assert refused["result"]["isError"] is True
        assert approvals(tmp_path)[0].status.value == "pending"
        # asked again (the same approval), accepted, then the accept replayed
        wire.send(call(2, "first"))
        question = wire.next()
        wire.send({"jsonrpc": "2.0", "id": question["id"], "result": accept})
        ran, _ = wire.until(2)
        assert "isError" not in ran["result"]
        wire.send({"jsonrpc": "2.0", "id": question["id"], "result": accept})
        wire.send({"jsonrpc": "2.0", "id": 3, "method": "ping"})
        wire.until(3)
        assert wire.close() == 0
    finally:
        wire.kill()
    received = upstream_lines(tmp_path)
    calls = [line for line in received if line.get("method") == "tools/call"]
    assert len(calls) == 1 and calls[0]["id"] == 2  # ran once, on the approved call
    # no answer to the gateway's questions ever reached the upstream
    assert not [
        line
        for line in received
        if "method" not in line and str(line.get("id", "")).startswith("interlock-")
    ]
    (approval,) = [a for a in approvals(tmp_path) if a.status.value == "claimed"]
    assert approval.decided_by == "mcp-elicitation"


def test_an_answer_is_bound_to_the_call_it_was_asked_about(tmp_path: Path) -> None:
    """2026-07-28: the answer rides the retry; carried by another call, or replayed,
    it decides nothing."""
    wire = scripted(tmp_path)
    yes = {"action": "accept", "content": {"approve": True}}
    try:
        wire.send(
            {
                "jsonrpc": "2.0",
                "id": 0,
                "method": "server/discover",
                "params": {"_meta": MODERN_META},
            }
        )
        wire.until(0)
        wire.send(call(1, "one", MODERN_META))
        asked, _ = wire.until(1)
        (key,) = asked["result"]["inputRequests"]
        assert asked["result"]["resultType"] == "input_required"
        # another call carrying the answer: the answer is dropped, that call asked anew
        wire.send(call(2, "other", MODERN_META, inputResponses={key: yes}))
        other, _ = wire.until(2)
        assert other["result"]["resultType"] == "input_required"
        assert all(a.status.value == "pending" for a in approvals(tmp_path))
        # the same answer on the right call now finds nothing held: asked anew too
        wire.send(call(3, "one", MODERN_META, inputResponses={key: yes}))
        again, _ = wire.until(3)
        assert again["result"]["resultType"] == "input_required"
        (fresh,) = again["result"]["inputRequests"]
        wire.send(call(4, "one", MODERN_META, inputResponses={fresh: yes}))
        ran, _ = wire.until(4)
        assert "isError" not in ran["result"]
        wire.send(call(5, "one", MODERN_META, inputResponses={fresh: yes}))  # replayed
        replayed, _ = wire.until(5)
        assert replayed["result"]["resultType"] == "input_required"  # a new approval
        assert wire.close() == 0
    finally:
        wire.kill()
    calls = [line for line in upstream_lines(tmp_path) if line.get("method") == "tools/call"]
    assert [c["id"] for c in calls] == [4]
    assert "inputResponses" not in calls[0]["params"]  # the answer stayed at the gateway
    assert os.path.exists(tmp_path / "interlock.db")
