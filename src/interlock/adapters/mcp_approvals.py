"""Approvals through elicitation: a ``tools/call`` that needs approval is put to the
human at the MCP client, in band (``elicitation/create``, form mode), and their
answer decides the Interlock approval.

Opt-in (``--approve-by-elicitation`` at the gateway, ``approve_by_elicitation=True``
on :func:`interlock.adapters.mcp.guard_server`), because it makes the MCP client an
approver: whoever answers the client's elicitation prompt approves the call. Trust
it only with a client that shows the prompt to a human — software that answers
elicitations by itself (an agent's own callback) would approve its own requests.
See docs/adr/0019-approvals-through-elicitation.md. Refused without a store (there
is no approval to decide) and for a remote guard: the server refuses an approval
decided with the requester's own key, and rightly.

The question names the tool, its arguments (redacted as the approvals page shows
them: a redaction never hides an operator or a command), the reason and the
approval id, and asks for one boolean, ``approve``. A call too long to show in a
prompt is not asked in band: the approver must see what they approve. The answer:

- ``accept`` with ``approve: true``: approved, ``decided_by`` ``mcp-elicitation:<agent>``
  (``mcp-elicitation`` for a guard with no agent); the identical call then claims it,
  once;
- ``accept`` with ``approve: false``, or ``decline``: denied (the identical call is
  refused until the denial lapses, as for a denial on the approvals page);
- ``cancel``, no answer in time, an answer that is none of these: left pending — the
  refusal with the approval URL, so that another approver can still decide.

In the 2026-07-28 generation the question is an ``input_required`` result carrying
one elicitation under a key of Interlock's, bound to the approval and to the exact
call; the client's retry carries the answer (:class:`HeldQuestions`).
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import logging
import secrets
from collections import OrderedDict
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Final, Literal

from interlock.adapters.base import pending_approval
from interlock.errors import ApprovalError, describe

if TYPE_CHECKING:
    from interlock.adapters.base import CallKey
    from interlock.core.action import Action, Context
    from interlock.core.decision import Decision
    from interlock.guard import Guard

__all__ = [
    "APPROVE_FIELD",
    "CHANNEL",
    "ELICITATION_METHOD",
    "MAX_QUESTION_CHARS",
    "MODERN_GENERATION",
    "QUESTION_KEY_PREFIX",
    "Answer",
    "HeldQuestions",
    "ServerApprovals",
    "answer_of",
    "approval_question",
    "approver",
    "check_can_approve",
    "form_supported",
    "record_answer",
]

log = logging.getLogger("interlock")

ELICITATION_METHOD: Final = "elicitation/create"
#: The channel an approval decided in the MCP client is recorded as.
CHANNEL: Final = "mcp-elicitation"
#: The one field of the form.
APPROVE_FIELD: Final = "approve"
#: The longest question put to the client's user: a longer call is not asked in band.
MAX_QUESTION_CHARS: Final = 8000
#: The start of every input-request key of an approval question (2026-07-28).
QUESTION_KEY_PREFIX: Final = "interlock-approval-"
#: The first protocol version whose server asks in an ``input_required`` result.
MODERN_GENERATION: Final = "2026-07-28"
#: How many unanswered questions (2026-07-28) are remembered; the oldest go first.
_MAX_HELD: Final = 1024

Answer = Literal["approve", "deny", "pending"]


def check_can_approve(guard: Guard) -> None:
    """Raise ValueError when approvals through elicitation cannot be honest here:
    a remote guard (the server decides approvals, and refuses one decided with the
    requester's own key), or no store (no approval to decide)."""
    if getattr(guard.decider, "serves_state", False):  # a remote guard
        raise ValueError(
            "approvals through elicitation need a local store: a remote guard's approvals "
            "are decided on the server, by an approver other than the agent's key"
        )
    if guard.store is None:
        raise ValueError("approvals through elicitation need a store (approvals are kept there)")


def approver(guard: Guard, context: Context | None = None) -> str:
    """Who an approval decided in the MCP client is recorded as decided by: the
    channel and the agent at the client (``context``'s, a gateway client's key's,
    else the guard's)."""
    agent = _callers(guard, context).agent
    return f"{CHANNEL}:{agent}" if agent else CHANNEL


def _callers(guard: Guard, context: Context | None) -> Context:
    return context.merged_over(guard.context) if context is not None else guard.context


def form_supported(capabilities: Any) -> bool:
    """Whether a client's declared capabilities include form-mode elicitation (an
    empty ``elicitation`` object means form mode, as the protocol says)."""
    if not isinstance(capabilities, Mapping):
        return False
    elicitation = capabilities.get("elicitation")
    if not isinstance(elicitation, Mapping):
        return False
    return not elicitation or isinstance(elicitation.get("form"), Mapping)


def approval_question(decision: Decision, action: Action, guard: Guard) -> dict[str, Any] | None:
    """The params of the ``elicitation/create`` request that asks for ``decision``'s
    approval, or ``None`` when the call is too long to show."""
    approval = decision.approval
    if approval is None or approval.id is None:
        return None
    shown = guard.redactor.redact_value(dict(action.arguments))
    arguments = json.dumps(shown, ensure_ascii=False, indent=2, sort_keys=True, default=str)
    message = (
        f"Interlock: the MCP tool call {action.name!r} needs your approval.\n\n"
        f"Arguments:\n{arguments}\n\n"
        f"Why: {guard.redactor.redact(decision.reason)}\n\n"
        f"Approve it to run this call once (approval {approval.id}, "
        f"decision {decision.decision_id})."
    )
    if len(message) > MAX_QUESTION_CHARS:
        return None
    schema = {
        "type": "object",
        "properties": {
            APPROVE_FIELD: {
                "type": "boolean",
                "title": "Approve this call",
                "description": "true runs the call once; false denies it",
            }
        },
        "required": [APPROVE_FIELD],
    }
    return {"mode": "form", "message": message, "requestedSchema": schema}


def answer_of(result: Any) -> Answer:
    """What an ``ElicitResult`` (its wire form) says of the approval."""
    if not isinstance(result, Mapping):
        return "pending"
    action = result.get("action")
    if action == "decline":
        return "deny"
    if action != "accept":
        return "pending"
    content = result.get("content")
    value = content.get(APPROVE_FIELD) if isinstance(content, Mapping) else None
    if value is True:
        return "approve"
    if value is False:
        return "deny"
    return "pending"  # not a boolean: nobody said yes or no


async def record_answer(
    guard: Guard,
    approval_id: str,
    answer: Answer,
    client: str | None = None,
    context: Context | None = None,
) -> str | None:
    """Decide the approval as the client's user answered (nothing for ``pending``).
    ``None``, or why the store refused (decided meanwhile, expired, the requester's
    own identity): the call is then judged as the approval stands. ``context``: the
    caller's, where the runtime knows it (a gateway client's key: the approval is
    its tenant's, and its agent's user answered), else the guard's."""
    if answer == "pending":
        return None
    store = guard.store
    if store is None:  # pragma: no cover - check_can_approve refuses this first
        return "no store"
    where = f"in the MCP client {client!r}" if client else "in the MCP client"
    by = approver(guard, context)
    tenant = _callers(guard, context).tenant

    def decide() -> None:
        if answer == "approve":
            store.approve(approval_id, by=by, reason=f"approved {where}", tenant=tenant)
        else:
            store.deny(approval_id, by=by, reason=f"denied {where}", tenant=tenant)

    try:
        await asyncio.to_thread(decide)
    except ApprovalError as exc:
        log.warning("interlock: an approval answered in band was refused: %s", exc)
        return str(exc)
    except Exception as exc:
        log.error("interlock: could not record an approval answered in band: %s", describe(exc))
        return describe(exc)
    log.info("interlock: approval %s %s by %s", approval_id, answer, by)
    return None


class HeldQuestions:
    """The approval questions asked in ``input_required`` results (2026-07-28), each
    under a key of its own, bound to its approval and its exact call, until the
    client's retry answers it (once: a replayed answer finds nothing)."""

    __slots__ = ("_held", "_next", "_token")

    def __init__(self) -> None:
        self._held: OrderedDict[str, tuple[str, CallKey]] = OrderedDict()
        self._token = secrets.token_hex(6)
        self._next = 0

    def ask(self, approval_id: str, call: CallKey, question: dict[str, Any]) -> dict[str, Any]:
        """The ``input_required`` result that asks ``question``."""
        self._next += 1
        key = f"{QUESTION_KEY_PREFIX}{self._token}-{self._next}"
        self._held[key] = (approval_id, call)
        while len(self._held) > _MAX_HELD:
            self._held.popitem(last=False)
        request = {"method": ELICITATION_METHOD, "params": question}
        return {"resultType": "input_required", "inputRequests": {key: request}}

    def take(
        self, params: Any, call: CallKey
    ) -> tuple[dict[str, Any] | None, list[tuple[str, Answer]]]:
        """The answers a retry of ``call`` carries to questions asked about ``call``
        (approval id, answer each), and its params without any answer under an
        Interlock key (``None``: there were none). An answer to a question asked
        about another call, or to none held, is dropped unread."""
        responses = params.get("inputResponses") if isinstance(params, Mapping) else None
        if not isinstance(responses, Mapping) or not any(
            isinstance(key, str) and key.startswith(QUESTION_KEY_PREFIX) for key in responses
        ):
            return None, []
        assert isinstance(params, Mapping)
        answers: list[tuple[str, Answer]] = []
        kept: dict[str, Any] = {}
        for key, response in responses.items():
            if not key.startswith(QUESTION_KEY_PREFIX):
                kept[key] = response
                continue
            held = self._held.pop(key, None)
            if held is None or held[1] != call:
                log.warning("interlock: dropped an approval answer for no question of this call")
                continue
            answers.append((held[0], answer_of(response)))
        out = {key: value for key, value in params.items() if key != "inputResponses"}
        if kept:
            out["inputResponses"] = kept
        return out, answers


class ServerApprovals:
    """Approvals through elicitation for a guarded server (``guard_server(...,
    approve_by_elicitation=True)``): the middleware's side of it."""

    __slots__ = ("guard", "questions")

    def __init__(self, guard: Guard) -> None:
        check_can_approve(guard)
        self.guard = guard
        self.questions = HeldQuestions()

    async def take_answers(self, ctx: Any, call: CallKey) -> tuple[Any, bool]:
        """A retry's answers to questions about ``call`` (2026-07-28), recorded; the
        request context without them (what the tool sees), and whether it had any."""
        params, answers = self.questions.take(ctx.params, call)
        for approval_id, answer in answers:
            await record_answer(self.guard, approval_id, answer, _client_name(ctx))
        if params is None:
            return ctx, False
        return dataclasses.replace(ctx, params=params), bool(answers)

    async def ask(
        self, ctx: Any, call: CallKey, decision: Decision, action: Action
    ) -> dict[str, Any] | Answer | None:
        """Put ``decision``'s approval to the client's user: the ``input_required``
        result to answer with (2026-07-28), the user's answer, already recorded
        (2025-11-25), or ``None`` when it cannot be asked."""
        approval_id = pending_approval(decision)
        capabilities = ctx.session.client_capabilities
        wire = capabilities.model_dump(by_alias=True, exclude_none=True) if capabilities else None
        question = approval_question(decision, action, self.guard)
        if approval_id is None or question is None or not form_supported(wire):
            return None
        if ctx.protocol_version >= MODERN_GENERATION:
            return self.questions.ask(approval_id, call, question)
        try:
            result = await ctx.session.elicit_form(
                question["message"], question["requestedSchema"], related_request_id=ctx.request_id
            )
        except Exception as exc:  # no back channel, an error answer: nobody decided
            log.warning("interlock: the approval question could not be asked: %s", describe(exc))
            return "pending"
        answer = answer_of(result.model_dump(by_alias=True, mode="json", exclude_none=True))
        await record_answer(self.guard, approval_id, answer, _client_name(ctx))
        return answer


def _client_name(ctx: Any) -> str | None:
    params = getattr(ctx.session, "client_params", None)
    info = getattr(params, "client_info", None)
    name = getattr(info, "name", None)
    return name if isinstance(name, str) else None
