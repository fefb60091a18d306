"""HTTP upstreams: a real SDK server served over streamable HTTP
(``MCPServer(...).streamable_http_app()`` under uvicorn) behind the gateway, next
to the stdio test servers — behind the HTTP gateway and behind the stdio gateway.
Its calls are judged like any other; its credentials (``headers:`` in the config,
``${VAR}`` from the gateway's environment) reach it and no other upstream, and the
client's Interlock key never does; every gateway session has its own session with
it, ended when the gateway's ends; a stream it drops is resumed."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import mcp_types as types
import pytest
from mcp import Client, ClientSession, StdioServerParameters, stdio_client
from mcp.client.context import ClientRequestContext

from interlock.gateways.mcp.config import load_config

from .http_support import Gateway, RawHttp, Uvicorn, http_client, wait_until
from .http_upstream_server import Record, build
from .support import INTERLOCK, UPSTREAM, base_env, reached, write_policy

pytestmark = pytest.mark.anyio

MAIL = Path(__file__).with_name("mail_server.py")
SECRET = "upstream-secret-7f3a"

POLICY = """\
version: 1
default: deny
rules:
  - id: tools-ok
    decision: allow
    reason: these tools are fine
    name: [echo, count, ask, hangup, list_mail, locate]
  - id: no-deletes
    decision: deny
    reason: deleting files is not allowed
    name: delete_file
  - id: no-mail-from-the-gateway
    decision: deny
    reason: nobody sends mail through here
    kind: mcp
    params: {server: mail}
    name: send_mail
  - id: the-servers-may-sample
    decision: allow
    reason: the test servers may ask the client's model
    kind: llm
    name: mcp-sampling
"""


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(scope="module")
def web() -> Iterator[tuple[Uvicorn, Record]]:
    record = Record()
    server = Uvicorn(build(record))
    yield server, record
    server.close()


def config_file(tmp: Path, web_url: str, *, stdio: bool = True) -> Path:
    stdio_upstreams = (
        f"""\
  files:
    command: [{json.dumps(sys.executable)}, {json.dumps(str(UPSTREAM))}]
  mail:
    command: [{json.dumps(sys.executable)}, {json.dumps(str(MAIL))}]
"""
        if stdio
        else ""
    )
    path = tmp / "gateway.yaml"
    path.write_text(
        f"""\
upstreams:
{stdio_upstreams}  web:
    url: {web_url}/mcp
    headers:
      Authorization: "Bearer ${{WEB_TOKEN}}"
      X-Tenant-Hint: gateway
