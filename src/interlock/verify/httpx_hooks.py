"""The caller's side, for httpx: attach a grant to a request, check the receipt of its
answer.

:class:`GrantAuth` (an ``httpx.Auth``, for ``Client`` and ``AsyncClient``) gives each
request an ``Idempotency-Key`` when it has none, then asks ``grant_for(method, target,
body, idempotency_key)`` for a grant token for exactly that request — ``target`` is
the path and query as they go on the wire, ``body`` the bytes — and sends it in the
``Interlock-Grant`` header. ``grant_for`` may be a coroutine function under
``AsyncClient``.

:func:`receipt_hook` / :func:`areceipt_hook` build a response event hook that checks
the provider's ``Interlock-Receipt`` against the grant the request carried, the
status and the body that arrived (:func:`~interlock.verify.receipts.check_receipt`):
a missing (when required), forged or mismatched receipt raises
:class:`~interlock.errors.ReceiptError` — with the provider's error ``code`` when it
refused the grant. The checked claims and the token are kept in
``response.extensions["interlock_receipt"]`` / ``["interlock_receipt_token"]`` for the
audit. Requests sent without a grant are not checked.

Example::

    import httpx
    from interlock.verify.httpx_hooks import GrantAuth, receipt_hook

    def grant_for(method, target, body, idempotency_key):
        return "<a grant token from guard.issue_grant(...)>"

    provider_jwks = {"keys": []}  # the provider's receipt keys
    client = httpx.Client(
        auth=GrantAuth(grant_for),
        event_hooks={"response": [receipt_hook(provider_jwks)]},
    )
    client.close()
"""

from __future__ import annotations

import inspect
import json
import uuid
from collections.abc import Awaitable, Callable, Generator, Mapping
from typing import TYPE_CHECKING, Any

try:
    import httpx
except ImportError as exc:  # pragma: no cover - httpx is installed where tests run
    raise ImportError(
        "interlock.verify.httpx_hooks needs httpx: pip install 'interlock[remote]'"
    ) from exc

from interlock.errors import GrantError, ReceiptError
from interlock.verify.asgi import GRANT_HEADER
from interlock.verify.binding import IDEMPOTENCY_HEADER
from interlock.verify.receipts import RECEIPT_HEADER, ReceiptClaims, check_receipt
from interlock.verify.tokens import GrantClaims, b64url_decode

if TYPE_CHECKING:
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

__all__ = ["GrantAuth", "areceipt_hook", "receipt_hook", "request_target"]

GrantFor = Callable[[str, str, bytes, str], "str | Awaitable[str]"]
ProviderKeys = Mapping[str, "Ed25519PublicKey"] | Mapping[str, Any]


def request_target(request: httpx.Request) -> str:
    """The request target as it goes on the wire: the raw path and query."""
    return request.url.raw_path.decode("ascii")


class GrantAuth(httpx.Auth):
    """Attaches a grant for exactly this request (see the module). ``idempotency_key``
    makes the key of a request that has none (default: a random UUID)."""

    requires_request_body = True

    def __init__(
        self,
        grant_for: GrantFor,
        *,
        idempotency_key: Callable[[], str] = lambda: str(uuid.uuid4()),
    ) -> None:
        self._grant_for = grant_for
        self._idempotency_key = idempotency_key

    def _arguments(self, request: httpx.Request) -> tuple[str, str, bytes, str]:
        keys = request.headers.get_list(IDEMPOTENCY_HEADER)
        if len(keys) > 1:
            raise GrantError(f"the request carries {len(keys)} {IDEMPOTENCY_HEADER} headers")
        if not keys:
            request.headers[IDEMPOTENCY_HEADER] = self._idempotency_key()
        key = request.headers[IDEMPOTENCY_HEADER]
        return request.method, request_target(request), request.content, key

    def sync_auth_flow(self, request: httpx.Request) -> Generator[httpx.Request, httpx.Response]:
        request.read()
        token = self._grant_for(*self._arguments(request))
        if inspect.isawaitable(token):
            raise TypeError("grant_for returned an awaitable: use it with httpx.AsyncClient")
        request.headers[GRANT_HEADER] = token
        yield request

    async def async_auth_flow(
        self, request: httpx.Request
    ) -> Any:  # AsyncGenerator[httpx.Request, httpx.Response]
        await request.aread()
        token = self._grant_for(*self._arguments(request))
        if inspect.isawaitable(token):
            token = await token
        request.headers[GRANT_HEADER] = token
        yield request


def receipt_hook(
    provider_keys: ProviderKeys, *, require: bool = True
) -> Callable[[httpx.Response], None]:
    """A response hook for ``httpx.Client`` (see the module)."""

    def check(response: httpx.Response) -> None:
        if _grant_of(response) is not None:
            response.read()
            _check(response, provider_keys, require=require)

    return check


def areceipt_hook(
    provider_keys: ProviderKeys, *, require: bool = True
) -> Callable[[httpx.Response], Awaitable[None]]:
    """A response hook for ``httpx.AsyncClient`` (see the module)."""

    async def check(response: httpx.Response) -> None:
        if _grant_of(response) is not None:
            await response.aread()
            _check(response, provider_keys, require=require)

    return check


def _grant_of(response: httpx.Response) -> GrantClaims | None:
    """The claims of the grant the request carried — the caller's own token, read
    without a key: what it says is what the receipt must repeat."""
    tokens = response.request.headers.get_list(GRANT_HEADER)
    if not tokens:
        return None
    try:
        payload = json.loads(b64url_decode(tokens[0].split(".")[1], what="grant's payload"))
        return GrantClaims.from_payload(payload)
    except (GrantError, ValueError, IndexError) as exc:
        raise ReceiptError(f"the request's own grant cannot be read: {exc}") from exc


def _check(response: httpx.Response, provider_keys: ProviderKeys, *, require: bool) -> None:
    grant = _grant_of(response)
    assert grant is not None
    receipts = response.headers.get_list(RECEIPT_HEADER)
    if len(receipts) > 1:
        raise ReceiptError(
            f"the provider answered with {len(receipts)} receipts", status=response.status_code
        )
    if not receipts:
        if require:
            raise _missing(response)
        return
    claims: ReceiptClaims = check_receipt(
        receipts[0], provider_keys, grant=grant, status=response.status_code, body=response.content
    )
    response.extensions["interlock_receipt"] = claims
    response.extensions["interlock_receipt_token"] = receipts[0]


def _missing(response: httpx.Response) -> ReceiptError:
    code = message = None
    try:
        error = response.json()["error"]
        code, message = str(error["code"]), str(error.get("message", ""))
    except Exception:  # not the verifier's refusal: no code to report
        pass
    refused = f": it refused the grant ({code}: {message})" if code else ""
    return ReceiptError(
        f"the provider answered {response.status_code} without a receipt{refused}",
        status=response.status_code,
        provider_code=code,
    )
