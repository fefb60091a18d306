"""The HTTP family of effects: one request, with an ``Idempotency-Key`` and the grant.

:class:`HttpEffect` sends an action as one HTTP request to a provider that dedups by
``Idempotency-Key`` (the runtime's key) and can check the ``Interlock-Grant`` header
itself (:mod:`interlock.verify`). What the request is:

- by default, the action's declared endpoint (``Context.downstream.endpoint``, e.g.
  ``"POST /orders/{order_id}/refunds"``: ``{name}`` filled from the arguments,
  percent-encoded) with the arguments as the JSON body (RFC 8785 bytes);
- or what ``request=`` (a function of the action) returns, an :class:`HttpRequest`.

How an answer is read (``execute``):

| what happened | outcome |
| --- | --- |
| 2xx (with ``receipt_keys``: and a valid receipt) | COMMITTED |
| 4xx other than 409 / 425 | FAILED (refused) |
| no connection (connect error or timeout, pool timeout) | FAILED, not sent: retryable |
| the connection dropped, a read or write timed out (the request may have left) | INDETERMINATE |
| 5xx, 409, 425, 1xx/3xx, a 2xx whose receipt is missing or does not verify | INDETERMINATE |

Reconciling asks the provider's lookup endpoint (``lookup``, default
``GET /idempotency/{key}``): ``200 {"status": <status it answered>, "body": <JSON>}``
for a key it executed (or refused, and remembers), ``404`` for a key it never saw;
anything else — another status, no connection — is *unknowable*.

Another family (a message queue, a database, an SDK) is a sibling module implementing
:class:`~interlock.effects.protocol.EffectAdapter`; nothing else changes.

Example::

    import httpx
    from interlock import Action, Context, Downstream
    from interlock.effects.http import HttpEffect

    refunds = HttpEffect("http://shop.test", audience="shop")
    ctx = Context(downstream=Downstream("shop", "refund", "POST /orders/{order}/refunds"),
                  idempotency_key="k-1")
    prepared = refunds.prepare(Action.tool("refund", {"order": 42, "amount": 5}, context=ctx))
    assert prepared.request["target"] == "/orders/42/refunds"
"""

from __future__ import annotations

import hashlib
import json
import string
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final
from urllib.parse import quote

import rfc8785

from interlock.effects.protocol import (
    Execution,
    Outcome,
    PreparedEffect,
    ProviderResult,
    ReconcileContext,
    Reconciled,
    Resolution,
)
from interlock.errors import EffectError, ReceiptError, describe
from interlock.verify.binding import IDEMPOTENCY_HEADER, http_binding

if TYPE_CHECKING:
    import httpx
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

    from interlock.core.action import Action
    from interlock.verify.tokens import GrantClaims

__all__ = ["GRANT_HEADER", "RECEIPT_HEADER", "HttpEffect", "HttpRequest"]

GRANT_HEADER: Final = "Interlock-Grant"
RECEIPT_HEADER: Final = "Interlock-Receipt"
_MAX_DATA: Final = 4096  # bytes of a non-JSON answer kept as text
_MAX_OBSERVED: Final = 16384  # bytes of an answer's JSON kept in the record
_FIELD: Final = frozenset(string.ascii_letters + string.digits + "_")


@dataclass(frozen=True, slots=True)
class HttpRequest:
    """One request: ``target`` is the path and query as sent (origin-form)."""

    method: str
    target: str
    body: bytes = b""
    content_type: str | None = "application/json"


def _require_httpx() -> Any:
    try:
        import httpx
    except ImportError as exc:  # pragma: no cover - httpx ships with the extras below
        raise ImportError(
            "the HTTP effect family needs httpx: pip install 'interlock[effects]'"
        ) from exc
    return httpx


