"""A streamed Responses answer relayed event by event, its tool calls held until
judged, and settled exactly once whatever ends it.

- Events of an item nothing runs from (text deltas above all) pass at once, as they
  came.
- The events of a gated item (a ``function_call``, a ``custom_tool_call``…; see
  :mod:`~interlock.gateways.llm_proxy.response_items`) are held from its
  ``response.output_item.added`` to its ``response.output_item.done``; the finished
  item is judged, then its events are released as they came or replaced, at the same
  ``output_index``, by the six events of an assistant message carrying the refusal
  (``output_item.added``, ``content_part.added``, ``output_text.delta`` /
  ``.done``, ``content_part.done``, ``output_item.done``). A ``function_call`` or
  ``custom_tool_call`` whose streamed deltas do not add up to the finished item is
  refused: a client may read either.
- ``sequence_number`` stays one more per event as the client sees it (events are
  renumbered once something was held back or inserted).
- The ``response`` that ``response.completed`` (and every lifecycle event) embeds has
  the same refused items replaced, so its ``output`` agrees with what was streamed.
- An item still held when the stream ends (the upstream cut it mid-call) is never
  released; nor is an event whose data is not a JSON object this proxy reads (a
  laxer parser might find a call in it).

Settled once, in a ``finally`` no cancellation skips: committed from the usage the
stream states, else from the estimated input and the streamed characters / 4 (the
client left, or the upstream ended without a usage after some output); released when
the upstream ended (cut, failed, or closed) before any output and without a usage.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, Final, TypeGuard

import anyio
import orjson

from interlock.gateways.http1 import UpstreamError

from .asgi import Message, Receive, Scope, Send
from .relay import sse_events
from .response_items import ItemJudge, calls_of, is_gated
from .responses import ResponsesMeter
from .sessions import TURN
from .upstream import UpstreamResponse

__all__ = ["ResponsesRelay"]

Settle = Callable[[bool], Awaitable[None]]  # settle(failed): commit, or release when failed

_ADDED: Final = "response.output_item.added"
_DONE: Final = "response.output_item.done"
# item type -> (its delta event, its done event, the item's field they spell)
_STREAMED_FIELD: Final = {
    "function_call": (
        "response.function_call_arguments.delta",
        "response.function_call_arguments.done",
        "arguments",
    ),
    "custom_tool_call": (
        "response.custom_tool_call_input.delta",
        "response.custom_tool_call_input.done",
        "input",
    ),
}

# One upstream event: its JSON data and its lines as they came.
_Event = tuple[dict[str, Any], list[str]]


_NO_DATA: Final = object()  # an event of comments and fields only (a keep-alive)
_FIELDS: Final = (":", "event:", "id:", "retry:")


def _data(lines: list[str]) -> Any:
    """The event's JSON data, :data:`_NO_DATA` when it has no data and nothing else
    (comments, ``event:``, ``id:``, ``retry:``), ``None`` when it is anything else:
    not JSON this proxy reads, or lines that are not SSE."""
    if not any(line.startswith("data:") for line in lines):
        return _NO_DATA if all(line.startswith(_FIELDS) for line in lines) else None
    payload = "\n".join(line[5:].removeprefix(" ") for line in lines if line.startswith("data:"))
    try:
        return orjson.loads(payload)
    except orjson.JSONDecodeError:
        return None


def _body(chunk: bytes) -> Message:
    return {"type": "http.response.body", "body": chunk, "more_body": True}


class ResponsesRelay:
    """The ASGI response for one upstream Responses stream (already answered 2xx)."""

    def __init__(
        self,
        upstream: UpstreamResponse,
        meter: ResponsesMeter,
        settle: Settle,
        judge: ItemJudge,
        *,
        headers: dict[str, str],
    ) -> None:
        self.upstream = upstream
        self.meter = meter
        self.settle = settle
        self.judge = judge
        self.headers = headers
        self._held: dict[int, list[_Event]] = {}
        self._next_seq: int | None = None  # the sequence number the client sees next
        self._ended = False  # the upstream ended (or failed) before the client left

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await send(
                {
                    "type": "http.response.start",
                    "status": 200,
                    "headers": [(k.encode(), v.encode()) for k, v in self.headers.items()],
                }
            )
            async with anyio.create_task_group() as group:
                group.start_soon(self._watch_disconnect, receive, group.cancel_scope)
                try:
                    async for lines in sse_events(self.upstream.aiter_lines()):
                        for chunk in await self._relayed(lines):
                            await send(_body(chunk))
                    self._ended = True
                    await send({"type": "http.response.body", "body": b"", "more_body": False})
                except UpstreamError:
                    self._ended = True  # the upstream failed mid-stream
                finally:
                    group.cancel_scope.cancel()
        except OSError:
            pass  # the client went away while we wrote: charged for what was streamed
        finally:
            with anyio.CancelScope(shield=True):
                await self.upstream.aclose()
                await self.settle(self._released())

    def _released(self) -> bool:
        """Whether the reservation is released rather than committed: the upstream
        ended (closed, cut or failed) with no usage and no output before the client
        left."""
        return self._ended and not self.meter.final and self.meter.outputs == 0

    @staticmethod
    async def _watch_disconnect(receive: Receive, scope: anyio.CancelScope) -> None:
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                scope.cancel()
                return

    # -- one event in, what the client gets out -----------------------------------------

    async def _relayed(self, lines: list[str]) -> list[bytes]:
        data = _data(lines)
        if data is _NO_DATA:
            return [_raw(lines)]  # a comment, a keep-alive: as it came
        if not isinstance(data, dict):
            # Not a JSON object this proxy can judge, though a laxer parser might read
            # one (Python's json takes NaN; orjson does not): never relayed.
            return []
        self.meter.feed(data)
        kind = data.get("type")
        index = data.get("output_index")
        if kind in (_ADDED, _DONE) and is_gated(data.get("item")):
            if not _is_index(index):
                return []  # a call with no place cannot be judged: never relayed
            self._held.setdefault(index, []).append((data, lines))
            return await self._judged(index) if kind == _DONE else []
        if _is_index(index) and index in self._held:
            self._held[index].append((data, lines))
            return []
        response = data.get("response")
        if kind == "response.created" and isinstance(response, dict):
            turn = TURN.get()
            if turn is not None:  # a later request continuing it is of this session
                turn.responded(response.get("id"))
        output = response.get("output") if isinstance(response, dict) else None
        if isinstance(output, list) and await self.judge.output(output):
            return [self._emit(data, None)]
        return [self._emit(data, lines)]

    async def _judged(self, index: int) -> list[bytes]:
        events = self._held.pop(index)
        item = events[-1][0].get("item")
        disagreement = _disagreement(events, item)
        if disagreement is not None:
            replacement: dict[str, Any] | None = self.judge.refuse(item, index, disagreement)
        else:
            replacement = await self.judge.replacement(item, index)
        if replacement is None:
            return [self._emit(data, lines) for data, lines in events]
        return [self._emit(data, None) for data in _message_events(replacement, index)]

    def _emit(self, data: dict[str, Any], lines: list[str] | None) -> bytes:
        """The event as the client gets it: as it came (``lines``) when its sequence
        number is the next one, else written anew."""
        seq = data.get("sequence_number")
        if isinstance(seq, int) and not isinstance(seq, bool):
            expected = seq if self._next_seq is None else self._next_seq
            self._next_seq = expected + 1
            if seq != expected:
                data["sequence_number"] = expected
                lines = None
        elif "sequence_number" in data or lines is None:
            data["sequence_number"] = self._next_seq or 0
            self._next_seq = (self._next_seq or 0) + 1
            lines = None
        if lines is not None:
            return _raw(lines)
        kind = data.get("type")
        head = f"event: {kind}\n".encode() if isinstance(kind, str) else b""
        return head + b"data: " + orjson.dumps(data) + b"\n\n"


def _raw(lines: list[str]) -> bytes:
    return ("\n".join(lines) + "\n\n").encode()


def _is_index(value: object) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _disagreement(events: list[_Event], item: object) -> str | None:
    """Why a call whose streamed deltas (or ``.done`` event) spell other arguments
    than its finished item is refused, else ``None``."""
    if not isinstance(item, dict):
        return None
    kind = item.get("type")
    if not isinstance(kind, str) or kind not in _STREAMED_FIELD:
        return None
    delta_kind, done_kind, field = _STREAMED_FIELD[kind]
    finished = item.get(field)
    if not isinstance(finished, str):
        return None  # not text: the judge refuses it as not an object
    added = events[0][0].get("item") if events[0][0].get("type") == _ADDED else None
    start = added.get(field) if isinstance(added, dict) else None
    deltas = [data.get("delta") for data, _ in events if data.get("type") == delta_kind]
    spelled = [data.get(field) for data, _ in events if data.get("type") == done_kind]
    # What a client that adds the deltas to the added item reads, as the SDKs do.
    pieces: list[Any] = [start or "", *deltas]
    if not all(isinstance(piece, str) for piece in pieces):
        agree = False
    elif deltas:
        agree = "".join(pieces) == finished
    else:
        agree = start in (None, "", finished)
    if agree and all(text == finished for text in spelled):
        return None
    calls = calls_of(item) or [(None, None, None)]
    name, _, call_id = calls[0]
    return (
        f"Interlock refused the tool call {name!r}: its streamed {field} and the "
        f"finished call disagree [tool call {call_id}]"
    )


def _message_events(message: dict[str, Any], index: int) -> list[dict[str, Any]]:
    """The events that stream ``message`` (one ``output_text`` part) at ``index``."""
    item_id = message["id"]
    (part,) = message["content"]
    text = part["text"]
    at = {"item_id": item_id, "output_index": index, "content_index": 0}
    empty_part = {**part, "text": ""}
    return [
        {
            "type": _ADDED,
            "output_index": index,
            "item": {**message, "status": "in_progress", "content": []},
        },
        {"type": "response.content_part.added", **at, "part": empty_part},
        {"type": "response.output_text.delta", **at, "delta": text, "logprobs": []},
        {"type": "response.output_text.done", **at, "text": text, "logprobs": []},
        {"type": "response.content_part.done", **at, "part": part},
        {"type": _DONE, "output_index": index, "item": message},
    ]
