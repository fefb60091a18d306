"""Several upstreams behind one gateway (``--upstream NAME=COMMAND``, ``--config``),
driven by real MCP clients over stdio: tools and prompts merged under each
upstream's name, every call judged with the upstream's name and the tool's
annotations as facts, and routed to the upstream that has the tool — which receives
its own tool name and nothing the policy refused."""

from __future__ import annotations

import contextlib
import json
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import mcp_types as types
import pytest
from mcp import Client, ClientSession, StdioServerParameters, stdio_client
from mcp.shared.exceptions import MCPError

from .support import INTERLOCK, UPSTREAM, WAIT, RawWire, base_env, reached, write_policy

pytestmark = pytest.mark.anyio

MAIL = Path(__file__).with_name("mail_server.py")

POLICY = """\
version: 1
default: deny
rules:
  - id: files-ok
    decision: allow
    reason: the files tools are fine
    kind: tool
    name: [echo, count, ask, confirm, roots, chatty, whoami, fail]
  - id: files-may-sample
    decision: allow
    reason: the files server may ask the client's model
    kind: llm
    name: mcp-sampling
    params: {server: files}
  - id: no-deletes
    decision: deny
    reason: deleting files is not allowed
    name: delete_file
  - id: mail-tools
    decision: allow
    reason: the mail tools
    kind: mcp
    params: {server: mail}
  - id: nothing-destructive-on-mail
    decision: require_approval
    reason: a human sends the mail
    params: {server: mail, destructive: true}
"""


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def text_of(result: types.CallToolResult) -> str:
    return "".join(block.text for block in result.content if isinstance(block, types.TextContent))


def two_upstreams(tmp_path: Path, *options: str) -> StdioServerParameters:
    policy = write_policy(tmp_path, POLICY)
    files = f"files={sys.executable} {UPSTREAM}"
    mail = f"mail={sys.executable} {MAIL}"
    args = [
        "mcp-gateway",
        "--policy",
        str(policy),
        "--env",
        f"MCP_TEST_LOG={tmp_path / 'up.jsonl'}",
    ]
    args += ["--upstream", files, "--upstream", mail, *options]
    return StdioServerParameters(command=INTERLOCK, args=args, env=base_env())


@contextlib.asynccontextmanager
async def session(params: StdioServerParameters, **callbacks: Any) -> AsyncIterator[ClientSession]:
    async with stdio_client(params) as (read, write), ClientSession(read, write, **callbacks) as s:
        await s.initialize()
        yield s


async def fake_model(
    context: Any, params: types.CreateMessageRequestParams
) -> types.CreateMessageResult:
    question = params.messages[0].content
    assert isinstance(question, types.TextContent)
    return types.CreateMessageResult(
        role="assistant",
        content=types.TextContent(type="text", text=question.text.upper()),
        model="fake-model",
    )


async def test_the_tools_of_both_upstreams_under_their_names(tmp_path: Path) -> None:
    async with session(two_upstreams(tmp_path)) as s:
        tools = {tool.name: tool for tool in (await s.list_tools()).tools}
    assert {"files__echo", "files__delete_file", "mail__send_mail", "mail__echo"} <= set(tools)
    assert not any("__" not in name for name in tools)
    listed = tools["mail__list_mail"].annotations
    assert listed is not None and listed.read_only_hint is True  # annotations pass


async def test_a_call_reaches_its_upstream_under_its_own_name(tmp_path: Path) -> None:
    async with session(two_upstreams(tmp_path)) as s:
        await s.list_tools()
        files = await s.call_tool("files__echo", {"text": "hi"})
        mail = await s.call_tool("mail__echo", {"text": "hi"})
        listed = await s.call_tool("mail__list_mail", {})
    assert (text_of(files), text_of(mail), text_of(listed)) == ("hi", "mail: hi", "3 mails")
    records = reached(tmp_path / "up.jsonl")
    assert [(r["tool"], r.get("server")) for r in records] == [
        ("echo", None),
        ("echo", "mail"),
        ("list_mail", "mail"),
    ]


async def test_the_server_and_the_annotations_decide(tmp_path: Path) -> None:
    async with session(two_upstreams(tmp_path)) as s:
        await s.list_tools()
        send = await s.call_tool("mail__send_mail", {"to": "a@example.com", "body": "x"})
        delete = await s.call_tool("files__delete_file", {"path": "/etc/passwd"})
    assert send.is_error
    decision = (send.meta or {})["interlock/decision"]
    assert (decision["verdict"], decision["rule_ids"]) == (
        "require_approval",
        ["nothing-destructive-on-mail"],
    )
    assert "MCP tool 'mail__send_mail'" in text_of(send)
    # A kind-less deny rule written for the tool name applies behind a prefix too.
    assert delete.is_error and (delete.meta or {})["interlock/decision"]["rule_ids"] == [
        "no-deletes"
    ]
    assert {r["tool"] for r in reached(tmp_path / "up.jsonl")} == set()


