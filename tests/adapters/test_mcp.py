"""The MCP adapter, driven through the real SDK (``mcp`` 2.x).

Where each conformance row runs:

- server side: every row through an in-process ``MCPServer`` and a real ``mcp.Client``
  on both wires the SDK speaks in memory (``legacy``: the ``initialize`` handshake and
  JSON-RPC over memory streams, protocol 2025-11-25; ``modern``: the per-request
  envelope, protocol 2026-07-28); the allow / deny / require_approval rows also
  through a real stdio server process (``mcp_servers/tools_server.py``) that builds
  the row's guard itself;
- client side: every row through a guarded ``ClientSession`` talking to an in-process
  server, in both refusal styles; the allow / deny / require_approval rows also
  through a ``ClientSession`` talking to the stdio server (unguarded), in both styles.

The rows whose guard carries Python objects (a slow decider, throwing observers, a
mapper) need a guard built in the test process, which the in-memory paths give. No
model is involved: the client is the caller.
"""

from __future__ import annotations

import pytest

pytest.importorskip("mcp")

import asyncio
import contextlib
import json
import sys
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any, Literal

import mcp_types as types
from mcp import Client, ClientSession, StdioServerParameters, stdio_client
from mcp.server import Server, ServerRequestContext
from mcp.server.context import CallNext, HandlerResult
from mcp.server.mcpserver import MCPServer

import interlock
from interlock import Action, Context, Decision, Guard, Verdict, load_policy_text
from interlock.adapters.base import adapter_for
from interlock.adapters.mcp import (
    CLIENT,
    DECISION_META_KEY,
    LOW_LEVEL,
    SERVER,
    ClientSessionAdapter,
    InterlockMiddleware,
    LowLevelServerAdapter,
    MCPServerAdapter,
    guard_server,
    guard_session,
    tool_action,
)
from interlock.store import open_store

from .conformance import (
    CANCELLATION,
    POLICY,
    ROWS,
    STORE_UNREACHABLE,
    Row,
    assert_cancellation_never_runs,
    make_guard,
)

ids = [row.behaviour for row in ROWS]

#: The rows that also run over real stdio: their guard is the policy alone.
STDIO_ROWS = [
    row
    for row in ROWS
    if row.mapper is None
    and not row.guard_options
    and row.verdict in (Verdict.ALLOW, Verdict.DENY, Verdict.REQUIRE_APPROVAL)
]
assert [row.verdict for row in STDIO_ROWS] == [
    Verdict.ALLOW,
    Verdict.DENY,
    Verdict.REQUIRE_APPROVAL,
]

SERVER_SCRIPT = Path(__file__).parent / "mcp_servers" / "tools_server.py"
SRC = Path(interlock.__file__).resolve().parents[1]

Wire = Literal["legacy", "modern"]
WIRES: list[Wire] = ["legacy", "modern"]
PROTOCOL = {"legacy": "2025-11-25", "modern": "2026-07-28"}


class Tools:
    """An in-process ``MCPServer`` with the table's tools, recording each body that ran."""

    def __init__(self, middleware: list[Any] | None = None) -> None:
        self.ran: list[tuple[str, dict[str, Any]]] = []
        self.server = MCPServer("interlock-test-tools", middleware=middleware)
        ran = self.ran

        @self.server.tool()
        def shell(command: str) -> str:
            """Run a shell command."""
            ran.append(("shell", {"command": command}))
            return f"ran {command}"

        @self.server.tool()
        def pay(amount: float | str) -> str:
            """Pay an amount."""
            ran.append(("pay", {"amount": amount}))
            return f"paid {amount}"

        @self.server.tool()
        def paid_lookup(query: str, est_cost: float) -> str:
            """Look something up, at a cost."""
            ran.append(("paid_lookup", {"query": query}))
            return "found"

        @self.server.tool()
        def broken_lookup(query: str, est_cost: float) -> str:
            """Look something up, at a cost, from a service that is down."""
            ran.append(("broken_lookup", {"query": query}))
            raise RuntimeError("upstream down")


