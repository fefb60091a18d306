"""The gateway listening on streamable HTTP (``--http``) in front of the stdio test
server, driven by the SDK's own streamable-HTTP client (``mcp.Client`` over
``streamable_http_client``) and by hand: both protocol generations, the same
verdicts as in-process, keys (tenant and agent from the key; 401/403; a session
id is its key's alone), sessions (one set of upstream processes each; DELETE and
expiry stop them; a cap), a dropped SSE stream resumed, and DNS rebinding refused."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import anyio
import mcp_types as types
import pytest
from mcp.client.context import ClientRequestContext

from interlock import Guard, load_policy_text
from interlock.adapters.mcp import guard_server
from interlock.core.action import Context

from . import upstream_server
from .http_support import (
    HTTP_POLICY,
    INITIALIZED,
    TRANSPARENT,
    Gateway,
    RawHttp,
    alive,
    events_of,
    http_client,
    wait_until,
)
from .support import reached

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
def gateway(http_gateway: Gateway) -> Gateway:
    return http_gateway


def text_of(result: types.CallToolResult) -> str:
    return "".join(block.text for block in result.content if isinstance(block, types.TextContent))


def calls_to(gateway: Gateway, tool: str) -> list[dict[str, Any]]:
    return [entry for entry in reached(gateway.log) if entry["tool"] == tool]


# -- real clients ----------------------------------------------------------------------


async def test_a_handshake_client_session_over_http(gateway: Gateway) -> None:
    seen: dict[str, list[Any]] = {"sampled": [], "elicited": [], "logs": [], "other": []}

    async def sampling(ctx: ClientRequestContext, params: Any) -> types.CreateMessageResult:
        seen["sampled"].append(params)
        return types.CreateMessageResult(
            role="assistant", content=types.TextContent(type="text", text="yes"), model="m"
        )

    async def elicitation(ctx: ClientRequestContext, params: Any) -> types.ElicitResult:
        seen["elicited"].append(params)
        return types.ElicitResult(action="accept", content={"ok": True})

    async def roots(ctx: ClientRequestContext) -> types.ListRootsResult:
        return types.ListRootsResult(roots=[types.Root(uri="file:///work", name="work")])

    async def logging(params: types.LoggingMessageNotificationParams) -> None:
        seen["logs"].append(params.data)

    async def other(message: Any) -> None:
        seen["other"].append(message)

    progress: list[float] = []

    async def on_progress(done: float, total: float | None, message: str | None) -> None:
        progress.append(done)

    async with http_client(
        gateway.url,
        gateway.keys.bot,
        mode="legacy",
        sampling_callback=sampling,
        elicitation_callback=elicitation,
        list_roots_callback=roots,
        logging_callback=logging,
        message_handler=other,
    ) as client:
        assert "echo" in {tool.name for tool in (await client.list_tools()).tools}
        assert text_of(await client.call_tool("echo", {"text": "héllo"})) == "héllo"
        refused = await client.call_tool("delete_file", {"path": "/etc/passwd"})
        counted = await client.call_tool("count", {"to": 3}, progress_callback=on_progress)
        asked = await client.call_tool("ask", {"question": "ready?"})
        confirmed = await client.call_tool("confirm", {"question": "sure?"})
        rooted = await client.call_tool("roots", {})
        chatted = await client.call_tool("chatty", {})
        # The list change is no request's: it comes on the session's GET stream, in
        # its own time (a bound on waiting, not a speed check).
        for _ in range(600):
            if any(type(m).__name__ == "ToolListChangedNotification" for m in seen["other"]):
                break
            await anyio.sleep(0.05)

    assert refused.is_error and refused.meta is not None
    assert refused.meta["interlock/decision"]["rule_ids"] == ["no-deletes"]
    assert calls_to(gateway, "delete_file") == []
    assert text_of(counted) == "counted to 3" and progress == [1, 2, 3]
    assert text_of(asked) == "yes" and len(seen["sampled"]) == 1
    assert "accept" in text_of(confirmed) and len(seen["elicited"]) == 1
    assert text_of(rooted) == "file:///work"
    assert text_of(chatted) == "said things" and "a log line" in seen["logs"]
    kinds = {type(message).__name__ for message in seen["other"]}
    assert "ToolListChangedNotification" in kinds


async def test_the_per_request_generation_over_http(gateway: Gateway) -> None:
    progress: list[float] = []

    async def on_progress(done: float, total: float | None, message: str | None) -> None:
        progress.append(done)

    async with http_client(gateway.url, gateway.keys.bot) as client:  # mode="auto"
        assert client.protocol_version == "2026-07-28"
        assert "echo" in {tool.name for tool in (await client.list_tools()).tools}
        echoed = await client.call_tool("echo", {"text": "modern"})
        refused = await client.call_tool("delete_file", {"path": "/"})
        counted = await client.call_tool("count", {"to": 2}, progress_callback=on_progress)

    assert text_of(echoed) == "modern"
    assert refused.is_error and calls_to(gateway, "delete_file") == []
    assert text_of(counted) == "counted to 2" and progress == [1, 2]


CALLS: list[tuple[str, dict[str, Any]]] = [
    ("echo", {"text": "hello"}),
    ("echo", {"text": "LOUD hello"}),  # require_approval
    ("delete_file", {"path": "/etc/passwd"}),
    ("ECHO", {"text": "hello"}),
    ("whoami", {}),  # allowed for the agent bot only
    ("no_such_tool", {}),
]


def outcome(result: types.CallToolResult) -> tuple[Any, ...]:
    meta = (result.meta or {}).get("interlock/decision", {})
    text = re.sub(r"(dec|apr)_[0-9a-f]+", "…", text_of(result)) if meta else None
    return (result.is_error, meta.get("verdict"), tuple(meta.get("rule_ids", ())), text)


@pytest.mark.parametrize("mode", ["legacy", "auto"])
async def test_the_same_verdicts_as_in_process(
    gateway: Gateway, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, mode: str
) -> None:
    """The bot's key over HTTP, and a guard in-process whose context is the bot's."""
    from mcp import Client

    monkeypatch.setenv("MCP_TEST_LOG", str(tmp_path / "in-process.jsonl"))
    guard = Guard(
        load_policy_text(HTTP_POLICY),
        context=Context(tenant="acme", agent="bot"),
        store=f"sqlite:///{tmp_path / 'in-process.db'}",  # as the gateway's: approval links
    )
    server = upstream_server.server
    guard_server(server, guard)
    try:
        async with Client(server) as local:
            in_process = [outcome(await local.call_tool(name, args)) for name, args in CALLS]
    finally:
        guard.detach(server)
        guard.close()

    async with http_client(gateway.url, gateway.keys.bot, mode=mode) as client:
        await client.list_tools()
        gated = [outcome(await client.call_tool(name, args)) for name, args in CALLS]

    assert gated == in_process
    assert [row[1] for row in gated] == [None, "require_approval", "deny", "deny", None, "deny"]


# -- keys ------------------------------------------------------------------------------


async def test_tenant_and_agent_come_from_the_key(gateway: Gateway) -> None:
    async with http_client(gateway.url, gateway.keys.other, mode="legacy") as client:
        refused = await client.call_tool("whoami", {})
        held = await client.call_tool("echo", {"text": "LOUD from other"})
    async with http_client(gateway.url, gateway.keys.bot, mode="legacy") as client:
        allowed = await client.call_tool("whoami", {})

    assert refused.is_error and not allowed.is_error  # the rule says agent: bot
    assert gateway.guard.store is not None
    approval_id = (held.meta or {})["interlock/decision"]["approval_id"]
    record = gateway.guard.store.get_approval(approval_id)
    assert (record.tenant, record.context.get("agent")) == ("beta", "other")


@pytest.mark.parametrize(
    ("key", "status"),
    [("none", 401), ("garbage", 401), ("revoked", 401), ("approver", 403)],
)
def test_a_client_without_an_agent_key_is_refused(gateway: Gateway, key: str, status: int) -> None:
    token = {"none": None, "garbage": "ilk_0000000000000000_" + "x" * 43}.get(
        key, getattr(gateway.keys, key, None)
    )
    before = gateway.pids()
    raw = RawHttp(gateway.url, token)
    try:
        response = raw.post(
            {
                "jsonrpc": "2.0",
                "id": 0,
                "method": "initialize",
                "params": {"protocolVersion": "2025-11-25", "capabilities": {}},
            }
        )
    finally:
        raw.close()
    assert response.status_code == status
    assert "mcp-session-id" not in response.headers
    assert gateway.pids() == before  # no upstream started for it


def test_a_session_id_presented_with_another_key_is_not_found(gateway: Gateway) -> None:
    owner, thief = RawHttp(gateway.url, gateway.keys.bot), RawHttp(gateway.url, gateway.keys.other)
    try:
        owner.handshake()
        thief.session_id, thief.version = owner.session_id, owner.version
        stolen = thief.post(call(1, "echo", {"text": "stolen"}))
        ended = thief.delete()
        reply, messages = owner.call(call(2, "echo", {"text": "mine"}))
    finally:
        owner.delete()
        owner.close()
        thief.close()
    assert stolen.status_code == 404 and ended.status_code == 404
    assert reply.status_code == 200 and messages[-1]["result"]["content"][0]["text"] == "mine"
    assert {"text": "stolen"} not in [entry["args"] for entry in calls_to(gateway, "echo")]


# -- sessions --------------------------------------------------------------------------


def call(request_id: Any, name: str, arguments: dict[str, Any], meta: Any = None) -> dict[str, Any]:
    params: dict[str, Any] = {"name": name, "arguments": arguments}
    if meta is not None:
        params["_meta"] = meta
    return {"jsonrpc": "2.0", "id": request_id, "method": "tools/call", "params": params}


def test_each_session_has_its_own_upstream_and_delete_stops_it(gateway: Gateway) -> None:
    first, second = RawHttp(gateway.url, gateway.keys.bot), RawHttp(gateway.url, gateway.keys.bot)
    try:
        before = gateway.pids()
        first.handshake()
        after_first = gateway.pids() - before
        second.handshake()
        after_second = gateway.pids() - before - after_first
        assert len(after_first) == 1 and len(after_second) == 1  # one process each
        assert first.delete().status_code == 204
        (gone,) = after_first
        wait_until(lambda: not alive(gone), "the deleted session's upstream exited")
        assert first.post(call(1, "echo", {"text": "late"})).status_code == 404
        _, messages = second.call(call(1, "echo", {"text": "still here"}))
        assert messages[-1]["result"]["content"][0]["text"] == "still here"
    finally:
        second.delete()
        first.close()
        second.close()
    (other,) = after_second
    wait_until(lambda: not alive(other), "the second session's upstream exited")


def test_an_abandoned_session_expires_and_the_cap_holds(tmp_path: Path) -> None:
    # 1.5 s: a loaded machine's pauses between the handshake's two messages must not
    # expire the session before the test abandons it (0.3 s did, once, under load).
    small = Gateway(tmp_path, HTTP_POLICY, TRANSPARENT, idle_timeout=1.5, max_sessions=1)
    try:
        abandoned, waiting = RawHttp(small.url, small.keys.bot), RawHttp(small.url, small.keys.bot)
        abandoned.handshake()
        (pid,) = small.pids()
        refused = waiting.post(
            {**call(0, "x", {}), "method": "initialize", "params": {"capabilities": {}}}
        )
        assert refused.status_code == 503  # the cap: one session
        wait_until(lambda: not small.gateway.sessions, "the idle session expired")
        wait_until(lambda: not alive(pid), "its upstream was stopped")
        assert abandoned.post(call(1, "echo", {"text": "x"})).status_code == 404
        waiting.handshake()  # room again
        waiting.close()
        abandoned.close()
    finally:
        small.close()


def test_a_dropped_stream_resumes_from_its_last_event(gateway: Gateway) -> None:
    """A call's SSE connection drops after the server's sampling request came on it;
    the client answers, then reads the rest of that stream from the last event id
    (``GET`` with ``Last-Event-ID``): the response is there, once."""
    raw = RawHttp(gateway.url, gateway.keys.bot)
    try:
        raw.handshake()
        with raw.http.stream(
            "POST",
            raw.url,
            json=call(7, "ask", {"question": "resume?"}),
            headers=raw.headers(),
        ) as response:
            seen: list[dict[str, str]] = []
            buffer = ""
            for text in response.iter_text():
                buffer += text
                seen = events_of(buffer)
                if any("sampling/createMessage" in e.get("data", "") for e in seen):
                    break  # hang up here
        asked = next(e for e in seen if "sampling/createMessage" in e.get("data", ""))
        assert seen[0]["data"] == "" and "id" in seen[0]  # the priming event
        request = json.loads(asked["data"])
        answer = {
            "jsonrpc": "2.0",
            "id": request["id"],
            "result": {
                "role": "assistant",
                "content": {"type": "text", "text": "resumed"},
                "model": "m",
            },
        }
        assert raw.post(answer).status_code == 202
        resumed = raw.http.get(
            raw.url,
            headers={**raw.headers(), "last-event-id": asked["id"], "accept": "text/event-stream"},
        )
        assert resumed.status_code == 200
        replayed = [json.loads(e["data"]) for e in events_of(resumed.text) if e.get("data")]
        assert [m.get("id") for m in replayed] == [7]
        assert replayed[0]["result"]["content"][0]["text"] == "resumed"
        unknown = raw.http.get(
            raw.url,
            headers={**raw.headers(), "last-event-id": "99-1", "accept": "text/event-stream"},
        )
        assert unknown.status_code == 404
    finally:
        raw.delete()
        raw.close()


# -- DNS rebinding ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("headers", "status"),
    [
        ({"host": "evil.example"}, 421),
        ({"host": "evil.example:{port}"}, 421),
        ({"host": "127.0.0.1.evil.example:{port}"}, 421),
        ({"origin": "http://evil.example"}, 403),
        ({"origin": "http://localhost.evil.example:{port}"}, 403),
        ({"origin": "null"}, 403),
        # benign look-alikes: the gateway's own names
        ({"host": "localhost:{port}"}, 200),
        ({"host": "127.0.0.1:{port}", "origin": "http://127.0.0.1:{port}"}, 200),
        ({"origin": "http://localhost:5173"}, 200),
    ],
)
def test_a_foreign_host_or_origin_is_refused(
    gateway: Gateway, headers: dict[str, str], status: int
) -> None:
    port = str(gateway.server.port)
    raw = RawHttp(gateway.url, gateway.keys.bot)
    try:
        sent = {name: value.replace("{port}", port) for name, value in headers.items()}
        response = raw.post(
            {
                "jsonrpc": "2.0",
                "id": 0,
                "method": "initialize",
                "params": {"protocolVersion": "2025-11-25", "capabilities": {}},
            },
            **sent,
        )
        assert response.status_code == status, response.text
        if status == 200:
            raw.session_id = response.headers["mcp-session-id"]
            assert raw.delete().status_code == 204
    finally:
        raw.close()


def test_the_session_stream_carries_what_the_server_sends_unasked(gateway: Gateway) -> None:
    """A list change and a log line, sent while no GET stream is open, are kept for
    it; a second GET stream at once is refused."""
    raw = RawHttp(gateway.url, gateway.keys.bot)
    try:
        raw.handshake()
        raw.call(
            {"jsonrpc": "2.0", "id": 1, "method": "logging/setLevel", "params": {"level": "info"}}
        )
        _, on_post = raw.call(call(2, "chatty", {}))
        assert [m.get("id") for m in on_post] == [2]  # only its response on the POST
        headers = {**raw.headers(), "accept": "text/event-stream"}
        with raw.http.stream("GET", raw.url, headers=headers) as stream:
            second = raw.http.get(raw.url, headers=headers)
            buffer = ""
            for text in stream.iter_text():
                buffer += text
                methods = [
                    json.loads(e["data"]).get("method") for e in events_of(buffer) if e.get("data")
                ]
                if "notifications/tools/list_changed" in methods:
                    break
        assert second.status_code == 409
        assert "notifications/message" in methods
        assert raw.post(INITIALIZED).status_code == 202
    finally:
        raw.delete()
        raw.close()


def test_a_cancelled_call_ends_its_stream(gateway: Gateway) -> None:
    """The client cancels ``ask`` while it waits on the client's model: the call's
    stream ends with ``-32800`` at once (the upstream is told; a late answer of
    its would be dropped)."""
    raw = RawHttp(gateway.url, gateway.keys.bot)
    try:
        raw.handshake()
        with raw.http.stream(
            "POST", raw.url, json=call(5, "ask", {"question": "cancel me"}), headers=raw.headers()
        ) as response:
            buffer, chunks = "", response.iter_text()
            while "sampling/createMessage" not in buffer:
                buffer += next(chunks)
            cancel = {"requestId": 5, "reason": "changed my mind"}
            note = {"jsonrpc": "2.0", "method": "notifications/cancelled", "params": cancel}
            assert raw.post(note).status_code == 202
            for text in chunks:
                buffer += text
        last = json.loads([e["data"] for e in events_of(buffer) if e.get("data")][-1])
        assert last["id"] == 5 and last["error"]["code"] == -32800
        _, after = raw.call(call(6, "echo", {"text": "the session goes on"}))
        assert after[-1]["result"]["content"][0]["text"] == "the session goes on"
    finally:
        raw.delete()
        raw.close()