""",
        encoding="utf-8",
    )
    return path


@pytest.fixture(scope="module")
def gateway(
    tmp_path_factory: pytest.TempPathFactory, web: tuple[Uvicorn, Record]
) -> Iterator[Gateway]:
    tmp = tmp_path_factory.mktemp("http-upstreams")
    config = load_config(config_file(tmp, web[0].url), environ={"WEB_TOKEN": SECRET})
    running = Gateway(tmp, POLICY, config)
    yield running
    running.close()


def text_of(result: types.CallToolResult) -> str:
    return "".join(block.text for block in result.content if isinstance(block, types.TextContent))


async def sampled(ctx: ClientRequestContext, params: Any) -> types.CreateMessageResult:
    return types.CreateMessageResult(
        role="assistant", content=types.TextContent(type="text", text="sampled"), model="m"
    )


@pytest.mark.parametrize("mode", ["legacy", "auto"])
async def test_an_http_upstream_behind_the_http_gateway(
    gateway: Gateway, web: tuple[Uvicorn, Record], mode: str
) -> None:
    _, record = web
    progress: list[float] = []

    async def on_progress(done: float, total: float | None, message: str | None) -> None:
        progress.append(done)

    async with http_client(
        gateway.url, gateway.keys.bot, mode=mode, sampling_callback=sampled
    ) as c:
        names = {tool.name for tool in (await c.list_tools()).tools}
        assert {"files__echo", "mail__send_mail", "web__echo", "web__hangup"} <= names
        echoed = await c.call_tool("web__echo", {"text": f"over http ({mode})"})
        refused = await c.call_tool("web__delete_file", {"path": "/"})
        counted = await c.call_tool("web__count", {"to": 3}, progress_callback=on_progress)
        mail = await c.call_tool("mail__send_mail", {"to": "x@example.com", "body": "hi"})
        local = await c.call_tool("files__echo", {"text": "over stdio"})
        if mode == "legacy":  # the per-request generation has no sampling
            asked = await c.call_tool("web__ask", {"question": "ready?"})
            assert text_of(asked) == "sampled"

    assert text_of(echoed) == f"over http ({mode})"
    assert refused.is_error and "delete_file" not in {call["tool"] for call in record.calls}
    assert text_of(counted) == "counted to 3" and progress == [1, 2, 3]
    assert mail.is_error and "send_mail" not in {e["tool"] for e in reached(gateway.log)}
    assert text_of(local) == "over stdio"


def test_credentials_reach_their_upstream_and_the_clients_key_never_does(
    gateway: Gateway, web: tuple[Uvicorn, Record]
) -> None:
    _, record = web
    raw = RawHttp(gateway.url, gateway.keys.bot)
    try:
        raw.handshake()
        _, answer = raw.call(
            {
                "jsonrpc": "2.0",
                "id": 1,
                "method": "tools/call",
                "params": {"name": "web__echo", "arguments": {"text": "whose key?"}},
            }
        )
        assert answer[-1]["result"]["content"][0]["text"] == "whose key?"
    finally:
        raw.delete()
        raw.close()
    assert record.requests
    assert set(record.headers_seen("authorization")) == {f"Bearer {SECRET}"}
    assert set(record.headers_seen("x-tenant-hint")) == {"gateway"}
    everything = json.dumps(record.requests)
    for key in (gateway.keys.bot, gateway.keys.other):
        assert key not in everything
        assert key.split("_")[1] not in everything  # not even the key's id
    whoami = [e for e in reached(gateway.log) if e["tool"] == "whoami"]
    assert whoami == []  # (the stdio upstreams get no headers at all: no such channel)


CLIENT_SECRETS = {"x-client-secret": "client-secret-91c2", "cookie": "sid=client-cookie-5d1e"}


@pytest.mark.parametrize("generation", ["handshake", "per-request"])
def test_nothing_of_the_upstreams_credentials_reaches_the_client_nor_the_clients_the_upstream(
    gateway: Gateway, web: tuple[Uvicorn, Record], generation: str
) -> None:
    """Every byte the client is sent (status lines aside: headers and bodies), for a
    handshake, a listing, an allowed call, a refused one and an upstream's error, is
    free of the upstream's credentials; every request the upstream gets is free of
    the client's key and of whatever else the client sent in its headers."""
    _, record = web
    raw = RawHttp(gateway.url, gateway.keys.bot)
    seen = len(record.requests)
    answers: list[httpx.Response] = []
    meta = {
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": {},
    }

    def send(request_id: int, method: str, params: dict[str, Any]) -> None:
        body = {"jsonrpc": "2.0", "id": request_id, "method": method, "params": params}
        if generation == "handshake":
            answers.append(raw.post(body, **CLIENT_SECRETS))
            return
        body["params"] = {**params, "_meta": meta}
        headers = {**raw.headers(), **CLIENT_SECRETS, "mcp-protocol-version": "2026-07-28"}
        headers["mcp-method"] = method
        if "name" in params or "uri" in params:
            headers["mcp-name"] = params.get("name") or params["uri"]
        answers.append(raw.http.post(raw.url, content=json.dumps(body).encode(), headers=headers))

    try:
        if generation == "handshake":
            raw.handshake()
        send(1, "tools/list", {})
        send(2, "tools/call", {"name": "web__echo", "arguments": {"text": "whose secret?"}})
        send(3, "tools/call", {"name": "web__delete_file", "arguments": {"path": "/"}})
        send(4, "tools/call", {"name": "web__no_such_tool", "arguments": {}})
        send(5, "resources/read", {"uri": "web://nowhere"})
    finally:
        if generation == "handshake":
            raw.delete()
        raw.close()
    assert "whose secret?" in answers[1].text  # the call went through, and back
    assert '"isError":true' in answers[2].text and '"isError":true' in answers[3].text
    assert '"error"' in answers[4].text  # an error answer (no upstream listed the URI)
    sent_back = "".join(f"{answer.headers}{answer.text}" for answer in answers)
    assert SECRET not in sent_back and "upstream-secret" not in sent_back
    upstream_saw = json.dumps(record.requests[seen:])
    assert len(record.requests) > seen
    for value in (*CLIENT_SECRETS.values(), gateway.keys.bot, gateway.keys.bot.split("_")[1]):
        assert value not in upstream_saw


