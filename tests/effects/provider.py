"""A provider stand-in for the effect tests: a small ASGI app on a real uvicorn socket.

It refunds orders, once per ``Idempotency-Key``: the key is recorded with its answer
in the same step as the effect (a lock stands in for the provider's transaction), a
repeated key gets the stored answer, ``GET /idempotency/{key}`` looks a key up (200 with
the stored answer, 404 for a key never seen). In the tests it sits behind
:class:`interlock.verify.GrantMiddleware` (:func:`guarded`), which refuses a request
whose grant does not verify before the app sees it and signs a receipt of each answer;
the lookup is exempt. ``hold`` makes it keep its answer after committing until
released (the test kills the agent meanwhile); ``committed`` is set once an effect
happened.
"""

from __future__ import annotations

import json
import socket
import threading
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any
from urllib.parse import unquote

import uvicorn

Scope = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]
Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]


class Provider:
    """The app and its state (shared with the test thread)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.answers: dict[str, tuple[int, dict[str, Any]]] = {}
        self.effects: list[dict[str, Any]] = []  # what happened, in order
        self.seen_grants: list[str] = []
        self.hold = threading.Event()  # set: hold answers after committing
        self.released = threading.Event()
        self.committed = threading.Event()
        self.receipt_jwks: dict[str, Any] = {}

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return
        body = b""
        while True:
            message = await receive()
            body += message.get("body", b"")
            if not message.get("more_body"):
                break
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}
        path = scope["path"]
        target = scope["raw_path"].decode("latin-1")
        if scope["query_string"]:
            target += "?" + scope["query_string"].decode("latin-1")
        if scope["method"] == "GET" and path.startswith("/idempotency/"):
            key = unquote(scope["raw_path"].decode("latin-1")[len("/idempotency/") :])
            with self.lock:
                stored = self.answers.get(key)
            if stored is None:
                await _answer(send, 404, {"error": "unknown key"})
            else:
                await _answer(send, 200, {"status": stored[0], "body": stored[1]})
            return
        key = headers.get("idempotency-key")
        if not key:
            await _answer(send, 400, {"error": "no Idempotency-Key"})
            return
        with self.lock:
            stored = self.answers.get(key)
        if stored is not None:  # the key's answer again, nothing done
            await _answer(send, *stored)
            return
        verified = scope.get("state", {}).get("interlock_grant")
        if verified is not None:  # what the middleware let through
            self.seen_grants.append(verified.grant_id)
        if body and json.loads(body).get("amount", 0) > 1000:
            answer: tuple[int, dict[str, Any]] = (422, {"error": "amount too large"})
        else:
            with self.lock:
                stored = self.answers.get(key)
                if stored is None:
                    self.effects.append({"key": key, "target": target, "body": body.decode()})
                    answer = (201, {"refund": len(self.effects), "target": target})
                else:
                    answer = stored
        with self.lock:
            self.answers.setdefault(key, answer)
        self.committed.set()
        if self.hold.is_set():
            import asyncio

            while not self.released.is_set():
                await asyncio.sleep(0.01)
        await _answer(send, *answer)


async def _answer(send: Send, status: int, body: dict[str, Any]) -> None:
    data = json.dumps(body).encode()
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [(b"content-type", b"application/json")],
        }
    )
    await send({"type": "http.response.body", "body": data})


def is_lookup(scope: Scope) -> bool:
    return scope.get("method") == "GET" and str(scope.get("path", "")).startswith("/idempotency/")


def guarded(app: Provider, interlock_jwks: Callable[[], dict[str, Any]]) -> tuple[Any, Any]:
    """``app`` behind the verify middleware (audience ``shop``), and the public JWK set
    of the provider's own receipt key (what the caller checks receipts with)."""
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    from interlock.verify import GrantMiddleware, Verifier
    from interlock.verify.tokens import public_jwk

    receipt_key = Ed25519PrivateKey.generate()
    verifier = Verifier(interlock_jwks, audience="shop")
    wrapped = GrantMiddleware(
        app, verifier, receipt_key=receipt_key, receipt_kid="shop-1", exempt=is_lookup
    )
    return wrapped, {"keys": [public_jwk("shop-1", receipt_key.public_key())]}


class Served:
    """An ASGI app served by uvicorn on 127.0.0.1 (a real socket), in a thread."""

    def __init__(self, app: Any) -> None:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"
        config = uvicorn.Config(app, log_level="warning", lifespan="off")
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

    def close(self) -> None:
        self.server.should_exit = True
        self.thread.join(10)
        self.sock.close()