async def test_a_call_is_judged_even_before_the_tools_are_listed(tmp_path: Path) -> None:
    async with session(two_upstreams(tmp_path)) as s:
        delete = await s.call_tool("files__delete_file", {"path": "/"})
        echo = await s.call_tool("files__echo", {"text": "unlisted"})
    assert delete.is_error and not echo.is_error
    assert [r["tool"] for r in reached(tmp_path / "up.jsonl")] == ["echo"]


async def test_hidden_tools_are_left_out_and_still_refused(tmp_path: Path) -> None:
    async with session(two_upstreams(tmp_path, "--hide-denied-tools")) as s:
        names = {tool.name for tool in (await s.list_tools()).tools}
        refused = await s.call_tool("files__delete_file", {"path": "/"})
    assert "files__delete_file" not in names  # an unconditional deny
    assert "files__lookup" not in names  # no rule allows it: the default refuses it
    assert {"files__echo", "mail__send_mail", "mail__list_mail"} <= names  # may run
    assert refused.is_error


async def test_an_unknown_tool_is_a_protocol_error(tmp_path: Path) -> None:
    async with session(two_upstreams(tmp_path)) as s:
        for name in ("nope__echo", "echo", "FILES__echo", "files_echo", "files.echo"):
            with pytest.raises(MCPError) as raised:
                await s.call_tool(name, {"text": "x"})
            assert raised.value.error.code == -32602, name
            assert "unknown tool" in raised.value.error.message
    assert reached(tmp_path / "up.jsonl") == []


async def test_server_requests_and_notifications_pass_through_both_ways(tmp_path: Path) -> None:
    progress: list[float] = []

    async def on_progress(done: float, total: float | None, message: str | None) -> None:
        progress.append(done)

    async def elicit(context: Any, params: Any) -> types.ElicitResult:
        return types.ElicitResult(action="accept", content={"ok": True})

    async with session(
        two_upstreams(tmp_path), sampling_callback=fake_model, elicitation_callback=elicit
    ) as s:
        asked = await s.call_tool("files__ask", {"question": "ready?"})
        confirmed = await s.call_tool("files__confirm", {"question": "sure?"})
        counted = await s.call_tool("files__count", {"to": 2}, progress_callback=on_progress)
    assert text_of(asked) == "READY?"
    assert text_of(confirmed).startswith("accept")
    assert text_of(counted) == "counted to 2" and progress == [1, 2]


async def test_prompts_and_resources_route_to_their_upstream(tmp_path: Path) -> None:
    async with session(two_upstreams(tmp_path)) as s:
        prompts = {prompt.name for prompt in (await s.list_prompts()).prompts}
        got = await s.get_prompt("mail__summary", {"topic": "budgets"})
        resources = {str(r.uri) for r in (await s.list_resources()).resources}
        templates = {t.uri_template for t in (await s.list_resource_templates()).resource_templates}
        inbox = await s.read_resource("mail://inbox")
        one = await s.read_resource("mail://message/7")
    assert "mail__summary" in prompts
    content = got.messages[0].content
    assert isinstance(content, types.TextContent) and "budgets" in content.text
    assert "mail://inbox" in resources and "mail://message/{message_id}" in templates
    assert [c.text for c in inbox.contents if isinstance(c, types.TextResourceContents)] == [
        "inbox: 3 mails"
    ]
    assert [c.text for c in one.contents if isinstance(c, types.TextResourceContents)] == [
        "mail number 7"
    ]


async def test_the_handshake_merges_the_upstreams(tmp_path: Path) -> None:
    async with (
        stdio_client(two_upstreams(tmp_path)) as (read, write),
        ClientSession(read, write) as s,
    ):
        init = await s.initialize()
    assert init.server_info.name == "interlock-mcp-gateway"
    assert init.capabilities.tools is not None
    assert init.capabilities.prompts is not None and init.capabilities.resources is not None
    assert init.instructions is not None and "[mail] Mail for the team." in init.instructions


async def test_the_newer_protocol_generation(tmp_path: Path) -> None:
    async with Client(two_upstreams(tmp_path)) as client:
        names = {tool.name for tool in (await client.list_tools()).tools}
        echoed = await client.call_tool("mail__echo", {"text": "modern"})
        refused = await client.call_tool("files__delete_file", {"path": "/"})
    assert {"files__echo", "mail__echo"} <= names
    assert text_of(echoed) == "mail: modern"
    assert refused.is_error


async def test_an_upstream_that_dies_leaves_the_others_working(tmp_path: Path) -> None:
    async with session(two_upstreams(tmp_path)) as s:
        await s.list_tools()
        with pytest.raises(MCPError) as raised:
            await s.call_tool("mail__crash", {})
        assert "exited" in raised.value.error.message
        still = await s.call_tool("files__echo", {"text": "alive"})
        names = {tool.name for tool in (await s.list_tools()).tools}
    assert text_of(still) == "alive"
    assert names and not any(name.startswith("mail__") for name in names)


