"""A server's sampling request (``sampling/createMessage``) as a model call: judged,
and budgeted like any other, before it reaches the client's model.

The action is ``kind: llm`` named :data:`SAMPLING_MODEL` (``mcp-sampling``): the
model is the *client's* choice, so the server's ``modelPreferences.hints`` are not
its name — they are untrusted wishes, kept as the argument ``model_hints`` (a rule
may refuse on them; an allow rule that trusts them trusts the server, and binds
nothing: the client may pick another model). Its target is ``mcp:<server>`` (the
upstream's name, as the operator configured it; the parameter ``server``), and its
arguments are what the request asks of the model, in the LLM proxy's names:
``provider: mcp``, ``messages`` (inline image and audio data replaced by a
placeholder that says its size), ``system`` (``systemPrompt``), ``max_tokens``
(``maxTokens``), ``include_context``, ``tools``, ``tool_choice``, ``temperature``,
``stop_sequences``, ``metadata`` and ``model_hints``. The request's ``_meta`` plays
no part: who asks is the gateway's (or the session's) trusted context.

The budget is reserved from the proxy's estimate (the prompt's characters / 4, plus
``maxTokens``) when the request is allowed, before the client sees it; the answer
has no usage, so what is committed is the same input estimate plus the answer's
own characters / 4 (text, and the name and input of a tool use), never more than
``maxTokens``, priced as :data:`SAMPLING_MODEL`. The model the client used
(``result.model``) is recorded: in the ``llm_output`` event and in an audit record
of kind ``sampling``. An error answer, a cancellation or an abandoned request
releases the reservation; :class:`Sampled` settles exactly once.

A refused request is answered, on the client's behalf, with the JSON-RPC error the
protocol gives a rejected sampling request (code ``-1``), carrying the reason and
the decision (:func:`rejection`).
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import logging
import math
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Final

from pydantic import ValidationError

from interlock.core.action import Action, Context
from interlock.core.phases import LLMInput, LLMOutput, emit_phase
from interlock.errors import MappingError, describe
from interlock.ledger.estimate import CHARS_PER_TOKEN, estimate_model_call
from interlock.ledger.usage import Usage

try:
    from mcp_types import CreateMessageRequestParams
except ImportError as exc:  # pragma: no cover - exercised only without the extra
    raise ImportError(
        f"MCP sampling needs mcp>=2.0,<3 ({exc}): pip install 'interlock[mcp]'"
    ) from exc

if TYPE_CHECKING:
    from interlock.core.decision import Decision
    from interlock.guard import Guard

__all__ = [
    "SAMPLING_METHOD",
    "SAMPLING_MODEL",
    "SAMPLING_REJECTED",
    "Sampled",
    "judge_sampling",
    "rejection",
    "sampled_usage",
    "sampling_action",
    "sampling_params",
]

log = logging.getLogger("interlock")

#: The method of a sampling request.
SAMPLING_METHOD: Final = "sampling/createMessage"
#: The name of every sampling action (the model is the client's choice).
SAMPLING_MODEL: Final = "mcp-sampling"
#: The protocol's error code for a rejected sampling request.
SAMPLING_REJECTED: Final = -1

# Inline data longer than this is replaced by a placeholder in the action.
_BLOB_CHARS: Final = 256


def sampling_params(params: Any) -> CreateMessageRequestParams | str:
    """The validated params of a sampling request, or why they do not validate."""
    if not isinstance(params, Mapping):
        return "the sampling/createMessage params are not an object"
    try:
        return CreateMessageRequestParams.model_validate(params, by_name=False)
    except ValidationError as exc:
        return f"the sampling/createMessage params are malformed ({exc.error_count()} error(s))"


def sampling_action(
    params: CreateMessageRequestParams,
    server: str | None = None,
    call_id: str | None = None,
    context: Context | None = None,
) -> Action:
    """The ``llm`` action of one sampling request (see the module docstring);
    ``context``: the caller's trusted context where the runtime knows it (a gateway
    session: the tenant and agent of the client's key)."""
    wire = params.model_dump(by_alias=True, mode="json", exclude_none=True)
    args: dict[str, Any] = {
        "provider": "mcp",
        "messages": _without_blobs(wire.get("messages", [])),
        "max_tokens": params.max_tokens,
    }
    for key, name in (
        ("systemPrompt", "system"),
        ("includeContext", "include_context"),
        ("tools", "tools"),
        ("temperature", "temperature"),
        ("stopSequences", "stop_sequences"),
        ("metadata", "metadata"),
    ):
        if key in wire:
            args[name] = wire[key]
    choice = wire.get("toolChoice")
    if isinstance(choice, Mapping) and "mode" in choice:
        args["tool_choice"] = choice["mode"]
    preferences = params.model_preferences
    hints = [hint.name for hint in preferences.hints or ()] if preferences else []
    if any(hints):
        args["model_hints"] = [hint for hint in hints if hint]
    return Action.llm(
        SAMPLING_MODEL,
        arguments=args,
        target=f"mcp:{server}" if server else None,
        context=_trusted(context, call_id),
    )


