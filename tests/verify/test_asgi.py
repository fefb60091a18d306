"""The middleware's edges, driven as ASGI (the socket tests are test_provider.py and
test_adversarial.py): what is not HTTP, a client that leaves mid-body, a store or a key
set that is down (503, fail closed), and an app that tries to sign for itself."""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

import pytest

from interlock.errors import StoreUnavailable
from interlock.verify import GrantMiddleware, Verifier
from interlock.verify.nonces import MemoryNonceStore
from interlock.verify.receipts import read_receipt

from .support import JWKS, PROVIDER_JWKS, PROVIDER_KEY, Clock, Req, grant_for


class App:
    def __init__(self) -> None:
        self.calls: list[dict[str, Any]] = []

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "lifespan":
            self.calls.append({"lifespan": True})
            return
        message = await receive()
        self.calls.append({"body": message["body"], "grant": scope["state"]["interlock_grant"]})
        await send(
            {
                "type": "http.response.start",
                "status": 200,
                "headers": [(b"interlock-receipt", b"forged.by.app")],
            }
        )
        await send({"type": "http.response.body", "body": b"part 1, ", "more_body": True})
        await send({"type": "http.response.body", "body": b"part 2"})


def scope_of(request: Req, headers: Iterable[tuple[bytes, bytes]]) -> dict[str, Any]:
    path, _, query = request.target.partition("?")
    return {
        "type": "http",
        "method": request.method,
        "path": path,
        "raw_path": path.encode(),
        "query_string": query.encode(),
        "headers": list(headers),
    }


async def drive(
    middleware: GrantMiddleware, scope: dict[str, Any], messages: list[dict[str, Any]]
) -> list[dict[str, Any]]:
    incoming = list(messages)
    sent: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        return incoming.pop(0) if incoming else {"type": "http.disconnect"}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    await middleware(scope, receive, send)
    return sent


def granted_headers(request: Req, token: str) -> list[tuple[bytes, bytes]]:
    return [(b"interlock-grant", token.encode()), (b"idempotency-key", b"refund-42-1")]


def middleware(app: App, nonces: Any = None, keys: Any = JWKS, **options: Any) -> GrantMiddleware:
    verifier = Verifier(keys, audience="shop", clock=Clock(), nonces=nonces)
    return GrantMiddleware(app, verifier, **options)


async def test_the_app_sees_the_body_once_and_the_verified_grant() -> None:
    app = App()
    request = Req()
    body = [
        {"type": "http.request", "body": request.body[:5], "more_body": True},
        {"type": "http.request", "body": request.body[5:]},
    ]
    sent = await drive(
        middleware(app), scope_of(request, granted_headers(request, grant_for())), body
    )
    assert [c["body"] for c in app.calls] == [request.body]
    assert app.calls[0]["grant"].binding == request.binding()
    assert sent[0]["status"] == 200


async def test_an_apps_own_receipt_header_is_replaced_by_the_signed_one() -> None:
    app = App()
    request = Req()
    sent = await drive(
        middleware(app, receipt_key=PROVIDER_KEY, receipt_kid="shop-1"),
        scope_of(request, granted_headers(request, grant_for())),
        [{"type": "http.request", "body": request.body}],
    )
    receipts = [v for k, v in sent[0]["headers"] if k == b"interlock-receipt"]
    assert len(receipts) == 1 and receipts[0] != b"forged.by.app"
    claims = read_receipt(receipts[0].decode(), PROVIDER_JWKS)
    assert claims.status == 200 and claims.binding == request.binding()
    assert [m.get("body") for m in sent[1:]] == [b"part 1, part 2"]  # buffered, one piece


async def test_a_client_gone_mid_body_runs_nothing_and_burns_no_nonce() -> None:
    app, nonces = App(), MemoryNonceStore()
    request = Req()
    sent = await drive(
        middleware(app, nonces),
        scope_of(request, granted_headers(request, grant_for())),
        [{"type": "http.request", "body": request.body[:5], "more_body": True}],
    )
    assert sent == [] and app.calls == [] and len(nonces) == 0


class DownStore(MemoryNonceStore):
    def consume(self, nonce: str, *, keep_until: int, now: float) -> bool:
        raise StoreUnavailable("the database is down")

    async def aconsume(self, nonce: str, *, keep_until: int, now: float) -> bool:
        raise StoreUnavailable("the database is down")


def _error(sent: list[dict[str, Any]]) -> tuple[int, str]:
    return sent[0]["status"], json.loads(sent[1]["body"])["error"]["code"]


async def test_a_store_that_is_down_fails_closed_with_503(
    caplog: pytest.LogCaptureFixture,
) -> None:
    app = App()
    request = Req()
    sent = await drive(
        middleware(app, DownStore()),
        scope_of(request, granted_headers(request, grant_for())),
        [{"type": "http.request", "body": request.body}],
    )
    assert _error(sent) == (503, "nonce_store_unavailable") and app.calls == []
    assert "database is down" not in sent[1]["body"].decode()  # details: the log's only
    assert "the database is down" in caplog.text


async def test_keys_that_cannot_be_fetched_fail_closed_with_503(
    caplog: pytest.LogCaptureFixture,
) -> None:
    def fetch() -> dict[str, Any]:
        raise OSError("no route to host")

    app = App()
    request = Req()
    sent = await drive(
        middleware(app, keys=fetch),
        scope_of(request, granted_headers(request, grant_for())),
        [{"type": "http.request", "body": request.body}],
    )
    assert _error(sent) == (503, "keys_unavailable") and app.calls == []
    assert "no route to host" not in sent[1]["body"].decode()
    assert "no route to host" in caplog.text


async def test_a_websocket_is_closed_unless_exempt() -> None:
    app = App()
    sent = await drive(middleware(app), {"type": "websocket", "path": "/ws", "headers": []}, [])
    assert sent == [{"type": "websocket.close", "code": 1008, "reason": "grant required"}]


async def test_lifespan_passes_through() -> None:
    app = App()
    await drive(middleware(app), {"type": "lifespan"}, [])
    assert app.calls == [{"lifespan": True}]


async def test_an_unknown_protocol_is_not_let_through() -> None:
    with pytest.raises(RuntimeError, match="cannot verify"):
        await drive(middleware(App()), {"type": "webtransport"}, [])


async def test_a_scope_without_raw_path_binds_the_encoded_path() -> None:
    app = App()
    request = Req(target="/refunds/a%20b")
    scope = scope_of(request, granted_headers(request, grant_for(request)))
    scope.pop("raw_path")
    scope["path"] = "/refunds/a b"
    sent = await drive(middleware(app), scope, [{"type": "http.request", "body": request.body}])
    assert sent[0]["status"] == 200


def test_a_receipt_key_needs_its_id() -> None:
    with pytest.raises(ValueError, match="receipt_kid"):
        middleware(App(), receipt_key=PROVIDER_KEY)
