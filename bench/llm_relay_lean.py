"""The lean relay of the ``llm-proxy`` benchmark: the stack ``interlock llm-proxy``
is built on, with nothing of Interlock's. A plain ASGI app under uvicorn (httptools,
uvloop, no access log) reads the body and sends it on to ``$BENCH_UPSTREAM`` (…/v1,
the same path after it) with :class:`interlock.gateways.http1.Http1Client`, relaying
the answer as it came (a stream chunk by chunk). No key, no policy, no budget, no
audit, no parsing: what the proxy's hop costs, beside :mod:`bench.llm_relay` (the
stack it was built on before: Starlette and httpx).

Served by ``python -m uvicorn bench.llm_relay_lean:app`` in a process of its own.
"""

from __future__ import annotations

import os
from typing import Any

from interlock.gateways.http1 import Http1Client, Target

__all__ = ["app"]

_HEADERS = [("content-type", "application/json"), ("authorization", "Bearer sk-standin")]


class _Relay:
    def __init__(self) -> None:
        self.client: Http1Client | None = None
        self.targets: dict[str, Target] = {}

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "lifespan":
            while (await receive())["type"] != "lifespan.shutdown":
                await send({"type": "lifespan.startup.complete"})
            if self.client is not None:
                await self.client.aclose()
            await send({"type": "lifespan.shutdown.complete"})
            return
        if self.client is None:
            self.client = Http1Client()
        path = scope["path"]
        target = self.targets.get(path)
        if target is None:
            upstream = os.environ["BENCH_UPSTREAM"] + path.removeprefix("/v1")
            target = self.targets[path] = Target.of(upstream)
        chunks = []
        while True:
            message = await receive()
            chunks.append(message.get("body", b""))
            if not message.get("more_body"):
                break
        answer = await self.client.send("POST", target, _HEADERS, b"".join(chunks))
        media = answer.headers.get("content-type", "application/json").encode()
        headers = [(b"content-type", media)]
        if media.startswith(b"text/event-stream"):
            await send(
                {"type": "http.response.start", "status": answer.status_code, "headers": headers}
            )
            async for chunk in answer.aiter_bytes():
                await send({"type": "http.response.body", "body": chunk, "more_body": True})
            await send({"type": "http.response.body", "body": b""})
            return
        body = await answer.aread()
        headers.append((b"content-length", str(len(body)).encode()))
        await send(
            {"type": "http.response.start", "status": answer.status_code, "headers": headers}
        )
        await send({"type": "http.response.body", "body": body})


app = _Relay()
