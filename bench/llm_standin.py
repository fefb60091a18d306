"""The upstream stand-in of the ``llm-proxy`` benchmark: a fake OpenAI model on a real
port. ``POST /v1/chat/completions`` answers a fixed chat completion with usage, or,
with ``"stream": true``, a short SSE stream (a role chunk, five text chunks, the finish
chunk, the ``include_usage`` chunk when asked for, ``[DONE]``). It does no work per
request beyond reading the JSON body, so what it costs is what HTTP costs here.

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

__all__ = ["TEXT", "USAGE", "app"]

TEXT: Final = ["Hel", "lo", " there", ", agent", "."]
USAGE: Final = {"prompt_tokens": 11, "completion_tokens": 7, "total_tokens": 18}


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


async def _chunks(model: str, usage: bool) -> AsyncIterator[str]:
    yield _chunk(model, {"role": "assistant", "content": ""})
    for piece in TEXT:
        yield _chunk(model, {"content": piece})
    yield _chunk(model, {}, "stop")
    if usage:
        yield _chunk(model, None)
    yield "data: [DONE]\n\n"


async def _openai(request: Request) -> Response:
    body = await request.json()
    model = str(body["model"])
    if body.get("stream"):
        usage = (body.get("stream_options") or {}).get("include_usage") is True
        return StreamingResponse(_chunks(model, usage), media_type="text/event-stream")
    return Response(_completion(model), media_type="application/json")


app = Starlette(routes=[Route("/v1/chat/completions", _openai, methods=["POST"])])