@pytest.mark.parametrize("mode", ["legacy", "auto"])
async def test_x_mcp_header_parameters_reach_the_upstream_as_mcp_param_headers(
    gateway: Gateway, web: tuple[Uvicorn, Record], mode: str
) -> None:
    """A tool whose ``region`` is an ``x-mcp-header`` parameter: on the per-request
    generation the upstream (the SDK's server, which checks them) gets
    ``Mcp-Param-Region`` from the body the gateway judged — base64-wrapped when it is
    not plain ASCII — and the call runs; the handshake generation carries none."""
    _, record = web
    seen = len(record.requests)
    async with http_client(gateway.url, gateway.keys.bot, mode=mode) as client:
        plain = await client.call_tool("web__locate", {"region": "eu-west", "query": "a"})
        accented = await client.call_tool("web__locate", {"region": "Zürich", "query": "b"})
        without = await client.call_tool("web__locate", {"region": "", "query": "c"})
    assert [text_of(r) for r in (plain, accented, without)] == [
        "a in eu-west",
        "b in Zürich",
        "c in ",
    ]
    sent = [h["mcp-param-region"] for _, h in record.requests[seen:] if "mcp-param-region" in h]
    if mode == "auto":
        assert sent == ["eu-west", "=?base64?WsO8cmljaA==?=", ""]
    else:
        assert sent == []


MODERN_META = {
    "io.modelcontextprotocol/protocolVersion": "2026-07-28",
    "io.modelcontextprotocol/clientCapabilities": {},
}


def modern_post(
    raw: RawHttp, method: str, params: dict[str, Any], extra: list[tuple[str, str]]
) -> httpx.Response:
    """One per-request-generation POST, its routing headers right, ``extra`` added
    as given (a header may come twice)."""
    body = {"jsonrpc": "2.0", "id": 1, "method": method, "params": {**params, "_meta": MODERN_META}}
    headers = [
        *raw.headers().items(),
        ("mcp-protocol-version", "2026-07-28"),
        ("mcp-method", method),
        *([("mcp-name", params["name"])] if "name" in params else []),
        *extra,
    ]
    return raw.http.post(raw.url, content=json.dumps(body).encode(), headers=headers)


#: ``Mcp-Param-*`` headers over ``web__locate`` (``region`` is its ``x-mcp-header``
#: argument, ``query`` is not): a proxy in front of the gateway may route on them, so
#: every one that says otherwise than the body is refused before the upstream hears
#: of the call; the honest look-alikes run.
PARAM_HEADER_ROWS: list[tuple[str, dict[str, Any], list[tuple[str, str]], str | None]] = [
    ("a header saying another region", {"region": "eu"}, [("mcp-param-region", "us-evil")], None),
    (
        "the right header twice",
        {"region": "eu"},
        [("mcp-param-region", "eu"), ("mcp-param-region", "eu")],
        None,
    ),
    (
        "a right header and a wrong one",
        {"region": "eu"},
        [("mcp-param-region", "eu"), ("Mcp-Param-Region", "us")],
        None,
    ),
    ("no header for a region the body has", {"region": "eu"}, [], None),
    ("a header for a region the body lacks", {}, [("mcp-param-region", "eu")], None),
    (
        "a header no declared argument stands behind",
        {"region": "eu"},
        [("mcp-param-region", "eu"), ("mcp-param-query", "q")],
        None,
    ),
    (
        "a base64 wrapper around another value",
        {"region": "eu"},
        [("mcp-param-region", "=?base64?dXM=?=")],
        None,
    ),
    # the honest look-alikes
    ("the right header", {"region": "eu"}, [("mcp-param-region", "eu")], "q in eu"),
    (
        "the right header, its name in capitals",
        {"region": "eu"},
        [("MCP-PARAM-REGION", "eu")],
        "q in eu",
    ),
    (
        "a value outside ASCII, base64-wrapped",
        {"region": "Zürich"},
        [("mcp-param-region", "=?base64?WsO8cmljaA==?=")],
        "q in Zürich",
    ),
]


