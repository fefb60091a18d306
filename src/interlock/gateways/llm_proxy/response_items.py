"""The output items of an OpenAI Responses answer, judged before the agent sees them.

Each item type is either run by the client (judged as one or more ``kind: tool``
actions: all must be allowed), already run by the provider (passed: nothing can stop
it now), or not a call at all (passed). A type not in this table is refused: it may
be a call the client runs, and the proxy cannot judge what it does not know.

Run by the client, so judged (``type``: the tool action, its arguments):

- ``function_call``: ``name``, its JSON ``arguments`` (an object, else refused);
- ``custom_tool_call``: ``name``, ``{"input": <its free text>}``;
- ``mcp_approval_request`` (the provider runs it once the client approves): ``name``,
  its JSON ``arguments``;
- ``local_shell_call``: ``local_shell``, ``{"command": <argv as shell words>, ...}``
  (the action's other fields beside);
- ``shell_call`` not in a container: ``shell``, ``{"command": c}`` for each command;
- ``apply_patch_call``: ``apply_patch``, its ``operation`` (``type``, ``path``, ``diff``);
- ``computer_call``: ``computer``, each action;
- ``tool_search_call`` with ``execution: client``: ``tool_search``, its ``arguments``.

Already run by the provider, so passed: ``web_search_call``, ``file_search_call``,
``code_interpreter_call``, ``image_generation_call``, ``mcp_call``, ``mcp_list_tools``,
``program``, a ``shell_call`` in a ``container_reference`` and a server-side
``tool_search_call``. Nothing runs from (passed): ``message``, ``reasoning``,
``compaction``, ``additional_tools``, every ``*_output`` and ``mcp_approval_response``.
Anything else is refused.

A refused item is replaced, at its place, by an assistant ``message`` whose one
``output_text`` part is the refusal (the same text as the chat flavour's,
:func:`~interlock.gateways.llm_proxy.tools.refusal_for_call`).
"""

from __future__ import annotations

import hashlib
import json
import shlex
from collections.abc import Mapping
from typing import Any, Final, TypeGuard

from interlock.core.action import Context
from interlock.guard import Guard

from .tools import refusal_for_call

__all__ = [
    "PASSED",
    "ItemJudge",
    "calls_of",
    "is_gated",
    "judge_response",
    "output_text_of",
    "refusal_message",
]

#: item types nothing runs from, or the provider has already run
PASSED: Final = frozenset(
    {
        "message",
        "reasoning",
        "compaction",
        "additional_tools",
        "web_search_call",
        "file_search_call",
        "code_interpreter_call",
        "image_generation_call",
        "mcp_call",
        "mcp_list_tools",
        "program",
        "program_output",
        "function_call_output",
        "custom_tool_call_output",
        "computer_call_output",
        "local_shell_call_output",
        "shell_call_output",
        "apply_patch_call_output",
        "tool_search_output",
        "mcp_approval_response",
    }
)

# Stands for arguments that are not a JSON object: refused by refusal_for_call.
_NOT_AN_OBJECT: Final = object()

# One judged call: (tool name, arguments, the id the refusal names).
_Call = tuple[object, object, object]


def is_gated(item: object) -> bool:
    """Whether ``item`` must be judged (or refused) before the agent may see it."""
    if not isinstance(item, Mapping):
        return True
    kind = item.get("type")
    if isinstance(kind, str) and kind in PASSED:
        return False
    return not _provider_run(item)


def _provider_run(item: Mapping[str, Any]) -> bool:
    kind = item.get("type")
    if kind == "shell_call":
        environment = item.get("environment")
        return isinstance(environment, Mapping) and environment.get("type") == (
            "container_reference"
        )
    if kind == "tool_search_call":
        return item.get("execution") == "server"
    return False


def _json_object(text: object) -> object:
    """The JSON object ``text`` holds, else :data:`_NOT_AN_OBJECT`."""
    if not isinstance(text, str):
        return _NOT_AN_OBJECT
    try:
        parsed = json.loads(text)  # as the Python clients parse it
    except ValueError:
        return _NOT_AN_OBJECT
    return parsed if isinstance(parsed, dict) else _NOT_AN_OBJECT


def _object(value: object) -> object:
    return value if isinstance(value, Mapping) else _NOT_AN_OBJECT


def calls_of(item: Mapping[str, Any]) -> list[_Call] | None:
    """The tool calls a gated item asks the client to run (``None``: a type the
    proxy does not know, or one too malformed to judge)."""
    kind = item.get("type")
    call_id = item.get("call_id") or item.get("id")
    if kind == "function_call":
        return [(item.get("name"), _json_object(item.get("arguments")), call_id)]
    if kind == "custom_tool_call":
        free_form = item.get("input")  # text, never parsed as JSON
        arguments = {"input": free_form} if isinstance(free_form, str) else _NOT_AN_OBJECT
        return [(item.get("name"), arguments, call_id)]
    if kind == "mcp_approval_request":
        return [(item.get("name"), _json_object(item.get("arguments")), item.get("id"))]
    found = item.get("action")
    action: Mapping[str, Any] = found if isinstance(found, Mapping) else {}
    if kind == "local_shell_call":
        argv = action.get("command")
        if not _strings(argv):
            return [("local_shell", _NOT_AN_OBJECT, call_id)]
        rest = {k: v for k, v in action.items() if k not in ("type", "command")}
        return [("local_shell", {"command": shlex.join(argv), **rest}, call_id)]
    if kind == "shell_call":
        commands = action.get("commands")
        if not _strings(commands):
            return [("shell", _NOT_AN_OBJECT, call_id)]
        return [("shell", {"command": command}, call_id) for command in commands]
    if kind == "apply_patch_call":
        return [("apply_patch", _object(item.get("operation")), call_id)]
    if kind == "computer_call":
        steps: list[object] = []
        if item.get("action") is not None:
            steps.append(item["action"])
        listed = item.get("actions")
        if isinstance(listed, list):
            steps.extend(listed)
        elif listed is not None:
            steps.append(listed)  # not a list: refused below, as not an object
        return [("computer", _object(step), call_id) for step in steps or [None]]
    if kind == "tool_search_call":
        return [("tool_search", _object(item.get("arguments")), call_id)]
    return None


