"""The corpus through MCP: a guarded ``MCPServer`` (``guard_server``) and a real
``mcp.Client`` session over the SDK's in-memory transport; a refusal is a
``CallToolResult`` with ``isError`` and the decision in its ``_meta``. The servers and
one client session per server are opened once per module; every row is a
``tools/call`` on that session, as an agent's calls are."""

from __future__ import annotations

import pytest

pytest.importorskip("mcp")

import asyncio
import inspect
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from mcp import Client
from mcp.server.mcpserver import MCPServer

from interlock.adapters.mcp import DECISION_META_KEY, guard_server

from .case import DESCRIPTION, TOOLS, Case, PolicyName
from .surfaces import Bodies, Recorder, assert_outcome, fresh, make_guards
from .table import params


def _tool_function(name: str, bodies: Bodies) -> Any:
    """A function whose signature declares exactly the tool's parameters (the server
    derives the tool's input schema from it)."""

    def body(**arguments: Any) -> str:
        return bodies.run(name, arguments)

    parameters = [
        inspect.Parameter(
            param,
            inspect.Parameter.KEYWORD_ONLY,
            annotation=str if kind == "str" else list[str],
        )
        for param, kind in TOOLS[name].items()
    ]
    body.__signature__ = inspect.Signature(parameters, return_annotation=str)  # type: ignore[attr-defined]
    body.__name__ = name
    return body


def make_server(bodies: Bodies) -> MCPServer:
    server = MCPServer("interlock-corpus")
    for name in TOOLS:
        server.add_tool(_tool_function(name, bodies), name=name, description=DESCRIPTION)
    return server


Call = tuple[Case, "asyncio.Future[Any]"]


class Session:
    """One client session on a server, held open by a task of the module's event loop
    (the SDK's sessions must be entered and left in one task); rows are queued to it."""

    def __init__(self, server: MCPServer) -> None:
        self.server = server
        self.calls: asyncio.Queue[Call | None] = asyncio.Queue()
        self.task = asyncio.ensure_future(self._serve())

    async def _serve(self) -> None:
        async with Client(self.server) as client:
            while (call := await self.calls.get()) is not None:
                case, answer = call
                try:
                    answer.set_result(await client.call_tool(case.tool, dict(case.args)))
                except Exception as exc:
                    answer.set_exception(exc)

    async def call(self, case: Case) -> Any:
        answer: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        await self.calls.put((case, answer))
        return await asyncio.wait_for(answer, timeout=60)

    async def close(self) -> None:
        await self.calls.put(None)
        await asyncio.wait_for(self.task, timeout=60)


@dataclass
class McpSurface:
    recorder: Recorder
    bodies: Bodies
    sessions: dict[PolicyName, Session]
    loop: asyncio.Runner  # one event loop for the module's rows


async def _open(servers: dict[PolicyName, MCPServer]) -> dict[PolicyName, Session]:
    return {policy: Session(server) for policy, server in servers.items()}


@pytest.fixture(scope="module")
def surface() -> Iterator[McpSurface]:
    guards, recorder = make_guards()
    bodies = Bodies()
    servers: dict[PolicyName, MCPServer] = {}
    for policy, guard in guards.items():
        servers[policy] = make_server(bodies)
        guard_server(servers[policy], guard)
    with asyncio.Runner() as loop:
        sessions = loop.run(_open(servers))
        yield McpSurface(recorder, bodies, sessions, loop)
        for session in sessions.values():
            loop.run(session.close())
    for guard in guards.values():
        guard.close()


@pytest.mark.parametrize("case", params())
def test_guarded_server(case: Case, surface: McpSurface) -> None:
    with fresh(surface.recorder, surface.bodies):
        result = surface.loop.run(surface.sessions[case.policy].call(case))
        assert_outcome(case, surface.recorder.decisions, surface.bodies.ran, "mcp server")
    assert result.is_error is not case.expect.allows, result
    meta = (result.meta or {}).get(DECISION_META_KEY)
    if case.expect.allows:
        assert meta is None
    else:
        assert meta is not None and meta["verdict"] in {v.value for v in case.expect.verdicts}