def _trusted(context: Context | None, call_id: str | None) -> Context:
    if context is None:
        return Context(call_id=call_id) if call_id else Context()
    return dataclasses.replace(context, call_id=call_id) if call_id else context


def _without_blobs(value: Any) -> Any:
    """``value`` with long inline ``data`` (base64 images, audio) replaced by a
    placeholder: its characters are not tokens, and the audit log keeps no blobs."""
    if isinstance(value, list):
        return [_without_blobs(item) for item in value]
    if not isinstance(value, Mapping):
        return value
    out = {key: _without_blobs(item) for key, item in value.items()}
    data = value.get("data")
    if isinstance(data, str) and len(data) > _BLOB_CHARS:
        kind = value.get("mimeType") if isinstance(value.get("mimeType"), str) else "data"
        out["data"] = f"<{len(data)} characters of base64 {kind}>"
    return out


def sampled_usage(action: Action, result: Mapping[str, Any]) -> Usage:
    """What an answered sampling request is charged: the input as estimated when it
    was reserved, and the answer's characters / 4 (at most ``max_tokens``)."""
    estimate = estimate_model_call(action.arguments)
    content = result.get("content")
    blocks = content if isinstance(content, list) else [content]
    chars = 0
    for block in blocks:
        if not isinstance(block, Mapping):
            continue
        if isinstance(block.get("text"), str):
            chars += len(block["text"])
        if block.get("type") == "tool_use":
            chars += len(str(block.get("name", ""))) + len(json.dumps(block.get("input")))
    output = math.ceil(chars / CHARS_PER_TOKEN)
    bound = estimate.output_tokens
    return Usage(estimate.input_tokens, min(output, bound) if bound is not None else output)


def rejection(decision: Decision, action: Action | None = None) -> dict[str, Any]:
    """The JSON-RPC error object that refuses a sampling request: code ``-1``, the
    refusal as the message (with the decision id), the decision in ``data``."""
    from interlock.adapters.base import verdict_outcome
    from interlock.adapters.mcp import decision_meta, without_dead_link

    decision = without_dead_link(decision)
    text = verdict_outcome(decision, action).message or decision.reason
    if decision.decision_id:
        text = f"{text} (decision {decision.decision_id})"
    return {"code": SAMPLING_REJECTED, "message": text, "data": decision_meta(decision)}


