"""A second real MCP server (the Python SDK's ``MCPServer``) for the gateway's
several-upstream tests. Each tool body appends one JSON line to ``MCP_TEST_LOG``.

Tools: ``send_mail(to, body)`` (no annotations: destructive and open-world by the
protocol's defaults), ``list_mail()`` (read-only), ``echo(text)`` (read-only; the same name as
a tool of the other test server), ``crash()`` (the server exits at once, code 3); a
prompt ``summary(topic)``; a resource ``mail://inbox`` and a template
``mail://message/{id}``.
"""

from __future__ import annotations

import json
import os

from mcp.server.mcpserver import MCPServer
from mcp_types import ToolAnnotations

server = MCPServer("mail-upstream", instructions="Mail for the team.")


def _record(tool: str, args: dict[str, object]) -> None:
    with open(os.environ["MCP_TEST_LOG"], "a", encoding="utf-8") as log:
        log.write(json.dumps({"tool": tool, "args": args, "server": "mail"}) + "\n")


@server.tool()
def send_mail(to: str, body: str) -> str:
    """Send a mail."""
    _record("send_mail", {"to": to, "body": body})
    return f"sent to {to}"


@server.tool(annotations=ToolAnnotations(read_only_hint=True, open_world_hint=False))
def list_mail() -> str:
    """List the inbox."""
    _record("list_mail", {})
    return "3 mails"


@server.tool(annotations=ToolAnnotations(read_only_hint=True))
def echo(text: str) -> str:
    """Say the text back, from the mail server."""
    _record("echo", {"text": text})
    return f"mail: {text}"


@server.tool(annotations=ToolAnnotations(destructive_hint=False))
def crash() -> str:
    """Exit the server at once."""
    _record("crash", {})
    os._exit(3)


@server.prompt()
def summary(topic: str) -> str:
    """Summarise the mails about a topic."""
    return f"Summarise the mails about {topic}."


@server.resource("mail://inbox")
def inbox() -> str:
    """The inbox."""
    return "inbox: 3 mails"


@server.resource("mail://message/{message_id}")
def message(message_id: str) -> str:
    """One mail."""
    return f"mail number {message_id}"


if __name__ == "__main__":
    server.run("stdio")