@pytest.mark.parametrize(
    ("label", "arguments", "extra", "runs"),
    PARAM_HEADER_ROWS,
    ids=[r[0] for r in PARAM_HEADER_ROWS],
)
def test_mcp_param_headers_that_disagree_with_the_body_are_refused(
    gateway: Gateway,
    web: tuple[Uvicorn, Record],
    label: str,
    arguments: dict[str, Any],
    extra: list[tuple[str, str]],
    runs: str | None,
) -> None:
    _, record = web
    raw = RawHttp(gateway.url, gateway.keys.bot)
    try:
        listed = modern_post(raw, "tools/list", {}, [])
        assert listed.status_code == 200
        seen, ran = len(record.requests), len(record.calls)
        answer = modern_post(
            raw,
            "tools/call",
            {"name": "web__locate", "arguments": {**arguments, "query": "q"}},
            extra,
        )
    finally:
        raw.close()
    calls = record.calls[ran:]
    if runs is None:
        assert answer.status_code == 400, answer.text
        assert answer.json()["error"]["code"] == -32020
        assert calls == []  # the upstream never heard of it
        assert "us-evil" not in json.dumps(record.requests[seen:])
    else:
        assert answer.status_code == 200, answer.text
        assert answer.json()["result"]["content"][0]["text"] == runs
        assert len(calls) == 1


def test_mcp_param_headers_on_a_tool_not_yet_listed_are_refused_until_it_is(
    gateway: Gateway, web: tuple[Uvicorn, Record]
) -> None:
    """A key whose lane has never listed the tools: the gateway cannot tell what the
    headers stand for, so it refuses them (the client lists, and calls again, as the
    protocol has it); a call with no such header runs at once (the gateway lists the
    tools itself to judge it)."""
    from interlock.server.keys import KeyStore, Role

    assert gateway.guard.store is not None
    fresh = KeyStore(gateway.guard.store).create(tenant="acme", role=Role.AGENT, name="fresh")
    raw = RawHttp(gateway.url, fresh.token)
    call = {"name": "web__locate", "arguments": {"region": "eu", "query": "q"}}
    try:
        refused = modern_post(raw, "tools/call", call, [("mcp-param-region", "eu")])
        assert modern_post(raw, "tools/list", {}, []).status_code == 200
        runs = modern_post(raw, "tools/call", call, [("mcp-param-region", "eu")])
    finally:
        raw.close()
    assert refused.status_code == 400
    assert "list the tools" in refused.json()["error"]["message"]
    assert runs.json()["result"]["content"][0]["text"] == "q in eu"


def test_each_gateway_session_has_its_own_upstream_session(
    gateway: Gateway, web: tuple[Uvicorn, Record]
) -> None:
    _, record = web
    before = len(record.requests)
    first, second = RawHttp(gateway.url, gateway.keys.bot), RawHttp(gateway.url, gateway.keys.bot)
    try:
        first.handshake()
        second.handshake()
        ids = {
            headers["mcp-session-id"]
            for _, headers in record.requests[before:]
            if "mcp-session-id" in headers
        }
        assert len(ids) == 2
        assert first.delete().status_code == 204
        deleted = [h["mcp-session-id"] for m, h in record.requests[before:] if m == "DELETE"]
        assert len(deleted) == 1 and deleted[0] in ids
    finally:
        second.delete()
        first.close()
        second.close()


def test_a_dropped_upstream_stream_is_resumed(
    gateway: Gateway, web: tuple[Uvicorn, Record]
) -> None:
    """``hangup`` closes its SSE connection before answering; the gateway resumes the
    stream from its last event id and the client gets the answer as usual."""
    _, record = web
    before = len(record.requests)
    raw = RawHttp(gateway.url, gateway.keys.bot)
    try:
        raw.handshake()
        _, answer = raw.call(
            {
                "jsonrpc": "2.0",
                "id": 1,
                "method": "tools/call",
                "params": {"name": "web__hangup", "arguments": {"text": "still answered"}},
            }
        )
    finally:
        raw.delete()
        raw.close()
    assert answer[-1]["result"]["content"][0]["text"] == "still answered"
    resumed = [h for m, h in record.requests[before:] if m == "GET" and "last-event-id" in h]
    assert len(resumed) == 1


