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

Many keys, one connection pool: a gateway that judges each of its clients with that
client's own key gives every decider the same :class:`RemoteConnection`; each request
then carries its decider's key, and the pool's connections are shared::

    connection = RemoteConnection("http://interlock.internal:8750")
    guard = Guard(decider=RemoteDecider.on(connection, client_key))
"""

from __future__ import annotations

import asyncio
import json
import logging
import threading
import time
from collections import OrderedDict
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

    from interlock.approvals.grants import Grant
    from interlock.deciders.base import CancelToken

__all__ = ["RemoteConnection", "RemoteDecider"]

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
#: Allowed calls of a session remembered until their outcome is reported, at most.
_PENDING_KEPT: Final = 10_000
#: Longest single long-poll; waiting longer repeats it.
_LONG_POLL: Final = 30.0
_REDACTOR: Final = Redactor()


def _import_httpx() -> Any:
    try:
        import httpx
    except ImportError:
        raise ImportError("the remote guard needs httpx: pip install 'interlock[remote]'") from None
    return httpx


class RemoteConnection:
    """The HTTP clients of one Interlock server: a sync ``httpx.Client`` (opened on
    first use) and an ``httpx.AsyncClient`` per running event loop (an async client's
    connections belong to the loop that opened them). They carry no API key: each
    request names its own, so deciders of many keys share one pool
    (:meth:`RemoteDecider.on`).

    ``timeout`` (seconds) bounds every request that has no earlier deadline;
    ``transport`` / ``async_transport`` replace the network (``httpx`` transports);
    ``verify`` is passed to httpx (a CA bundle path, or False); ``limits`` is the
    pool's ``httpx.Limits``.
    """

    def __init__(
        self,
        url: str,
        *,
        timeout: float = 5.0,
        transport: Any = None,
        async_transport: Any = None,
        verify: Any = True,
        limits: Any = None,
    ) -> None:
        if timeout <= 0:
            raise ValueError(f"timeout must be positive, not {timeout!r}")
        lib = _import_httpx()
        self.httpx = lib
        self.timeout = timeout
        base, uds = _base_url(url)
        self.url = base
        if transport is None and uds is not None:
            transport = lib.HTTPTransport(uds=uds)
        if async_transport is None and uds is not None:
            async_transport = lib.AsyncHTTPTransport(uds=uds)
        self._transport = transport
        self._async_transport = async_transport
        self._verify = verify
        self._limits = limits
        self._client: httpx.Client | None = None
        self._aclient: tuple[asyncio.AbstractEventLoop, httpx.AsyncClient] | None = None

    def client(self) -> httpx.Client:
        if self._client is None:
            self._client = self.httpx.Client(**self._options(self._transport))
        return self._client

    def async_client(self) -> httpx.AsyncClient:
        loop = asyncio.get_running_loop()
        if self._aclient is None or self._aclient[0] is not loop:
            self._aclient = (loop, self.httpx.AsyncClient(**self._options(self._async_transport)))
        aclient: httpx.AsyncClient = self._aclient[1]
        return aclient

    def _options(self, transport: Any) -> dict[str, Any]:
        options: dict[str, Any] = {
            "base_url": self.url,
            "headers": {"user-agent": "interlock-remote"},
            "timeout": self.timeout,
            "transport": transport,
            "verify": self._verify,
        }
        if self._limits is not None:
            options["limits"] = self._limits
        return options

    def close(self) -> None:
        """Close the sync client; an async client is forgotten (close it with
        :meth:`aclose` on its own loop)."""
        if self._client is not None:
            self._client.close()
            self._client = None
        self._aclient = None

    async def aclose(self) -> None:
        """Close both clients (the async one on the running loop, if it is its own)."""
        held, self._aclient = self._aclient, None
        if held is not None and held[0] is asyncio.get_running_loop():
            await held[1].aclose()
        self.close()


class RemoteDecider:
    """Decides by asking an Interlock server (see the module docstring).

    ``timeout`` (seconds) bounds every request when the check has no earlier
    deadline; ``transport`` replaces the network (an ``httpx`` transport, e.g. an
    ASGI app in tests); ``verify`` is passed to httpx (a CA bundle path, or False).
    :meth:`on` makes one that shares another's connection pool.
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
        connection: RemoteConnection | None = None,
    ) -> None:
        if not api_key:
            raise ValueError("the remote guard needs an API key (interlock keys create)")
        if connection is None:
            connection = RemoteConnection(
                url,
                timeout=timeout,
                transport=transport,
                async_transport=async_transport,
                verify=verify,
            )
            connection.client()  # made here, not within the first check's deadline
            self._owns_connection = True
        else:
            self._owns_connection = False
        self.connection = connection
        self.httpx = connection.httpx
        self.timeout = connection.timeout
        self.url = connection.url
        self._headers = {"authorization": f"Bearer {api_key}"}
        #: decision id -> session id of the allowed calls of a session, until reported
        self._pending: OrderedDict[str, str] = OrderedDict()
        self._pending_lock = threading.Lock()

    @classmethod
    def on(cls, connection: RemoteConnection, api_key: str) -> RemoteDecider:
        """A decider for ``api_key`` on ``connection``'s pool (which it does not
        close): cheap to make, one per key or per request."""
        return cls(connection.url, api_key, connection=connection)

    def close(self) -> None:
        """Close the connection when it is this decider's own."""
        if self._owns_connection:
            self.connection.close()

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
        return self._noted(action, decision_of(response))

    async def adecide(
        self, action: Action, *, deadline: float | None, cancel: CancelToken | None
    ) -> Decision:
        body = action_json(action)
        response = await self._asend("POST", "/v1/check", deadline, json=body, check=True)
        return self._noted(action, decision_of(response))

    def unreadable(self, action: Action, problem: str) -> Decision:
        """Have the server record a call this client could not read (undetermined,
        naming ``problem``), as it records every decision of this key's."""
        body = {**action_json(action), "unreadable": problem[:4000]}
        return decision_of(self._send("POST", "/v1/check", None, json=body, check=True))

    async def aunreadable(self, action: Action, problem: str) -> Decision:
        body = {**action_json(action), "unreadable": problem[:4000]}
        return decision_of(await self._asend("POST", "/v1/check", None, json=body, check=True))

    # -- session outcomes and inputs ----------------------------------------------------

    def _noted(self, action: Action, decision: Decision) -> Decision:
        """Remember the session of an allowed call, for its outcome report."""
        session_id = action.context.session_id
        if session_id is not None and decision.verdict is Verdict.ALLOW and decision.decision_id:
            with self._pending_lock:
                self._pending[decision.decision_id] = session_id
                while len(self._pending) > _PENDING_KEPT:
                    self._pending.popitem(last=False)
        return decision

    def awaits_outcome(self, decision: Decision) -> bool:
        """Whether ``decision`` is an allowed call of a session not yet reported."""
        with self._pending_lock:
            return decision.decision_id in self._pending

    def take_pending(self, decision: Decision) -> tuple[str, str] | None:
        """The session and decision id of ``decision`` when it awaits its outcome
        report, taken from the pending table (the newest 10,000 are kept: a caller
        that reports later takes it when the call is allowed, then reports with
        :meth:`settle_step`). None when it awaits none or was taken already."""
        with self._pending_lock:
            session_id = self._pending.pop(decision.decision_id, None)
        if session_id is None or decision.decision_id is None:
            return None
        return session_id, decision.decision_id

    def report_outcome(
        self,
        decision: Decision,
        *,
        executed: bool,
        fingerprints: frozenset[int] = frozenset(),
        labels: tuple[str, ...] = (),
    ) -> bool:
        """Tell the server the outcome of an allowed call of a session (``POST
        /v1/sessions/outcome``): whether it ran and its result's fingerprints (of
        :func:`~interlock.session.fingerprints.of_data`, computed here: the result
        never leaves this process). False when the call was not a session's (nothing
        is sent) or the server kept nothing; raises RemoteError when it cannot tell."""
        reported = self.take_pending(decision)
        if reported is None:
            return False
        return self.settle_step(
            *reported, executed=executed, fingerprints=fingerprints, labels=labels
        )

    def settle_step(
        self,
        session_id: str,
        decision_id: str,
        *,
        executed: bool,
        fingerprints: frozenset[int] = frozenset(),
        labels: tuple[str, ...] = (),
    ) -> bool:
        """:meth:`report_outcome` for a decision this object did not make itself (a
        proxy answers each request with a new decider, and the result of a call comes
        back in a later request): the session and decision named. False when the
        server kept nothing (its policy reads no sessions, or the session holds no
        step of that decision); raises RemoteError when it cannot tell."""
        body = _step_body(session_id, decision_id, executed, fingerprints, labels)
        return _recorded(self._send("POST", "/v1/sessions/outcome", None, json=body))

    async def asettle_step(
        self,
        session_id: str,
        decision_id: str,
        *,
        executed: bool,
        fingerprints: frozenset[int] = frozenset(),
        labels: tuple[str, ...] = (),
    ) -> bool:
        """The async twin of :meth:`settle_step`."""
        body = _step_body(session_id, decision_id, executed, fingerprints, labels)
        return _recorded(await self._asend("POST", "/v1/sessions/outcome", None, json=body))

    async def areport_outcome(
        self,
        decision: Decision,
        *,
        executed: bool,
        fingerprints: frozenset[int] = frozenset(),
        labels: tuple[str, ...] = (),
    ) -> bool:
        """The async twin of :meth:`report_outcome`."""
        reported = self.take_pending(decision)
        if reported is None:
            return False
        return await self.asettle_step(
            *reported, executed=executed, fingerprints=fingerprints, labels=labels
        )

    def report_input(
        self,
        session_id: str,
        fingerprints: frozenset[int],
        *,
        trusted: bool,
        labels: tuple[str, ...] = (),
        tool: tuple[str, object] | None = None,
    ) -> int | None:
        """Record outside data entering a session on the server (``POST
        /v1/sessions/input``), as its fingerprints; the step's seq, or None when the
        server's policy reads no sessions. ``tool``: the name and arguments of the
        call an untrusted input is the result of, when known — the server adds the
        labels its policy gives such a call."""
        body = _input_body(session_id, fingerprints, trusted, labels, tool)
        return _seq_of(self._send("POST", "/v1/sessions/input", None, json=body))

    async def areport_input(
        self,
        session_id: str,
        fingerprints: frozenset[int],
        *,
        trusted: bool,
        labels: tuple[str, ...] = (),
        tool: tuple[str, object] | None = None,
    ) -> int | None:
        """The async twin of :meth:`report_input`."""
        body = _input_body(session_id, fingerprints, trusted, labels, tool)
        return _seq_of(await self._asend("POST", "/v1/sessions/input", None, json=body))

    # -- budgets and approvals ----------------------------------------------------------

    def commit(
        self, decision: Decision, usage: object | None = None, *, model: str | None = None
    ) -> Reservation | None:
        ref = decision.reservation
        if ref is None:
            return None
        body = _commit_body(ref.id, usage, model)
        return reservation_of(self._send("POST", "/v1/budgets/commit", None, json=body))

    async def acommit(
        self, decision: Decision, usage: object | None = None, *, model: str | None = None
    ) -> Reservation | None:
        """The async twin of :meth:`commit` (over the running loop's client)."""
        ref = decision.reservation
        if ref is None:
            return None
        body = _commit_body(ref.id, usage, model)
        return reservation_of(await self._asend("POST", "/v1/budgets/commit", None, json=body))

    def release(self, decision: Decision) -> Reservation | None:
        ref = decision.reservation
        if ref is None:
            return None
        body = {"reservation_id": ref.id}
        return reservation_of(self._send("POST", "/v1/budgets/release", None, json=body))

    async def arelease(self, decision: Decision) -> Reservation | None:
        """The async twin of :meth:`release`."""
        ref = decision.reservation
        if ref is None:
            return None
        body = {"reservation_id": ref.id}
        return reservation_of(await self._asend("POST", "/v1/budgets/release", None, json=body))

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
        client = self.connection.client()
        try:
            response = client.request(
                method, path, timeout=timeout, headers=self._headers, **options
            )
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
        client = self.connection.async_client()
        try:
            response = await client.request(
                method, path, timeout=timeout, headers=self._headers, **options
            )
        except self.httpx.HTTPError as exc:
            raise RemoteError(f"{method} {path}: {type(exc).__name__}: {exc}") from exc
        return _answer(response, method, path, check=check)


