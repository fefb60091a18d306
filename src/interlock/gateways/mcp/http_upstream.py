"""An upstream MCP server reached over streamable HTTP: the gateway is its client.

Each message the gateway sends is one POST, its body the exact line the gateway
judged (without the newline). A request's answer comes back as a JSON body or as an
SSE stream carrying the messages that belong to it and then the response; a
notification or a response is acknowledged ``202``. After the handshake
(``notifications/initialized``) a GET stream is opened for what the server sends
unasked (its requests, list changes, logs). What arrives, on any stream, is yielded
by :meth:`HttpUpstream.lines`, one message per line, as a stdio upstream's would be.

- **Session.** The ``Mcp-Session-Id`` the server gives with its ``initialize``
  answer is sent with everything after it, with ``MCP-Protocol-Version`` (the
  version that answer agreed). A message of the per-request generation
  (2026-07-28: its ``_meta`` names the version) goes without a session, with
  ``MCP-Protocol-Version``, ``Mcp-Method`` and ``Mcp-Name`` read from the body
  being sent — and, for a ``tools/call``, an ``Mcp-Param-<token>`` header for each
  argument the tool's input schema marks ``x-mcp-header: <token>`` (learnt from
  the server's own ``tools/list`` answers as they pass; a server of that
  generation refuses a call without them). Every such header is read from the
  body the gateway judged and sends, never taken from the client's request, so
  it cannot say anything the body does not. :meth:`stop` ends the session
  (``DELETE``).
- **Resumption.** An SSE stream that drops before its response is resumed once,
  from its last event id (``Last-Event-ID``); the GET stream likewise.
- **Credentials.** ``headers`` (the config's ``headers:``) go to this upstream and
  nowhere else. Nothing of the client's request is ever forwarded — no header of
  it, so never the client's Interlock key. Redirects are not followed (a redirect
  elsewhere would carry the credentials there).
- **Failures.** A request that cannot be answered (the server unreachable, an HTTP
  error, a stream that ends without the response) is answered with a JSON-RPC
  error for its id, so the client is never left waiting; an HTTP error's own
  JSON-RPC error body is passed on as it came. ``404`` for a live session means
  the server has ended it: the upstream is gone (exit code 1).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Mapping
from typing import TYPE_CHECKING, Any, Final

import orjson

from interlock.gateways.mcp.messages import (
    NotAMessage,
    encode,
    error_reply,
    parse_body,
)
from interlock.gateways.mcp.sse import EventTooLarge, SseParser

if TYPE_CHECKING:
    import httpx

__all__ = ["HttpUpstream"]

log = logging.getLogger("interlock.gateways.mcp")

INTERNAL_ERROR: Final = -32603
SESSION_HEADER: Final = "mcp-session-id"
VERSION_HEADER: Final = "mcp-protocol-version"
#: The methods whose name (or uri) the per-request generation repeats in ``Mcp-Name``.
_NAME_OF: Final = {
    "tools/call": "name",
    "resources/read": "uri",
    "prompts/get": "name",
}
_MODERN_META: Final = "io.modelcontextprotocol/protocolVersion"
#: Seconds before a dropped stream is resumed, when the server names none.
DEFAULT_RETRY: Final = 1.0
#: Seconds a stream may stay open after its response before it is dropped.
DRAIN_SECONDS: Final = 5.0


def _id_key(request_id: Any) -> tuple[str, Any]:
    """A request id as a key (``1`` and ``"1"`` are two ids to a server)."""
    return (type(request_id).__name__, request_id)


def _import_httpx() -> Any:
    try:
        import httpx
    except ImportError:
        raise ImportError(
            "an HTTP upstream needs httpx: pip install 'interlock[mcp]' (httpx>=0.27)"
        ) from None
    return httpx


class HttpUpstream:
    """One upstream server at ``url`` (see the module docstring). ``transport``
    replaces the network (an ``httpx`` async transport)."""

    def __init__(
        self,
        name: str | None,
        url: str,
        *,
        headers: Mapping[str, str] | None = None,
        max_message_bytes: int,
        connect_timeout: float = 10.0,
        transport: Any = None,
    ) -> None:
        self.name = name
        self.url = url
        self._headers = {"user-agent": "interlock-mcp-gateway", **dict(headers or {})}
        self._limit = max_message_bytes
        self._connect_timeout = connect_timeout
        self._transport = transport
        self._client: httpx.AsyncClient | None = None
        self._lines: asyncio.Queue[bytes | None] = asyncio.Queue()
        self._session_id: str | None = None
        self._version: str | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        self._listening = False
        self._closing = False
        self._ended = asyncio.Event()
        self._code = 0
        #: each tool's x-mcp-header parameters (path in the arguments -> token)
        self._param_headers: dict[str, dict[tuple[str, ...], str]] = {}
        #: the ids of the tools/list requests whose answers are still to come
        self._listings: set[tuple[str, Any]] = set()

    @property
    def label(self) -> str:
        return f"upstream {self.name!r}" if self.name is not None else "the upstream"

    def __str__(self) -> str:
        return self.label

    async def start(self) -> None:
        httpx = _import_httpx()
        # No read timeout: a tool may take long, and a stream stays open between
        # messages; the client's own cancellation ends a call.
        timeout = httpx.Timeout(connect=self._connect_timeout, read=None, write=60.0, pool=None)
        self._client = httpx.AsyncClient(
            headers=self._headers,
            timeout=timeout,
            limits=httpx.Limits(max_connections=None, max_keepalive_connections=16),
            follow_redirects=False,
            transport=self._transport,
        )

    async def lines(self) -> AsyncIterator[bytes]:
        while (line := await self._lines.get()) is not None:
            yield line

    async def wait(self) -> int:
        await self._ended.wait()
        return self._code

    async def send(self, line: bytes) -> bool:
        """POST one message: a request's answer is read in the background (it may be
        a long stream); a notification or a response is sent before this returns,
        so that what the client sends reaches the server in its order."""
        if self._closing or self._ended.is_set():
            return False
        try:
            body = orjson.loads(line)
        except orjson.JSONDecodeError:  # the gateway sends only what it has read
            log.warning("interlock mcp-gateway: not sent to %s: not JSON", self)
            return True
        if not isinstance(body, dict):
            return True
        if "method" in body and "id" in body:
            self._spawn(self._request(line, body))
            return True
        await self._notify(line, body)
        if body.get("method") == "notifications/initialized" and self._session_id:
            self._open_listener()
        return True

    async def stop(self) -> int:
        """End the session (``DELETE``), stop every stream; the exit code."""
        if self._closing:
            return await self.wait()
        self._closing = True
        client = self._client
        if client is not None and self._session_id is not None and not self._ended.is_set():
            with contextlib.suppress(Exception):
                await asyncio.wait_for(client.delete(self.url, headers=self._base_headers()), 5.0)
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        if client is not None:
            await client.aclose()
        self._end(self._code)
        return self._code

    # -- internals -------------------------------------------------------------------

    def _spawn(self, coro: Any) -> None:
        task = asyncio.ensure_future(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def _end(self, code: int) -> None:
        if not self._ended.is_set():
            self._code = code
            self._ended.set()
            self._lines.put_nowait(None)

    def _base_headers(self) -> dict[str, str]:
        headers: dict[str, str] = {}
        if self._session_id is not None:
            headers[SESSION_HEADER] = self._session_id
        if self._version is not None:
            headers[VERSION_HEADER] = self._version
        return headers

    def _headers_for(self, body: dict[str, Any]) -> dict[str, str]:
        headers = {
            "accept": "application/json, text/event-stream",
            "content-type": "application/json",
        }
        params = body.get("params")
        meta = params.get("_meta") if isinstance(params, dict) else None
        modern = meta.get(_MODERN_META) if isinstance(meta, dict) else None
        if isinstance(modern, str) and body.get("method") != "initialize":
            from mcp.shared.inbound import encode_header_value

            method = body.get("method")
            headers[VERSION_HEADER] = modern
            if isinstance(method, str):
                headers["mcp-method"] = method
                key = _NAME_OF.get(method)
                value = params.get(key) if key is not None and isinstance(params, dict) else None
                if isinstance(value, str):
                    headers["mcp-name"] = encode_header_value(value)
                    if method == "tools/call" and isinstance(params, dict):
                        headers.update(self._mcp_param_headers(value, params))
            return headers
        if body.get("method") != "initialize":
            headers.update(self._base_headers())
        return headers

    def _mcp_param_headers(self, name: str, params: dict[str, Any]) -> dict[str, str]:
        """The ``Mcp-Param-*`` headers of a call of ``name`` with these params."""
        declared = self._param_headers.get(name)
        arguments = params.get("arguments")
        if not declared or not isinstance(arguments, dict):
            return {}
        from mcp.shared.inbound import mcp_param_headers

        return mcp_param_headers(declared, arguments)

    def _learn_tools(self, data: bytes) -> None:
        """Read each tool's ``x-mcp-header`` parameters from the answer to a
        ``tools/list`` request of ours (a later listing replaces an entry; a tool
        whose annotations are invalid gets none: a conforming client drops it, and
        its server checks none)."""
        try:
            body = orjson.loads(data)
        except orjson.JSONDecodeError:
            return
        if not isinstance(body, dict) or "method" in body or "id" not in body:
            return
        request_id = body["id"]
        if not isinstance(request_id, str | int) or _id_key(request_id) not in self._listings:
            return  # not the answer to a listing of ours
        result = body.get("result")
        tools = result.get("tools") if isinstance(result, dict) else None
        from mcp.shared.inbound import find_invalid_x_mcp_header, x_mcp_header_map

        for tool in tools if isinstance(tools, list) else ():
            name = tool.get("name") if isinstance(tool, dict) else None
            if not isinstance(name, str):
                continue
            schema = tool.get("inputSchema")
            declared = x_mcp_header_map(schema) if find_invalid_x_mcp_header(schema) is None else {}
            if declared:
                self._param_headers[name] = declared
            else:
                self._param_headers.pop(name, None)

    def _deliver(self, data: bytes) -> None:
        """One message from the server, onward as one line (re-encoded when the
        server spread it over several: a line must hold one message)."""
        if not data.strip():
            return
        if self._listings:
            self._learn_tools(data)
        if len(data) > self._limit:
            log.warning("interlock mcp-gateway: dropped a message over the limit from %s", self)
            return
        if b"\n" in data or b"\r" in data:
            try:
                data = parse_body(data).raw.rstrip(b"\n")
            except NotAMessage as exc:
                log.warning("interlock mcp-gateway: dropped a message from %s: %s", self, exc)
                return
        self._lines.put_nowait(data + b"\n")

    def _fail(self, request_id: Any, problem: str) -> None:
        log.warning("interlock mcp-gateway: %s: %s", self, problem)
        self._lines.put_nowait(error_reply(request_id, INTERNAL_ERROR, f"{self}: {problem}"))

    async def _notify(self, line: bytes, body: dict[str, Any]) -> None:
        client = self._client
        assert client is not None, "start() first"
        try:
            response = await client.post(
                self.url, content=line.rstrip(b"\r\n"), headers=self._headers_for(body)
            )
        except Exception as exc:
            log.warning("interlock mcp-gateway: could not send %s a message: %s", self, exc)
            return
        if response.status_code == 404 and self._session_id is not None:
            self._session_lost()
        elif response.status_code >= 300:
            log.warning(
                "interlock mcp-gateway: %s answered a %s with HTTP %d",
                self,
                body.get("method") or "response",
                response.status_code,
            )

    def _session_lost(self) -> None:
        log.warning("interlock mcp-gateway: %s ended its session", self)
        self._end(1)

    async def _request(self, line: bytes, body: dict[str, Any]) -> None:
        request_id = body.get("id")
        if body.get("method") == "tools/list" and isinstance(request_id, str | int):
            listing = _id_key(request_id)
            self._listings.add(listing)  # its answer teaches the x-mcp-header parameters
            try:
                await self._exchange(line, body)
            finally:
                self._listings.discard(listing)  # answered, failed or cancelled
            return
        await self._exchange(line, body)

    async def _exchange(self, line: bytes, body: dict[str, Any]) -> None:
        client = self._client
        assert client is not None, "start() first"
        request_id = body.get("id")
        initialize = body.get("method") == "initialize"
        headers = self._headers_for(body)
        had_session = SESSION_HEADER in headers
        try:
            async with client.stream(
                "POST", self.url, content=line.rstrip(b"\r\n"), headers=headers
            ) as response:
                if initialize and response.status_code < 300:
                    found = response.headers.get(SESSION_HEADER)
                    self._session_id = found or None
                answered = await self._answer(response, request_id, initialize, had_session)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            self._fail(request_id, f"the request failed ({type(exc).__name__}: {exc})")
            return
        if answered is not None:
            await self._resume(request_id, answered)

    async def _answer(
        self, response: httpx.Response, request_id: Any, initialize: bool, had_session: bool
    ) -> str | None:
        """Read a request's answer; ``None`` when it is complete (or answered with an
        error here), else the last event id to resume the stream from."""
        status = response.status_code
        kind = response.headers.get("content-type", "").partition(";")[0].strip().lower()
        if status == 202:
            self._fail(request_id, "it answered a request with 202 (no response)")
            return None
        if status == 404 and had_session:
            self._fail(request_id, "it ended the session")
            self._session_lost()
            return None
        if status >= 300:
            data = await self._bounded(response)
            if kind == "application/json" and self._error_body(data, request_id):
                return None
            self._fail(request_id, f"it answered HTTP {status}")
            return None
        if kind == "application/json":
            data = await self._bounded(response)
            if initialize:
                self._learn_version(data)
            self._deliver(data)
            return None
        if kind == "text/event-stream":
            parser = SseParser(self._limit)
            if await self._events(response, parser, request_id, initialize):
                return None
            if parser.last_id is None:
                self._fail(request_id, "its stream ended without a response")
                return None
            return parser.last_id
        self._fail(request_id, f"it answered with content type {kind or 'none'!r}")
        return None

    async def _bounded(self, response: httpx.Response) -> bytes:
        chunks: list[bytes] = []
        size = 0
        async for chunk in response.aiter_bytes():
            size += len(chunk)
            if size > self._limit:
                raise EventTooLarge(f"an answer over {self._limit} bytes")
            chunks.append(chunk)
        return b"".join(chunks)

    def _error_body(self, data: bytes, request_id: Any) -> bool:
        """Pass on a JSON-RPC error an HTTP error carried (with the request's id)."""
        try:
            body = orjson.loads(data)
        except orjson.JSONDecodeError:
            return False
        if not isinstance(body, dict) or not isinstance(body.get("error"), dict):
            return False
        self._lines.put_nowait(encode({"jsonrpc": "2.0", "id": request_id, "error": body["error"]}))
        return True

    def _learn_version(self, data: bytes) -> None:
        with contextlib.suppress(orjson.JSONDecodeError, AttributeError):
            result = orjson.loads(data).get("result")
            version = result.get("protocolVersion") if isinstance(result, dict) else None
            if isinstance(version, str):
                self._version = version

    async def _events(
        self,
        response: httpx.Response,
        parser: SseParser,
        request_id: Any,
        initialize: bool = False,
    ) -> bool:
        """Deliver the stream's messages; True once the response to ``request_id``
        came (``None``: the GET stream, which carries none)."""
        chunks = response.aiter_bytes()
        async for chunk in chunks:
            for sse in parser.feed(chunk):
                if sse.event != "message" or not sse.data:
                    continue
                if request_id is not None and self._is_response_to(sse.data, request_id):
                    if initialize:
                        self._learn_version(sse.data)
                    self._deliver(sse.data)
                    await self._drain(chunks)
                    return True
                self._deliver(sse.data)
        return False

    async def _drain(self, chunks: AsyncIterator[bytes]) -> None:
        """Read a stream to its end once its response came (the server ends it
        then), so that its connection is kept for the next request; a server that
        leaves it open loses it after a few seconds."""
        with contextlib.suppress(Exception):
            async with asyncio.timeout(DRAIN_SECONDS):
                async for _ in chunks:
                    pass

    @staticmethod
    def _is_response_to(data: bytes, request_id: Any) -> bool:
        try:
            body = orjson.loads(data)
        except orjson.JSONDecodeError:
            return False
        return isinstance(body, dict) and "method" not in body and body.get("id") == request_id

    async def _resume(self, request_id: Any, last_id: str) -> None:
        """The request's stream dropped before its response: resume it once."""
        client = self._client
        assert client is not None
        headers = {**self._base_headers(), "accept": "text/event-stream", "last-event-id": last_id}
        parser = SseParser(self._limit)
        try:
            async with client.stream("GET", self.url, headers=headers) as response:
                kind = response.headers.get("content-type", "").partition(";")[0].strip()
                streams = response.status_code < 300 and kind == "text/event-stream"
                if streams and await self._events(response, parser, request_id):
                    return
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            log.debug("resuming a stream of %s failed: %s", self, exc)
        self._fail(request_id, "its stream dropped before the response, and did not resume")

    def _open_listener(self) -> None:
        if not self._listening:
            self._listening = True
            self._spawn(self._listen())

    async def _listen(self) -> None:
        """The GET stream: what the server sends unasked. Reopened when the server
        ends it (from its last event id), and once when it drops; given up when that
        fails too."""
        client = self._client
        assert client is not None
        parser = SseParser(self._limit)
        failures = 0
        while not self._closing and failures < 2:
            headers = {**self._base_headers(), "accept": "text/event-stream"}
            if parser.last_id is not None:
                headers["last-event-id"] = parser.last_id
            try:
                async with client.stream("GET", self.url, headers=headers) as response:
                    if response.status_code == 405:
                        return  # the server offers no such stream
                    if response.status_code == 404:
                        self._session_lost()
                        return
                    if response.status_code >= 300:
                        log.warning(
                            "interlock mcp-gateway: %s refused its GET stream (HTTP %d)",
                            self,
                            response.status_code,
                        )
                        return
                    await self._events(response, parser, None)
                failures = 0
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                log.debug("the GET stream of %s dropped: %s", self, exc)
                failures += 1
            retry = parser.retry / 1000 if parser.retry is not None else DEFAULT_RETRY
            await asyncio.sleep(retry)
