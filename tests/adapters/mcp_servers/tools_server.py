"""A real MCP server over stdio for the adapter tests, with the conformance tools
``shell(command)`` and ``pay(amount)``.

Each tool body appends one JSON line (``{"tool": ..., "args": ...}``) to the file named
by ``MCP_TEST_LOG``, so a test can prove whether a body ran. The server guards itself
when told to:

- ``MCP_TEST_POLICY``: a policy file; the guard is ``Guard.from_file`` on it, with the
  store at ``MCP_TEST_STORE`` when that is set;
- ``MCP_TEST_ROW``: the behaviour of a row of ``tests/adapters/conformance.py``; the
  guard and the mapper are that row's;
- neither: the server is unguarded (the client-side tests guard the client).

Run as ``python tools_server.py``; it speaks MCP on stdin/stdout.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

from mcp.server.mcpserver import MCPServer

from interlock import Guard
from interlock.adapters.mcp import guard_server
from interlock.guard import Mapper

server = MCPServer("interlock-test-tools")


def _record(tool: str, args: dict[str, Any]) -> None:
    with open(os.environ["MCP_TEST_LOG"], "a", encoding="utf-8") as log:
        log.write(json.dumps({"tool": tool, "args": args}) + "\n")


@server.tool()
def shell(command: str) -> str:
    """Run a shell command (recorded, never executed)."""
    _record("shell", {"command": command})
    return f"ran {command}"


@server.tool()
def pay(amount: float | str) -> str:
    """Pay an amount (recorded, never paid)."""
    _record("pay", {"amount": amount})
    return f"paid {amount}"


def _configured_guard() -> tuple[Guard | None, Mapper | None]:
    policy = os.environ.get("MCP_TEST_POLICY")
    if policy:
        return Guard.from_file(policy, store=os.environ.get("MCP_TEST_STORE") or None), None
    behaviour = os.environ.get("MCP_TEST_ROW")
    if behaviour:
        sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # tests/
        from adapters.conformance import ROWS, make_guard

        (row,) = [r for r in ROWS if r.behaviour == behaviour]
        return make_guard(row), row.mapper
    return None, None


def main() -> None:
    guard, mapper = _configured_guard()
    if guard is None:
        server.run("stdio")
        return
    with guard:
        guard_server(server, guard, mapper=mapper)
        server.run("stdio")


if __name__ == "__main__":
    main()
