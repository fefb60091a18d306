"""The HTTP side's doors, each next to its benign look-alike: a body or a request
that two readers could take two ways, or that tries to get a call past the gate,
is refused before anything reaches the upstream; the honest version of the same
thing goes through. Every smuggled call is an ``echo`` the policy *allows*, with a
marker of its own: had any reader forwarded it, the upstream's record would show
the marker."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import httpx
import pytest

from .http_support import Gateway, RawHttp, events_of, messages_of
from .support import reached


@pytest.fixture(scope="module")
def raw(http_gateway: Gateway) -> Iterator[RawHttp]:
    session = RawHttp(http_gateway.url, http_gateway.keys.bot)
    session.handshake()
    yield session
    session.delete()
    session.close()


def echo(marker: str, request_id: Any = 1) -> dict[str, Any]:
    return {
        "jsonrpc": "2.0",
        "id": request_id,
        "method": "tools/call",
        "params": {"name": "echo", "arguments": {"text": marker}},
    }


def body(value: Any) -> bytes:
    return json.dumps(value).encode()


@dataclass(frozen=True)
class Door:
    """``send(raw session, marker) -> response``; the status expected; whether the
    marked echo may reach the upstream; whether the answer carries an error."""

    send: Callable[[RawHttp, str], httpx.Response]
    status: int
    reaches: bool
    error: bool = False


def post(content: bytes, **headers: str) -> Callable[[RawHttp, str], httpx.Response]:
    """A POST of ``content`` (``{m}`` replaced by the marker)."""

    def send(raw: RawHttp, marker: str) -> httpx.Response:
        return raw.post(content.replace(b"{m}", marker.encode()), **headers)

    return send


def modern(method: str, name: str | None, **extra: str) -> Callable[[RawHttp, str], httpx.Response]:
    """A 2026-07-28 request (no session) with routing headers ``method``/``name``."""

    def send(raw: RawHttp, marker: str) -> httpx.Response:
        meta = {
            "io.modelcontextprotocol/protocolVersion": "2026-07-28",
            "io.modelcontextprotocol/clientCapabilities": {},
        }
        message = echo(marker)
        message["params"]["_meta"] = meta
        headers = {
            **raw.headers(),
            "mcp-protocol-version": "2026-07-28",
            "mcp-method": method,
        }
        headers.pop("mcp-session-id", None)
        headers.update(extra)
        if name is not None:
            headers["mcp-name"] = name
        return raw.http.post(raw.url, content=body(message), headers=headers)

    return send


def get_with_a_call(raw: RawHttp, marker: str) -> httpx.Response:
    """A GET carrying a tools/call in its body and its query."""
    headers = {**raw.headers(), "accept": "text/event-stream"}
    query = {"method": "tools/call", "name": "echo", "text": marker}
    with raw.http.stream(
        "GET", raw.url, params=query, content=body(echo(marker)), headers=headers
    ) as response:
        return response  # the session's stream: nothing of the body is read


def twice(name: str) -> Callable[[RawHttp, str], httpx.Response]:
    def send(raw: RawHttp, marker: str) -> httpx.Response:
        headers = [(k, v) for k, v in raw.headers().items()]
        headers.append(
            (name, raw.headers().get(name, "x") if name != "authorization" else "Bearer x")
        )
        return raw.http.post(raw.url, content=body(echo(marker)), headers=headers)

    return send


SINGLE = body(echo("{m}"))
OVER = 4 * 1024 * 1024 + 1

DOORS: dict[str, Door] = {
    # a batch: each element would need its own verdict
    "batch": Door(post(body([echo("{m}")])), 400, False, True),
    "one message (benign)": Door(post(SINGLE), 200, True),
    # over the body limit
    "oversize body": Door(post(body(echo("{m}" + "x" * OVER))), 413, False, True),
    "a large body under the limit (benign)": Door(
        post(body(echo("{m}" + "x" * (1024 * 1024)))), 200, True
    ),
    # content types
    "text/plain body": Door(post(SINGLE, **{"content-type": "text/plain"}), 415, False, True),
    "no content type": Door(post(SINGLE, **{"content-type": ""}), 415, False, True),
    "json with a charset (benign)": Door(
        post(SINGLE, **{"content-type": "application/json; charset=utf-8"}), 200, True
    ),
    "accepts neither json nor sse": Door(post(SINGLE, accept="text/html"), 406, False, True),
    "accepts json only (benign)": Door(post(SINGLE, accept="application/json"), 200, True),
    # two readers, two values
    "a duplicate key (method)": Door(
        post(
            b'{"jsonrpc":"2.0","id":1,"method":"tools/list","method":"tools/call",'
            b'"params":{"name":"echo","arguments":{"text":"{m}"}}}'
        ),
        400,
        False,
        True,
    ),
    "a duplicate key (name)": Door(
        post(
            b'{"jsonrpc":"2.0","id":1,"method":"tools/call",'
            b'"params":{"name":"delete_file","name":"echo","arguments":{"text":"{m}"}}}'
        ),
        400,
        False,
        True,
    ),
    "pretty-printed, CRLF whitespace (benign)": Door(
        post(json.dumps(echo("{m}"), indent=2).replace("\n", "\r\n").encode()), 200, True
    ),
    "a NaN": Door(post(SINGLE.replace(b'"id": 1', b'"id": NaN')), 400, False, True),
    "an id that is a float": Door(post(SINGLE.replace(b'"id": 1', b'"id": 1.5')), 400, False, True),
    'jsonrpc "1.0"': Door(post(SINGLE.replace(b'"2.0"', b'"1.0"')), 400, False, True),
    "a lone surrogate in an argument (not text)": Door(
        post(SINGLE.replace(b'"text": "', b'"text": "\\ud800')), 400, False, True
    ),
    "a surrogate pair (benign: one character)": Door(
        post(SINGLE.replace(b'"text": "', b'"text": "\\ud83d\\ude00')), 200, True
    ),
    # the call is not a request
    "a tools/call as a notification": Door(
        post(body({k: v for k, v in echo("{m}").items() if k != "id"})), 400, False, True
    ),
    "a cancellation notification (benign)": Door(
        post(
            body(
                {"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 99}}
            )
        ),
        202,
        False,
    ),
    "a method that reads as tools/call": Door(
        post(SINGLE.replace(b'"tools/call"', b'"Tools/Call"')), 200, False, True
    ),
    "a tools/call smuggled in a GET": Door(get_with_a_call, 200, False),
    # headers that two readers could take two ways
    "two Authorization headers": Door(twice("authorization"), 400, False, True),
    "two Mcp-Session-Id headers": Door(twice("mcp-session-id"), 400, False, True),
    "another protocol version than the session's": Door(
        post(SINGLE, **{"mcp-protocol-version": "2025-06-18"}), 400, False, True
    ),
    "an unknown session": Door(
        post(SINGLE, **{"mcp-session-id": "no-such-session"}), 404, False, True
    ),
    "no session": Door(post(SINGLE, **{"mcp-session-id": ""}), 400, False, True),
    "PUT": Door(
        lambda raw, marker: raw.http.put(raw.url, content=SINGLE, headers=raw.headers()),
        405,
        False,
        True,
    ),
    # the per-request generation's routing headers must say what the body says
    "Mcp-Method says tools/list": Door(modern("tools/list", "echo"), 400, False, True),
    "Mcp-Name says another tool": Door(modern("tools/call", "whoami"), 400, False, True),
    "matching routing headers (benign)": Door(modern("tools/call", "echo"), 200, True),
    "a session id on a per-request call": Door(
        modern("tools/call", "echo", **{"mcp-session-id": "x"}), 400, False, True
    ),
}


@pytest.mark.parametrize("door", list(DOORS), ids=list(DOORS))
def test_a_door_is_refused_and_its_look_alike_passes(
    http_gateway: Gateway, raw: RawHttp, door: str
) -> None:
    case = DOORS[door]
    marker = f"door-{list(DOORS).index(door)}"
    response = case.send(raw, marker)
    assert response.status_code == case.status, response.text[:500]
    answer = [] if door == "a tools/call smuggled in a GET" else messages_of(response)
    if case.error:
        assert answer and "error" in answer[-1], answer
    elif case.status == 200 and answer:
        assert answer and "result" in answer[-1], answer
    texts = [entry["args"].get("text", "") for entry in reached(http_gateway.log)]
    assert any(marker in text for text in texts) == case.reaches


def test_a_live_request_id_cannot_be_reused(http_gateway: Gateway, raw: RawHttp) -> None:
    """While ``ask`` waits on the client (its sampling request), a second request
    under its id is refused; the first is then answered as usual."""
    ask = {
        "jsonrpc": "2.0",
        "id": 41,
        "method": "tools/call",
        "params": {"name": "ask", "arguments": {"question": "wait"}},
    }
    with raw.http.stream("POST", raw.url, content=body(ask), headers=raw.headers()) as stream:
        buffer, lines = "", stream.iter_text()
        while "sampling/createMessage" not in buffer:
            buffer += next(lines)
        again = raw.post(echo("door-reused", "41"))  # "41" and 41 are one id
        asked = next(m for m in sse_messages(buffer) if m.get("method"))
        answer = {"role": "assistant", "content": {"type": "text", "text": "ok"}, "model": "m"}
        raw.post({"jsonrpc": "2.0", "id": asked["id"], "result": answer})
        for text in lines:
            buffer += text
    assert again.status_code == 400 and "in use" in again.text
    assert sse_messages(buffer)[-1]["id"] == 41
    assert sse_messages(buffer)[-1]["result"]["content"][0]["text"] == "ok"
    assert "door-reused" not in json.dumps(reached(http_gateway.log))


def sse_messages(text: str) -> list[dict[str, Any]]:
    return [json.loads(e["data"]) for e in events_of(text) if e.get("data")]
