"""Anthropic Messages streams: a ``tool_use`` block held from its
``content_block_start`` to its ``content_block_stop``, then judged, released or
replaced in place (see :mod:`.stream_tools`).

The client (the ``anthropic`` SDK) appends a block at each ``content_block_start``
and addresses deltas and stops by ``index``, so a block is relayed only at the
position it claims. A released block is sent whole: its start (``input: {}``), one
``input_json_delta`` with the exact JSON the model wrote, and its stop. A refused
one becomes, at the same index, a ``text`` block carrying the refusal. Deltas for a
block that is not open (never started, held, already stopped) are dropped, so
nothing can be added to a released call afterwards.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Final, final

import orjson

from .held import CALL_OVERHEAD, HeldBytes, Judge, broken_note, data_frame, rewritten_frame
from .relay import sse_frame, sse_payload
from .tools import judge_tool_calls

__all__ = ["AnthropicToolGate"]

_UNREADABLE: Final = "the stream carried an event the proxy could not read"
#: events after which a block still held can no longer complete
_ENDS_A_BLOCK: Final = frozenset({"message_start", "message_delta", "message_stop", "error"})


@dataclass(slots=True)
class _Block:
    """A ``tool_use`` block held back."""

    index: int  # where the client will hold it
    upstream: object  # the index the upstream gave it
    start: dict[str, Any]  # its content_block
    parts: list[str] = field(default_factory=list)
    size: int = 0
    broken: str | None = None


@final
class AnthropicToolGate:
    """The :class:`~.relay.Gate` of one ``/v1/messages`` stream."""

    __slots__ = ("_held", "_holding", "_judge", "_open", "_positions", "_refused", "_released")

    def __init__(self, judge: Judge, held: HeldBytes) -> None:
        self._judge = judge
        self._held = held
        self._positions = 0  # blocks the client holds
        self._open: dict[int, str] = {}  # relayed blocks not yet stopped: index -> type
        self._holding: _Block | None = None
        self._released = 0
        self._refused = 0

    async def feed(self, event: list[str], data: Any) -> list[bytes]:
        if not isinstance(data, dict):
            if sse_payload(event):  # not JSON, or not an object: never relayed
                if self._holding is not None:
                    self._fail(self._holding, _UNREADABLE)
                return []
            return [sse_frame(event)]
        kind = data.get("type")
        if kind == "content_block_start":
            return await self._start(event, data)
        if kind == "content_block_delta":
            return self._delta(event, data)
        if kind == "content_block_stop":
            return await self._stop(event, data)
        if kind not in _ENDS_A_BLOCK:  # ping, and what the proxy does not know: as it came
            return [sse_frame(event)]
        frames = await self._settle_held("the message ended before the tool call did")
        if kind == "message_start":
            return [*frames, await self._message_start(event, data)]
        if kind == "message_delta":
            return [*frames, self._message_delta(event, data)]
        return [*frames, sse_frame(event)]

    async def end(self) -> list[bytes]:
        return await self._settle_held("the stream ended before the tool call was complete")

    # -- blocks -----------------------------------------------------------------------

    async def _start(self, event: list[str], data: dict[str, Any]) -> list[bytes]:
        frames = await self._settle_held("another block started before it ended")
        index = data.get("index")
        block = data.get("content_block")
        if not isinstance(block, dict) or block.get("type") != "tool_use":
            if type(index) is int:
                self._open[index] = str(block.get("type")) if isinstance(block, dict) else ""
            self._positions += 1
            return [*frames, sse_frame(event)]
        held = _Block(self._positions, index, block)
        if not self._held.take(CALL_OVERHEAD):
            held.broken = self._held.too_large()
        else:
            held.size = CALL_OVERHEAD
        if index != self._positions:
            self._fail(held, f"its index {index!r} is out of order (expected {self._positions})")
        self._holding = held
        return frames

    def _delta(self, event: list[str], data: dict[str, Any]) -> list[bytes]:
        index = data.get("index")
        delta = data.get("delta")
        held = self._holding
        if held is not None and index == held.upstream and type(index) is int:
            partial = delta.get("partial_json") if isinstance(delta, dict) else None
            if not isinstance(delta, dict) or delta.get("type") != "input_json_delta":
                self._fail(held, "a delta that is not its input came for it")
            elif not isinstance(partial, str):
                self._fail(held, "its input delta is not text")
            elif held.broken is None:
                size = len(partial.encode())
                if self._held.take(size):
                    held.parts.append(partial)
                    held.size += size
                else:
                    self._fail(held, self._held.too_large())
            return []
        if type(index) is not int or index not in self._open:
            return []  # no open block of that index: never started, or already stopped
        is_input = isinstance(delta, dict) and delta.get("type") == "input_json_delta"
        if is_input and not self._open[index].endswith("tool_use"):
            return []  # input only ever goes to a (server-run) tool block
        return [sse_frame(event)]

    async def _stop(self, event: list[str], data: dict[str, Any]) -> list[bytes]:
        index = data.get("index")
        held = self._holding
        if held is not None and index == held.upstream and type(index) is int:
            return await self._settle_held(None)
        if type(index) is int and self._open.pop(index, None) is not None:
            return [sse_frame(event)]
        return []

    async def _settle_held(self, cut: str | None) -> list[bytes]:
        """The held block, judged (``cut`` is ``None``) or refused as cut: the
        frames that release or replace it; nothing when none is held."""
        held = self._holding
        if held is None:
            return []
        self._holding = None
        self._held.give(held.size)
        self._positions += 1
        block = held.start
        name, call_id = block.get("name"), block.get("id")
        text = "".join(held.parts)
        if cut is not None or held.broken is not None:
            note: str | None = broken_note(name, held.broken or cut or "", call_id)
        else:
            arguments: object = text if text.strip() else block.get("input")
            note = await self._judge.refusal(name, arguments, call_id)
        if note is not None:
            self._refused += 1
            return _text_block(held.index, note)
        self._released += 1
        if not text.strip():
            text = orjson.dumps(block.get("input") or {}).decode()
        return [
            _event("content_block_start", index=held.index, content_block={**block, "input": {}}),
            _event(
                "content_block_delta",
                index=held.index,
                delta={"type": "input_json_delta", "partial_json": text},
            ),
            _event("content_block_stop", index=held.index),
        ]

    def _fail(self, held: _Block, reason: str) -> None:
        if held.broken is None:
            held.broken = reason
        freed = sum(len(part.encode()) for part in held.parts)
        held.parts.clear()
        held.size -= freed
        self._held.give(freed)

    # -- the message ------------------------------------------------------------------

    async def _message_start(self, event: list[str], data: dict[str, Any]) -> bytes:
        message = data.get("message")
        if not isinstance(message, dict) or not isinstance(message.get("content"), list):
            return sse_frame(event)
        content = message["content"]
        if self._positions == 0:
            self._positions = len(content)
        refused = await judge_tool_calls(
            self._judge.guard, "anthropic", message, self._judge.context
        )
        self._released += sum(isinstance(b, dict) and b.get("type") == "tool_use" for b in content)
        if not refused:
            return sse_frame(event)
        self._refused += 1
        return rewritten_frame(event, data)

    def _message_delta(self, event: list[str], data: dict[str, Any]) -> bytes:
        delta = data.get("delta")
        ended_on_tools = isinstance(delta, dict) and delta.get("stop_reason") == "tool_use"
        if not ended_on_tools or not self._refused or self._released:
            return sse_frame(event)
        assert isinstance(delta, dict)
        return rewritten_frame(event, {**data, "delta": {**delta, "stop_reason": "end_turn"}})


def _event(kind: str, **fields: Any) -> bytes:
    return data_frame({"type": kind, **fields}, kind)


def _text_block(index: int, text: str) -> list[bytes]:
    return [
        _event("content_block_start", index=index, content_block={"type": "text", "text": ""}),
        _event("content_block_delta", index=index, delta={"type": "text_delta", "text": text}),
        _event("content_block_stop", index=index),
    ]