@contextlib.asynccontextmanager
async def connect(server: MCPServer | Server[Any], wire: Wire = "modern") -> AsyncIterator[Client]:
    """A real ``mcp.Client`` on an in-process server, on the given wire."""
    async with Client(server, mode="legacy" if wire == "legacy" else "auto") as client:
        assert client.protocol_version == PROTOCOL[wire]
        yield client


@contextlib.asynccontextmanager
async def stdio_session(log: Path, **env: str) -> AsyncIterator[ClientSession]:
    """A real ``ClientSession`` on ``tools_server.py`` run as a subprocess over stdio.
    The SDK hands the child only a few inherited variables (HOME, PATH, ...), so
    everything it needs is passed."""
    params = StdioServerParameters(
        command=sys.executable,
        args=[str(SERVER_SCRIPT)],
        env={"PYTHONPATH": str(SRC), "MCP_TEST_LOG": str(log), **env},
    )
    async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
        await session.initialize()
        yield session


def read_log(log: Path) -> list[tuple[str, dict[str, Any]]]:
    """The bodies the stdio server ran, in order."""
    if not log.exists():
        return []
    lines = [json.loads(line) for line in log.read_text().splitlines()]
    return [(line["tool"], line["args"]) for line in lines]


def text_of(result: types.CallToolResult) -> str:
    return " ".join(block.text for block in result.content if isinstance(block, types.TextContent))


def decision_of(result: types.CallToolResult) -> dict[str, Any]:
    meta: dict[str, Any] = (result.meta or {})[DECISION_META_KEY]
    return meta


async def twice(call: Callable[[], Awaitable[Any]]) -> list[Any]:
    """The same call made twice, concurrently (an error is returned, not raised)."""
    return list(await asyncio.gather(call(), call(), return_exceptions=True))


def check_row(row: Row, results: list[Any], ran: list[tuple[str, dict[str, Any]]]) -> None:
    """Both calls ran (allow, pass-through) or neither did and each came back as a
    refusal the client can read and act on."""
    if row.runs:
        assert [name for name, _ in ran] == [row.tool, row.tool]
        for result in results:
            assert isinstance(result, types.CallToolResult), result
            assert not result.is_error
            assert DECISION_META_KEY not in (result.meta or {})
        return
    assert ran == []
    for result in results:
        assert isinstance(result, types.CallToolResult), result
        assert result.is_error
        assert row.says in text_of(result)
        assert row.verdict is not None
        assert decision_of(result)["verdict"] == row.verdict.value
    assert len({decision_of(result)["decision_id"] for result in results}) == 2


def check_raised(row: Row, outcomes: list[Any], ran: list[tuple[str, dict[str, Any]]]) -> None:
    """Raise style: both calls ran, or each raised the row's error before leaving."""
    if row.error is None:
        assert [name for name, _ in ran] == [row.tool, row.tool]
        assert all(isinstance(o, types.CallToolResult) and not o.is_error for o in outcomes)
        return
    assert ran == []
    for outcome in outcomes:
        assert isinstance(outcome, row.error), outcome
        assert outcome.decision.verdict is row.verdict


def recording_guard(
    seen: list[tuple[Decision, Action | None]], policy: Any = POLICY, **options: Any
) -> Guard:
    return Guard(policy, on_decision=lambda d, a: seen.append((d, a)), **options)


# -- server side: the table --------------------------------------------------------------


def install(how: str, tools: Tools, guard: Guard, row: Row) -> None:
    """``guard_server`` (the middleware and the in-process ``call_tool`` gate), or the
    middleware alone, so that the table shows the middleware refusing by itself."""
    if how == "guard_server":
        guard_server(tools.server, guard, mapper=row.mapper)
    else:
        middleware = InterlockMiddleware(guard, mapper=row.mapper, server=tools.server)
        tools.server.middleware.append(middleware)


@pytest.mark.parametrize("how", ["guard_server", "middleware alone"])
@pytest.mark.parametrize("wire", WIRES)
@pytest.mark.parametrize("row", ROWS, ids=ids)
async def test_server_runs_the_tool_only_on_allow_and_the_client_reads_the_refusal(
    row: Row, wire: Wire, how: str
) -> None:
    tools = Tools()
    install(how, tools, make_guard(row), row)
    async with connect(tools.server, wire) as client:
        results = await twice(lambda: client.call_tool(row.tool, row.args))
    check_row(row, results, tools.ran)


