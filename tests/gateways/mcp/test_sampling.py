"""A server's sampling requests through the gateway are model calls: judged (an
``llm`` action named ``mcp-sampling``), their budget reserved before the client sees
them, committed from the client's answer, released when it answers an error or the
request is cancelled, abandoned, or its server or the gateway goes away — exactly
one of the two, and the figures in the store say which.

Real parts: the Python SDK's server (``ask``: a 2025-11-25 sampling request;
``muse``: either generation) and its clients (``ClientSession``, ``mcp.Client``), the
real ``interlock mcp-gateway``, a SQLite store read by the test. The raw-wire tests
play the client by hand where a real client cannot misbehave on cue."""

from __future__ import annotations

import contextlib
import json
import math
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import mcp_types as types
import pytest
from mcp import Client, ClientSession, StdioServerParameters, stdio_client
from mcp.shared.exceptions import MCPError

from interlock.ledger.estimate import estimate_model_call
from interlock.store.url import open_store

from .support import (
    INTERLOCK,
    UPSTREAM,
    RawWire,
    base_env,
    gateway_params,
    gateway_wire,
    reached,
    write_policy,
)

pytestmark = pytest.mark.anyio

POLICY = """\
version: 1
default: deny
rules:
  - id: tools-ok
    decision: allow
    reason: the test tools
    name: [ask, muse, echo]
  - id: sampling-ok
    decision: allow
    reason: the upstream may ask the client's model
    kind: llm
    name: mcp-sampling
  - id: no-secrets-sampled
    decision: deny
    reason: nothing about secrets goes to the model
    kind: llm
    name: mcp-sampling
    when: "args.messages[0].content.text.contains('secret')"
budgets:
  - id: sampling-tokens
    limit: 1000
    unit: tokens
    kind: llm
    name: mcp-sampling
"""


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


class FakeModel:
    """The client's "model": answers in capitals, and counts what it was asked."""

    def __init__(self, answer: Any = None) -> None:
        self.asked: list[types.CreateMessageRequestParams] = []
        self.answer = answer

    async def __call__(
        self, context: Any, params: types.CreateMessageRequestParams
    ) -> types.CreateMessageResult | types.ErrorData:
        self.asked.append(params)
        if self.answer is not None:
            return self.answer  # type: ignore[no-any-return]
        question = params.messages[0].content
        assert isinstance(question, types.TextContent)
        return types.CreateMessageResult(
            role="assistant",
            content=types.TextContent(type="text", text=question.text.upper()),
            model="client-picked-model",
        )


def text_of(result: types.CallToolResult) -> str:
    return "".join(block.text for block in result.content if isinstance(block, types.TextContent))


def database(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'interlock.db'}"


def figures(tmp_path: Path, budget_id: str = "sampling-tokens") -> tuple[int, int]:
    """(spent, reserved) of one budget, summed over its counters."""
    store = open_store(database(tmp_path))
    try:
        rows = store.budget_rows(budget_id=budget_id)
    finally:
        store.close()
    return sum(row.spent for row in rows), sum(row.reserved for row in rows)


def sampling_records(tmp_path: Path) -> list[dict[str, Any]]:
    store = open_store(database(tmp_path))
    try:
        return [json.loads(row.body) for row in store.audit_rows(kind="sampling")]
    finally:
        store.close()


def charged(question: str, answer: str, max_tokens: int) -> int:
    """What a sampling request with one text message is charged: the input as the
    proxy estimates it, and the answer's characters / 4 (at most max_tokens)."""
    message = {"role": "user", "content": {"type": "text", "text": question}}
    estimate = estimate_model_call({"messages": [message], "max_tokens": max_tokens})
    return estimate.input_tokens + min(math.ceil(len(answer) / 4), max_tokens)


@contextlib.asynccontextmanager
async def session_through(
    params: StdioServerParameters, **callbacks: Any
) -> AsyncIterator[ClientSession]:
    async with stdio_client(params) as (read, write), ClientSession(read, write, **callbacks) as s:
        await s.initialize()
        yield s


def through_gateway(tmp_path: Path, *options: str) -> StdioServerParameters:
    policy, log = write_policy(tmp_path, POLICY), tmp_path / "upstream.jsonl"
    return gateway_params(policy, log, "--database", database(tmp_path), *options)


# -- 2025-11-25: a server-to-client request ------------------------------------------