def _base_url(url: str) -> tuple[str, str | None]:
    """``(base URL, Unix socket path or None)``; ``unix:/path`` names a socket."""
    if url.startswith("unix:"):
        return "http://interlock", url[len("unix:") :]
    if not url.startswith(("http://", "https://")):
        raise ValueError(f"the server URL must be http://, https:// or unix:/path, not {url!r}")
    return url.rstrip("/"), None


def _step_body(
    session_id: str,
    decision_id: str,
    executed: bool,
    fingerprints: frozenset[int],
    labels: tuple[str, ...],
) -> dict[str, Any]:
    from interlock.session.packing import pack_text

    return {
        "session_id": session_id,
        "decision_id": decision_id,
        "executed": executed,
        "fingerprints": pack_text(fingerprints),
        "labels": list(labels),
    }


def _input_body(
    session_id: str,
    fingerprints: frozenset[int],
    trusted: bool,
    labels: tuple[str, ...],
    tool: tuple[str, object] | None,
) -> dict[str, Any]:
    from interlock.session.packing import pack_text

    body: dict[str, Any] = {
        "session_id": session_id,
        "fingerprints": pack_text(fingerprints),
        "trusted": trusted,
        "labels": list(labels),
    }
    if tool is not None:
        body["tool"] = {"name": tool[0], "arguments": tool[1]}
    return body