@pytest.mark.parametrize("row", STDIO_ROWS, ids=[row.behaviour for row in STDIO_ROWS])
async def test_a_stdio_server_runs_the_tool_only_on_allow(row: Row, tmp_path: Path) -> None:
    log = tmp_path / "bodies.jsonl"
    async with stdio_session(log, MCP_TEST_ROW=row.behaviour) as session:
        results = await twice(lambda: session.call_tool(row.tool, row.args))
    check_row(row, results, read_log(log))


APPROVAL_POLICY = """
version: 1
default: deny
approvals:
  url: "https://approvals.example.com/a/{id}"
rules:
  - id: shell-ok
    decision: allow
    reason: shell is allowed
    name: shell
  - id: no-rm
    decision: deny
    reason: no recursive deletes
    name: shell
    when: "args.command.startsWith('rm')"
  - id: pay-needs-a-human
    decision: require_approval
    reason: payments need a human
    name: pay
"""


async def test_a_stdio_server_guarded_from_a_policy_file_hands_the_client_the_approval(
    tmp_path: Path,
) -> None:
    log = tmp_path / "bodies.jsonl"
    policy = tmp_path / "interlock.yaml"
    policy.write_text(APPROVAL_POLICY)
    store_url = f"sqlite:///{tmp_path / 'state.db'}"
    env = {"MCP_TEST_POLICY": str(policy), "MCP_TEST_STORE": store_url}
    async with stdio_session(log, **env) as session:
        held, denied, allowed = await asyncio.gather(
            session.call_tool("pay", {"amount": 5}),
            session.call_tool("shell", {"command": "rm -rf /"}),
            session.call_tool("shell", {"command": "ls"}),
        )
    assert read_log(log) == [("shell", {"command": "ls"})]
    assert not allowed.is_error
    assert denied.is_error
    assert decision_of(denied)["rule_ids"] == ["no-rm"]
    assert held.is_error
    meta = decision_of(held)
    assert meta["verdict"] == "require_approval"
    assert meta["rule_ids"] == ["pay-needs-a-human"]
    assert meta["approval_url"] == f"https://approvals.example.com/a/{meta['approval_id']}"
    assert meta["approval_url"] in text_of(held)
    with open_store(store_url) as store:  # the approval the client holds is the server's
        approval = store.get_approval(meta["approval_id"])
    assert approval.status.value == "pending"
    assert approval.rule_ids == ("pay-needs-a-human",)


async def test_an_approved_call_runs_once_when_the_client_retries_it(tmp_path: Path) -> None:
    tools = Tools()
    with Guard(load_policy_text(APPROVAL_POLICY), store=f"sqlite:///{tmp_path / 's.db'}") as guard:
        guard_server(tools.server, guard)
        async with connect(tools.server) as client:
            held = await client.call_tool("pay", {"amount": 5})
            assert guard.store is not None
            guard.store.approve(decision_of(held)["approval_id"], by="alice", reason="checked")
            retried = await client.call_tool("pay", {"amount": 5})
            again = await client.call_tool("pay", {"amount": 5})
    assert held.is_error
    assert not retried.is_error
    assert again.is_error  # the grant was single use
    assert tools.ran == [("pay", {"amount": 5.0})]


# -- server side: what is judged, and against what ---------------------------------------


async def test_the_server_gate_passes_every_other_message_through() -> None:
    tools = Tools()
    seen: list[tuple[Decision, Action | None]] = []
    guard_server(tools.server, recording_guard(seen))
    async with connect(tools.server, "legacy") as client:
        listed = await client.list_tools()
        await client.list_resources()
    assert {tool.name for tool in listed.tools} >= {"shell", "pay"}
    assert seen == []


async def test_malformed_tools_call_params_fail_closed_on_the_server() -> None:
    tools = Tools()
    guard_server(tools.server, Guard(POLICY))
    loose = types.Request[dict[str, Any], str](
        method="tools/call", params={"arguments": {"command": "ls"}}
    )
    async with connect(tools.server, "legacy") as client:
        result = await client.session.send_request(loose, types.CallToolResult)
    assert tools.ran == []
    assert result.is_error
    assert decision_of(result)["verdict"] == "undetermined"
    assert "malformed" in text_of(result)