def _strings(value: object) -> TypeGuard[list[str]]:
    """Whether ``value`` is a non-empty list of strings."""
    return isinstance(value, list) and bool(value) and all(isinstance(v, str) for v in value)


def refusal_message(note: str, item: object, index: int) -> dict[str, Any]:
    """The assistant message that takes a refused item's place. Its id starts with
    ``msg_`` (the API refuses other message ids when the agent sends it back) and is
    the same for the same item, streamed or not."""
    seed = _item_key(item, index)
    digest = hashlib.sha256(seed.encode()).hexdigest()[:32]
    part = {"type": "output_text", "text": note, "annotations": [], "logprobs": []}
    return {
        "id": f"msg_interlock_{digest}",
        "type": "message",
        "status": "completed",
        "role": "assistant",
        "content": [part],
    }


def _item_key(item: object, index: int) -> str:
    """A stable text naming ``item`` (its type and ids, else its place)."""
    if isinstance(item, Mapping):
        return f"{item.get('type')}|{item.get('id')}|{item.get('call_id')}|{index}"
    return f"?|{index}"


def _malformed_note(item: object, index: int) -> str:
    if not isinstance(item, Mapping):
        return f"Interlock refused a malformed output item [output {index}]"
    ident = item.get("call_id") or item.get("id") or f"output {index}"
    return (
        f"Interlock refused an output item of type {item.get('type')!r}: the proxy cannot "
        f"judge it, so it does not reach the agent [item {ident}]"
    )


class ItemJudge:
    """Judges the gated items of one response, each once: the same item seen again
    (a stream's ``response.output_item.done`` and then its ``response.completed``)
    gets the same verdict; a changed item is judged anew."""

    __slots__ = ("_context", "_guard", "_verdicts")

    def __init__(self, guard: Guard, context: Context) -> None:
        self._guard = guard
        self._context = context
        self._verdicts: dict[str, dict[str, Any] | None] = {}

    async def replacement(self, item: object, index: int) -> dict[str, Any] | None:
        """``None`` when ``item`` may reach the agent as it is, else the message that
        replaces it."""
        if not is_gated(item):
            return None
        key = _signature(item, index)
        if key in self._verdicts:
            return self._verdicts[key]
        note = await self._note(item, index)
        verdict = None if note is None else refusal_message(note, item, index)
        self._verdicts[key] = verdict
        return verdict

    def refuse(self, item: object, index: int, note: str) -> dict[str, Any]:
        """Refuse ``item`` with ``note`` (whatever a check would say of it): the
        message that replaces it, here and wherever the same item is seen again."""
        verdict = refusal_message(note, item, index)
        self._verdicts[_signature(item, index)] = verdict
        return verdict

    async def _note(self, item: object, index: int) -> str | None:
        calls = calls_of(item) if isinstance(item, Mapping) else None
        if calls is None:
            return _malformed_note(item, index)
        for name, arguments, call_id in calls:
            note = await refusal_for_call(self._guard, name, arguments, call_id, self._context)
            if note is not None:
                return note
        return None

    async def output(self, items: list[Any]) -> bool:
        """Replace, in place, every refused item of a response's ``output``; ``True``
        when one was."""
        changed = False
        for index, item in enumerate(items):
            replacement = await self.replacement(item, index)
            if replacement is not None:
                items[index] = replacement
                changed = True
        return changed


def _signature(item: object, index: int) -> str:
    """What makes two sightings of an item the same call: its ids and everything in
    it but its ``status``."""
    if not isinstance(item, Mapping):
        return f"?|{index}|{item!r}"
    body = {k: v for k, v in item.items() if k != "status"}
    try:
        text = json.dumps(body, sort_keys=True, default=repr)
    except ValueError:  # a circular value cannot come from JSON; judged anew
        text = repr(body)
    return f"{_item_key(item, -1)}|{text}"


def output_text_of(output: list[Any]) -> str:
    """What the SDKs' ``output_text`` shows: the ``output_text`` parts of the
    messages, joined."""
    texts: list[str] = []
    for item in output:
        if not isinstance(item, Mapping) or item.get("type") != "message":
            continue
        for part in item.get("content") or ():
            if isinstance(part, Mapping) and part.get("type") == "output_text":
                text = part.get("text")
                if isinstance(text, str):
                    texts.append(text)
    return "".join(texts)


async def judge_response(guard: Guard, body: dict[str, Any], context: Context) -> bool:
    """Judge every gated item of a non-streamed response (``body`` changed in place;
    an ``output_text`` field, where present, is written anew); ``True`` when one was
    refused."""
    output = body.get("output")
    if not isinstance(output, list):
        return False
    judge = ItemJudge(guard, context)
    changed = await judge.output(output)
    if changed and isinstance(body.get("output_text"), str):
        body["output_text"] = output_text_of(output)
    return changed
