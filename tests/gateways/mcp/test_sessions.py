"""Session-aware rules at the MCP gateway: each client's session at the gateway is a
session of its own (a random id, never the transport's), so a label one call attaches
holds for the calls after it in that client's session — and for no other client's.

Real MCP clients over stdio, the gateway as a process, two scripted upstreams."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from mcp import StdioServerParameters

from .support import INTERLOCK, UPSTREAM, base_env, reached, write_policy
from .test_aggregate import MAIL, session, text_of

pytestmark = pytest.mark.anyio

POLICY = """\
version: 1
default: deny
labels:
  - id: mail-is-untrusted
    attach: [untrusted]
    kind: mcp
    params: {server: mail}
rules:
  - id: files-ok
    decision: allow
    reason: the files tools are fine
    kind: tool
    name: echo
  - id: mail-tools
    decision: allow
    reason: the mail tools
    kind: mcp
    params: {server: mail}
  - id: no-files-after-mail
    decision: deny
    reason: nothing goes to the files server after untrusted mail was read
    kind: tool
    name: echo
    session:
      labels: [untrusted]
"""


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def gateway(tmp_path: Path) -> StdioServerParameters:
    policy = write_policy(tmp_path, POLICY)
    args = [
        "mcp-gateway",
        "--policy",
        str(policy),
        "--env",
        f"MCP_TEST_LOG={tmp_path / 'up.jsonl'}",
        "--upstream",
        f"files={sys.executable} {UPSTREAM}",
        "--upstream",
        f"mail={sys.executable} {MAIL}",
    ]
    return StdioServerParameters(command=INTERLOCK, args=args, env=base_env())


async def test_a_label_holds_for_the_rest_of_the_client_session_only(tmp_path: Path) -> None:
    async with session(gateway(tmp_path)) as s:
        await s.list_tools()
        before = await s.call_tool("files__echo", {"text": "one"})  # nothing read yet
        listed = await s.call_tool("mail__list_mail", {})  # attaches `untrusted`
        after = await s.call_tool("files__echo", {"text": "two"})
    assert not before.is_error and text_of(before) == "one"
    assert not listed.is_error
    assert after.is_error and "after untrusted mail was read" in text_of(after)
    # the refused call never reached the upstream
    reached_files = [r for r in reached(tmp_path / "up.jsonl") if r.get("server") is None]
    assert [r["tool"] for r in reached_files] == ["echo"]
    # another client (another gateway session) starts with no label
    async with session(gateway(tmp_path)) as other:
        await other.list_tools()
        fresh = await other.call_tool("files__echo", {"text": "three"})
    assert not fresh.is_error and text_of(fresh) == "three"