async def test_the_server_judges_against_the_tools_own_schema_and_description() -> None:
    tools = Tools()
    seen: list[tuple[Decision, Action | None]] = []
    guard_server(tools.server, recording_guard(seen))
    async with connect(tools.server) as client:
        await client.call_tool("shell", {"command": "ls"})
        (listed,) = [t for t in (await client.list_tools()).tools if t.name == "shell"]
    ((_, action),) = seen
    assert action is not None
    assert action.schema == listed.input_schema
    assert action.description == "Run a shell command."


async def test_the_server_records_the_json_rpc_request_id_as_the_call_id() -> None:
    tools = Tools()
    request_ids: list[str] = []

    async def observe(ctx: ServerRequestContext[Any, Any], call_next: CallNext) -> HandlerResult:
        if ctx.method == "tools/call":
            request_ids.append(str(ctx.request_id))
        return await call_next(ctx)

    tools.server.middleware.append(observe)
    seen: list[tuple[Decision, Action | None]] = []
    guard_server(tools.server, recording_guard(seen))
    async with connect(tools.server, "legacy") as client:
        await twice(lambda: client.call_tool("shell", {"command": "ls"}))
    call_ids = [action.context.call_id for _, action in seen if action is not None]
    assert len(set(request_ids)) == 2
    assert sorted(call_ids) == sorted(request_ids)  # type: ignore[type-var]


async def test_a_low_level_server_is_guarded_through_its_middleware() -> None:
    ran: list[str] = []
    schema = {"type": "object", "properties": {"command": {"type": "string"}}}

    async def list_tools(
        ctx: ServerRequestContext[Any, Any], params: types.PaginatedRequestParams | None
    ) -> types.ListToolsResult:
        return types.ListToolsResult(tools=[types.Tool(name="shell", input_schema=schema)])

    async def call_tool(
        ctx: ServerRequestContext[Any, Any], params: types.CallToolRequestParams
    ) -> types.CallToolResult:
        ran.append((params.arguments or {})["command"])
        return types.CallToolResult(content=[types.TextContent(text="ran")])

    server: Server[Any] = Server(
        "low",
        on_list_tools=list_tools,
        on_call_tool=call_tool,
        get_tool_input_schema=lambda name: schema if name == "shell" else None,
    )
    seen: list[tuple[Decision, Action | None]] = []
    guard_server(server, recording_guard(seen))
    async with connect(server, "legacy") as client:
        refused = await client.call_tool("shell", {"command": "rm -rf /"})
        allowed = await client.call_tool("shell", {"command": "ls", "sudo": True})
    assert ran == ["ls"]
    assert refused.is_error
    assert "no recursive deletes" in text_of(refused)
    assert not allowed.is_error
    assert [action.schema for _, action in seen if action is not None] == [schema, schema]


async def test_a_call_made_inside_a_passed_through_tool_is_judged() -> None:
    tools = Tools()
    server = tools.server

    @server.tool()
    async def relay(command: str) -> str:
        """Run a shell command through the server itself."""
        result = await server.call_tool("shell", {"command": command})
        assert isinstance(result, types.CallToolResult)
        return text_of(result)

    def relays_are_not_ours(name: str, arguments: dict[str, Any], tool: Any) -> Action | None:
        return None if name == "relay" else tool_action(name, arguments, tool)

    guard_server(server, Guard(POLICY), mapper=relays_are_not_ours)
    async with connect(server) as client:
        result = await client.call_tool("relay", {"command": "rm -rf /"})
    assert tools.ran == []
    assert "no recursive deletes" in text_of(result)


# -- server side: every public entry point is judged -------------------------------------

ServerCall = Callable[[MCPServer, str, dict[str, Any]], Awaitable[Any]]


async def _over(wire: Wire, server: MCPServer, name: str, args: dict[str, Any]) -> Any:
    async with connect(server, wire) as client:
        return await client.call_tool(name, args)


SERVER_ENTRY_POINTS: dict[str, ServerCall] = {
    "tools/call, legacy wire": lambda s, n, a: _over("legacy", s, n, a),
    "tools/call, modern wire": lambda s, n, a: _over("modern", s, n, a),
    "MCPServer.call_tool in process": lambda s, n, a: s.call_tool(n, a),
}


