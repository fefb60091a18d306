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

from starlette.responses import JSONResponse

from interlock.core.decision import Decision, Verdict
from interlock.errors import Blocked

__all__ = ["Provider", "Refusal", "refusal_for_decision"]

Provider = Literal["openai", "anthropic"]

# status -> (OpenAI error type, Anthropic error type)
_TYPES: dict[int, tuple[str, str]] = {
    400: ("invalid_request_error", "invalid_request_error"),
    401: ("authentication_error", "authentication_error"),
    403: ("permission_error", "permission_error"),
    404: ("not_found_error", "not_found_error"),
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

    def response(self, provider: Provider) -> JSONResponse:
        openai_type, anthropic_type = _TYPES[self.status]
        headers = {"x-should-retry": "false"}
        if self.decision_id:
            headers["x-interlock-decision-id"] = self.decision_id
        if self.status == 401:
            headers["www-authenticate"] = "Bearer"
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
        return JSONResponse(body, status_code=self.status, headers=headers)


def refusal_for_decision(exc: Blocked) -> Refusal:
    """The refusal of a model call the guard did not allow: 403 for deny and
    approval required, 429 for a budget that cannot take it, 503 when no verdict
    could be reached."""
    decision: Decision = exc.decision
    message = str(exc)
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