async def test_an_allowed_sampling_request_reaches_the_client_and_is_charged_once(
    tmp_path: Path,
) -> None:
    model = FakeModel()
    async with session_through(through_gateway(tmp_path), sampling_callback=model) as s:
        asked = await s.call_tool("ask", {"question": "are you there?"})
    assert text_of(asked) == "ARE YOU THERE?"
    assert len(model.asked) == 1
    assert figures(tmp_path) == (charged("are you there?", "ARE YOU THERE?", 16), 0)
    (record,) = sampling_records(tmp_path)
    assert record["status"] == "committed" and record["model"] == "client-picked-model"


async def test_a_refused_sampling_request_never_reaches_the_client(tmp_path: Path) -> None:
    model = FakeModel()
    async with session_through(through_gateway(tmp_path), sampling_callback=model) as s:
        with pytest.raises(MCPError) as refused:
            await s.call_tool("ask", {"question": "tell me the secret"})
        allowed = await s.call_tool("ask", {"question": "what time is it?"})
    # the server's create_message got error -1, which its SDK passes on as the call's
    assert refused.value.error.code == -1
    assert "nothing about secrets goes to the model" in refused.value.error.message
    assert [p.messages[0].content.text for p in model.asked] == ["what time is it?"]  # type: ignore[union-attr]
    assert text_of(allowed) == "WHAT TIME IS IT?"
    assert figures(tmp_path) == (charged("what time is it?", "WHAT TIME IS IT?", 16), 0)
    assert [entry["args"]["question"] for entry in reached(tmp_path / "upstream.jsonl")] == [
        "tell me the secret",
        "what time is it?",
    ]


async def test_a_client_error_answer_releases_the_reservation(tmp_path: Path) -> None:
    model = FakeModel(types.ErrorData(code=-1, message="User rejected sampling request"))
    async with session_through(through_gateway(tmp_path), sampling_callback=model) as s:
        with pytest.raises(MCPError, match="User rejected"):
            await s.call_tool("ask", {"question": "are you there?"})
    assert len(model.asked) == 1
    assert figures(tmp_path) == (0, 0)
    (record,) = sampling_records(tmp_path)
    assert record["status"] == "released" and "User rejected" in record["reason"]


# -- 2026-07-28: sampling inside an input_required result ------------------------------


async def test_the_newer_generation_judges_and_charges_sampling_in_results(
    tmp_path: Path,
) -> None:
    model = FakeModel()
    async with Client(through_gateway(tmp_path), sampling_callback=model) as client:
        assert client.protocol_version == "2026-07-28"
        mused = await client.call_tool("muse", {"topic": "cats"})
        refused = await client.call_tool("muse", {"topic": "the secret"})
    assert text_of(mused) == "WRITE ABOUT CATS"
    assert refused.is_error
    decision = (refused.meta or {})["interlock/decision"]
    assert decision["verdict"] == "deny" and decision["rule_ids"] == ["no-secrets-sampled"]
    assert [p.messages[0].content.text for p in model.asked] == ["write about cats"]  # type: ignore[union-attr]
    assert figures(tmp_path) == (charged("write about cats", "WRITE ABOUT CATS", 32), 0)
    # the tool body ran once: on the retry that carried the (judged) answer
    assert [entry["tool"] for entry in reached(tmp_path / "upstream.jsonl")] == ["muse"]


# -- the ways a held request ends without an answer ------------------------------------


def ask_on(wire: RawWire, request_id: int, question: str = "q") -> dict[str, Any]:
    """Call ``ask``; the sampling request the client is then sent."""
    params = {"name": "ask", "arguments": {"question": question}}
    wire.send({"jsonrpc": "2.0", "id": request_id, "method": "tools/call", "params": params})
    while True:
        body = wire.next()
        if body.get("method") == "sampling/createMessage":
            return body
        assert body.get("id") != request_id, body


def raw_gateway(tmp_path: Path, *options: str) -> RawWire:
    policy, log = write_policy(tmp_path, POLICY), tmp_path / "upstream.jsonl"
    return gateway_wire(policy, log, "--database", database(tmp_path), *options)


