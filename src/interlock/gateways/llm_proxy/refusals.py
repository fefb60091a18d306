"""Refusals in the provider's own error format.

OpenAI: ``{"error": {"message", "type", "code", "param", "decision_id"}}``;
Anthropic: ``{"type": "error", "error": {"type", "message", "decision_id"}}``; an
approval required adds ``approval_id`` and ``approval_url`` beside ``decision_id``. Every
refusal carries ``x-should-retry: false`` (the official SDKs then do not retry it)
and, when a decision made it, ``x-interlock-decision-id``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import orjson

from interlock.core.decision import Decision, Verdict
from interlock.errors import Blocked, RemoteError

from .asgi import JSON, Send, send_answer

__all__ = ["Provider", "Refusal", "refusal_for_decision"]

Provider = Literal["openai", "anthropic"]

# status -> (OpenAI error type, Anthropic error type)
_TYPES: dict[int, tuple[str, str]] = {
    400: ("invalid_request_error", "invalid_request_error"),
    401: ("authentication_error", "authentication_error"),
    403: ("permission_error", "permission_error"),
    404: ("not_found_error", "not_found_error"),
    405: ("invalid_request_error", "invalid_request_error"),
    413: ("invalid_request_error", "request_too_large"),
    429: ("insufficient_quota", "rate_limit_error"),
    502: ("server_error", "api_error"),
    503: ("server_error", "api_error"),
}


@dataclass(frozen=True, slots=True)
class Refusal:
    """One refusal: ``status``, an Interlock ``code`` and a message for the agent."""

    status: int
    code: str
    message: str
    decision_id: str | None = None
    approval_id: str | None = None
    approval_url: str | None = None

    def render(self, provider: Provider) -> tuple[list[tuple[bytes, bytes]], bytes]:
        """The answer's headers and JSON body."""
        openai_type, anthropic_type = _TYPES[self.status]
        headers = [JSON, (b"x-should-retry", b"false")]
        if self.decision_id:
            headers.append((b"x-interlock-decision-id", self.decision_id.encode("latin-1")))
        if self.status == 401:
            headers.append((b"www-authenticate", b"Bearer"))
        if provider == "openai":
            error: dict[str, object] = {
                "message": self.message,
                "type": openai_type,
                "code": self.code,
                "param": None,
            }
            body: dict[str, object] = {"error": error}
        else:
            error = {"type": anthropic_type, "message": self.message}
            body = {"type": "error", "error": error}
        if self.decision_id:
            error["decision_id"] = self.decision_id
        if self.approval_id:
            error["approval_id"] = self.approval_id
            error["approval_url"] = self.approval_url
        return headers, orjson.dumps(body)

    async def send(self, send: Send, provider: Provider) -> None:
        """Answer with this refusal."""
        headers, body = self.render(provider)
        await send_answer(send, self.status, headers, body)


def refusal_for_decision(exc: Blocked) -> Refusal:
    """The refusal of a model call the guard did not allow: 403 for deny and
    approval required, 429 for a budget that cannot take it, 503 when no verdict
    could be reached — but for a shared server that refused the client's key itself
    (its 401 or 403 is the proxy's)."""
    decision: Decision = exc.decision
    message = str(exc)
    refused_key = _refused_key(decision)
    if refused_key is not None:
        return refused_key
    if decision.verdict is Verdict.REQUIRE_APPROVAL:
        approval = decision.approval
        return Refusal(
            403,
            "interlock_approval_required",
            message,
            decision.decision_id,
            approval_id=approval.id if approval else None,
            approval_url=approval.url if approval else None,
        )
    if decision.verdict is Verdict.DENY:
        if any(rule.startswith("budget:") for rule in decision.rule_ids):
            return Refusal(429, "interlock_budget_exceeded", message, decision.decision_id)
        return Refusal(403, "interlock_denied", message, decision.decision_id)
    return Refusal(503, "interlock_undetermined", message, decision.decision_id)


def _refused_key(decision: Decision) -> Refusal | None:
    """The shared server's own 401/403 on a check (a key revoked or not allowed to
    check), which left the decision undetermined."""
    cause = decision.cause
    if decision.verdict is not Verdict.UNDETERMINED or not isinstance(cause, RemoteError):
        return None
    if cause.status == 401:
        return Refusal(401, "unauthorized", f"the Interlock server refused the key: {cause}")
    if cause.status == 403:
        return Refusal(403, "forbidden", f"the Interlock server refused the key: {cause}")
    return None
