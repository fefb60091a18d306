"""The upstream stand-in of the ``llm-proxy`` benchmark: a fake OpenAI model on a real
port. ``POST /v1/chat/completions`` answers a fixed chat completion with usage, or,
with ``"stream": true``, a short SSE stream (a role chunk, five text chunks, the finish
chunk, the ``include_usage`` chunk when asked for, ``[DONE]``); a streamed request that
offers ``tools`` gets a ``get_weather`` call after the text (its name in one chunk, its
arguments in four) and ``finish_reason: tool_calls``. It does no work per request
beyond reading the JSON body, so what it costs is what HTTP costs here.

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

__all__ = ["ARGUMENTS", "TEXT", "TOOL", "USAGE", "app"]

TEXT: Final = ["Hel", "lo", " there", ", agent", "."]
USAGE: Final = {"prompt_tokens": 11, "completion_tokens": 7, "total_tokens": 18}
TOOL: Final = "get_weather"
ARGUMENTS: Final = '{"city": "Oslo", "units": "metric"}'


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


app = Starlette(routes=[Route("/v1/chat/completions", _openai, methods=["POST"])])