class HttpEffect:
    """The HTTP effect adapter (see the module). ``base_url`` is the provider's
    origin (and base path); ``audience`` the downstream system grants are issued for;
    ``client`` an ``httpx.Client`` of your own (auth, TLS, a transport), else one is
    made; ``headers`` go on every request and lookup; ``receipt_keys`` (kid → Ed25519
    public key, or a JWK set) make a valid provider receipt a condition of COMMITTED."""

    def __init__(
        self,
        base_url: str,
        *,
        audience: str,
        id: str = "http",
        version: str = "1",
        action_types: tuple[str, ...] = (),
        request: Callable[[Action], HttpRequest] | None = None,
        lookup: str = "/idempotency/{key}",
        headers: Mapping[str, str] | None = None,
        receipt_keys: Mapping[str, Ed25519PublicKey] | Mapping[str, Any] | None = None,
        client: httpx.Client | None = None,
    ) -> None:
        httpx = _require_httpx()
        if not audience:
            raise ValueError("an HTTP effect needs the audience its grants are issued for")
        if "{key}" not in lookup or not lookup.startswith("/"):
            raise ValueError(f"lookup {lookup!r} must be a path holding {{key}}")
        self.base_url = base_url.rstrip("/")
        self.audience = audience
        self._id = id
        self._version = version
        self._action_types = tuple(action_types)
        self._request = request
        self.lookup = lookup
        self.headers = dict(headers or {})
        self.receipt_keys = _receipt_keys(receipt_keys)
        self._owns_client = client is None
        self.client = client if client is not None else httpx.Client()

    @property
    def id(self) -> str:
        return self._id

    @property
    def version(self) -> str:
        return self._version

    @property
    def action_types(self) -> tuple[str, ...]:
        return self._action_types

    def close(self) -> None:
        """Close the client this adapter made (one you gave it stays yours)."""
        if self._owns_client:
            self.client.close()

    # -- prepare (pure) ------------------------------------------------------------------

    def prepare(self, action: Action) -> PreparedEffect:
        request = self._request(action) if self._request is not None else default_request(action)
        if not isinstance(request, HttpRequest):
            raise EffectError(f"request= returned a {type(request).__name__}, not HttpRequest")
        key = action.context.idempotency_key
        binding = http_binding(
            request.method, request.target, request.body, key, audience=self.audience
        )
        return PreparedEffect(
            request={
                "method": request.method.upper(),
                "url": self.base_url + request.target,
                "target": request.target,
                "content_type": request.content_type,
                "body_sha256": hashlib.sha256(request.body).hexdigest(),
            },
            binding=binding,
            audience=self.audience,
            body=request.body,
            expected={"status": "2xx"},
        )

    # -- execute -------------------------------------------------------------------------

    def execute(self, execution: Execution) -> ProviderResult:
        httpx = _require_httpx()
        prepared = execution.prepared
        left = execution.deadline - time.monotonic()
        if left <= 0:
            return ProviderResult(
                Outcome.FAILED, reason="the deadline passed before the request left", sent=False
            )
        headers = {
            **self.headers,
            IDEMPOTENCY_HEADER: execution.idempotency_key,
            GRANT_HEADER: execution.grant,
        }
        if prepared.request.get("content_type"):
            headers["Content-Type"] = str(prepared.request["content_type"])
        try:
            response = self.client.request(
                str(prepared.request["method"]),
                str(prepared.request["url"]),
                content=prepared.body,
                headers=headers,
                timeout=httpx.Timeout(left),
            )
        except (httpx.ConnectError, httpx.ConnectTimeout, httpx.PoolTimeout) as exc:
            return ProviderResult(
                Outcome.FAILED,
                reason=f"no connection to the provider, nothing sent: {describe(exc)}",
                sent=False,
            )
        except (httpx.UnsupportedProtocol, httpx.LocalProtocolError) as exc:
            return ProviderResult(
                Outcome.FAILED, reason=f"the request could not be sent: {describe(exc)}", sent=False
            )
        except httpx.TransportError as exc:
            return ProviderResult(
                Outcome.INDETERMINATE,
                reason=f"the request may have reached the provider, the answer did not "
                f"arrive: {describe(exc)}",
            )
        return self._read(response, execution.claims)

    def _read(self, response: httpx.Response, claims: GrantClaims | None) -> ProviderResult:
        status = response.status_code
        data = _data(response)
        receipt = response.headers.get(RECEIPT_HEADER)
        if 200 <= status < 300:
            problem = self._receipt_problem(receipt, status, response.content, claims)
            if problem is not None:
                return ProviderResult(
                    Outcome.INDETERMINATE,
                    status,
                    data,
                    receipt,
                    f"the provider answered {status}, but {problem}",
                )
            return ProviderResult(Outcome.COMMITTED, status, data, receipt, f"{status}: committed")
        if 400 <= status < 500 and status not in (409, 425):
            return ProviderResult(Outcome.FAILED, status, data, receipt, f"{status}: refused")
        return ProviderResult(
            Outcome.INDETERMINATE, status, data, receipt, f"{status}: neither committed nor refused"
        )

    def _receipt_problem(
        self, receipt: str | None, status: int, body: bytes, claims: GrantClaims | None
    ) -> str | None:
        """Why the receipt does not vouch for this answer, or ``None`` when it does (or
        when no receipt keys are configured)."""
        if not self.receipt_keys:
            return None
        if receipt is None:
            return f"it sent no {RECEIPT_HEADER}"
        if claims is None:
            return "there is no grant to check its receipt against"
        from interlock.verify.receipts import check_receipt

        try:
            check_receipt(receipt, self.receipt_keys, grant=claims, status=status, body=body)
        except ReceiptError as exc:
            return f"its receipt does not check: {describe(exc)}"
        return None

    def _looked_up_receipt_problem(
        self, receipt: str | None, status: int, context: ReconcileContext
    ) -> str | None:
        """A lookup need not carry a receipt (it reads the provider's own records over
        the channel you configured); one it carries must be for this attempt."""
        if receipt is None or not self.receipt_keys:
            return None
        from interlock.verify.receipts import read_receipt

        try:
            claims = read_receipt(receipt, self.receipt_keys)
        except ReceiptError as exc:
            return f"its receipt does not verify: {describe(exc)}"
        for name, expected in (
            ("grant_id", context.grant_id),
            ("binding", context.binding),
            ("status", status),
        ):
            if expected is not None and getattr(claims, name) != expected:
                return f"its receipt's {name} is not this attempt's"
        return None

    # -- observe (pure) ------------------------------------------------------------------

    def observe_effect(
        self, result: ProviderResult, prepared: PreparedEffect
    ) -> dict[str, Any] | None:
        if result.status is None:
            return None
        body: Any = result.data
        encoded = json.dumps(body, default=str, separators=(",", ":")).encode()
        if len(encoded) > _MAX_OBSERVED:  # recorded and audited: the digest stands in
            body = {"omitted_bytes": len(encoded), "sha256": hashlib.sha256(encoded).hexdigest()}
        return {"status": result.status, "body": body, "receipt": result.receipt}

    # -- reconcile (read-only) -----------------------------------------------------------

    def reconcile(self, context: ReconcileContext) -> Reconciled:
        httpx = _require_httpx()
        url = self.base_url + self.lookup.replace("{key}", quote(context.idempotency_key, safe=""))
        try:
            response = self.client.get(url, headers=self.headers, timeout=httpx.Timeout(10.0))
        except httpx.TransportError as exc:
            return Reconciled(Resolution.UNKNOWABLE, reason=f"lookup failed: {describe(exc)}")
        if response.status_code == 404:
            return Reconciled(
                Resolution.NEVER_EXECUTED, reason="reconciled: the provider never saw the key"
            )
        if response.status_code != 200:
            return Reconciled(
                Resolution.UNKNOWABLE,
                reason=f"lookup answered {response.status_code}: the provider cannot say",
            )
        try:
            stored = response.json()
            status = stored["status"]
            if not isinstance(status, int) or isinstance(status, bool):
                raise TypeError("status is not an integer")
        except (ValueError, KeyError, TypeError) as exc:
            return Reconciled(
                Resolution.UNKNOWABLE, reason=f"lookup answered something unreadable: {exc}"
            )
        body = stored.get("body")
        receipt = stored.get("receipt") if isinstance(stored.get("receipt"), str) else None
        if 200 <= status < 300:
            problem = self._looked_up_receipt_problem(receipt, status, context)
            if problem is not None:
                return Reconciled(
                    Resolution.UNKNOWABLE, reason=f"lookup says {status}, but {problem}"
                )
            return Reconciled(
                Resolution.DONE,
                ProviderResult(
                    Outcome.COMMITTED, status, body, receipt, f"reconciled: {status}, committed"
                ),
            )
        if 400 <= status < 500 and status not in (409, 425):
            return Reconciled(
                Resolution.DONE,
                ProviderResult(
                    Outcome.FAILED, status, body, receipt, f"reconciled: {status}, refused"
                ),
            )
        return Reconciled(
            Resolution.UNKNOWABLE, reason=f"lookup says {status}: neither committed nor refused"
        )


