"""Every record of a request that came with a valid key is that key's: its tenant and
its agent, never the gateway's own — a call refused before any policy reads it (its
params malformed, a tool no upstream has), a server's sampling request refused
unread, and an approval the key's user decides through elicitation. Both protocol
generations, the transparent relay and the merging one. The gateway's own guard
runs under the default tenant, and every key here is another tenant's."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import mcp_types as types
import pytest
from mcp.client.context import ClientRequestContext

from interlock.gateways.mcp.config import GatewayConfig, UpstreamSpec

from .http_support import HTTP_POLICY, TRANSPARENT, Gateway, RawHttp, http_client, messages_of
from .support import UPSTREAM, reached

SCRIPTED = Path(__file__).with_name("scripted_server.py")
MERGED = GatewayConfig(
    (
        UpstreamSpec("tools", command=(sys.executable, str(UPSTREAM))),
        UpstreamSpec("script", command=(sys.executable, str(SCRIPTED))),
    )
)
POLICY = HTTP_POLICY.replace("[echo, fail,", "[script, echo, fail,")
MODERN = "2026-07-28"
MODERN_META = {
    "io.modelcontextprotocol/protocolVersion": MODERN,
    "io.modelcontextprotocol/clientCapabilities": {},
}


@pytest.fixture(scope="module", params=["transparent", "merged"])
def gateway(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Gateway]:
    config = TRANSPARENT if request.param == "transparent" else MERGED
    running = Gateway(tmp_path_factory.mktemp(f"tenancy-{request.param}"), POLICY, config)
    yield running
    running.close()


def merged(gateway: Gateway) -> bool:
    return not gateway.config.transparent


def tool(gateway: Gateway, name: str) -> str:
    """The name the client calls ``name`` by (prefixed behind the merging relay)."""
    return f"tools__{name}" if merged(gateway) else name


def record(gateway: Gateway, decision_id: str) -> tuple[str, str | None, str | None]:
    """The tenant, agent and verdict of the decision's audit record (waited for:
    records are written in batches)."""
    store = gateway.guard.store
    assert store is not None
    assert gateway.guard.audit is not None
    gateway.guard.audit.flush()
    (row,) = [row for row in store.audit_rows() if row.decision_id == decision_id]
    return row.tenant, row.agent, row.decision


def call(request_id: Any, params: Any) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": request_id, "method": "tools/call", "params": params}


def modern_post(raw: RawHttp, message: dict[str, Any], name: str | None) -> Any:
    headers = {
        **raw.headers(),
        "mcp-protocol-version": MODERN,
        "mcp-method": message["method"],
    }
    headers.pop("mcp-session-id", None)
    if name is not None:
        headers["mcp-name"] = name
    response = raw.http.post(raw.url, content=json.dumps(message).encode(), headers=headers)
    (answer,) = messages_of(response)
    return answer


MALFORMED: list[tuple[str, Any]] = [
    ("arguments-not-an-object", {"name": "echo", "arguments": ["x"]}),
    ("name-not-text", {"name": 7, "arguments": {}}),
    ("no-name", {"arguments": {"text": "x"}}),
    ("params-not-an-object", ["echo"]),
]


@pytest.mark.parametrize(("label", "params"), MALFORMED, ids=[row[0] for row in MALFORMED])
def test_a_malformed_call_is_recorded_as_the_keys(
    gateway: Gateway, label: str, params: Any
) -> None:
    raw = RawHttp(gateway.url, gateway.keys.other)
    try:
        raw.handshake()
        _, (answer,) = raw.call(call(1, params))
    finally:
        raw.delete()
        raw.close()
    assert answer["error"]["code"] == -32602, answer
    decision_id = answer["error"]["data"]["decision_id"]
    assert record(gateway, decision_id) == ("beta", "other", "undetermined")


def test_a_malformed_call_of_the_per_request_generation_is_the_keys(gateway: Gateway) -> None:
    raw = RawHttp(gateway.url, gateway.keys.other)
    name = tool(gateway, "echo")
    params = {"name": name, "arguments": ["x"], "_meta": MODERN_META}
    try:
        answer = modern_post(raw, call(1, params), name)
    finally:
        raw.close()
    assert answer["error"]["code"] == -32602, answer
    decision_id = answer["error"]["data"]["decision_id"]
    assert record(gateway, decision_id) == ("beta", "other", "undetermined")


@pytest.mark.parametrize("generation", ["handshake", "per-request"])
def test_a_tool_no_upstream_has_is_recorded_as_the_keys(gateway: Gateway, generation: str) -> None:
    if not merged(gateway):
        pytest.skip("only the merging relay knows a tool is nobody's before asking")
    raw = RawHttp(gateway.url, gateway.keys.other)
    try:
        if generation == "handshake":
            raw.handshake()
            _, (answer,) = raw.call(call(1, {"name": "nobody__echo", "arguments": {}}))
        else:
            params = {"name": "nobody__echo", "arguments": {}, "_meta": MODERN_META}
            answer = modern_post(raw, call(1, params), "nobody__echo")
            raw.session_id = None
    finally:
        if raw.session_id:
            raw.delete()
        raw.close()
    assert answer["error"]["code"] == -32602, answer
    assert "unknown tool" in answer["error"]["message"]
    decision_id = answer["error"]["data"]["decision_id"]
    assert record(gateway, decision_id) == ("beta", "other", "undetermined")


def test_a_sampling_request_refused_unread_is_recorded_as_the_keys(gateway: Gateway) -> None:
    if not merged(gateway):
        pytest.skip("the scripted server is behind the merging gateway")
    disguised = {
        "jsonrpc": "2.0",
        "id": "s1",
        "method": "Sampling/createMessage",
        "params": {"messages": [], "maxTokens": 4},
    }
    steps = [{"send": disguised}, {"await": "s1"}]
    raw = RawHttp(gateway.url, gateway.keys.other)
    try:
        raw.handshake()
        _, messages = raw.call(call(1, {"name": "script__script", "arguments": {"steps": steps}}))
    finally:
        raw.delete()
        raw.close()
    (answered,) = json.loads(messages[-1]["result"]["content"][0]["text"])
    assert answered["error"]["code"] == -1
    decision_id = answered["error"]["data"]["decision_id"]
    assert record(gateway, decision_id) == ("beta", "other", "undetermined")


def test_an_allowed_and_a_refused_call_are_the_keys_as_before(gateway: Gateway) -> None:
    """The look-alikes: calls the policy reads were the key's already."""
    raw = RawHttp(gateway.url, gateway.keys.other)
    try:
        raw.handshake()
        _, (refused,) = raw.call(
            call(1, {"name": tool(gateway, "delete_file"), "arguments": {"path": "/"}})
        )
    finally:
        raw.delete()
        raw.close()
    decision_id = refused["result"]["_meta"]["interlock/decision"]["decision_id"]
    assert record(gateway, decision_id) == ("beta", "other", "deny")


