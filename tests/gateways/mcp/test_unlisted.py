"""A ``tools/call`` before any ``tools/list``: the gateway learns each tool's input
schema and description from the ``tools/list`` answers that pass through it, and judges
with them as the in-process adapter does (which always has them). A client need not list
tools before calling one — so the verdict must not depend on whether it did.

It once did: a call the client made without listing first was judged without the
description and the schema, with two consequences (now the gateway lists the tools
itself first, relayed or merged):

- a scope that only the description gives (``ask``: "... a sampling request ...", a
  ``network`` word) is missing, so a ``network`` deny rule does not apply and the call
  is **allowed** where in-process it is denied — and it runs;
- an argument the schema does not declare is not projected away, so ``file_path``
  beside ``path`` is a conflict and the call is denied where in-process it is allowed.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import mcp_types as types
import pytest
from mcp import Client, ClientSession, stdio_client

from interlock import Guard
from interlock.adapters.mcp import guard_server

from . import upstream_server
from .support import (
    INTERLOCK,
    UPSTREAM,
    RawWire,
    base_env,
    gateway_params,
    gateway_wire,
    reached,
    write_policy,
)

pytestmark = pytest.mark.anyio

POLICY = """\
version: 1
default: deny
rules:
  - id: local-tools
    decision: allow
    reason: local tools are fine
    scope: shell
  - id: scratch-files
    decision: allow
    reason: the scratch directory is fine
    scope: filesystem
    params: {path: {glob: "/tmp/scratch/*"}}
  - id: no-network
    decision: deny
    reason: no network from this agent
    scope: network
"""

#: (label, tool, arguments, the verdict in-process: None for allowed).
CALLS: list[tuple[str, str, dict[str, Any], str | None]] = [
    ("a scope only the description gives", "ask", {"question": "ready?"}, "deny"),
    (
        "an undeclared alias beside the declared one",
        "delete_file",
        {"path": "/tmp/scratch/old.txt", "file_path": "/etc/passwd"},
        None,
    ),
]


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


SAMPLED = {"role": "assistant", "content": {"type": "text", "text": "yes"}, "model": "fake-model"}


async def answer(
    context: Any, params: types.CreateMessageRequestParams
) -> types.CreateMessageResult:
    return types.CreateMessageResult(
        role="assistant", content=types.TextContent(text="yes"), model="fake-model"
    )


def verdict_of(result: types.CallToolResult) -> str | None:
    decision: dict[str, Any] = (result.meta or {}).get("interlock/decision", {})
    return decision.get("verdict")


async def in_process(policy: Path, monkeypatch: pytest.MonkeyPatch, log: Path) -> list[str | None]:
    """The verdicts of ``CALLS`` with the upstream's server guarded in-process."""
    monkeypatch.setenv("MCP_TEST_LOG", str(log))
    guard = Guard.from_file(policy)
    server = upstream_server.server
    guard_server(server, guard)
    try:
        async with Client(server, sampling_callback=answer) as client:
            return [verdict_of(await client.call_tool(name, args)) for _, name, args, _ in CALLS]
    finally:
        guard.detach(server)


EXPECTED = [expected for *_, expected in CALLS]


async def test_a_call_after_listing_gets_the_in_process_verdict(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    policy, log = write_policy(tmp_path, POLICY), tmp_path / "gated.jsonl"
    assert await in_process(policy, monkeypatch, tmp_path / "in.jsonl") == EXPECTED
    params = gateway_params(policy, log)
    async with (
        stdio_client(params) as (read, write),
        ClientSession(read, write, sampling_callback=answer) as session,
    ):
        await session.initialize()
        await session.list_tools()
        verdicts = [verdict_of(await session.call_tool(name, args)) for _, name, args, _ in CALLS]
    assert verdicts == EXPECTED
    assert [entry["tool"] for entry in reached(log)] == ["delete_file"]


def merged_wire(policy: Path, log: Path) -> RawWire:
    """The merging gateway, its one upstream named ``files``: tools as ``files__*``."""
    command = [
        INTERLOCK,
        "mcp-gateway",
        "--policy",
        str(policy),
        "--env",
        f"MCP_TEST_LOG={log}",
        "--upstream",
        f"files={sys.executable} {UPSTREAM}",
    ]
    return RawWire(command, base_env())


def unlisted_verdicts(policy: Path, log: Path, mode: str) -> list[str | None]:
    """The verdicts of ``CALLS`` sent on the wire with no ``tools/list`` before them
    (an SDK client lists tools by itself after its first call). Nothing but the
    answers to the client's own requests (and the upstream's sampling) reaches it:
    the gateway's own listing is never relayed."""
    wire = gateway_wire(policy, log) if mode == "relayed" else merged_wire(policy, log)
    prefix = "" if mode == "relayed" else "files__"
    verdicts = []
    try:
        wire.handshake()
        for number, (_, name, arguments, _) in enumerate(CALLS, start=1):
            params = {"name": prefix + name, "arguments": arguments}
            wire.send({"jsonrpc": "2.0", "id": number, "method": "tools/call", "params": params})
            while True:
                body = wire.next()
                if body.get("method") == "sampling/createMessage":  # the upstream ran ``ask``
                    wire.send({"jsonrpc": "2.0", "id": body["id"], "result": SAMPLED})
                    continue
                assert "method" in body or body.get("id") == number, body
                if "method" not in body:
                    break
            decision = body["result"].get("_meta", {}).get("interlock/decision", {})
            verdicts.append(decision.get("verdict"))
        assert wire.close() == 0
    finally:
        wire.kill()
    return verdicts


@pytest.mark.parametrize("mode", ["relayed", "merged"])
async def test_a_call_before_any_listing_gets_the_in_process_verdict(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, mode: str
) -> None:
    """The gateway lists the tools itself before it judges a call of one it has not
    seen listed, so the verdict does not depend on whether the client listed them."""
    policy, log = write_policy(tmp_path, POLICY), tmp_path / "gated.jsonl"
    assert await in_process(policy, monkeypatch, tmp_path / "in.jsonl") == EXPECTED
    assert unlisted_verdicts(policy, log, mode) == EXPECTED
    assert [entry["tool"] for entry in reached(log)] == ["delete_file"]
