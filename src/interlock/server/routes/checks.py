"""``POST /v1/check`` and ``POST /v1/check/batch``: the decision point, over HTTP.

The trusted context comes from the API key, never from the body: the tenant is the
key's tenant and the agent is the key's name (so an approval the check opens is
requested by that name, which can then never decide it).
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Annotated

from fastapi import APIRouter, Depends, Request, Response
from pydantic_core import to_json

from interlock.core.action import Action, Context, Downstream
from interlock.core.decision import Decision
from interlock.server.api_models import ActionIn, BatchIn, DecisionOut
from interlock.server.auth import Permission, require
from interlock.server.keys import ApiKey
from interlock.server.routes.common import errors
from interlock.server.state import ServerState, state_of

if TYPE_CHECKING:
    from interlock.core.redaction import Redactor

__all__ = ["answer_body", "decision_json", "router", "to_action"]

router = APIRouter(prefix="/v1", tags=["check"])

CheckKey = Annotated[ApiKey, Depends(require(Permission.CHECK))]


def to_action(body: ActionIn, key: ApiKey) -> Action:
    """The action the body describes, in the key's trusted context."""
    stated = body.context
    downstream = stated.downstream
    context = Context(
        tenant=key.tenant,
        agent=key.identity,
        agent_type=stated.agent_type,
        runtime=stated.runtime,
        session_id=stated.session_id,
        run_id=stated.run_id,
        call_id=stated.call_id,
        idempotency_key=stated.idempotency_key,
        downstream=None
        if downstream is None
        else Downstream(downstream.system, downstream.operation, downstream.endpoint),
    )
    return Action(
        kind=body.kind,
        name=body.name,
        arguments=body.arguments,
        target=body.target,
        scope=body.scope,
        description=body.description,
        schema=body.tool_schema,
        capabilities=tuple(body.capabilities),
        context=context,
    )


async def decide_one(state: ServerState, body: ActionIn, key: ApiKey) -> Decision:
    """The decision on one action (``POST /v1/check``, on the stack or the fast entry):
    judged; or, when the client says it could not read the call, recorded as
    undetermined and never decided."""
    if body.unreadable is not None:
        return await state.guard.aunreadable(to_action(body, key), body.unreadable)
    return await state.guard.acheck(to_action(body, key))


def _answer(state: ServerState, decision: Decision, started: float) -> Response:
    # Serialised here, once: returned as a Response, FastAPI does not validate and
    # encode the model a second time (the route's response_model still documents it).
    return Response(answer_body(state, decision, started), media_type="application/json")


def answer_body(state: ServerState, decision: Decision, started: float) -> bytes:
    """The answer's body for ``decision``, counted in the check metrics (``started``:
    when the guard was asked, by ``time.perf_counter``)."""
    metrics = state.metrics
    metrics.check_seconds.observe(time.perf_counter() - started)
    metrics.decided[decision.verdict].inc()
    return decision_json(decision, state.guard.redactor)


def decision_json(decision: Decision, redactor: Redactor) -> bytes:
    """The body of :class:`DecisionOut` for ``decision``, byte for byte. A plain verdict
    (no approval, reservation, shadow or cause: most of them) is encoded straight from
    its fields, which are all strings already; any other (a grant's too) goes through
    the model."""
    if (
        decision.approval is None
        and decision.reservation is None
        and decision.shadow is None
        and decision.cause is None
        and decision.grant is None
    ):
        plain = {
            "verdict": decision.verdict.value,
            "reason": redactor.redact(decision.reason),
            "rule_ids": list(decision.rule_ids),
            "decision_id": decision.decision_id,
            "approval": None,
            "reservation": None,
            "shadow": None,
            "cause": None,
            "fail_open": decision.fail_open,
            "grant": None,
        }
        return to_json(plain)  # the model's own serialiser, without building the model
    return DecisionOut.of(decision, redactor).model_dump_json().encode("utf-8")


@router.post("/check", response_model=DecisionOut, responses=errors(403))
async def check(body: ActionIn, request: Request, key: CheckKey) -> Response:
    """Decide one action: allow, deny, require_approval or undetermined (which fails
    closed). Every verdict is a 200; the decision is in the body."""
    state = state_of(request)
    started = time.perf_counter()
    return _answer(state, await decide_one(state, body, key), started)


@router.post("/check/batch", response_model=DecisionOut, responses=errors(403))
async def check_batch(body: BatchIn, request: Request, key: CheckKey) -> Response:
    """Decide an ordered list of actions that together make one call: the first
    verdict that is not allow halts it and is returned; else the last allow is."""
    state = state_of(request)
    started = time.perf_counter()
    decision = await state.guard.acheck_batch([to_action(item, key) for item in body.actions])
    assert decision is not None  # the list is never empty
    return _answer(state, decision, started)