# -- approvals through elicitation --------------------------------------------------------


@pytest.fixture
def approving(tmp_path: Path) -> Iterator[Gateway]:
    running = Gateway(tmp_path, HTTP_POLICY, TRANSPARENT, approve_by_elicitation=True)
    yield running
    running.close()


@pytest.mark.anyio
@pytest.mark.parametrize("mode", ["legacy", "auto"])
async def test_an_approval_answered_in_band_is_the_keys(approving: Gateway, mode: str) -> None:
    asked: list[str] = []

    async def the_user(ctx: ClientRequestContext, params: Any) -> types.ElicitResult:
        asked.append(params.message)
        return types.ElicitResult(action="accept", content={"approve": True})

    async with http_client(
        approving.url, approving.keys.other, mode=mode, elicitation_callback=the_user
    ) as client:
        result = await client.call_tool("echo", {"text": "LOUD and approved"})

    assert not result.is_error, result
    assert len(asked) == 1
    assert [entry["args"] for entry in reached(approving.log) if entry["tool"] == "echo"] == [
        {"text": "LOUD and approved"}
    ]
    assert approving.guard.store is not None
    (approval,) = approving.guard.store.list_approvals(tenant="beta")
    assert approval.status.value == "claimed"
    assert approval.decided_by == "mcp-elicitation:other"
    assert approval.context.get("agent") == "other"


# -- what each key is shown: --hide-denied-tools per key ----------------------------------

HIDING_POLICY = (
    POLICY
    + """\
  - id: lookups-for-beta
    decision: allow
    reason: tenant beta may look things up
    name: lookup
    tenant: beta
"""
)


@pytest.fixture(scope="module", params=["transparent", "merged"])
def hiding(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Gateway]:
    upstreams = (TRANSPARENT if request.param == "transparent" else MERGED).upstreams
    config = GatewayConfig(upstreams, hide_denied_tools=True)
    running = Gateway(tmp_path_factory.mktemp(f"hiding-{request.param}"), HIDING_POLICY, config)
    yield running
    running.close()


@pytest.mark.anyio
@pytest.mark.parametrize("mode", ["legacy", "auto"])
async def test_each_key_is_shown_the_tools_its_agent_and_tenant_may_call(
    hiding: Gateway, mode: str
) -> None:
    shown: dict[str, set[str]] = {}
    refused: dict[str, types.CallToolResult] = {}
    for who, key, forbidden in (
        ("bot", hiding.keys.bot, "lookup"),
        ("other", hiding.keys.other, "whoami"),
    ):
        async with http_client(hiding.url, key, mode=mode) as client:
            names = {tool.name for tool in (await client.list_tools()).tools}
            shown[who] = {name.removeprefix("tools__") for name in names}
            arguments = {"query": "x", "est_cost": 1.0} if forbidden == "lookup" else {}
            refused[who] = await client.call_tool(tool(hiding, forbidden), arguments)
    always = {"echo", "fail", "count", "confirm", "roots", "chatty"}
    assert always <= shown["bot"] and always <= shown["other"]
    assert "whoami" in shown["bot"] and "whoami" not in shown["other"]  # agent: bot
    assert "lookup" in shown["other"] and "lookup" not in shown["bot"]  # tenant: beta
    assert "delete_file" not in shown["bot"] | shown["other"]  # nobody's
    # hidden, called anyway: judged and refused like any other, never reaching it
    assert refused["bot"].is_error and refused["other"].is_error
    assert {entry.get("tool") for entry in reached(hiding.log)} & {"lookup", "whoami"} == set()