def default_request(action: Action) -> HttpRequest:
    """The action's declared endpoint, ``{name}`` filled from its arguments, with its
    arguments as the RFC 8785 JSON body."""
    downstream = action.context.downstream
    endpoint = downstream.endpoint if downstream is not None else None
    if not endpoint:
        raise EffectError(
            f"action {action.name!r} declares no endpoint (Context.downstream.endpoint, "
            "e.g. 'POST /refunds'); give HttpEffect a request= function instead"
        )
    method, _, path = endpoint.strip().partition(" ")
    path = path.strip()
    if not method or not path.startswith("/"):
        raise EffectError(f"endpoint {endpoint!r} is not 'METHOD /path'")
    target = _fill(path, action.arguments)
    try:
        body = rfc8785.dumps(dict(action.arguments))
    except (rfc8785.CanonicalizationError, TypeError, ValueError) as exc:
        raise EffectError(f"the arguments of {action.name!r} have no JSON form: {exc}") from exc
    return HttpRequest(method.upper(), target, body)


def _fill(path: str, arguments: Mapping[str, Any]) -> str:
    """``path`` with each ``{name}`` replaced by that argument, percent-encoded whole
    (a ``/``, ``?`` or ``..`` in an argument cannot change the path's shape)."""
    out: list[str] = []
    rest = path
    while "{" in rest:
        head, _, tail = rest.partition("{")
        name, closed, rest = tail.partition("}")
        if not closed or not name or not set(name) <= _FIELD:
            raise EffectError(f"endpoint path {path!r} has a malformed {{placeholder}}")
        value = arguments.get(name)
        if isinstance(value, bool) or not isinstance(value, (str, int)) or value == "":
            raise EffectError(
                f"endpoint path {path!r} needs argument {name!r} as a non-empty string or "
                f"integer, not {value!r}"
            )
        text = str(value)
        if text in (".", ".."):
            raise EffectError(f"argument {name!r} cannot be a path segment of {text!r}")
        out.extend((head, quote(text, safe="")))
    out.append(rest)
    return "".join(out)


def _data(response: httpx.Response) -> Any:
    try:
        return response.json()
    except ValueError:
        return {"text": response.content[:_MAX_DATA].decode("utf-8", "replace")}


def _receipt_keys(keys: Mapping[str, Any] | None) -> dict[str, Any] | None:
    if keys is None:
        return None
    if "keys" in keys and isinstance(keys.get("keys"), list):
        from interlock.verify.tokens import keys_from_jwks

        return dict(keys_from_jwks(keys))
    return dict(keys)
