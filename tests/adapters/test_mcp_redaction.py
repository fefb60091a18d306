"""What a guarded MCP server or client hands back is redacted with the policy's own
``redaction.patterns`` and the built-in secret shapes: the text of a refusal (a mapper
that failed on a value, an evaluation error quoting it), and the error text of a tool
that failed, which the client — often a model — reads next.

Driven through the real SDK (``mcp`` 2.x): an in-process ``MCPServer`` and a real
``mcp.Client``.
"""

from __future__ import annotations

import pytest

pytest.importorskip("mcp")

from typing import Any

import mcp_types as types
from mcp import Client
from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError

from interlock import ActionUndetermined, Guard, load_policy_text
from interlock.adapters.mcp import guard_server, guard_session
from interlock.errors import MappingError

INTERNAL = "INTERNAL-" + "123456"
PASSWORD = "hunter2" + "Zq8Xv"
POLICY = load_policy_text(
    """
version: 1
default: deny
redaction:
  patterns: ['INTERNAL-[0-9]{6}']
rules:
  - id: tools
    decision: allow
    reason: the tools are fine
    name: ["lookup", "connect"]
  - id: numbers-only
    decision: allow
    reason: a numeric amount is fine
    name: pay
    params:
      args.amount: {lte: 100}
"""
)


def _server() -> MCPServer:
    server = MCPServer("redaction-tools")

    @server.tool()
    def lookup(ref: str) -> str:
        """Look an order up."""
        return f"found {ref}"

    @server.tool()
    def connect(host: str) -> str:
        """Connect to a database."""
        # A ToolError's text is what the SDK hands the client (a crash's is withheld).
        raise ToolError(f"no route to postgres://app:{PASSWORD}@{host}/db for {INTERNAL}")

    @server.tool()
    def pay(amount: float | str) -> str:
        """Pay an amount."""
        return f"paid {amount}"

    return server


def _text(result: types.CallToolResult) -> str:
    return " ".join(b.text for b in result.content if isinstance(b, types.TextContent))


def _refuse(name: str, arguments: dict[str, Any], tool: Any = None) -> Any:
    raise MappingError(f"cannot map {name}: order {arguments.get('ref')} is unknown")


async def test_a_refusal_quoting_the_call_reaches_the_client_redacted() -> None:
    server = _server()
    guard_server(server, Guard(POLICY))
    async with Client(server) as client:
        result = await client.call_tool("pay", {"amount": f"{INTERNAL} {PASSWORD}"})
    assert result.is_error
    text = _text(result)
    assert "not a finite number" in text
    assert INTERNAL not in text
    assert "[REDACTED:policy]" in text


async def test_a_mapper_failure_reaches_the_client_redacted() -> None:
    server = _server()
    guard_server(server, Guard(POLICY), mapper=_refuse)
    async with Client(server) as client:
        result = await client.call_tool("lookup", {"ref": INTERNAL})
    assert result.is_error
    assert INTERNAL not in _text(result)


async def test_a_failed_tools_error_text_reaches_the_client_redacted() -> None:
    server = _server()
    guard_server(server, Guard(POLICY))
    async with Client(server) as client:
        result = await client.call_tool("connect", {"host": "db.internal"})
    assert result.is_error
    text = _text(result)
    assert "no route to postgres://app:" in text and "db.internal" in text  # the rest stays
    assert PASSWORD not in text
    assert INTERNAL not in text


async def test_a_tools_argument_error_quoting_a_secret_reaches_the_client_redacted() -> None:
    server = _server()
    guard_server(server, Guard(POLICY))
    async with Client(server) as client:  # ref must be a string: the error quotes the input
        result = await client.call_tool("lookup", {"ref": {"token": PASSWORD, "id": INTERNAL}})
    assert result.is_error
    assert PASSWORD not in _text(result)
    assert INTERNAL not in _text(result)


async def test_a_client_side_refusal_is_redacted_in_both_styles() -> None:
    server = _server()
    async with Client(server) as client:
        guard_session(client.session, Guard(POLICY), mapper=_refuse)
        result = await client.call_tool("lookup", {"ref": INTERNAL})
    assert result.is_error and INTERNAL not in _text(result)

    server = _server()
    async with Client(server) as client:
        guard_session(client.session, Guard(POLICY), mapper=_refuse, refusal="raise")
        with pytest.raises(ActionUndetermined) as raised:
            await client.call_tool("lookup", {"ref": INTERNAL})
    assert INTERNAL not in str(raised.value)
