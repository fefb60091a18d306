"""OpenAI Chat Completions streams: tool-call deltas held per choice until the
choice finishes, then judged, released or replaced (see :mod:`.stream_tools`).

A choice's ``delta.tool_calls[j]`` fragments (and the legacy ``delta.function_call``)
are taken out of the chunks as they pass; everything else in the chunk goes on at
once. The chunk that carries the choice's ``finish_reason`` then carries, instead of
the fragments, one delta per released call (``index`` renumbered 0…k-1 in the order
the calls were released on the choice, the upstream's ``id``, ``name`` and exact
``arguments`` text) and the refusals, appended to the content as the non-streamed
path appends them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Final, TypeGuard, final

from .held import CALL_OVERHEAD, HeldBytes, Judge, broken_note, data_frame, rewritten_frame
from .relay import sse_frame, sse_payload

__all__ = ["OpenAIToolGate"]

_LEGACY: Final = -1  # the key of a choice's legacy ``function_call``
_CUT: Final = "the stream ended before its choice finished"
_UNREADABLE: Final = "the stream carried an event the proxy could not read"
_CALL_FINISHES: Final = ("tool_calls", "function_call")


@dataclass(slots=True)
class _Call:
    id: str | None
    name: str = ""
    arguments: list[str] = field(default_factory=list)
    size: int = 0  # bytes counted against the stream's cap
    broken: str | None = None


@dataclass(slots=True)
class _Choice:
    calls: dict[int, _Call] = field(default_factory=dict)  # by the upstream's tool index
    strays: dict[str, None] = field(default_factory=dict)  # refusals of unattributable deltas
    wrote_text: bool = False  # content already sent on this choice
    seen: bool = False  # the choice has appeared in a chunk sent to the client
    released: int = 0  # tool calls released on this choice: the next one's index
    legacy_released: bool = False  # its function_call was released

    @property
    def pending(self) -> bool:
        return bool(self.calls or self.strays)


@final
class OpenAIToolGate:
    """The :class:`~.relay.Gate` of one ``/v1/chat/completions`` stream."""

    __slots__ = ("_choices", "_envelope", "_held", "_judge")

    def __init__(self, judge: Judge, held: HeldBytes) -> None:
        self._judge = judge
        self._held = held
        self._choices: dict[int, _Choice] = {}
        self._envelope: dict[str, Any] = {}

    async def feed(self, event: list[str], data: Any) -> list[bytes]:
        if not isinstance(data, dict):
            payload = sse_payload(event)
            if payload == "[DONE]":
                return [*await self.end(), sse_frame(event)]
            if payload:  # not JSON, or not an object: never relayed
                self._break_all(_UNREADABLE)
                return []
            return [sse_frame(event)]
        choices = data.get("choices")
        if not isinstance(choices, list) or not choices:
            return [sse_frame(event)]
        self._envelope = {k: v for k, v in data.items() if k not in ("choices", "usage")}
        kept: list[Any] = []
        touched = False
        for entry in choices:
            out, changed = await self._choice(entry)
            touched = touched or changed
            if out is not None:
                kept.append(out)
        if not touched:
            return [sse_frame(event)]
        if not kept and data.get("usage") is None:
            return []
        return [rewritten_frame(event, {**data, "choices": kept})]

    async def end(self) -> list[bytes]:
        """Every call still held is refused: its choice never finished."""
        entries = []
        for index, state in self._choices.items():
            if state.pending:
                delta = await self._resolve(state, cut=True)
                entries.append({"index": index, "delta": delta, "finish_reason": None})
        if not entries:
            return []
        return [data_frame({**self._envelope, "choices": entries})]

    # -- one choice of a chunk ----------------------------------------------------------

    async def _choice(self, entry: Any) -> tuple[Any, bool]:
        """The entry to send in its place (``None``: nothing) and whether it changed."""
        if not isinstance(entry, dict):
            return entry, False
        delta = entry.get("delta")
        tools = isinstance(delta, dict) and (
            delta.get("tool_calls") is not None or delta.get("function_call") is not None
        )
        index = entry.get("index")
        if not _is_index(index):  # no choice to hold it for: its tool deltas are dropped
            return ({**entry, "delta": _without_tools(delta)}, True) if tools else (entry, False)
        state = self._choices.setdefault(index, _Choice())
        finish = entry.get("finish_reason")
        if not tools and not (finish and state.pending):
            state.seen = True
            if isinstance(delta, dict) and delta.get("content"):
                state.wrote_text = True
            return entry, False
        rest: dict[str, Any] = _without_tools(delta) if isinstance(delta, dict) else {}
        if isinstance(delta, dict) and tools:
            self._absorb(state, delta.get("tool_calls"), delta.get("function_call"))
        out = {**entry, "delta": rest}
        if finish and state.pending:
            released = await self._resolve(state, cut=False, content=rest.get("content"))
            out["delta"] = {**rest, **released}
            left = state.released > 0 or state.legacy_released  # on the choice, so far
            if finish in _CALL_FINISHES and not left:
                out["finish_reason"] = "stop"  # nothing is left to call
        elif not rest and not finish and entry.get("logprobs") is None and state.seen:
            return None, True
        if isinstance(out["delta"].get("content"), str) and out["delta"]["content"]:
            state.wrote_text = True
        state.seen = True
        return out, True

    async def _resolve(
        self, state: _Choice, *, cut: bool, content: object = None
    ) -> dict[str, Any]:
        """Judge every call of a finished (or cut) choice: the delta that releases
        the allowed ones and carries the refusals of the others."""
        notes = list(state.strays)
        released: list[dict[str, Any]] = []
        legacy: dict[str, str] | None = None
        for key, call in state.calls.items():
            self._held.give(call.size)
            label = "function_call" if key == _LEGACY else call.id or "?"
            text = "".join(call.arguments)
            if cut or call.broken is not None:
                notes.append(broken_note(call.name, call.broken or _CUT, label))
                continue
            if key == _LEGACY and state.legacy_released:
                # The client would append it to the one it has: refused unjudged.
                notes.append(broken_note(call.name, "a second function call", label))
                continue
            note = await self._judge.refusal(call.name, text, label)
            if note is not None:
                notes.append(note)
            elif key == _LEGACY:
                legacy = {"name": call.name, "arguments": text}
                state.legacy_released = True
            else:
                # Numbered on from the calls released before: the client places a
                # call by its index, and would merge two of one index into one.
                function = {"name": call.name, "arguments": text}
                entry = {"index": state.released, "id": call.id, "type": "function"}
                released.append({**entry, "function": function})
                state.released += 1
        state.calls.clear()
        state.strays.clear()
        delta: dict[str, Any] = {}
        if notes:
            before = content if isinstance(content, str) else ""
            joiner = "\n\n" if before or state.wrote_text else ""
            delta["content"] = before + joiner + "\n".join(notes)
        if released:
            delta["tool_calls"] = released
        if legacy is not None:
            delta["function_call"] = legacy
        return delta

    # -- taking the fragments in ----------------------------------------------------------

    def _absorb(self, state: _Choice, tool_calls: object, function_call: object) -> None:
        if tool_calls is not None:
            if isinstance(tool_calls, list):
                for entry in tool_calls:
                    self._absorb_call(state, entry)
            else:
                state.strays[broken_note(None, "its deltas are not a list", "?")] = None
        if function_call is not None:
            call = state.calls.get(_LEGACY)
            if call is None:
                call = state.calls[_LEGACY] = self._new_call("function_call", None)
            self._absorb_function(call, function_call)

    def _absorb_call(self, state: _Choice, entry: object) -> None:
        if not isinstance(entry, dict) or not _is_index(entry.get("index")):
            reason = "a delta that names no tool call (no index)"
            state.strays[broken_note(None, reason, "?")] = None
            return
        index = entry["index"]
        call_id = entry.get("id")
        call = state.calls.get(index)
        if call is None:
            if not isinstance(call_id, str) or not call_id:
                call = self._new_call(None, "a delta came for a call that never started (no id)")
            elif any(other.id == call_id for other in state.calls.values()):
                call = self._new_call(call_id, "its id is already another call's")
            else:
                call = self._new_call(call_id, None)
            state.calls[index] = call
        elif call_id is not None and call_id != call.id:
            self._fail(call, f"its index was reused for another call ({call_id!r})")
        kind = entry.get("type")
        if kind is not None and kind != "function":
            self._fail(call, f"its type {kind!r} is not a function call")
        if entry.get("function") is not None:
            self._absorb_function(call, entry["function"])

    def _absorb_function(self, call: _Call, function: object) -> None:
        if not isinstance(function, dict):
            self._fail(call, "its function is not an object")
            return
        name = function.get("name")
        if name is not None and name != "":
            if not isinstance(name, str):
                self._fail(call, "its name is not text")
            elif not call.name:
                if self._take(call, name):
                    call.name = name
            elif name != call.name:
                self._fail(call, f"its name changed mid-stream (to {name!r})")
        arguments = function.get("arguments")
        if arguments is not None:
            if not isinstance(arguments, str):
                self._fail(call, "its arguments are not text")
            elif call.broken is None and self._take(call, arguments):
                call.arguments.append(arguments)

    def _new_call(self, call_id: str | None, broken: str | None) -> _Call:
        call = _Call(call_id, broken=broken)
        if self._held.take(CALL_OVERHEAD):
            call.size = CALL_OVERHEAD
        else:
            call.broken = self._held.too_large()
        return call

    def _take(self, call: _Call, text: str) -> bool:
        size = len(text.encode())
        if self._held.take(size):
            call.size += size
            return True
        self._fail(call, self._held.too_large())
        return False

    def _fail(self, call: _Call, reason: str) -> None:
        """The call will be refused: the first reason stands, its arguments go."""
        if call.broken is None:
            call.broken = reason
        if call.arguments:
            freed = sum(len(part.encode()) for part in call.arguments)
            call.arguments.clear()
            call.size -= freed
            self._held.give(freed)

    def _break_all(self, reason: str) -> None:
        for state in self._choices.values():
            for call in state.calls.values():
                self._fail(call, reason)


def _is_index(value: object) -> TypeGuard[int]:
    return type(value) is int and 0 <= value < 2**31


def _without_tools(delta: object) -> Any:
    if not isinstance(delta, dict):
        return delta
    return {k: v for k, v in delta.items() if k not in ("tool_calls", "function_call")}