@pytest.mark.parametrize("entry", list(SERVER_ENTRY_POINTS))
async def test_every_server_entry_point_refuses_a_denied_call(entry: str) -> None:
    tools = Tools()
    guard_server(tools.server, Guard(POLICY))
    result = await SERVER_ENTRY_POINTS[entry](tools.server, "shell", {"command": "rm -rf /"})
    assert tools.ran == []
    assert result.is_error
    assert "no recursive deletes" in text_of(result)
    assert decision_of(result)["verdict"] == "deny"


@pytest.mark.parametrize("entry", list(SERVER_ENTRY_POINTS))
async def test_every_server_entry_point_runs_an_allowed_call_judged_once(entry: str) -> None:
    tools = Tools()
    seen: list[tuple[Decision, Action | None]] = []
    guard_server(tools.server, recording_guard(seen))
    result = await SERVER_ENTRY_POINTS[entry](tools.server, "shell", {"command": "ls"})
    assert tools.ran == [("shell", {"command": "ls"})]
    assert not result.is_error
    assert [decision.verdict for decision, _ in seen] == [Verdict.ALLOW]


# -- client side: the table --------------------------------------------------------------


@pytest.mark.parametrize("row", ROWS, ids=ids)
async def test_client_sends_only_on_allow_and_returns_the_refusal_a_server_would(
    row: Row,
) -> None:
    tools = Tools()
    async with connect(tools.server) as client:
        guard_session(client.session, make_guard(row), mapper=row.mapper)
        results = await twice(lambda: client.session.call_tool(row.tool, row.args))
    check_row(row, results, tools.ran)


@pytest.mark.parametrize("row", ROWS, ids=ids)
async def test_client_raise_style_sends_only_on_allow_and_raises_the_error(row: Row) -> None:
    tools = Tools()
    async with connect(tools.server) as client:
        guard_session(client.session, make_guard(row), refusal="raise", mapper=row.mapper)
        outcomes = await twice(lambda: client.session.call_tool(row.tool, row.args))
    check_raised(row, outcomes, tools.ran)


@pytest.mark.parametrize("row", STDIO_ROWS, ids=[row.behaviour for row in STDIO_ROWS])
async def test_a_client_of_a_stdio_server_sends_only_on_allow_in_both_styles(
    row: Row, tmp_path: Path
) -> None:
    log = tmp_path / "bodies.jsonl"
    async with stdio_session(log) as session:  # the server itself is unguarded
        guard = make_guard(row)
        guard_session(session, guard)
        results = await twice(lambda: session.call_tool(row.tool, row.args))
        check_row(row, results, read_log(log))
        guard.detach(session)
        log.unlink(missing_ok=True)
        guard_session(session, guard, refusal="raise")
        outcomes = await twice(lambda: session.call_tool(row.tool, row.args))
        check_raised(row, outcomes, read_log(log))


# -- client side: no public path skips the gate ------------------------------------------


def _call_request(name: str, args: dict[str, Any]) -> types.CallToolRequest:
    return types.CallToolRequest(params=types.CallToolRequestParams(name=name, arguments=args))


async def test_send_request_does_not_bypass_the_client_gate() -> None:
    tools = Tools()
    denied = _call_request("shell", {"command": "rm -rf /"})
    async with connect(tools.server) as client:
        unguarded = await client.session.send_request(denied, types.CallToolResult)
        assert not unguarded.is_error  # the path exists and reaches the tool...
        assert len(tools.ran) == 1
        guard_session(client.session, Guard(POLICY))
        guarded = await client.session.send_request(denied, types.CallToolResult)
    assert len(tools.ran) == 1  # ...and once guarded it no longer does
    assert guarded.is_error
    assert decision_of(guarded)["rule_ids"] == ["no-rm"]


ClientCall = Callable[[Client, str, dict[str, Any]], Awaitable[Any]]

