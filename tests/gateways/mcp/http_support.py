"""Pieces of the HTTP gateway tests: an ASGI app under uvicorn on a real port (in a
thread of its own), the gateway itself (the real :class:`HttpGateway` on a store
holding the test keys), MCP clients over HTTP with a key, and a raw JSON-RPC over
HTTP client for the wire-level tests."""

from __future__ import annotations

import contextlib
import json
import os
import socket
import sys
import threading
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import httpx2
import uvicorn
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from starlette.types import ASGIApp

from interlock import Guard, load_policy_text
from interlock.gateways.mcp.config import GatewayConfig, UpstreamSpec
from interlock.gateways.mcp.http_auth import StoreKeys
from interlock.gateways.mcp.http_server import HttpGateway, HttpOptions, relays_for
from interlock.server.keys import KeyStore, Role

from .support import UPSTREAM, WAIT, base_env

INIT = {
    "jsonrpc": "2.0",
    "id": 0,
    "method": "initialize",
    "params": {
        "protocolVersion": "2025-11-25",
        "capabilities": {"sampling": {}, "elicitation": {}, "roots": {"listChanged": True}},
        "clientInfo": {"name": "raw-http-test", "version": "1"},
    },
}
INITIALIZED = {"jsonrpc": "2.0", "method": "notifications/initialized"}
SSE_AND_JSON = "application/json, text/event-stream"

HTTP_POLICY = """\
version: 1
default: deny
approvals:
  url: https://approvals.example.com/a/{id}
rules:
  - id: allow-safe
    decision: allow
    reason: safe tools
    name: [echo, fail, count, ask, confirm, roots, chatty]
  - id: no-deletes
    decision: deny
    reason: deleting files is not allowed
    name: delete_file
  - id: big-echo-needs-a-human
    decision: require_approval
    reason: a human reads loud echoes first
    name: echo
    when: "args.text.startsWith('LOUD')"
  - id: whoami-for-the-bot
    decision: allow
    reason: the bot may ask who the upstream is
    name: whoami
    agent: bot
  - id: the-server-may-sample
    decision: allow
    reason: the test server may ask the client's model
    kind: llm
    name: mcp-sampling
"""

#: One unnamed stdio upstream (the test server), relayed byte for byte.
TRANSPARENT = GatewayConfig((UpstreamSpec(None, command=(sys.executable, str(UPSTREAM))),))


class Uvicorn:
    """``app`` served on 127.0.0.1 at a free port, in a thread with its own loop."""

    def __init__(self, app: ASGIApp, *, lifespan: str = "on") -> None:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        config = uvicorn.Config(
            app, log_level="warning", lifespan=lifespan, timeout_graceful_shutdown=1
        )
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(
            target=self.server.run, kwargs={"sockets": [self.sock]}, daemon=True
        )
        self.thread.start()
        for _ in range(4000):
            if self.server.started:
                break
            threading.Event().wait(0.005)
        assert self.server.started

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def close(self) -> None:
        self.server.should_exit = True
        self.thread.join(WAIT)
        self.sock.close()


@dataclass
class Keys:
    bot: str  # agent "bot", tenant acme
    other: str  # agent "other", tenant beta
    approver: str
    revoked: str


class Gateway:
    """The real HTTP gateway, in front of ``config``'s upstreams, on a store with the
    test keys; ``log`` is the stdio test servers' record."""

    def __init__(
        self,
        tmp: Path,
        policy: str,
        config: GatewayConfig,
        *,
        idle_timeout: float = 1800.0,
        max_sessions: int = 64,
        max_body_bytes: int = 4 * 1024 * 1024,
        **session_options: Any,
    ) -> None:
        self.log = tmp / "upstream.jsonl"
        self.config = config
        self.guard = Guard(load_policy_text(policy), store=f"sqlite:///{tmp / 'gateway.db'}")
        assert self.guard.store is not None
        keys = KeyStore(self.guard.store)
        revoked = keys.create(tenant="acme", role=Role.AGENT, name="gone")
        keys.revoke(revoked.key.id)
        self.keys = Keys(
            bot=keys.create(tenant="acme", role=Role.AGENT, name="bot").token,
            other=keys.create(tenant="beta", role=Role.AGENT, name="other").token,
            approver=keys.create(tenant="acme", role=Role.APPROVER, name="alice").token,
            revoked=revoked.token,
        )
        env = {**base_env(), "MCP_TEST_LOG": str(self.log)}
        options = HttpOptions.for_bind(
            "127.0.0.1",
            idle_timeout=idle_timeout,
            max_sessions=max_sessions,
            max_body_bytes=max_body_bytes,
        )
        self.gateway = HttpGateway(
            StoreKeys(self.guard, keys),
            relays_for(config, env, grace=2.0, **session_options),
            options,
        )
        self.server = Uvicorn(self.gateway.app())

    @property
    def url(self) -> str:
        return f"{self.server.url}/mcp"

    def pids(self) -> set[int]:
        """The upstream processes of the open sessions."""
        found = set()
        for session in [*self.gateway.sessions.values(), *self.gateway.lanes.values()]:
            assert session.relay is not None
            for upstream in session.relay.upstreams:
                process = getattr(upstream, "_process", None)
                if process is not None and process.returncode is None:
                    found.add(process.pid)
        return found

    def close(self) -> None:
        self.server.close()
        self.guard.close()


