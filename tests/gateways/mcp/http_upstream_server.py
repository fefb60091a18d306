"""A real MCP server (the Python SDK's ``MCPServer``) served over streamable HTTP
(``streamable_http_app()``): the gateway's HTTP upstream in these tests. It keeps
its own record, in this process: every tool body appends to ``record.calls``, and
every HTTP request it receives appends its method and headers to
``record.requests`` (to see which credentials reached it, and which did not).

Tools: ``echo(text)``, ``delete_file(path)``, ``count(to)`` (a progress
notification per step) and ``ask(question)`` (a sampling request back to the
client), like the stdio test server's; ``locate(region, query)``, whose ``region``
is an ``x-mcp-header`` parameter; and ``hangup(text)``, which closes the
call's SSE connection before it answers (the answer is kept in the server's event
store, for the client to resume the stream from its last event id).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Annotated, Any

from mcp.server.mcpserver import Context, MCPServer
from mcp.server.streamable_http import EventCallback, EventMessage, EventStore
from mcp_types import JSONRPCMessage, SamplingMessage, TextContent
from pydantic import Field
from starlette.types import ASGIApp, Receive, Scope, Send


class MemoryEvents(EventStore):
    """The simplest event store: every event kept, in order."""

    def __init__(self) -> None:
        self.events: list[tuple[str, str, JSONRPCMessage | None]] = []

    async def store_event(self, stream_id: str, message: JSONRPCMessage | None) -> str:
        event_id = str(len(self.events) + 1)
        self.events.append((event_id, stream_id, message))
        return event_id

    async def replay_events_after(
        self, last_event_id: str, send_callback: EventCallback
    ) -> str | None:
        found = next((i for i, event in enumerate(self.events) if event[0] == last_event_id), None)
        if found is None:
            return None
        stream = self.events[found][1]
        for event_id, stream_id, message in self.events[found + 1 :]:
            if stream_id == stream and message is not None:
                await send_callback(EventMessage(message, event_id))
        return stream


@dataclass
class Record:
    calls: list[dict[str, Any]] = field(default_factory=list)
    requests: list[tuple[str, dict[str, str]]] = field(default_factory=list)

    def headers_seen(self, name: str) -> list[str]:
        return [headers[name] for _, headers in self.requests if name in headers]


def build(record: Record) -> ASGIApp:
    server = MCPServer("http-upstream")

    @server.tool()
    def echo(text: str) -> str:
        """Say the text back."""
        record.calls.append({"tool": "echo", "args": {"text": text}})
        return text

    @server.tool()
    def delete_file(path: str) -> str:
        """Delete a file (recorded, never deleted)."""
        record.calls.append({"tool": "delete_file", "args": {"path": path}})
        return f"deleted {path}"

    @server.tool()
    async def count(to: int, ctx: Context) -> str:
        """Count, reporting progress at every step."""
        record.calls.append({"tool": "count", "args": {"to": to}})
        for step in range(1, to + 1):
            await ctx.report_progress(step, to, f"step {step}")
        return f"counted to {to}"

    @server.tool()
    async def ask(question: str, ctx: Context) -> str:
        """Ask the client's model (a sampling request) and return its answer."""
        record.calls.append({"tool": "ask", "args": {"question": question}})
        message = SamplingMessage(role="user", content=TextContent(type="text", text=question))
        reply = await ctx.session.create_message(messages=[message], max_tokens=16)
        content = reply.content
        return content.text if isinstance(content, TextContent) else str(content)

    @server.tool()
    def locate(
        region: Annotated[str, Field(json_schema_extra={"x-mcp-header": "Region"})], query: str
    ) -> str:
        """Look ``query`` up in ``region`` (mirrored in the ``Mcp-Param-Region`` header
        on the per-request generation, which this server checks against the body)."""
        record.calls.append({"tool": "locate", "args": {"region": region, "query": query}})
        return f"{query} in {region}"

    @server.tool()
    async def hangup(text: str, ctx: Context) -> str:
        """Drop this call's SSE connection, then answer."""
        record.calls.append({"tool": "hangup", "args": {"text": text}})
        await ctx.close_sse_stream()
        return text

    app = server.streamable_http_app(event_store=MemoryEvents())

    async def recorded(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            headers = {k.decode("latin-1"): v.decode("latin-1") for k, v in scope["headers"]}
            record.requests.append((scope["method"], headers))
        await app(scope, receive, send)

    return recorded