CLIENT_ENTRY_POINTS: dict[str, ClientCall] = {
    "ClientSession.call_tool": lambda c, n, a: c.session.call_tool(n, a),
    "ClientSession.send_request(CallToolRequest)": lambda c, n, a: c.session.send_request(
        _call_request(n, a), types.CallToolResult
    ),
    "ClientSession.send_request(a hand-built tools/call)": lambda c, n, a: c.session.send_request(
        types.Request[dict[str, Any], str](method="tools/call", params={"name": n, "arguments": a}),
        types.CallToolResult,
    ),
    "Client.call_tool": lambda c, n, a: c.call_tool(n, a),
}


@pytest.mark.parametrize("refusal", ["message", "raise"])
@pytest.mark.parametrize("entry", list(CLIENT_ENTRY_POINTS))
async def test_every_client_entry_point_refuses_a_denied_call(entry: str, refusal: str) -> None:
    tools = Tools()
    async with connect(tools.server) as client:
        guard_session(client.session, Guard(POLICY), refusal=refusal)  # type: ignore[arg-type]
        call = CLIENT_ENTRY_POINTS[entry](client, "shell", {"command": "rm -rf /"})
        if refusal == "raise":
            with pytest.raises(interlock.ActionDenied) as caught:
                await call
            assert caught.value.decision.rule_ids == ("no-rm",)
        else:
            result = await call
            assert result.is_error
            assert "no recursive deletes" in text_of(result)
    assert tools.ran == []


@pytest.mark.parametrize("entry", list(CLIENT_ENTRY_POINTS))
async def test_every_client_entry_point_sends_an_allowed_call_judged_once(entry: str) -> None:
    tools = Tools()
    seen: list[tuple[Decision, Action | None]] = []
    async with connect(tools.server) as client:
        guard_session(client.session, recording_guard(seen))
        result = await CLIENT_ENTRY_POINTS[entry](client, "shell", {"command": "ls"})
    assert not result.is_error
    assert tools.ran == [("shell", {"command": "ls"})]
    assert [decision.verdict for decision, _ in seen] == [Verdict.ALLOW]


async def test_the_private_dispatcher_under_the_session_is_the_documented_boundary() -> None:
    """Below ``send_request`` the only way out is the session's private dispatcher;
    the gate does not reach it (docs/adapter-mcp.md says so)."""
    tools = Tools()
    async with connect(tools.server, "legacy") as client:
        guard_session(client.session, Guard(POLICY))
        dispatcher = client.session._dispatcher
        params = {"name": "shell", "arguments": {"command": "rm -rf /"}}
        await dispatcher.send_raw_request("tools/call", params, {})
    assert tools.ran == [("shell", {"command": "rm -rf /"})]


async def test_the_client_gate_passes_every_other_request_through() -> None:
    tools = Tools()
    seen: list[tuple[Decision, Action | None]] = []
    async with connect(tools.server) as client:
        guard_session(client.session, recording_guard(seen))
        listed = await client.session.list_tools()
        await client.session.list_resources()
    assert {tool.name for tool in listed.tools} >= {"shell", "pay"}
    assert seen == []


async def test_the_client_judges_against_the_schema_of_the_listed_tools() -> None:
    tools = Tools()
    seen: list[tuple[Decision, Action | None]] = []
    async with connect(tools.server) as client:
        listed = (await client.session.list_tools()).tools
        guard_session(client.session, recording_guard(seen), tools=listed)
        await client.session.call_tool("shell", {"command": "ls"})
    ((_, action),) = seen
    assert action is not None
    (shell,) = [tool for tool in listed if tool.name == "shell"]
    assert action.schema == shell.input_schema
    assert action.description == "Run a shell command."


async def test_an_in_process_client_and_server_on_one_guard_judge_each_call_once() -> None:
    tools = Tools()
    seen: list[tuple[Decision, Action | None]] = []
    guard = recording_guard(seen)
    guard_server(tools.server, guard)
    async with connect(tools.server, "legacy") as client:
        guard_session(client.session, guard)
        await client.session.call_tool("shell", {"command": "ls"})
    assert tools.ran == [("shell", {"command": "ls"})]
    assert len(seen) == 1


# -- budgets: committed when the tool completes, released when it fails ------------------

BUDGET_POLICY = """
version: 1
default: deny
budgets:
  - id: tool-spend
    limit: 1
    unit: USD
    scope: agent
    kind: tool
rules:
  - id: lookups-ok
    decision: allow
    reason: lookups are fine
    name: [paid_lookup, broken_lookup]
"""


