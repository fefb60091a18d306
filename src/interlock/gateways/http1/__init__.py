"""A lean HTTP/1.1 client for the gateways' upstream calls: asyncio protocols and
httptools' parser, a keep-alive pool per origin, streamed bodies with back-pressure,
read/write/connect/pool timeouts, and no retry that could send a request twice
(docs/adr/0020-a-lean-upstream-client.md says why it is not httpx).

Example::

    from interlock.gateways.http1 import Http1Client, Target

    async with Http1Client() as client:
        target = Target.of("http://127.0.0.1:8000/v1/chat/completions")
        answer = await client.send("POST", target, [("content-type", "application/json")], b"{}")
        async with answer:
            async for line in answer.aiter_lines():
                ...

Needs ``httptools`` (``pip install 'interlock[llm-proxy]'``).
"""

from __future__ import annotations

try:
    import httptools as _httptools  # noqa: F401
except ImportError as exc:  # pragma: no cover - depends on the installed extras
    raise ImportError(
        "the upstream client needs httptools: pip install 'interlock[llm-proxy]'"
    ) from exc

from ._client import Http1Client, default_ssl_context
from ._errors import (
    ClientClosed,
    ConnectError,
    ConnectTimeout,
    PoolTimeout,
    ReadTimeout,
    RemoteProtocolError,
    ResponseTooLarge,
    UpstreamError,
    UpstreamTimeout,
    WriteTimeout,
)
from ._models import Limits, Target, Timeouts
from ._response import Response

__all__ = [
    "ClientClosed",
    "ConnectError",
    "ConnectTimeout",
    "Http1Client",
    "Limits",
    "PoolTimeout",
    "ReadTimeout",
    "RemoteProtocolError",
    "Response",
    "ResponseTooLarge",
    "Target",
    "Timeouts",
    "UpstreamError",
    "UpstreamTimeout",
    "WriteTimeout",
    "default_ssl_context",
]