async def test_an_http_upstream_behind_the_stdio_gateway(
    tmp_path: Path, web: tuple[Uvicorn, Record]
) -> None:
    server, record = web
    policy = write_policy(tmp_path, POLICY)
    path = config_file(tmp_path, server.url, stdio=False)
    params = StdioServerParameters(
        command=INTERLOCK,
        args=["mcp-gateway", "--policy", str(policy), "--config", str(path)],
        env={**base_env(), "WEB_TOKEN": SECRET},
    )
    before = len(record.requests)
    async with (
        stdio_client(params) as (read, write),
        ClientSession(read, write, sampling_callback=sampled) as session,
    ):
        await session.initialize()
        names = {tool.name for tool in (await session.list_tools()).tools}
        echoed = await session.call_tool("web__echo", {"text": "stdio to http"})
        refused = await session.call_tool("web__delete_file", {"path": "/srv"})
        asked = await session.call_tool("web__ask", {"question": "sample?"})

    assert names >= {"web__echo", "web__delete_file", "web__ask"}
    assert text_of(echoed) == "stdio to http" and text_of(asked) == "sampled"
    assert refused.is_error and {"path": "/srv"} not in [c["args"] for c in record.calls]
    seen = record.requests[before:]
    assert {h.get("authorization") for _, h in seen} == {f"Bearer {SECRET}"}
    wait_until(lambda: any(m == "DELETE" for m, _ in record.requests[before:]), "a DELETE")


async def test_the_stdio_gateway_sends_mcp_param_headers_to_an_http_upstream(
    tmp_path: Path, web: tuple[Uvicorn, Record]
) -> None:
    """The per-request generation over stdio (``mcp.Client``), on to an HTTP upstream
    that checks ``Mcp-Param-*``: the call runs, its header read from the body."""
    server, record = web
    policy = write_policy(tmp_path, POLICY)
    path = config_file(tmp_path, server.url, stdio=False)
    params = StdioServerParameters(
        command=INTERLOCK,
        args=["mcp-gateway", "--policy", str(policy), "--config", str(path)],
        env={**base_env(), "WEB_TOKEN": SECRET},
    )
    before = len(record.requests)
    async with Client(params) as client:
        assert client.protocol_version == "2026-07-28"
        located = await client.call_tool("web__locate", {"region": "ap-south", "query": "d"})
    assert text_of(located) == "d in ap-south"
    sent = [h.get("mcp-param-region") for _, h in record.requests[before:]]
    assert "ap-south" in sent


def test_the_same_messages_through_the_gateway_as_straight_to_the_upstream(
    tmp_path: Path, web: tuple[Uvicorn, Record]
) -> None:
    """The HTTP upstream alone behind the HTTP gateway (its tools under their own
    names) and the same upstream asked directly, one script each: the same listing,
    the same results, the same progress. (The handshake's answer is the gateway's
    own: merged capabilities, its server info; that is not compared.)"""
    server, _ = web
    path = tmp_path / "gateway.yaml"
    path.write_text(
        f"upstreams:\n  web:\n    url: {server.url}/mcp\n    namespace: false\n", encoding="utf-8"
    )
    only_web = Gateway(tmp_path, POLICY, load_config(path))
    script = [
        {"jsonrpc": "2.0", "id": 1, "method": "tools/list"},
        {
            "jsonrpc": "2.0",
            "id": 2,
            "method": "tools/call",
            "params": {"name": "echo", "arguments": {"text": "same ✓ \u2028 bytes"}},
        },
        {
            "jsonrpc": "2.0",
            "id": 3,
            "method": "tools/call",
            "params": {"name": "count", "arguments": {"to": 2}, "_meta": {"progressToken": "t"}},
        },
    ]
    received: dict[str, list[list[Any]]] = {}
    try:
        for label, raw in (
            ("direct", RawHttp(f"{server.url}/mcp", None)),
            ("gateway", RawHttp(only_web.url, only_web.keys.bot)),
        ):
            raw.handshake()
            received[label] = [raw.call(message)[1] for message in script]
            raw.delete()
            raw.close()
    finally:
        only_web.close()
    assert received["gateway"] == received["direct"]
    assert [m.get("method") for m in received["direct"][2]] == [
        "notifications/progress",
        "notifications/progress",
        None,
    ]
