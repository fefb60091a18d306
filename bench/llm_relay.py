"""The bare relay of the ``llm-proxy`` benchmark: what any Python proxy on the same
stack pays for the extra hop. ``POST /v1/chat/completions`` (and ``/v1/responses``)
reads the body and sends it on to ``$BENCH_UPSTREAM`` (…/v1, the same path after it)
with one shared ``httpx.AsyncClient``, as the proxy
does, relaying the answer as it came (a stream chunk by chunk). No key, no policy, no
budget, no audit, no checks.

Served by ``python -m uvicorn bench.llm_relay:app`` in a process of its own.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import httpx
from starlette.applications import Starlette
from starlette.background import BackgroundTask
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse
from starlette.routing import Route

__all__ = ["app"]

_client: dict[str, httpx.AsyncClient] = {}


@asynccontextmanager
async def _lifespan(app: Starlette) -> AsyncIterator[None]:
    async with httpx.AsyncClient(timeout=60) as client:
        _client["upstream"] = client
        yield


async def _relay(request: Request) -> Response:
    client = _client["upstream"]
    body = await request.body()
    streamed = b'"stream":true' in body.replace(b" ", b"")
    outbound = client.build_request(
        "POST",
        os.environ["BENCH_UPSTREAM"] + request.url.path.removeprefix("/v1"),
        content=body,
        headers={"content-type": "application/json", "authorization": "Bearer sk-standin"},
    )
    answer = await client.send(outbound, stream=streamed)
    media = answer.headers.get("content-type", "application/json")
    if streamed:
        return StreamingResponse(
            answer.aiter_raw(),
            answer.status_code,
            media_type=media,
            background=BackgroundTask(answer.aclose),
        )
    return Response(answer.content, answer.status_code, media_type=media)


def _routes() -> list[Any]:
    return [
        Route("/v1/chat/completions", _relay, methods=["POST"]),
        Route("/v1/responses", _relay, methods=["POST"]),
    ]


app = Starlette(routes=_routes(), lifespan=_lifespan)
