"""How the proxy reaches its upstreams: the lean HTTP/1.1 client
(:mod:`interlock.gateways.http1`), or httpx where the lean client does not go.

httpx is used when the app is given an httpx ``transport`` (a test double such as
``httpx.MockTransport``, or a transport of your own), and when the environment names
an HTTP proxy for an upstream (``HTTPS_PROXY``, ``HTTP_PROXY``, ``ALL_PROXY``, minus
``NO_PROXY``: the lean client only connects directly). Both answer with the same
:class:`UpstreamResponse` and fail with the same
:class:`~interlock.gateways.http1.UpstreamError` tree, so the proxy cannot tell them
apart.
"""

from __future__ import annotations

import urllib.request
from collections.abc import AsyncIterator, Iterable, Mapping
from typing import TYPE_CHECKING, Any, Protocol

from interlock.gateways.http1 import (
    ConnectError,
    ConnectTimeout,
    Http1Client,
    Limits,
    PoolTimeout,
    ReadTimeout,
    RemoteProtocolError,
    ResponseTooLarge,
    Target,
    Timeouts,
    UpstreamError,
    WriteTimeout,
)

if TYPE_CHECKING:
    import httpx

__all__ = ["HttpxUpstream", "UpstreamResponse", "Upstreams", "proxied", "upstream_client"]


class UpstreamResponse(Protocol):
    """An upstream's answer, its head in; the body read once."""

    @property
    def status_code(self) -> int: ...

    @property
    def headers(self) -> Mapping[str, str]: ...

    async def aread(self) -> bytes: ...

    def aiter_lines(self) -> AsyncIterator[str]: ...

    async def aclose(self) -> None: ...


class Upstreams(Protocol):
    """What sends the proxy's requests."""

    async def send(
        self, method: str, target: Target, headers: Iterable[tuple[str, str]], body: bytes
    ) -> UpstreamResponse: ...

    async def aclose(self) -> None: ...


def proxied(targets: Iterable[Target]) -> bool:
    """Whether the environment sends any of ``targets`` through an HTTP proxy."""
    proxies = urllib.request.getproxies()
    if not proxies:
        return False
    return any(
        (target.scheme in proxies or "all" in proxies)
        and not urllib.request.proxy_bypass(target.host)
        for target in targets
    )


def upstream_client(
    timeouts: Timeouts,
    limits: Limits,
    *,
    transport: httpx.AsyncBaseTransport | None,
    targets: Iterable[Target],
) -> Upstreams:
    """The lean client, or httpx (see the module docstring)."""
    if transport is None and not proxied(targets):
        return Http1Client(timeouts=timeouts, limits=limits)
    return HttpxUpstream(timeouts, limits, transport)


class HttpxUpstream:
    """httpx behind the lean client's interface (errors translated at the boundary)."""

    def __init__(
        self, timeouts: Timeouts, limits: Limits, transport: httpx.AsyncBaseTransport | None
    ) -> None:
        import httpx

        timeout = httpx.Timeout(
            connect=timeouts.connect, read=timeouts.read, write=timeouts.write, pool=timeouts.pool
        )
        pool = httpx.Limits(
            max_connections=limits.max_connections,
            max_keepalive_connections=limits.max_idle,
            keepalive_expiry=limits.idle_expiry,
        )
        self.max_body = limits.max_body
        self.client = httpx.AsyncClient(timeout=timeout, limits=pool, transport=transport)

    async def send(
        self, method: str, target: Target, headers: Iterable[tuple[str, str]], body: bytes
    ) -> UpstreamResponse:
        url = f"{target.scheme}://{target.host_header.decode()}{target.path}"
        request = self.client.build_request(method, url, content=body, headers=list(headers))
        try:
            answer = await self.client.send(request, stream=True)
        except Exception as exc:
            raise _translated(exc, target.origin) from exc
        return _HttpxResponse(answer, target.origin, self.max_body)

    async def aclose(self) -> None:
        await self.client.aclose()


class _HttpxResponse:
    def __init__(self, answer: httpx.Response, origin: str, max_body: int) -> None:
        self._answer = answer
        self._origin = origin
        self._max_body = max_body
        self.status_code = answer.status_code
        self.headers: Mapping[str, str] = answer.headers

    async def aread(self) -> bytes:
        parts: list[bytes] = []
        size = 0
        async for chunk in self._translate(self._answer.aiter_bytes()):
            size += len(chunk)
            if size > self._max_body:
                await self.aclose()
                raise ResponseTooLarge(
                    f"the response's body is larger than {self._max_body} bytes",
                    origin=self._origin,
                )
            parts.append(chunk)
        return b"".join(parts)

    def aiter_lines(self) -> AsyncIterator[str]:
        return self._translate(self._answer.aiter_lines())

    async def aclose(self) -> None:
        await self._answer.aclose()

    async def _translate(self, items: AsyncIterator[Any]) -> AsyncIterator[Any]:
        try:
            async for item in items:
                yield item
        except Exception as exc:
            raise _translated(exc, self._origin) from exc


def _translated(exc: Exception, origin: str) -> Exception:
    """httpx's error as the lean client's (anything else as it is)."""
    import httpx

    kinds: tuple[tuple[type[Exception], type[UpstreamError], bool], ...] = (
        (httpx.ConnectTimeout, ConnectTimeout, False),
        (httpx.PoolTimeout, PoolTimeout, False),
        (httpx.ReadTimeout, ReadTimeout, True),
        (httpx.WriteTimeout, WriteTimeout, True),
        (httpx.ConnectError, ConnectError, False),
        (httpx.HTTPError, RemoteProtocolError, True),
    )
    for httpx_kind, ours, sent in kinds:
        if isinstance(exc, httpx_kind):
            return ours(f"{type(exc).__name__}: {exc}", origin=origin, sent=sent)
    return exc
