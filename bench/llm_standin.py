"""The upstream stand-in of the ``llm-proxy`` benchmark: a fake OpenAI model on a real
port. ``POST /v1/chat/completions`` answers a fixed chat completion with usage, or,
with ``"stream": true``, a short SSE stream (a role chunk, five text chunks, the finish
chunk, the ``include_usage`` chunk when asked for, ``[DONE]``); a streamed request that
offers ``tools`` gets a ``get_weather`` call after the text (its name in one chunk, its
arguments in four) and ``finish_reason: tool_calls``. ``POST /v1/responses`` answers a
fixed Responses object (a message and a ``get_weather`` function call), or its SSE (the
message's text in five deltas, the call's arguments in two, the usage in
``response.completed``). It does no work per request beyond reading the JSON body, so
what it costs is what HTTP costs here.

Served by ``python -m uvicorn bench.llm_standin:app`` in a process of its own.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any, Final

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse
from starlette.routing import Route

__all__ = ["ARGUMENTS", "RESPONSES_USAGE", "RESPONSE_ARGUMENTS", "TEXT", "TOOL", "USAGE", "app"]

TEXT: Final = ["Hel", "lo", " there", ", agent", "."]
USAGE: Final = {"prompt_tokens": 11, "completion_tokens": 7, "total_tokens": 18}
RESPONSES_USAGE: Final = {"input_tokens": 11, "output_tokens": 7, "total_tokens": 18}
TOOL: Final = "get_weather"
#: the streamed chat call's arguments (in four chunks)
ARGUMENTS: Final = '{"city": "Oslo", "units": "metric"}'
#: the Responses call's arguments, as its two deltas
RESPONSE_ARGUMENTS: Final = ['{"city": ', '"Oslo"}']


def _completion(model: str) -> bytes:
    message = {"role": "assistant", "content": "".join(TEXT), "refusal": None}
    choice = {"index": 0, "message": message, "finish_reason": "stop", "logprobs": None}
    body = {
        "id": "chatcmpl-standin",
        "object": "chat.completion",
        "created": 1764800000,
        "model": model,
        "choices": [choice],
        "usage": USAGE,
    }
    return json.dumps(body).encode()


def _chunk(model: str, delta: dict[str, Any] | None, finish: str | None = None) -> str:
    choices = [] if delta is None else [{"index": 0, "delta": delta, "finish_reason": finish}]
    data = {
        "id": "chatcmpl-standin",
        "object": "chat.completion.chunk",
        "created": 1764800000,
        "model": model,
        "choices": choices,
        "usage": USAGE if delta is None else None,
    }
    return f"data: {json.dumps(data)}\n\n"


async def _chunks(model: str, usage: bool, tools: bool) -> AsyncIterator[str]:
    yield _chunk(model, {"role": "assistant", "content": ""})
    for piece in TEXT:
        yield _chunk(model, {"content": piece})
    if tools:
        start = {"index": 0, "id": "call_0", "type": "function"}
        yield _chunk(
            model, {"tool_calls": [{**start, "function": {"name": TOOL, "arguments": ""}}]}
        )
        for i in range(0, len(ARGUMENTS), 9):
            fragment = {"index": 0, "function": {"arguments": ARGUMENTS[i : i + 9]}}
            yield _chunk(model, {"tool_calls": [fragment]})
    yield _chunk(model, {}, "tool_calls" if tools else "stop")
    if usage:
        yield _chunk(model, None)
    yield "data: [DONE]\n\n"


async def _openai(request: Request) -> Response:
    body = await request.json()
    model = str(body["model"])
    if body.get("stream"):
        usage = (body.get("stream_options") or {}).get("include_usage") is True
        chunks = _chunks(model, usage, tools=bool(body.get("tools")))
        return StreamingResponse(chunks, media_type="text/event-stream")
    return Response(_completion(model), media_type="application/json")


def _output() -> list[dict[str, Any]]:
    part = {"type": "output_text", "text": "".join(TEXT), "annotations": [], "logprobs": []}
    message = {"id": "msg_1", "type": "message", "status": "completed", "role": "assistant"}
    call = {"id": "fc_1", "type": "function_call", "status": "completed", "call_id": "call_1"}
    return [
        {**message, "content": [part]},
        {**call, "name": "get_weather", "arguments": "".join(RESPONSE_ARGUMENTS)},
    ]


def _response(model: str, output: list[Any], usage: Any, status: str) -> dict[str, Any]:
    return {
        "id": "resp_standin",
        "object": "response",
        "created_at": 1764800000,
        "status": status,
        "model": model,
        "output": output,
        "usage": usage,
    }


async def _response_events(model: str) -> AsyncIterator[str]:
    seq = 0

    def event(kind: str, **data: Any) -> str:
        nonlocal seq
        seq += 1
        body = json.dumps({"type": kind, "sequence_number": seq - 1, **data})
        return f"event: {kind}\ndata: {body}\n\n"

    message, call = _output()
    start = _response(model, [], None, "in_progress")
    yield event("response.created", response=start)
    yield event("response.in_progress", response=start)
    yield event("response.output_item.added", output_index=0, item={**message, "content": []})
    at = {"item_id": "msg_1", "output_index": 0, "content_index": 0}
    part = message["content"][0]
    yield event("response.content_part.added", **at, part={**part, "text": ""})
    for piece in TEXT:
        yield event("response.output_text.delta", **at, delta=piece, logprobs=[])
    yield event("response.output_text.done", **at, text=part["text"], logprobs=[])
    yield event("response.content_part.done", **at, part=part)
    yield event("response.output_item.done", output_index=0, item=message)
    yield event("response.output_item.added", output_index=1, item={**call, "arguments": ""})
    at = {"item_id": "fc_1", "output_index": 1}
    for piece in RESPONSE_ARGUMENTS:
        yield event("response.function_call_arguments.delta", **at, delta=piece)
    yield event("response.function_call_arguments.done", **at, arguments=call["arguments"])
    yield event("response.output_item.done", output_index=1, item=call)
    final = _response(model, [message, call], RESPONSES_USAGE, "completed")
    yield event("response.completed", response=final)


async def _responses(request: Request) -> Response:
    body = await request.json()
    model = str(body["model"])
    if body.get("stream"):
        return StreamingResponse(_response_events(model), media_type="text/event-stream")
    reply = _response(model, _output(), RESPONSES_USAGE, "completed")
    return Response(json.dumps(reply).encode(), media_type="application/json")


app = Starlette(
    routes=[
        Route("/v1/chat/completions", _openai, methods=["POST"]),
        Route("/v1/responses", _responses, methods=["POST"]),
    ]
)