def run_gateway(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    policy = write_policy(tmp_path, POLICY)
    command = [INTERLOCK, "mcp-gateway", "--policy", str(policy), *args]
    return subprocess.run(
        command, check=False, input="", capture_output=True, text=True, timeout=WAIT, env=base_env()
    )


def test_the_exit_code_is_the_first_failing_upstreams(tmp_path: Path) -> None:
    wire = RawWire(
        [
            INTERLOCK,
            "mcp-gateway",
            "--policy",
            str(write_policy(tmp_path, POLICY)),
            "--upstream",
            f"files={sys.executable} {UPSTREAM}",
            "--upstream",
            f"mail={sys.executable} {MAIL}",
            "--env",
            f"MCP_TEST_LOG={tmp_path / 'up.jsonl'}",
        ],
        base_env(),
    )
    try:
        wire.handshake()
        wire.send({"jsonrpc": "2.0", "id": 0, "method": "tools/list"})  # learns the hints
        wire.until(0)
        wire.send(
            {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "mail__crash"}}
        )
        reply, _ = wire.until(1)
        assert reply.get("error", {}).get("code") == -32603, reply
        assert wire.close() == 3
    finally:
        wire.kill()


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["--upstream", "files"], "NAME=COMMAND"),
        (["--upstream", "fi_les=python x.py"], "use letters, digits and '-'"),
        (["--upstream", "a=python x.py", "--upstream", "A=python y.py"], "two upstreams are named"),
        (["--upstream", "a=python x.py", "--", "python", "y.py"], "not both"),
        (["--upstream", "a=https://mcp.example.com/mcp", "--allowed-host", "h"], "--http"),
        (["--upstream", "a=/no/such/program"], "could not start the upstream"),
        ([], "no upstream"),
    ],
)
def test_a_bad_command_line_says_what_is_wrong(tmp_path: Path, args: list[str], says: str) -> None:
    done = run_gateway(tmp_path, *args)
    assert done.returncode == 2, done.stderr
    assert says in done.stderr
    assert done.stdout == ""


async def test_two_tools_under_one_name_are_refused(tmp_path: Path) -> None:
    config = tmp_path / "gateway.yaml"
    config.write_text(
        f"""
upstreams:
  files:
    command: [{json.dumps(sys.executable)}, {json.dumps(str(UPSTREAM))}]
    namespace: false
  mail:
    command: [{json.dumps(sys.executable)}, {json.dumps(str(MAIL))}]
    namespace: false
""",
        encoding="utf-8",
    )
    params = StdioServerParameters(
        command=INTERLOCK,
        args=[
            "mcp-gateway",
            "--policy",
            str(write_policy(tmp_path, POLICY)),
            "--config",
            str(config),
            "--env",
            f"MCP_TEST_LOG={tmp_path / 'up.jsonl'}",
        ],
        env=base_env(),
    )
    async with session(params) as s:
        with pytest.raises(MCPError) as raised:
            await s.list_tools()
        prompts = await s.list_prompts()  # no clash there
    message = raised.value.error.message
    assert "'echo'" in message and "'files'" in message and "'mail'" in message
    assert [prompt.name for prompt in prompts.prompts] == ["summary"]


def test_an_upstreams_handshake_error_keeps_its_code_and_data(tmp_path: Path) -> None:
    """A client whose ``server/discover`` probe timed out falls back to ``initialize``;
    the upstreams, already modern, refuse it with -32022 naming their versions. The
    merged answer keeps that code and data, so the client re-probes (as the SDK's
    does) rather than failing."""
    meta = {
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientInfo": {"name": "raw", "version": "1"},
        "io.modelcontextprotocol/clientCapabilities": {},
    }
    wire = RawWire(
        [
            INTERLOCK,
            "mcp-gateway",
            "--policy",
            str(write_policy(tmp_path, POLICY)),
            "--upstream",
            f"files={sys.executable} {UPSTREAM}",
            "--upstream",
            f"mail={sys.executable} {MAIL}",
            "--env",
            f"MCP_TEST_LOG={tmp_path / 'up.jsonl'}",
        ],
        base_env(),
    )
    try:
        wire.send(
            {"jsonrpc": "2.0", "id": 1, "method": "server/discover", "params": {"_meta": meta}}
        )
        discovered, _ = wire.until(1)
        assert "2026-07-28" in discovered["result"]["supportedVersions"]
        wire.send(
            {
                "jsonrpc": "2.0",
                "id": 2,
                "method": "initialize",
                "params": {
                    "protocolVersion": "2025-11-25",
                    "capabilities": {},
                    "clientInfo": {"name": "raw", "version": "1"},
                },
            }
        )
        refused, _ = wire.until(2)
        assert refused["error"]["code"] == -32022, refused
        assert "2026-07-28" in refused["error"]["data"]["supported"]
        assert refused["error"]["message"].startswith("upstream '")
    finally:
        wire.kill()
