"""The tool calls a model emits in a non-streamed response, judged before the agent
sees them (a stream's, held until complete, are judged by the same
:func:`refusal_for_call`: :mod:`.stream_tools`). A refused call is taken out and
replaced by text the agent can read:

- OpenAI (``function`` and ``custom`` calls; a ``custom`` call's free-form input is
  judged as ``{"input": ...}``): the call leaves ``message.tool_calls`` (the key
  goes when none is left; the legacy ``message.function_call`` likewise) and the
  refusal is appended to ``message.content``; ``finish_reason``
  ``tool_calls``/``function_call`` becomes ``stop`` when no call is left.
- Anthropic: the ``tool_use`` block is replaced, in place, by a ``text`` block;
  ``stop_reason`` ``tool_use`` becomes ``end_turn`` when no ``tool_use`` is left.

A call with no name, or whose arguments are not a JSON object (empty text is
``{}``), is refused. The refusal text is the guard's own message (``Interlock denied tool 'x': …``,
with the approval URL when one is needed) followed by ``[tool call <id>; decision
<decision id>]``. An allowed call's budget reservation, if a policy budget covers
tools, is committed at once: the proxy has let the call through to the agent.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from interlock.core.action import Action, Context
from interlock.core.decision import Verdict
from interlock.errors import Blocked
from interlock.guard import Guard, raise_for

from .refusals import Provider
from .sessions import TURN

__all__ = ["judge_tool_calls", "not_an_object", "object_arguments", "refusal_for_call"]


async def judge_tool_calls(
    guard: Guard, provider: Provider, body: dict[str, Any], context: Context
) -> bool:
    """Judge every tool call in ``body`` (changed in place); ``True`` when one was
    refused."""
    if provider == "openai":
        return await _judge_openai(guard, body, context)
    return await _judge_anthropic(guard, body, context)


def object_arguments(text: str) -> dict[str, Any] | None:
    """The arguments a model wrote as JSON text, parsed as the agent's SDK parses them
    (the standard library's ``json``), or ``None`` when they are not a JSON object.
    Empty text is ``{}`` (a call of a tool that takes no parameters)."""
    if not text.strip():
        return {}
    try:
        parsed = json.loads(text)
    except ValueError:
        return None
    return parsed if isinstance(parsed, dict) else None


async def refusal_for_call(
    guard: Guard, name: object, arguments: object, call_id: object, ctx: Context
) -> str | None:
    """``None`` when the call may go to the agent, else the text that replaces it.
    ``arguments`` are a mapping, or the JSON text the model wrote (which must hold an
    object). The one judging path of non-streamed and streamed tool calls."""
    if not isinstance(name, str) or not name:
        return f"Interlock refused a tool call with no name [tool call {call_id}]"
    if arguments is None:
        parsed: object = {}
    elif isinstance(arguments, str):
        parsed = object_arguments(arguments)
    else:
        parsed = arguments
    if not isinstance(parsed, Mapping):
        return not_an_object(name, call_id)
    action = Action.tool(name, parsed, context=ctx)
    turn = TURN.get()
    if turn is not None and turn.inline:  # a session check on the embedded store: here
        decision = guard.check(action)  # (its thread hops cost more than its I/O)
    else:
        decision = await guard.acheck(action)
    if decision.verdict is Verdict.ALLOW:
        if turn is not None:  # its result, when it comes back, settles its step
            turn.allowed(call_id, decision)
        if decision.reservation is not None:
            owner = decision.reservation.owner
            await guard.acommit(decision, by=owner)
        return None
    try:
        raise_for(decision, action)
    except Blocked as exc:
        return f"{exc} [tool call {call_id}; decision {decision.decision_id}]"
    return None  # unreachable: raise_for raises on anything but allow


def not_an_object(name: str, call_id: object) -> str:
    """The refusal of a call whose arguments are not a JSON object."""
    return (
        f"Interlock refused the tool call {name!r}: its arguments are not an object "
        f"[tool call {call_id}]"
    )


async def _judge_openai(guard: Guard, body: dict[str, Any], ctx: Context) -> bool:
    refused_any = False
    for choice in body.get("choices") or ():
        message = choice.get("message") if isinstance(choice, dict) else None
        if not isinstance(message, dict):
            continue
        notes: list[str] = []
        kept: list[Any] = []
        calls = message.get("tool_calls") or []
        for call in calls if isinstance(calls, list) else [calls]:
            name, arguments, call_id = _openai_call(call)
            note = await refusal_for_call(guard, name, arguments, call_id, ctx)
            if note is None:
                kept.append(call)
            else:
                notes.append(note)
        legacy = message.get("function_call")
        if legacy is not None:
            legacy = legacy if isinstance(legacy, dict) else {}
            note = await refusal_for_call(
                guard, legacy.get("name"), legacy.get("arguments"), "function_call", ctx
            )
            if note is not None:
                notes.append(note)
                del message["function_call"]
        if not notes:
            continue
        refused_any = True
        if "tool_calls" in message:
            if kept:
                message["tool_calls"] = kept
            else:
                del message["tool_calls"]
        content = message.get("content")
        text = "\n".join(notes)
        message["content"] = (
            f"{content}\n\n{text}" if isinstance(content, str) and content else text
        )
        left = kept or "function_call" in message
        if not left and choice.get("finish_reason") in ("tool_calls", "function_call"):
            choice["finish_reason"] = "stop"
    return refused_any


def _openai_call(call: object) -> tuple[object, object, object]:
    """(name, arguments, id) of a ``function`` call (JSON arguments) or a ``custom``
    one (free-form ``input``, judged as ``{"input": ...}``); a call of another type
    has no name, so it is refused."""
    if not isinstance(call, dict):
        return None, None, None
    kind = call.get("type", "function")
    spec = call.get(kind) if kind in ("function", "custom") else None
    if not isinstance(spec, dict):
        return None, None, call.get("id")
    if kind == "function":
        return spec.get("name"), spec.get("arguments"), call.get("id")
    free_form = spec.get("input")  # text, never parsed as JSON
    arguments = {"input": free_form} if isinstance(free_form, str) else free_form
    return spec.get("name"), arguments, call.get("id")


async def _judge_anthropic(guard: Guard, body: dict[str, Any], ctx: Context) -> bool:
    blocks = body.get("content")
    if not isinstance(blocks, list):
        return False
    refused_any = False
    for index, block in enumerate(blocks):
        if not isinstance(block, dict) or block.get("type") != "tool_use":
            continue
        name, call_id = block.get("name"), block.get("id")
        note = await refusal_for_call(guard, name, block.get("input"), call_id, ctx)
        if note is not None:
            blocks[index] = {"type": "text", "text": note}
            refused_any = True
    left = any(isinstance(b, dict) and b.get("type") == "tool_use" for b in blocks)
    if refused_any and not left and body.get("stop_reason") == "tool_use":
        body["stop_reason"] = "end_turn"
    return refused_any
