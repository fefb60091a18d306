"""A real MCP server (the Python SDK's ``MCPServer``) over stdio, the gateway's
upstream in these tests. Each tool body appends one JSON line to the file named by
``MCP_TEST_LOG`` — the upstream's own record of what reached it.

Tools: ``echo(text)``, ``delete_file(path)``, ``lookup(query, est_cost)`` (paid),
``fail(text)`` (an error result that quotes its argument), ``count(to)`` (a progress
notification per step),
``ask(question)`` (a sampling request back to the client), ``muse(topic)`` (a
sampling request in either generation: a standalone request on 2025-11-25, an
``input_required`` result on 2026-07-28), ``confirm(question)`` (an
elicitation request), ``roots()`` (a roots/list request), ``chatty()`` (a log
message and a list_changed notification) and ``whoami()`` (the upstream's
environment, to check what the gateway passed it).
"""

from __future__ import annotations

import json
import os
from typing import Annotated

from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.server.mcpserver.resolve import Resolve, Sample
from mcp_types import CreateMessageResult, SamplingMessage, TextContent
from pydantic import BaseModel

server = MCPServer("gateway-upstream")


def _record(tool: str, args: dict[str, object]) -> None:
    with open(os.environ["MCP_TEST_LOG"], "a", encoding="utf-8") as log:
        log.write(json.dumps({"tool": tool, "args": args}) + "\n")


@server.tool()
def echo(text: str) -> str:
    """Say the text back."""
    _record("echo", {"text": text})
    return text


@server.tool()
def delete_file(path: str) -> str:
    """Delete a file (recorded, never deleted)."""
    _record("delete_file", {"path": path})
    return f"deleted {path}"


@server.tool()
def lookup(query: str, est_cost: float) -> str:
    """A paid lookup: ``est_cost`` is what it declares it costs; "fail" fails."""
    _record("lookup", {"query": query, "est_cost": est_cost})
    if query == "fail":
        raise ToolError("the lookup failed")
    return f"found {query}"


@server.tool()
def fail(text: str) -> str:
    """Fail, quoting the argument."""
    _record("fail", {"text": text})
    raise ToolError(f"could not use {text}")


@server.tool()
async def count(to: int, ctx: Context) -> str:
    """Count, reporting progress at every step."""
    _record("count", {"to": to})
    for step in range(1, to + 1):
        await ctx.report_progress(step, to, f"step {step}")
    return f"counted to {to}"


@server.tool()
async def ask(question: str, ctx: Context) -> str:
    """Ask the client's model (a sampling request) and return its answer."""
    _record("ask", {"question": question})
    reply = await ctx.session.create_message(
        messages=[SamplingMessage(role="user", content=TextContent(type="text", text=question))],
        max_tokens=16,
    )
    content = reply.content
    return content.text if isinstance(content, TextContent) else str(content)


def _draft(topic: str) -> Sample:
    text = TextContent(type="text", text=f"write about {topic}")
    return Sample([SamplingMessage(role="user", content=text)], max_tokens=32)


@server.tool()
async def muse(topic: str, reply: Annotated[CreateMessageResult, Resolve(_draft)]) -> str:
    """Ask the client's model about a topic (in either protocol generation)."""
    _record("muse", {"topic": topic})
    content = reply.content
    return content.text if isinstance(content, TextContent) else str(content)


class Confirmation(BaseModel):
    ok: bool


@server.tool()
async def confirm(question: str, ctx: Context) -> str:
    """Ask the client's user (an elicitation request) and return what they did."""
    _record("confirm", {"question": question})
    answer = await ctx.elicit(question, schema=Confirmation)
    return f"{answer.action}: {getattr(answer, 'data', None)}"


@server.tool()
async def roots(ctx: Context) -> str:
    """List the client's roots (a roots/list request)."""
    _record("roots", {})
    listed = await ctx.session.list_roots()
    return ",".join(str(root.uri) for root in listed.roots)


@server.tool()
async def chatty(ctx: Context) -> str:
    """Send a log message and a tools list_changed notification, then answer."""
    _record("chatty", {})
    await ctx.info("a log line")
    await ctx.session.send_tool_list_changed()
    return "said things"


@server.tool()
def whoami() -> str:
    """The upstream's environment variable names."""
    _record("whoami", {})
    return json.dumps(sorted(os.environ))


if __name__ == "__main__":
    server.run("stdio")
