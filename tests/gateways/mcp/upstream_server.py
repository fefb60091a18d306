"""A real MCP server (the Python SDK's ``MCPServer``) over stdio, the gateway's
upstream in these tests. Each tool body appends one JSON line to the file named by
``MCP_TEST_LOG`` — the upstream's own record of what reached it.

Tools: ``echo(text)``, ``delete_file(path)``, ``fail(text)`` (an error result that
quotes its argument), ``count(to)`` (a progress notification per step),
``ask(question)`` (a sampling request back to the client) and ``whoami()`` (the
upstream's environment, to check what the gateway passed it).
"""

from __future__ import annotations

import json
import os

from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp_types import SamplingMessage, TextContent

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


@server.tool()
def whoami() -> str:
    """The upstream's environment variable names."""
    _record("whoami", {})
    return json.dumps(sorted(os.environ))


if __name__ == "__main__":
    server.run("stdio")
