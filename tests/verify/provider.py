"""A provider stand-in: a small refunds service (Starlette) behind the grant middleware,
served by uvicorn on a real socket, and a caller's grant issuer (what
``guard.issue_grant`` does, here with the test's fixed key)."""

from __future__ import annotations

import http.client
import json
import socket
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from interlock.verify import GrantMiddleware, Verifier
from interlock.verify.binding import http_binding
from interlock.verify.keys import Keys
from interlock.verify.tokens import GrantClaims, sign_grant

from .support import AUDIENCE, INTERLOCK_KEY, NOW, PROVIDER_KEY, Clock

__all__ = ["Answer", "Provider", "Served", "issue", "send_raw"]


@dataclass
class Provider:
    """The refunds service: what it did (``effects``) and the ASGI app behind the
    middleware."""

    keys: Keys
    clock: Clock = field(default_factory=Clock)
    effects: list[dict[str, Any]] = field(default_factory=list)
    receipts: bool = True

    def app(self, **options: Any) -> GrantMiddleware:
        async def refund(request: Request) -> JSONResponse:
            grant = request.state.interlock_grant
            order = request.path_params["order"]
            effect = {"order": order, "body": await request.json(), "grant": grant.grant_id}
            self.effects.append(effect)
            return JSONResponse({"refund": f"r_{len(self.effects)}", **effect}, status_code=201)

        async def health(request: Request) -> JSONResponse:
            return JSONResponse({"ok": True})

        inner = Starlette(
            routes=[
                Route("/refunds/{order}", refund, methods=["POST"]),
                Route("/refunds", refund_by_query(self), methods=["POST"]),
                Route("/health", health, methods=["GET"]),
            ]
        )
        verifier = Verifier(self.keys, audience=AUDIENCE, clock=self.clock)
        if self.receipts:
            options.setdefault("receipt_key", PROVIDER_KEY)
            options.setdefault("receipt_kid", "shop-1")
        return GrantMiddleware(inner, verifier, **options)


def refund_by_query(provider: Provider) -> Callable[[Request], Any]:
    async def refund(request: Request) -> JSONResponse:
        grant = request.state.interlock_grant
        effect = {
            "order": request.query_params.get("order"),
            "body": await request.json(),
            "grant": grant.grant_id,
        }
        provider.effects.append(effect)
        return JSONResponse({"refund": f"r_{len(provider.effects)}", **effect}, status_code=201)

    return refund


class Served:
    """An ASGI app served by uvicorn in a thread, on a free port of 127.0.0.1."""

    def __init__(self, app: Any, *, http: str = "auto") -> None:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"
        config = uvicorn.Config(app, log_level="critical", lifespan="off", http=http)
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(
            target=self.server.run, kwargs={"sockets": [self.sock]}, daemon=True
        )
        self.thread.start()
        started = threading.Event()
        for _ in range(4000):
            if self.server.started:
                break
            started.wait(0.005)
        assert self.server.started

    def close(self) -> None:
        self.server.should_exit = True
        self.thread.join()
        self.sock.close()


def issue(
    method: str,
    target: str,
    body: bytes,
    idempotency_key: str | None,
    *,
    grant_id: str,
    audience: str = AUDIENCE,
    expires_at: int = NOW + 60,
    key: Any = INTERLOCK_KEY,
    kid: str = "k1",
) -> str:
    """A grant for exactly this request (what the authority issues)."""
    claims = GrantClaims(
        grant_id=grant_id,
        issuer="interlock",
        audience=audience,
        tenant="acme",
        agent="support-bot",
        intent_hash="sha256:" + "c" * 64,
        binding=http_binding(method, target, body, idempotency_key, audience=audience),
        issued_at=min(NOW, expires_at - 60),
        expires_at=expires_at,
    )
    return sign_grant(claims, key, kid=kid)


@dataclass(frozen=True)
class Answer:
    status: int
    json: Any
    headers: list[tuple[str, str]]


def send_raw(
    port: int,
    method: str,
    target: str,
    headers: Sequence[tuple[str, str]],
    body: bytes | Sequence[bytes],
) -> Answer:
    """One request with exactly these bytes: the target as given (never normalised),
    headers in this order and case (repeats kept), the body in one piece or chunked
    (a sequence of chunks)."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    try:
        conn.putrequest(method, target, skip_host=True, skip_accept_encoding=True)
        names = {name.lower() for name, _ in headers}
        if "host" not in names:
            conn.putheader("Host", f"127.0.0.1:{port}")
        for name, value in headers:
            conn.putheader(name, value)
        if isinstance(body, bytes):
            conn.putheader("Content-Length", str(len(body)))
            conn.endheaders(body)
        else:
            conn.putheader("Transfer-Encoding", "chunked")
            conn.endheaders()
            for chunk in body:
                conn.send(f"{len(chunk):x}\r\n".encode() + chunk + b"\r\n")
            conn.send(b"0\r\n\r\n")
        response = conn.getresponse()
        data = response.read()
        is_json = response.getheader("content-type", "").startswith("application/json")
        parsed = json.loads(data) if is_json else data.decode("latin-1")
        return Answer(response.status, parsed, response.getheaders())
    finally:
        conn.close()