def _recorded(answer: object) -> bool:
    return bool(answer.get("recorded")) if isinstance(answer, dict) else False


def _seq_of(answer: object) -> int | None:
    seq = answer.get("seq") if isinstance(answer, dict) else None
    return seq if isinstance(seq, int) and not isinstance(seq, bool) else None


def _commit_body(reservation_id: str, usage: object | None, model: str | None) -> dict[str, Any]:
    body: dict[str, Any] = {"reservation_id": reservation_id}
    if usage is not None:
        spent = Usage.of(usage)
        body["usage"] = {"input_tokens": spent.input_tokens, "output_tokens": spent.output_tokens}
    if model is not None:
        body["model"] = model
    return body


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
            grant=None if body.get("grant") is None else _grant_of(body["grant"]),
        )
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise RemoteError(f"the server's answer is not a decision: {exc!r}") from exc


def _grant_of(body: Any) -> Grant:
    from interlock.remote_grants import grant_of

    return grant_of(body)


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
            grant_ttl_us=body.get("grant_ttl_us"),
            severity=body.get("severity"),
            tool_description=body.get("tool_description"),
            tool_description_from=body.get("tool_description_from"),
        )
    except (KeyError, TypeError, ValueError) as exc:
        raise RemoteError(f"the server's answer is not an approval: {exc!r}") from exc