class Sampled:
    """An allowed sampling request, until it is settled: :meth:`commit` with the
    client's answer, or :meth:`release` — exactly one, once (a second call, of
    either, does nothing). Settling is shielded from cancellation."""

    __slots__ = ("_began", "_settled", "action", "decision", "guard", "server")

    def __init__(
        self, guard: Guard, decision: Decision, action: Action, server: str | None
    ) -> None:
        self.guard = guard
        self.decision = decision
        self.action = action
        self.server = server
        self._settled = False
        self._began = time.perf_counter_ns()
        if guard.sink is not None:
            estimate = estimate_model_call(action.arguments).usage()
            emit_phase(guard, LLMInput(SAMPLING_MODEL, decision.decision_id, estimate))

    @property
    def settled(self) -> bool:
        return self._settled

    async def commit(self, result: Mapping[str, Any]) -> None:
        """The client answered with ``result`` (a ``CreateMessageResult``)."""
        if self._settled:
            return
        self._settled = True
        usage = sampled_usage(self.action, result)
        model = result.get("model")
        used = model if isinstance(model, str) else None
        record = {"status": "committed", "model": used, "stop_reason": result.get("stopReason")}
        record["usage"] = {"input_tokens": usage.input_tokens, "output_tokens": usage.output_tokens}
        await asyncio.shield(asyncio.to_thread(self._settle, usage, record))
        self._finished(used, usage, None)

    async def release(self, why: str) -> None:
        """The request was not answered with a result: an error, a cancellation, an
        abandonment (``why`` says which)."""
        if self._settled:
            return
        self._settled = True
        record = {"status": "released", "reason": why}
        await asyncio.shield(asyncio.to_thread(self._settle, None, record))
        self._finished(None, None, why)

    def _settle(self, usage: Usage | None, record: dict[str, Any]) -> None:
        guard, decision = self.guard, self.decision
        reservation = decision.reservation
        if reservation is not None:
            try:
                if usage is None:
                    guard.release(decision, by=reservation.owner)
                else:
                    guard.commit(decision, usage, model=SAMPLING_MODEL, by=reservation.owner)
            except Exception as exc:  # the reaper settles it after its TTL; say so
                log.error(
                    "interlock: could not %s reservation %s of a sampling request: %s",
                    "release" if usage is None else "commit",
                    reservation.id,
                    describe(exc),
                )
        audit = guard.audit
        if audit is None:
            return
        record = {"decision_id": decision.decision_id, "server": self.server, **record}
        try:
            tenant = self.action.context.merged_over(guard.context).tenant
            audit.write_record(tenant, "sampling", record)
        except Exception as exc:
            log.error("interlock: could not record a sampling request: %s", describe(exc))

    def _finished(self, model: str | None, usage: Usage | None, error: str | None) -> None:
        if self.guard.sink is None:
            return
        output = LLMOutput(
            model or SAMPLING_MODEL,
            self.decision.decision_id,
            ok=error is None,
            usage=usage,
            error=error,
            duration_ns=time.perf_counter_ns() - self._began,
        )
        emit_phase(self.guard, output)


async def judge_sampling(
    guard: Guard,
    params: Any,
    *,
    server: str | None = None,
    call_id: str | None = None,
    problem: str | None = None,
    context: Context | None = None,
) -> Sampled | tuple[Decision, Action | None]:
    """The verdict on one sampling request: :class:`Sampled` (allowed, its budget
    reserved), or the refusing decision and its action (``None`` for params that
    cannot be read, or a request refused unread for ``problem``: undetermined,
    recorded by the guard)."""
    parsed = problem if problem is not None else sampling_params(params)
    if isinstance(parsed, str):
        problem = parsed
        if context is not None:  # a gateway's: the record is the client's key's
            target = f"mcp:{server}" if server else None
            known = Action.llm(SAMPLING_MODEL, target=target, context=_trusted(context, call_id))
            return await guard.aunreadable(known, problem), None

        def refuse(*_: Any) -> None:
            raise MappingError(problem)

        unread = await guard.acheck_mapped(refuse)
        assert unread is not None  # a mapper that raises is undetermined, never None
        return unread, None
    action = sampling_action(parsed, server, call_id, context)
    decision = await guard.acheck(action)
    if not decision.allowed:
        return decision, action
    return Sampled(guard, decision, action, server)
