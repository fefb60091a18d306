"""An ASGI middleware that lets through only requests carrying a good grant for
exactly themselves — pure ASGI, any framework (Starlette, FastAPI, Django, ...).

For each HTTP request it reads the body (at most ``max_body`` bytes: 413 beyond), the
``Interlock-Grant`` header and the ``Idempotency-Key`` header, and verifies the grant
against what arrived (:class:`~interlock.verify.Verifier`: the method, the target as
sent — the raw path and query —, the body bytes, the idempotency key). A refusal is a
JSON answer and the app never runs::

    {"error": {"code": "grant_replayed", "message": "the grant 'g_1' was used before ..."}}

with the status of its code: 401 ``grant_invalid`` / ``unknown_key`` /
``bad_signature`` / ``grant_expired``, 403 ``wrong_audience`` / ``binding_mismatch``,
409 ``grant_replayed``, 413 ``body_too_large``, 503 ``keys_unavailable`` /
``nonce_store_unavailable``. A header sent twice is refused (which one would the app
read?). Otherwise the app runs with the :class:`~interlock.verify.VerifiedGrant` in
``scope["state"]["interlock_grant"]`` (Starlette: ``request.state.interlock_grant``)
and the body replayed to it.

With a ``receipt_key`` (the provider's own Ed25519 key, not Interlock's) the answer is
buffered (at most ``max_response`` bytes) and carries an ``Interlock-Receipt`` header:
a receipt (:mod:`interlock.verify.receipts`) of the grant, the binding, the status and
the body's digest. A larger answer is sent as it comes, without a receipt. WebSocket
connections are closed (code 1008) unless ``exempt`` lets them through; ``exempt``
(a function of the ASGI scope) names requests that need no grant (a health check).

Example::

    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
    from interlock.verify import GrantMiddleware, Verifier

    async def refunds(scope, receive, send):
        grant = scope["state"]["interlock_grant"]
        await send({"type": "http.response.start", "status": 201, "headers": []})
        await send({"type": "http.response.body", "body": grant.grant_id.encode()})

    interlock_keys = {"k1": Ed25519PrivateKey.generate().public_key()}
    app = GrantMiddleware(
        refunds,
        Verifier(interlock_keys, audience="shop"),
        receipt_key=Ed25519PrivateKey.generate(), receipt_kid="shop-1",
    )
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Awaitable, Callable, MutableMapping
from typing import TYPE_CHECKING, Any, Final
from urllib.parse import quote

from interlock.errors import (
    BindingMismatch,
    GrantError,
    GrantInvalid,
    GrantReplayed,
    KeysUnavailable,
    StoreError,
    WrongAudience,
)
from interlock.verify.receipts import ReceiptClaims, body_digest, sign_receipt

if TYPE_CHECKING:
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    from interlock.verify.verifier import VerifiedGrant, Verifier

__all__ = [
    "GRANT_HEADER",
    "STATE_KEY",
    "GrantMiddleware",
    "status_for",
]

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

GRANT_HEADER: Final = "Interlock-Grant"
STATE_KEY: Final = "interlock_grant"
_GRANT: Final = b"interlock-grant"
_IDEMPOTENCY: Final = b"idempotency-key"
_RECEIPT: Final = b"interlock-receipt"
_log = logging.getLogger("interlock.verify")
_PATH_SAFE: Final = "/!$&'()*+,;=:@-._~"
_ABSOLUTE: Final = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://[^/?#]*")


def status_for(error: GrantError) -> int:
    """The HTTP status a refusal for ``error`` answers with."""
    if isinstance(error, KeysUnavailable):
        return 503
    if isinstance(error, GrantReplayed):
        return 409
    if isinstance(error, (WrongAudience, BindingMismatch)):
        return 403
    return 401  # GrantInvalid, UnknownKey, BadSignature, GrantExpired: not a usable grant


class _BodyTooLarge(Exception):
    pass


class _Disconnected(Exception):
    pass


class GrantMiddleware:
    """Verifies the grant of every HTTP request before ``app`` sees it (see the module)."""

    def __init__(
        self,
        app: ASGIApp,
        verifier: Verifier,
        *,
        max_body: int = 1 << 20,
        receipt_key: Ed25519PrivateKey | None = None,
        receipt_kid: str | None = None,
        max_response: int = 4 << 20,
        exempt: Callable[[Scope], bool] | None = None,
    ) -> None:
        if (receipt_key is None) != (receipt_kid is None):
            raise ValueError("a receipt key needs its key id (receipt_kid), and the other way")
        if max_body < 0 or max_response < 0:
            raise ValueError("max_body and max_response are byte counts >= 0")
        self.app = app
        self.verifier = verifier
        self.max_body = max_body
        self.receipt_key = receipt_key
        self.receipt_kid = receipt_kid
        self.max_response = max_response
        self.exempt = exempt

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        kind = scope["type"]
        if kind == "lifespan" or (self.exempt is not None and self.exempt(scope)):
            await self.app(scope, receive, send)
            return
        if kind == "websocket":
            await send({"type": "websocket.close", "code": 1008, "reason": "grant required"})
            return
        if kind != "http":  # an unknown protocol is not let through unverified
            raise RuntimeError(f"GrantMiddleware cannot verify an ASGI {kind!r} connection")
        try:
            verified, body = await self._verify(scope, receive)
        except KeysUnavailable as exc:  # the provider's outage: details to its log only
            _log.error("grant refused, the verifier has no keys: %s", exc)
            await _refuse(send, 503, exc.code, "the provider cannot verify grants right now")
            return
        except GrantError as exc:
            await _refuse(send, status_for(exc), exc.code, str(exc))
            return
        except StoreError as exc:
            _log.error("grant refused, the nonce store failed: %s", exc)
            await _refuse(
                send, 503, "nonce_store_unavailable", "the provider cannot refuse replays right now"
            )
            return
        except _BodyTooLarge:
            await _refuse(
                send,
                413,
                "body_too_large",
                f"the request body is larger than {self.max_body} bytes",
            )
            return
        except _Disconnected:
            return
        scope.setdefault("state", {})[STATE_KEY] = verified
        replayed = False

        async def replay() -> Message:
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()

        if self.receipt_key is None:
            await self.app(scope, replay, send)
        else:
            await self.app(scope, replay, _ReceiptSender(self, verified, send))

    async def _verify(self, scope: Scope, receive: Receive) -> tuple[VerifiedGrant, bytes]:
        grants = _values(scope, _GRANT)
        if not grants:
            raise GrantInvalid(f"the request carries no {GRANT_HEADER} header")
        if len(grants) > 1:
            raise GrantInvalid(f"the request carries {len(grants)} {GRANT_HEADER} headers")
        keys = _values(scope, _IDEMPOTENCY)
        if len(keys) > 1:
            raise BindingMismatch(f"the request carries {len(keys)} Idempotency-Key headers")
        try:
            token = grants[0].decode("ascii")
        except UnicodeDecodeError as exc:
            raise GrantInvalid(f"the {GRANT_HEADER} header is not ASCII") from exc
        body = await self._body(scope, receive)
        return await self.verifier.averify(
            token.strip(),
            method=scope["method"],
            target=_target(scope),
            body=body,
            idempotency_key=keys[0].decode("latin-1") if keys else None,
        ), body

    async def _body(self, scope: Scope, receive: Receive) -> bytes:
        lengths = _values(scope, b"content-length")
        if lengths and lengths[0].isdigit() and int(lengths[0]) > self.max_body:
            raise _BodyTooLarge
        chunks: list[bytes] = []
        size = 0
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                raise _Disconnected
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > self.max_body:
                raise _BodyTooLarge
            chunks.append(chunk)
            if not message.get("more_body", False):
                return b"".join(chunks)


class _ReceiptSender:
    """``send`` for the app: buffers its answer, then sends it with a receipt (or, past
    ``max_response`` bytes, as it comes, without one)."""

    def __init__(self, owner: GrantMiddleware, verified: VerifiedGrant, send: Send) -> None:
        self._owner = owner
        self._verified = verified
        self._send = send
        self._start: Message | None = None
        self._chunks: list[bytes] = []
        self._size = 0
        self._passing = False

    async def __call__(self, message: Message) -> None:
        if self._passing:
            await self._send(message)
        elif message["type"] == "http.response.start" and not message.get("trailers"):
            self._start = message
        elif message["type"] == "http.response.body" and self._start is not None:
            chunk = bytes(message.get("body", b""))
            self._size += len(chunk)
            self._chunks.append(chunk)
            if self._size > self._owner.max_response:
                await self._flush(more_body=message.get("more_body", False))
            elif not message.get("more_body", False):
                await self._finish()
        else:  # trailers, a push, a path send: not something a receipt covers
            await self._flush(more_body=True)
            await self._send(message)

    async def _flush(self, *, more_body: bool) -> None:
        self._passing = True
        if self._start is not None:
            await self._send(self._start)
            await self._send(
                {
                    "type": "http.response.body",
                    "body": b"".join(self._chunks),
                    "more_body": more_body,
                }
            )
        self._chunks = []

    async def _finish(self) -> None:
        assert self._start is not None
        owner, claims = self._owner, self._verified.claims
        body = b"".join(self._chunks)
        receipt = ReceiptClaims(
            grant_id=claims.grant_id,
            issuer=owner.verifier.audience,
            binding=self._verified.binding,
            intent_hash=claims.intent_hash,
            status=int(self._start["status"]),
            body_digest=body_digest(body),
            issued_at=int(owner.verifier.clock()),
        )
        assert owner.receipt_key is not None and owner.receipt_kid is not None
        token = sign_receipt(receipt, owner.receipt_key, kid=owner.receipt_kid)
        headers = [(k, v) for k, v in self._start.get("headers", []) if k.lower() != _RECEIPT]
        self._passing = True
        await self._send({**self._start, "headers": [*headers, (_RECEIPT, token.encode())]})
        await self._send({"type": "http.response.body", "body": body, "more_body": False})


def _values(scope: Scope, name: bytes) -> list[bytes]:
    return [value for key, value in scope.get("headers", ()) if key.lower() == name]


def _target(scope: Scope) -> str:
    """The request target as sent: the raw path (the server's bytes, not the decoded
    ``path``: ``/a%2Fb`` is not ``/a/b``) and the query string. A target sent in
    absolute form (``http://host/path``, RFC 9112 §3.2.2), which some servers pass on
    as it came, is its path: the authority is not part of the binding."""
    raw = scope.get("raw_path")
    path = raw.decode("latin-1") if raw else quote(scope["path"], safe=_PATH_SAFE)
    if absolute := _ABSOLUTE.match(path):
        path = path[absolute.end() :] or "/"
    query = scope.get("query_string", b"")
    return f"{path}?{query.decode('latin-1')}" if query else path


async def _refuse(send: Send, status: int, code: str, message: str) -> None:
    body = json.dumps({"error": {"code": code, "message": message}}).encode()
    headers = [
        (b"content-type", b"application/json"),
        (b"content-length", str(len(body)).encode()),
        (b"cache-control", b"no-store"),
    ]
    if status == 401:
        headers.append((b"www-authenticate", GRANT_HEADER.encode()))
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body, "more_body": False})
