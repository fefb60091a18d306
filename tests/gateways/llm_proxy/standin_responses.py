"""The stand-in's OpenAI Responses answers: a realistic ``response`` object, and its
SSE stream — ``event:`` lines, one ``sequence_number`` more per event, no ``[DONE]``,
the usage only in the terminal ``response.completed`` (or ``.incomplete`` /
``.failed``).

``output`` is the list of items the model "writes"; each is streamed with the events
the real API sends for its type (a message: added, content_part.added, text deltas,
text.done, content_part.done, done; a function_call: added, argument deltas,
arguments.done, done; a custom_tool_call likewise with input deltas; any other item:
added, done).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

RESPONSES_USAGE = {
    "input_tokens": 13,
    "input_tokens_details": {"cached_tokens": 3},
    "output_tokens": 9,
    "output_tokens_details": {"reasoning_tokens": 2},
    "total_tokens": 22,
}
RESPONSE_ID = "resp_standin"


def message(text: str, index: int = 0) -> dict[str, Any]:
    part = {"type": "output_text", "text": text, "annotations": [], "logprobs": []}
    return {
        "id": f"msg_standin{index}",
        "type": "message",
        "status": "completed",
        "role": "assistant",
        "content": [part],
    }


def function_call(name: str, arguments: str, index: int) -> dict[str, Any]:
    return {
        "id": f"fc_standin{index}",
        "type": "function_call",
        "status": "completed",
        "arguments": arguments,
        "call_id": f"call_{index}",
        "name": name,
    }


def response(
    model: str,
    output: list[dict[str, Any]],
    *,
    status: str = "completed",
    usage: dict[str, Any] | None = RESPONSES_USAGE,
) -> dict[str, Any]:
    return {
        "id": RESPONSE_ID,
        "object": "response",
        "created_at": 1764800000,
        "status": status,
        "background": False,
        "error": None,
        "incomplete_details": None,
        "instructions": None,
        "max_output_tokens": None,
        "model": model,
        "output": output,
        "parallel_tool_calls": True,
        "previous_response_id": None,
        "reasoning": {"effort": None, "summary": None},
        "store": True,
        "temperature": 1.0,
        "text": {"format": {"type": "text"}, "verbosity": "medium"},
        "tool_choice": "auto",
        "tools": [],
        "top_p": 1.0,
        "truncation": "disabled",
        "usage": usage,
        "user": None,
        "metadata": {},
    }


def pieces(text: str, count: int = 3) -> list[str]:
    """``text`` cut into ``count`` pieces (some may be empty for short texts)."""
    size = max(1, -(-len(text) // count))
    return [text[i : i + size] for i in range(0, len(text), size)] or [""]


class Events:
    """The SSE of one response: ``cut_after`` (an event type, with its count) marks
    where the stand-in stops (``StandIn`` holds or breaks there)."""

    def __init__(self, model: str, output: list[dict[str, Any]]) -> None:
        self.model = model
        self.output = output
        self.seq = 0

    def event(self, kind: str, **data: Any) -> str:
        body = {"type": kind, "sequence_number": self.seq, **data}
        self.seq += 1
        return f"event: {kind}\ndata: {json.dumps(body, ensure_ascii=False)}\n\n"

    def opening(self) -> Iterator[str]:
        start = response(self.model, [], status="in_progress", usage=None)
        yield self.event("response.created", response=start)
        yield self.event("response.in_progress", response=start)

    def item(
        self, index: int, item: dict[str, Any], text_pieces: list[str] | None = None
    ) -> Iterator[tuple[str, str]]:
        """(what the event is, the event) for one output item."""
        kind = item["type"]
        added = {**item, "status": "in_progress"}
        if kind == "message":
            added["content"] = []
        elif kind == "function_call":
            added["arguments"] = ""
        elif kind == "custom_tool_call":
            added["input"] = ""
        yield "added", self.event("response.output_item.added", output_index=index, item=added)
        at = {"item_id": item.get("id"), "output_index": index}
        if kind == "message":
            part = item["content"][0]
            text = part["text"]
            empty = {**part, "text": ""}
            yield (
                "part",
                self.event("response.content_part.added", **at, content_index=0, part=empty),
            )
            for piece in text_pieces or pieces(text):
                yield (
                    "text",
                    self.event(
                        "response.output_text.delta",
                        **at,
                        content_index=0,
                        delta=piece,
                        logprobs=[],
                    ),
                )
            yield (
                "text_done",
                self.event(
                    "response.output_text.done", **at, content_index=0, text=text, logprobs=[]
                ),
            )
            yield (
                "part_done",
                self.event("response.content_part.done", **at, content_index=0, part=part),
            )
        elif kind in ("function_call", "custom_tool_call"):
            field = "arguments" if kind == "function_call" else "input"
            stem = (
                "response.function_call_arguments"
                if kind == "function_call"
                else "response.custom_tool_call_input"
            )
            value = item.get(field)
            for piece in text_pieces or pieces(value if isinstance(value, str) else ""):
                yield "call", self.event(f"{stem}.delta", **at, delta=piece)
            yield "call_done", self.event(f"{stem}.done", **at, **{field: value})
        yield "done", self.event("response.output_item.done", output_index=index, item=item)

    def terminal(
        self, kind: str = "response.completed", *, usage: dict[str, Any] | None = RESPONSES_USAGE
    ) -> str:
        status = {
            "response.completed": "completed",
            "response.incomplete": "incomplete",
            "response.failed": "failed",
        }[kind]
        final = response(self.model, self.output, status=status, usage=usage)
        if kind == "response.failed":
            final["error"] = {"code": "server_error", "message": "the model broke"}
        return self.event(kind, response=final)