@pytest.mark.parametrize("side", ["server", "client"])
@pytest.mark.parametrize(
    ("tool", "spent"), [("paid_lookup", 400_000), ("broken_lookup", 0)], ids=["completes", "fails"]
)
async def test_a_completed_call_commits_its_reservation_and_a_failed_one_releases_it(
    side: str, tool: str, spent: int, tmp_path: Path
) -> None:
    tools = Tools()
    with Guard(
        load_policy_text(BUDGET_POLICY),
        store=f"sqlite:///{tmp_path / 'state.db'}",
        context=Context(agent="bot"),
    ) as guard:
        if side == "server":
            guard_server(tools.server, guard)
        async with connect(tools.server) as client:
            if side == "client":
                guard_session(client.session, guard)
            result = await client.call_tool(tool, {"query": "q", "est_cost": 0.4})
        assert guard.store is not None
        (budget,) = guard.store.budget_rows(budget_id="tool-spend")
    assert [name for name, _ in tools.ran] == [tool]
    assert result.is_error is (spent == 0)
    assert (budget.spent, budget.reserved) == (spent, 0)


# -- attach / detach -----------------------------------------------------------------------

_MISSING = object()
KINDS = ["MCPServer", "low-level Server", "ClientSession"]


def _target(kind: str, tools: Tools, client: Client) -> Any:
    return {
        "MCPServer": tools.server,
        "low-level Server": tools.server._lowlevel_server,
        "ClientSession": client.session,
    }[kind]


def patched_state(obj: object) -> dict[str, object]:
    """Every attribute the MCP adapters patch, as the instance holds it (for an
    ``MCPServer``, the low-level server under it too)."""
    objects = [obj]
    if isinstance(obj, MCPServer):
        objects.append(obj._lowlevel_server)
    return {
        f"{type(o).__name__}.{target.attr}": vars(o).get(target.attr, _MISSING)
        for o in objects
        for target in adapter_for(o).targets
    }


@pytest.mark.parametrize("kind", KINDS)
async def test_attach_then_detach_restores_every_patched_attribute(kind: str) -> None:
    tools = Tools()
    guard = Guard(POLICY)
    async with connect(tools.server) as client:
        obj = _target(kind, tools, client)
        before = patched_state(obj)
        guard.attach(obj)
        during = patched_state(obj)
        assert all(during[attr] is not before[attr] for attr in before)
        guard.attach(obj)  # idempotent: the same replacements stay
        assert all(patched_state(obj)[attr] is during[attr] for attr in before)
        refused = await client.call_tool("shell", {"command": "rm -rf /"})
        assert refused.is_error
        assert tools.ran == []
        guard.detach(obj)
        assert all(patched_state(obj)[attr] is before[attr] for attr in before)
        guard.detach(obj)  # a second detach changes nothing
        assert all(patched_state(obj)[attr] is before[attr] for attr in before)
        ran = await client.call_tool("shell", {"command": "rm -rf /"})
    assert not ran.is_error
    assert tools.ran == [("shell", {"command": "rm -rf /"})]


@pytest.mark.parametrize("kind", KINDS)
async def test_attaching_another_guard_or_other_options_is_refused(kind: str) -> None:
    tools = Tools()
    guard = Guard(POLICY)
    async with connect(tools.server) as client:
        obj = _target(kind, tools, client)
        guard.attach(obj)
        attached = patched_state(obj)
        try:
            with pytest.raises(ValueError, match="another guard"):
                Guard(POLICY).attach(obj)
            with pytest.raises(ValueError, match="other options"):
                attach: Callable[..., Any] = adapter_for(obj).attach
                attach(obj, guard, mapper=lambda *_: None)
            assert patched_state(obj) == attached
        finally:
            guard.detach(obj)


async def test_adapter_for_finds_each_mcp_adapter() -> None:
    tools = Tools()
    async with connect(tools.server) as client:
        assert adapter_for(client.session) is CLIENT
    assert adapter_for(tools.server) is SERVER
    assert adapter_for(tools.server._lowlevel_server) is LOW_LEVEL