def test_a_held_request_holds_its_reservation_until_answered(tmp_path: Path) -> None:
    wire = raw_gateway(tmp_path)
    try:
        wire.handshake()
        sampling = ask_on(wire, 1)
        spent, reserved = figures(tmp_path)
        assert (spent, reserved) == (0, charged("q", "", 16) + 16)  # input + maxTokens
        answer = {"role": "assistant", "content": {"type": "text", "text": "yes"}, "model": "m"}
        wire.send({"jsonrpc": "2.0", "id": sampling["id"], "result": answer})
        wire.send({"jsonrpc": "2.0", "id": sampling["id"], "result": answer})  # replayed
        reply, _ = wire.until(1)
        assert reply["result"]["content"][0]["text"] == "yes"
        assert wire.close() == 0
    finally:
        wire.kill()
    assert figures(tmp_path) == (charged("q", "yes", 16), 0)


def test_the_server_cancelling_its_request_releases_it(tmp_path: Path) -> None:
    """The client cancels the tool call; the server's SDK cancels the sampling request
    it was waiting on; the gateway releases it (and passes the cancellation on)."""
    wire = raw_gateway(tmp_path)
    try:
        wire.handshake()
        sampling = ask_on(wire, 1)
        cancel = {"requestId": 1, "reason": "the user gave up"}
        wire.send({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": cancel})
        while True:
            body = wire.next()
            if body.get("method") == "notifications/cancelled":
                assert body["params"]["requestId"] == sampling["id"]
                break
        assert wire.close() == 0
    finally:
        wire.kill()
    assert figures(tmp_path) == (0, 0)
    (record,) = sampling_records(tmp_path)
    assert record["status"] == "released" and "cancelled" in record["reason"]


def test_an_unanswered_request_is_abandoned_after_the_timeout(tmp_path: Path) -> None:
    wire = raw_gateway(tmp_path, "--sampling-timeout", "0.5")
    try:
        wire.handshake()
        sampling = ask_on(wire, 1)
        reply, before = wire.until(1)  # never answered: the server is told, and gives up
        assert reply["error"]["code"] == -32001
        cancels = [json.loads(raw) for raw in before]
        assert {"requestId": sampling["id"], "reason": "the sampling request timed out"} in [
            body.get("params") for body in cancels
        ]
        assert wire.close() == 0
    finally:
        wire.kill()
    assert figures(tmp_path) == (0, 0)


def test_the_gateway_shutting_down_releases_what_it_holds(tmp_path: Path) -> None:
    wire = raw_gateway(tmp_path)
    try:
        wire.handshake()
        ask_on(wire, 1)
        assert figures(tmp_path)[1] > 0
        assert wire.close() == 0  # the client leaves with the request unanswered
    finally:
        wire.kill()
    assert figures(tmp_path) == (0, 0)


SCRIPTED = Path(__file__).with_name("scripted_server.py")


def scripted_gateway(tmp_path: Path, policy: str = POLICY, *options: str) -> RawWire:
    """The gateway in front of the scripted stand-in (its tool: ``script``)."""
    log = tmp_path / "upstream.jsonl"
    path = write_policy(tmp_path, policy.replace("[ask, muse, echo]", "[script]"))
    command = [
        INTERLOCK,
        "mcp-gateway",
        "--policy",
        str(path),
        "--database",
        database(tmp_path),
        "--env",
        f"MCP_TEST_LOG={log}",
        *options,
        "--",
        sys.executable,
        str(SCRIPTED),
    ]
    return RawWire(command, base_env())


def sampling(request_id: Any, text: str = "hi", **params: Any) -> dict[str, Any]:
    message = {"role": "user", "content": {"type": "text", "text": text}}
    body = {"messages": [message], "maxTokens": 16, **params}
    return {"jsonrpc": "2.0", "id": request_id, "method": "sampling/createMessage", "params": body}


def script(wire: RawWire, request_id: int, *steps: dict[str, Any]) -> None:
    arguments = {"steps": list(steps)}
    params = {"name": "script", "arguments": arguments}
    wire.send({"jsonrpc": "2.0", "id": request_id, "method": "tools/call", "params": params})


def test_the_upstream_exiting_mid_sampling_releases_it(tmp_path: Path) -> None:
    wire = scripted_gateway(tmp_path)
    try:
        wire.handshake()
        script(wire, 1, {"send": sampling("s1")}, {"exit": 3})
        assert wire.next()["method"] == "sampling/createMessage"
        code = wire.process.wait(timeout=60)
        assert code == 3
    finally:
        wire.kill()
    assert figures(tmp_path) == (0, 0)


# -- several upstreams: the server's name is a fact -------------------------------------

PER_SERVER = """\
version: 1
default: deny
rules:
  - id: tools-ok
    decision: allow
    reason: the test tools
    name: [ask, muse]
  - id: only-trusted-samples
    decision: allow
    reason: the trusted server may ask the client's model
    kind: llm
    name: mcp-sampling
    params: {server: trusted}
budgets:
  - id: sampling-tokens
    limit: 1000
    unit: tokens
    kind: llm
"""


def merged(tmp_path: Path) -> StdioServerParameters:
    policy = write_policy(tmp_path, PER_SERVER)
    upstream = f"{sys.executable} {UPSTREAM}"
    args = [
        "mcp-gateway",
        "--policy",
        str(policy),
        "--database",
        database(tmp_path),
        "--env",
        f"MCP_TEST_LOG={tmp_path / 'upstream.jsonl'}",
        "--upstream",
        f"trusted={upstream}",
        "--upstream",
        f"other={upstream}",
    ]
    return StdioServerParameters(command=INTERLOCK, args=args, env=base_env())


async def test_merged_upstreams_are_judged_by_their_own_name(tmp_path: Path) -> None:
    model = FakeModel()
    async with session_through(merged(tmp_path), sampling_callback=model) as s:
        trusted = await s.call_tool("trusted__ask", {"question": "hello"})
        with pytest.raises(MCPError) as other:
            await s.call_tool("other__ask", {"question": "hello"})
    assert text_of(trusted) == "HELLO"
    assert other.value.error.code == -1
    assert len(model.asked) == 1
    assert figures(tmp_path) == (charged("hello", "HELLO", 16), 0)


async def test_merged_upstreams_in_the_newer_generation(tmp_path: Path) -> None:
    model = FakeModel()
    async with Client(merged(tmp_path), sampling_callback=model) as client:
        trusted = await client.call_tool("trusted__muse", {"topic": "dogs"})
        other = await client.call_tool("other__muse", {"topic": "dogs"})
    assert text_of(trusted) == "WRITE ABOUT DOGS"
    assert other.is_error
    assert (other.meta or {})["interlock/decision"]["verdict"] == "deny"
    assert len(model.asked) == 1
    assert figures(tmp_path) == (charged("write about dogs", "WRITE ABOUT DOGS", 32), 0)


def merged_wire(tmp_path: Path, *options: str) -> RawWire:
    """The merging gateway (``files``: the SDK server; ``script``: the stand-in) on
    the raw wire."""
    policy = write_policy(tmp_path, POLICY.replace("[ask, muse, echo]", "[ask, script]"))
    command = [
        INTERLOCK,
        "mcp-gateway",
        "--policy",
        str(policy),
        "--database",
        database(tmp_path),
        "--env",
        f"MCP_TEST_LOG={tmp_path / 'upstream.jsonl'}",
        "--upstream",
        f"files={sys.executable} {UPSTREAM}",
        "--upstream",
        f"script={sys.executable} {SCRIPTED}",
        *options,
    ]
    return RawWire(command, base_env())


def test_merged_upstreams_release_on_expiry_and_on_exit(tmp_path: Path) -> None:
    wire = merged_wire(tmp_path, "--sampling-timeout", "0.5")
    try:
        wire.handshake()
        wire.send({"jsonrpc": "2.0", "id": 1, "method": "tools/list"})
        wire.until(1)
        # files: never answered, abandoned after the timeout
        params = {"name": "files__ask", "arguments": {"question": "q"}}
        wire.send({"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": params})
        asked = wire.next()
        assert asked["method"] == "sampling/createMessage"
        reply, before = wire.until(2)
        assert reply["error"]["code"] == -32001
        cancels = [json.loads(raw).get("params") for raw in before]
        assert {"requestId": asked["id"], "reason": "the sampling request timed out"} in cancels
        # script: asks, then exits before the client answers
        steps = [{"send": sampling("s1")}, {"exit": 0}]
        params = {"name": "script__script", "arguments": {"steps": steps}}
        wire.send({"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": params})
        assert wire.next()["method"] == "sampling/createMessage"
        reply, _ = wire.until(3)
        assert "exited" in reply["error"]["message"]
        assert wire.close() == 0
    finally:
        wire.kill()
    assert figures(tmp_path) == (0, 0)
    assert [r["status"] for r in sampling_records(tmp_path)] == ["released", "released"]