def alive(pid: int) -> bool:
    """The process exists and is not a zombie."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii") as stat:
            return stat.read().split(") ")[-1][:1] != "Z"
    except FileNotFoundError:
        return False


def wait_until(condition: Any, what: str) -> None:
    """Poll ``condition`` until it holds; fail (not hang) after ``WAIT`` seconds."""
    for _ in range(int(WAIT / 0.02)):
        if condition():
            return
        threading.Event().wait(0.02)
    raise AssertionError(f"never happened: {what}")


@contextlib.asynccontextmanager
async def http_client(url: str, key: str | None, **options: Any) -> AsyncIterator[Client]:
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    async with (
        httpx2.AsyncClient(headers=headers, timeout=WAIT) as http,
        Client(streamable_http_client(url, http_client=http), **options) as client,
    ):
        yield client


class RawHttp:
    """JSON-RPC over HTTP by hand: a session's POSTs, their SSE or JSON answers."""

    def __init__(self, url: str, key: str | None) -> None:
        self.url = url
        self.http = httpx.Client(timeout=WAIT)
        self.key = key
        self.session_id: str | None = None
        self.version: str | None = None

    def headers(self, **extra: str) -> dict[str, str]:
        headers = {"content-type": "application/json", "accept": SSE_AND_JSON}
        if self.key:
            headers["authorization"] = f"Bearer {self.key}"
        if self.session_id:
            headers["mcp-session-id"] = self.session_id
        if self.version:
            headers["mcp-protocol-version"] = self.version
        headers.update(extra)
        return {k: v for k, v in headers.items() if v != ""}

    def post(self, body: Any, **headers: str) -> httpx.Response:
        content = body if isinstance(body, bytes) else json.dumps(body).encode()
        return self.http.post(self.url, content=content, headers=self.headers(**headers))

    def call(self, body: dict[str, Any], **headers: str) -> tuple[httpx.Response, list[Any]]:
        """POST a message; the answer and the JSON messages it carried."""
        response = self.post(body, **headers)
        return response, messages_of(response)

    def handshake(self) -> dict[str, Any]:
        response, messages = self.call(INIT)
        assert response.status_code == 200, response.text
        self.session_id = response.headers["mcp-session-id"]
        self.version = messages[-1]["result"]["protocolVersion"]
        assert self.post(INITIALIZED).status_code == 202
        return messages[-1]  # type: ignore[no-any-return]

    def delete(self) -> httpx.Response:
        return self.http.delete(self.url, headers=self.headers())

    def close(self) -> None:
        self.http.close()


def events_of(text: str) -> list[dict[str, str]]:
    """The SSE events of a body: their fields (``data`` joined)."""
    events = []
    for block in text.replace("\r\n", "\n").split("\n\n"):
        fields: dict[str, str] = {}
        for line in block.split("\n"):
            if not line or line.startswith(":"):
                continue
            name, _, value = line.partition(":")
            value = value[1:] if value.startswith(" ") else value
            fields[name] = fields[name] + "\n" + value if name in fields else value
        if fields:
            events.append(fields)
    return events


def messages_of(response: httpx.Response) -> list[Any]:
    kind = response.headers.get("content-type", "")
    if kind.startswith("text/event-stream"):
        return [json.loads(e["data"]) for e in events_of(response.text) if e.get("data")]
    if kind.startswith("application/json") and response.content:
        return [response.json()]
    return []


@contextlib.contextmanager
def environ(**values: str) -> Iterator[None]:
    saved = {name: os.environ.get(name) for name in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