async def test_an_unknown_refusal_style_is_refused() -> None:
    tools = Tools()
    async with connect(tools.server) as client:
        with pytest.raises(ValueError, match="refusal"):
            guard_session(client.session, Guard(POLICY), refusal="shout")  # type: ignore[arg-type]
        assert "send_request" not in vars(client.session)


async def test_the_middleware_given_to_the_server_constructor_judges_each_call() -> None:
    seen: list[tuple[Decision, Action | None]] = []
    tools = Tools(middleware=[InterlockMiddleware(recording_guard(seen))])
    async with connect(tools.server) as client:
        refused = await client.call_tool("shell", {"command": "rm -rf /"})
        allowed = await client.call_tool("shell", {"command": "ls"})
    assert tools.ran == [("shell", {"command": "ls"})]
    assert refused.is_error
    assert not allowed.is_error
    # without ``server=`` there is no registry to look in: the arguments as sent
    assert [action.schema for _, action in seen if action is not None] == [None, None]


@pytest.mark.parametrize("adapter", [MCPServerAdapter, LowLevelServerAdapter, ClientSessionAdapter])
def test_an_unsupported_version_names_the_range_and_the_extra(adapter: type[Any]) -> None:
    class Future(adapter):  # type: ignore[misc]
        supported = ("9.0", "10")

    with pytest.raises(ImportError, match=r"mcp>=9.0,<10.*interlock\[mcp\]"):
        Future()


# -- the store-unreachable row and cancellation --------------------------------------------


@pytest.mark.parametrize("how", ["guard_server", "middleware alone"])
@pytest.mark.parametrize("wire", WIRES)
async def test_an_unreachable_store_never_runs_the_tool_on_the_server(wire: Wire, how: str) -> None:
    row = STORE_UNREACHABLE
    tools = Tools()
    install(how, tools, make_guard(row), row)
    async with connect(tools.server, wire) as client:
        results = await twice(lambda: client.call_tool(row.tool, row.args))
    check_row(row, results, tools.ran)


@pytest.mark.parametrize("refusal", ["message", "raise"])
async def test_an_unreachable_store_never_sends_the_call_from_the_client(refusal: str) -> None:
    row = STORE_UNREACHABLE
    tools = Tools()
    async with connect(tools.server) as client:
        guard_session(client.session, make_guard(row), refusal=refusal)  # type: ignore[arg-type]
        outcomes = await twice(lambda: client.session.call_tool(row.tool, row.args))
    if refusal == "message":
        check_row(row, outcomes, tools.ran)
    else:
        check_raised(row, outcomes, tools.ran)


@pytest.mark.parametrize("wire", WIRES)
async def test_a_server_call_cancelled_while_it_is_judged_never_runs_the_tool(wire: Wire) -> None:
    tools = Tools()

    async def call(guard: Guard) -> Any:
        guard_server(tools.server, guard)
        async with connect(tools.server, wire) as client:
            return await client.call_tool(CANCELLATION.tool, CANCELLATION.args)

    await assert_cancellation_never_runs(call, lambda: len(tools.ran))


@pytest.mark.parametrize("refusal", ["message", "raise"])
async def test_a_client_call_cancelled_while_it_is_judged_is_never_sent(refusal: str) -> None:
    tools = Tools()

    async def call(guard: Guard) -> Any:
        async with connect(tools.server) as client:
            guard_session(client.session, guard, refusal=refusal)  # type: ignore[arg-type]
            return await client.session.call_tool(CANCELLATION.tool, CANCELLATION.args)

    await assert_cancellation_never_runs(call, lambda: len(tools.ran))


def test_coverage_names_the_resources_and_prompts_no_gate_judges() -> None:
    tools = Tools()

    @tools.server.resource("notes://today")
    def today() -> str:
        """Today's notes."""
        return "notes"

    @tools.server.prompt()
    def greet(name: str) -> str:
        """Greet someone."""
        return f"hi {name}"

    guard = Guard(POLICY)
    guard.attach(tools.server)
    coverage = guard.coverage(tools.server)
    assert coverage.unguarded == ["resource:notes://today", "prompt:greet"]
    assert "only tools/call is" in str(coverage)
    guard.detach(tools.server)
