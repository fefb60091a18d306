"""One policy, the same verdict and the same refusal: the test upstream's own
``MCPServer`` guarded in-process (``guard_server``) against the same server behind
the gateway, call for call."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import mcp_types as types
import pytest
from mcp import Client

from interlock import Guard
from interlock.adapters.mcp import guard_server

from . import upstream_server
from .support import gateway_params, write_policy

pytestmark = pytest.mark.anyio

CALLS: list[tuple[str, dict[str, Any]]] = [
    ("echo", {"text": "hello"}),
    ("echo", {"text": "LOUD hello"}),  # require_approval
    ("delete_file", {"path": "/etc/passwd"}),
    ("ECHO", {"text": "hello"}),
    ("whoami", {}),
    ("no_such_tool", {}),
    ("echo", {"text": "x" * 70_000}),  # long, in a parameter no scope reads
]


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def outcome(result: types.CallToolResult) -> tuple[Any, ...]:
    meta = (result.meta or {}).get("interlock/decision", {})
    text = "".join(b.text for b in result.content if isinstance(b, types.TextContent))
    masked = re.sub(r"dec_[0-9a-f]+", "dec_…", text) if meta else None
    return (result.is_error, meta.get("verdict"), tuple(meta.get("rule_ids", ())), masked)


async def test_in_process_and_at_the_gateway(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    policy, log = write_policy(tmp_path), tmp_path / "upstream.jsonl"
    monkeypatch.setenv("MCP_TEST_LOG", str(tmp_path / "in-process.jsonl"))

    guard = Guard.from_file(policy)
    server = upstream_server.server
    guard_server(server, guard)
    try:
        async with Client(server) as client:
            in_process = [outcome(await client.call_tool(name, args)) for name, args in CALLS]
    finally:
        guard.detach(server)

    async with Client(gateway_params(policy, log)) as client:
        await client.list_tools()  # the gateway learns the schemas the server judges with
        gated = [outcome(await client.call_tool(name, args)) for name, args in CALLS]

    assert gated == in_process
    verdicts = [row[1] for row in gated]
    assert verdicts == [None, "require_approval", "deny", "deny", None, "deny", None]
