"""The remote guard: decisions made by an Interlock server, with the local semantics.

``Guard.remote(url, api_key)`` is a :class:`~interlock.Guard` whose decider is a
:class:`RemoteDecider`: each check is one ``POST /v1/check`` over a kept-alive
connection (sync with ``httpx.Client``, async with ``httpx.AsyncClient``), and
``commit`` / ``release`` / ``wait_for_approval`` go to the server's budget and approval
endpoints. The tenant and the agent come from the API key on the server, never from
the caller.

Failing closed: an unreachable server, a timeout, a 5xx, a 4xx on a check or an answer
that is not a decision raises :class:`~interlock.errors.RemoteError` inside the
decider, which the guard turns into ``undetermined`` — the action does not run.
``fail_mode="open"`` turns that into allow, only when asked, and logs a warning.

Example::

    guard = Guard.remote("http://interlock.internal:8750", api_key=os.environ["INTERLOCK_KEY"])
    decision = guard.check(Action.tool("shell", {"command": "ls"}))

``url`` may be ``unix:/run/interlock.sock`` for a server on a Unix socket.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Final

from interlock.core.action import Action
from interlock.core.decision import ApprovalRef, Decision, ReservationRef, ShadowVerdict, Verdict
from interlock.core.redaction import Redactor
from interlock.errors import RemoteError, RemoteRefused, describe
from interlock.ledger.usage import Usage
from interlock.store.records import (
    ApprovalRecord,
    ApprovalStatus,
    BudgetLine,
    Reservation,
    ReservationStatus,
)

if TYPE_CHECKING:
    import httpx

    from interlock.deciders.base import CancelToken

__all__ = ["RemoteDecider"]

log = logging.getLogger("interlock")

#: Context fields a caller may state; the server takes tenant and agent from the key.
_CONTEXT_FIELDS: Final = (
    "agent_type",
    "runtime",
    "session_id",
    "run_id",
    "call_id",
    "idempotency_key",
)
#: Longest single long-poll; waiting longer repeats it.
_LONG_POLL: Final = 30.0
_REDACTOR: Final = Redactor()


def _import_httpx() -> Any:
    try:
        import httpx
    except ImportError:
        raise ImportError("the remote guard needs httpx: pip install 'interlock[remote]'") from None
    return httpx


class RemoteDecider:
    """Decides by asking an Interlock server (see the module docstring).

    ``timeout`` (seconds) bounds every request when the check has no earlier
    deadline; ``transport`` replaces the network (an ``httpx`` transport, e.g. an
    ASGI app in tests); ``verify`` is passed to httpx (a CA bundle path, or False).
    """

    #: The guard sends commit/release/approval waits here instead of to a store.
    serves_state: Final = True

    def __init__(
        self,
        url: str,
        api_key: str,
        *,
        timeout: float = 5.0,
        transport: Any = None,
        async_transport: Any = None,
        verify: Any = True,
    ) -> None:
        if not api_key:
            raise ValueError("the remote guard needs an API key (interlock keys create)")
        if timeout <= 0:
            raise ValueError(f"timeout must be positive, not {timeout!r}")
        lib = _import_httpx()
        self.httpx = lib
        self.timeout = timeout
        base, uds = _base_url(url)
        self.url = base
        headers = {"authorization": f"Bearer {api_key}", "user-agent": "interlock-remote"}
        self._headers = headers
        self._verify = verify
        if transport is None and uds is not None:
            transport = lib.HTTPTransport(uds=uds)
        if async_transport is None and uds is not None:
            async_transport = lib.AsyncHTTPTransport(uds=uds)
        self._async_transport = async_transport
        self._client: httpx.Client = lib.Client(
            base_url=base, headers=headers, timeout=timeout, transport=transport, verify=verify
        )
        # An AsyncClient's connections belong to the event loop that opened them:
        # one client per running loop.
        self._aclient: tuple[asyncio.AbstractEventLoop, httpx.AsyncClient] | None = None

    def close(self) -> None:
        self._client.close()
        self._aclient = None

    def compensate(self, decision: Decision) -> None:
        """Give back what a decision the guard will not use holds (it arrived after
        the deadline, or the check was cancelled): its reservation is released. A
        claimed approval cannot be given back over the API; it stays claimed."""
        if decision.reservation is None:
            return
        try:
            self.release(decision)
        except Exception as exc:  # the server's reaper releases it after its TTL
            log.warning(
                "interlock: could not release reservation %s on the server: %s",
                decision.reservation.id,
                describe(exc),
            )

    # -- checks -------------------------------------------------------------------------

    def decide(
        self, action: Action, *, deadline: float | None, cancel: CancelToken | None
    ) -> Decision:
        body = action_json(action)
        response = self._send("POST", "/v1/check", deadline, json=body, check=True)
        return decision_of(response)

    async def adecide(
        self, action: Action, *, deadline: float | None, cancel: CancelToken | None
    ) -> Decision:
        body = action_json(action)
        response = await self._asend("POST", "/v1/check", deadline, json=body, check=True)
        return decision_of(response)

    # -- budgets and approvals ----------------------------------------------------------

    def commit(
        self, decision: Decision, usage: object | None = None, *, model: str | None = None
    ) -> Reservation | None:
        ref = decision.reservation
        if ref is None:
            return None
        body: dict[str, Any] = {"reservation_id": ref.id}
        if usage is not None:
            spent = Usage.of(usage)
            body["usage"] = {
                "input_tokens": spent.input_tokens,
                "output_tokens": spent.output_tokens,
            }
        if model is not None:
            body["model"] = model
        return reservation_of(self._send("POST", "/v1/budgets/commit", None, json=body))

    def release(self, decision: Decision) -> Reservation | None:
        ref = decision.reservation
        if ref is None:
            return None
        body = {"reservation_id": ref.id}
        return reservation_of(self._send("POST", "/v1/budgets/release", None, json=body))

    def wait_for_approval(self, approval_id: str, timeout: float) -> ApprovalRecord:
        """Long-poll the server until the approval is decided or ``timeout`` passes;
        returns the record either way (``status`` says which)."""
        end = time.monotonic() + timeout
        while True:
            wait = max(0.0, min(_LONG_POLL, end - time.monotonic()))
            record = approval_of(
                self._send(
                    "GET",
                    f"/v1/approvals/{approval_id}/wait",
                    time.monotonic() + wait + self.timeout,
                    params={"timeout": wait},
                )
            )
            if record.decided or time.monotonic() >= end:
                return record

    async def await_approval(self, approval_id: str, timeout: float) -> ApprovalRecord:
        end = time.monotonic() + timeout
        while True:
            wait = max(0.0, min(_LONG_POLL, end - time.monotonic()))
            record = approval_of(
                await self._asend(
                    "GET",
                    f"/v1/approvals/{approval_id}/wait",
                    time.monotonic() + wait + self.timeout,
                    params={"timeout": wait},
                )
            )
            if record.decided or time.monotonic() >= end:
                return record

    # -- transport ----------------------------------------------------------------------

    def _request_timeout(self, deadline: float | None) -> float:
        if deadline is None:
            return self.timeout
        left = deadline - time.monotonic()
        if left <= 0:
            raise RemoteError("the deadline passed before the request was sent")
        return left

    def _send(
        self,
        method: str,
        path: str,
        deadline: float | None,
        *,
        check: bool = False,
        **options: Any,
    ) -> Any:
        timeout = self._request_timeout(deadline)
        try:
            response = self._client.request(method, path, timeout=timeout, **options)
        except self.httpx.HTTPError as exc:
            raise RemoteError(f"{method} {path}: {type(exc).__name__}: {exc}") from exc
        return _answer(response, method, path, check=check)

    async def _asend(
        self,
        method: str,
        path: str,
        deadline: float | None,
        *,
        check: bool = False,
        **options: Any,
    ) -> Any:
        timeout = self._request_timeout(deadline)
        client = self._async_client()
        try:
            response = await client.request(method, path, timeout=timeout, **options)
        except self.httpx.HTTPError as exc:
            raise RemoteError(f"{method} {path}: {type(exc).__name__}: {exc}") from exc
        return _answer(response, method, path, check=check)

    def _async_client(self) -> httpx.AsyncClient:
        loop = asyncio.get_running_loop()
        if self._aclient is None or self._aclient[0] is not loop:
            client = self.httpx.AsyncClient(
                base_url=self.url,
                headers=self._headers,
                timeout=self.timeout,
                transport=self._async_transport,
                verify=self._verify,
            )
            self._aclient = (loop, client)
        aclient: httpx.AsyncClient = self._aclient[1]
        return aclient


def _base_url(url: str) -> tuple[str, str | None]:
    """``(base URL, Unix socket path or None)``; ``unix:/path`` names a socket."""
    if url.startswith("unix:"):
        return "http://interlock", url[len("unix:") :]
    if not url.startswith(("http://", "https://")):
        raise ValueError(f"the server URL must be http://, https:// or unix:/path, not {url!r}")
    return url.rstrip("/"), None


def _answer(response: httpx.Response, method: str, path: str, *, check: bool) -> Any:
    status = response.status_code
    try:
        body = response.json()
    except (ValueError, json.JSONDecodeError):
        body = None
    if status >= 500 or (check and status != 200):
        detail = _error_text(body) or _REDACTOR.cut(response.text, 200)  # redacted, then cut
        raise RemoteError(f"{method} {path}: HTTP {status}: {detail}", status=status)
    if status >= 400:
        error = body.get("error", {}) if isinstance(body, dict) else {}
        detail = _error_text(body) or _REDACTOR.cut(response.text, 200)
        raise RemoteRefused(
            f"{method} {path}: HTTP {status}: {detail}",
            status=status,
            code=error.get("code") if isinstance(error, dict) else None,
            field=error.get("field") if isinstance(error, dict) else None,
        )
    if body is None:
        raise RemoteError(f"{method} {path}: the answer is not JSON", status=status)
    return body


def _error_text(body: Any) -> str | None:
    if isinstance(body, dict) and isinstance(body.get("error"), dict):
        message = body["error"].get("message")
        return str(message) if message is not None else None
    return None


# -- the wire format ----------------------------------------------------------------------


def action_json(action: Action) -> dict[str, Any]:
    """The ``/v1/check`` body for ``action`` (the trusted fields left to the key)."""
    body: dict[str, Any] = {
        "kind": action.kind,
        "name": action.name,
        "arguments": dict(action.arguments),
    }
    for name in ("target", "scope", "description"):
        value = getattr(action, name)
        if value is not None:
            body[name] = value
    if action.schema is not None:
        body["schema"] = dict(action.schema)
    if action.capabilities:
        body["capabilities"] = list(action.capabilities)
    context = {
        name: getattr(action.context, name)
        for name in _CONTEXT_FIELDS
        if getattr(action.context, name, None) is not None
    }
    downstream = action.context.downstream
    if downstream is not None:
        context["downstream"] = {
            key: value
            for key, value in (
                ("system", downstream.system),
                ("operation", downstream.operation),
                ("endpoint", downstream.endpoint),
            )
            if value is not None
        }
    if context:
        body["context"] = context
    return body


def decision_of(body: Any) -> Decision:
    """The :class:`Decision` in a ``DecisionOut`` body; RemoteError when it is not one."""
    try:
        if not isinstance(body, Mapping):
            raise TypeError("not an object")
        verdict = Verdict(body["verdict"])
        approval = body.get("approval")
        reservation = body.get("reservation")
        shadow = body.get("shadow")
        cause = body.get("cause")
        return Decision(
            verdict=verdict,
            reason=str(body["reason"]),
            rule_ids=tuple(str(r) for r in body.get("rule_ids") or ()),
            cause=RemoteError(f"on the server: {cause}") if cause else None,
            decision_id=str(body["decision_id"]),
            approval=None
            if approval is None
            else ApprovalRef(
                id=approval.get("id"), url=approval.get("url"), status=approval.get("status")
            ),
            reservation=None
            if reservation is None
            else ReservationRef(
                id=str(reservation["id"]),
                amounts=tuple(
                    (str(a["budget_id"]), int(a["amount"]), str(a["unit"]))
                    for a in reservation.get("amounts") or ()
                ),
            ),
            shadow=None
            if shadow is None
            else ShadowVerdict(
                Verdict(shadow["verdict"]),
                str(shadow["reason"]),
                tuple(str(r) for r in shadow.get("rule_ids") or ()),
            ),
            fail_open=bool(body.get("fail_open", False)),
        )
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise RemoteError(f"the server's answer is not a decision: {exc!r}") from exc


def reservation_of(body: Any) -> Reservation:
    try:
        return Reservation(
            id=str(body["id"]),
            tenant=str(body["tenant"]),
            idempotency_key=str(body["idempotency_key"]),
            status=ReservationStatus(body["status"]),
            lines=tuple(
                BudgetLine(
                    budget_id=str(line["budget_id"]),
                    scope_key=str(line["scope_key"]),
                    window_start=int(line["window_start"]),
                    unit=str(line["unit"]),
                    cap=int(line["cap"]),
                    amount=int(line["amount"]),
                )
                for line in body["lines"]
            ),
            created_us=int(body["created_us"]),
            expires_us=int(body["expires_us"]),
            settled_us=body.get("settled_us"),
            actual=body.get("actual"),
            replayed=bool(body.get("replayed", False)),
        )
    except (KeyError, TypeError, ValueError) as exc:
        raise RemoteError(f"the server's answer is not a reservation: {exc!r}") from exc


def approval_of(body: Any) -> ApprovalRecord:
    try:
        return ApprovalRecord(
            id=str(body["id"]),
            tenant=str(body["tenant"]),
            intent_hash=str(body["intent_hash"]),
            status=ApprovalStatus(body["status"]),
            action=dict(body["action"]),
            context=dict(body["context"]),
            rule_ids=tuple(body["rule_ids"]),
            reason=str(body["reason"]),
            requested_by=body.get("requested_by"),
            decided_by=body.get("decided_by"),
            decision_reason=body.get("decision_reason"),
            created_us=int(body["created_us"]),
            expires_us=int(body["expires_us"]),
            decided_us=body.get("decided_us"),
            claimed_us=body.get("claimed_us"),
        )
    except (KeyError, TypeError, ValueError) as exc:
        raise RemoteError(f"the server's answer is not an approval: {exc!r}") from exc
