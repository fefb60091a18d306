"""The client: a keep-alive pool per origin, and :meth:`Http1Client.send`.

A request is written in one piece (head and body, ``content-length`` framed); the
answer is a :class:`~._response.Response` as soon as its head has arrived. Retried,
once, on a fresh connection only when that cannot send it twice: the pooled
connection was found closed before anything was written, or — for a method that is
safe to repeat (``GET``, ``HEAD``, ``OPTIONS``, or ``retry_safe=True``) — it closed
before a byte of the answer came. A ``POST`` that may have reached the upstream is
never sent again: the caller hears the error.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import ssl
import time
from collections import deque
from collections.abc import Iterable
from types import TracebackType
from typing import Final, final

from ._connection import Connection
from ._errors import (
    ClientClosed,
    ConnectError,
    ConnectTimeout,
    PoolTimeout,
    RemoteProtocolError,
    UpstreamError,
)
from ._models import Limits, Target, Timeouts, check_header
from ._response import Response

__all__ = ["Http1Client"]

_SAFE_METHODS: Final = frozenset({"GET", "HEAD", "OPTIONS"})
# Headers the client writes itself (a caller's would frame the request twice, or ask
# for an encoding it cannot read).
_OWN_HEADERS: Final = frozenset(
    {
        b"host",
        b"content-length",
        b"transfer-encoding",
        b"connection",
        b"keep-alive",
        b"upgrade",
        b"accept-encoding",
    }
)


@final
class Http1Client:
    """A lean HTTP/1.1 client for one process's event loop.

    Example::

        async with Http1Client() as client:
            target = Target.of("http://127.0.0.1:8000/v1/chat/completions")
            headers = [("content-type", "application/json")]
            async with await client.send("POST", target, headers, body) as answer:
                reply = await answer.aread()
    """

    def __init__(
        self,
        *,
        timeouts: Timeouts | None = None,
        limits: Limits | None = None,
        ssl_context: ssl.SSLContext | None = None,
    ) -> None:
        self.timeouts = timeouts or Timeouts()
        self.limits = limits or Limits()
        self._ssl_context = ssl_context
        self._pools: dict[tuple[str, str, int], _Pool] = {}
        self._closed = False

    async def send(
        self,
        method: str,
        target: Target,
        headers: Iterable[tuple[str, str]] = (),
        body: bytes = b"",
        *,
        retry_safe: bool | None = None,
    ) -> Response:
        """Send one request; the response once its head is in. Raises an
        :class:`~._errors.UpstreamError` (a ``ValueError`` for a header that cannot
        be sent)."""
        if self._closed:
            raise ClientClosed("the client is closed", origin=target.origin, sent=False)
        request = _encode(method, target, headers, body)
        repeatable = method in _SAFE_METHODS if retry_safe is None else retry_safe
        pool = self._pool(target)
        fresh = False
        while True:
            connection, reused = await pool.acquire(fresh=fresh)
            try:
                connection.send(request)
                await connection.drain(self.timeouts.write)
                while not connection.head_done and connection.error is None:
                    await connection.wait(self.timeouts.read)
                if connection.error is not None:
                    raise connection.error
            except UpstreamError as exc:
                pool.release(connection, reuse=False)
                # Sent again only if it certainly was not sent, or it may be sent
                # twice and the connection closed without a byte of an answer.
                closed_unanswered = isinstance(exc, RemoteProtocolError) and not (
                    connection.got_bytes or type(exc) is not RemoteProtocolError
                )
                again = not exc.sent or (repeatable and closed_unanswered)
                if reused and not fresh and again:
                    fresh = True  # once, on a connection of its own
                    continue
                raise
            except BaseException:  # cancelled: the exchange is in an unknown state
                connection.abort()
                pool.release(connection, reuse=False)
                raise
            return Response(
                connection,
                pool.release,
                read_timeout=self.timeouts.read,
                max_body=self.limits.max_body,
            )

    async def aclose(self) -> None:
        """Close every idle connection; busy ones close as their responses end."""
        self._closed = True
        for pool in self._pools.values():
            pool.close()

    async def __aenter__(self) -> Http1Client:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()

    def _pool(self, target: Target) -> _Pool:
        key = (target.scheme, target.host, target.port)
        pool = self._pools.get(key)
        if pool is None:
            context = None
            if target.scheme == "https":
                context = self._ssl_context = self._ssl_context or default_ssl_context()
            pool = self._pools[key] = _Pool(target, self.timeouts, self.limits, context)
        return pool


class _Pool:
    """The connections to one origin: at most ``max_connections``, of which at most
    ``max_idle`` kept idle, the most recently used first."""

    def __init__(
        self, target: Target, timeouts: Timeouts, limits: Limits, context: ssl.SSLContext | None
    ) -> None:
        self.host = target.host
        self.port = target.port
        self.origin = target.origin
        self.timeouts = timeouts
        self.limits = limits
        self.context = context
        self.idle: list[Connection] = []
        self.total = 0  # open or opening, idle or busy
        self.waiters: deque[asyncio.Future[None]] = deque()
        self.closed = False

    async def acquire(self, *, fresh: bool) -> tuple[Connection, bool]:
        """A connection for one exchange, and whether it was used before."""
        deadline: float | None = None
        while True:
            if self.closed:
                raise ClientClosed("the client is closed", origin=self.origin, sent=False)
            if not fresh:
                connection = self._idle()
                if connection is not None:
                    return connection, True
            if self.total < self.limits.max_connections:
                self.total += 1
                try:
                    return await self._connect(), False
                except BaseException:
                    self._freed()
                    raise
            if deadline is None:
                deadline = time.monotonic() + self.timeouts.pool
            await self._wait_for_slot(deadline)

    def release(self, connection: Connection, reuse: bool) -> None:
        if (
            reuse
            and not self.closed
            and not connection.closed
            and len(self.idle) < self.limits.max_idle
        ):
            connection.idle_since = time.monotonic()
            self.idle.append(connection)
            self._wake()
            return
        if connection.closed:
            return  # counted out when it was lost
        connection.close()

    def close(self) -> None:
        self.closed = True
        for connection in list(self.idle):
            connection.close()
        while self.waiters:
            waiter = self.waiters.popleft()
            if not waiter.done():
                waiter.set_result(None)

    def _idle(self) -> Connection | None:
        now = time.monotonic()
        while self.idle:
            connection = self.idle.pop()
            expiry = self.limits.idle_expiry
            if connection.idle_expiry is not None:
                expiry = min(expiry, connection.idle_expiry)
            transport = connection.transport
            if (
                connection.closed
                or transport is None
                or transport.is_closing()
                or now - connection.idle_since >= expiry
            ):
                connection.close()
                continue
            return connection
        return None

    async def _connect(self) -> Connection:
        loop = asyncio.get_running_loop()
        timeout = self.timeouts.connect
        try:
            async with asyncio.timeout(timeout):
                _, connection = await loop.create_connection(
                    lambda: Connection(self.origin, self.limits.max_head, self._lost),
                    self.host,
                    self.port,
                    ssl=self.context,
                    server_hostname=self.host if self.context is not None else None,
                )
        except TimeoutError:
            raise ConnectTimeout(
                f"no connection to {self.origin} within {timeout} s", origin=self.origin, sent=False
            ) from None
        except OSError as exc:  # refused, unreachable, unresolvable, TLS (ssl.SSLError)
            raise ConnectError(
                f"could not connect to {self.origin}: {exc}", origin=self.origin, sent=False
            ) from exc
        return connection

    async def _wait_for_slot(self, deadline: float) -> None:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise PoolTimeout(
                f"all {self.limits.max_connections} connections to {self.origin} stayed busy "
                f"for {self.timeouts.pool} s",
                origin=self.origin,
                sent=False,
            )
        waiter = asyncio.get_running_loop().create_future()
        self.waiters.append(waiter)
        try:
            async with asyncio.timeout(remaining):
                await waiter
        except TimeoutError:
            pass  # the loop in acquire raises the PoolTimeout
        finally:
            if not waiter.done():
                waiter.cancel()
            with contextlib.suppress(ValueError):
                self.waiters.remove(waiter)

    def _lost(self, connection: Connection) -> None:
        """A connection closed (either side): it no longer counts."""
        with contextlib.suppress(ValueError):
            self.idle.remove(connection)
        self._freed()

    def _freed(self) -> None:
        self.total -= 1
        self._wake()

    def _wake(self) -> None:
        while self.waiters:
            waiter = self.waiters.popleft()
            if not waiter.done():
                waiter.set_result(None)
                return


def _encode(method: str, target: Target, headers: Iterable[tuple[str, str]], body: bytes) -> bytes:
    if not method.isalpha() or not method.isupper():
        raise ValueError(f"not an HTTP method: {method!r}")
    if method == "HEAD":
        raise ValueError("HEAD is not supported (its answer has no body to frame)")
    parts = [method.encode("ascii"), b" ", target.path.encode("ascii"), b" HTTP/1.1\r\nhost: "]
    parts += [target.host_header, b"\r\n"]
    for name, value in headers:
        raw_name, raw_value = name.encode("latin-1"), value.encode("latin-1")
        check_header(raw_name, raw_value)
        if raw_name.lower() in _OWN_HEADERS:
            raise ValueError(f"the client writes the {name} header itself")
        parts += [raw_name, b": ", raw_value, b"\r\n"]
    # identity: the client decodes no content-coding (an encoded answer is refused)
    parts += [b"accept-encoding: identity\r\ncontent-length: ", str(len(body)).encode("ascii")]
    parts += [b"\r\n\r\n", body]
    return b"".join(parts)


def default_ssl_context() -> ssl.SSLContext:
    """Certificates from ``$SSL_CERT_FILE`` / ``$SSL_CERT_DIR`` when set, else the
    ``certifi`` bundle (what httpx trusts), else the system's; HTTP/1.1 by ALPN."""
    cafile = os.environ.get("SSL_CERT_FILE")
    capath = os.environ.get("SSL_CERT_DIR")
    if cafile is None and capath is None:
        try:
            import certifi

            cafile = certifi.where()
        except ImportError:  # pragma: no cover - certifi comes with httpx
            pass
    context = ssl.create_default_context(cafile=cafile, capath=capath)
    context.set_alpn_protocols(["http/1.1"])
    return context
