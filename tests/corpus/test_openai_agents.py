"""The corpus through the OpenAI Agents SDK: each row invokes a guarded ``FunctionTool``
(``guard_tool``, raise style) the way the Runner does, with the model's JSON
arguments. The tools are built once per module."""

from __future__ import annotations

import pytest

pytest.importorskip("agents")

import asyncio
import json
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from agents import FunctionTool
from agents.tool import invoke_function_tool
from agents.tool_context import ToolContext

from interlock import Blocked
from interlock.adapters.openai_agents import guard_tool

from .case import DESCRIPTION, TOOLS, Case, PolicyName, tool_schema
from .surfaces import Bodies, Recorder, assert_outcome, fresh, make_guards
from .table import params


def make_tools(bodies: Bodies) -> dict[str, FunctionTool]:
    """A FunctionTool per corpus tool (strict schema), its body recording each run."""
    tools: dict[str, FunctionTool] = {}
    for name in TOOLS:

        async def invoke(ctx: ToolContext[Any], arguments: str, _name: str = name) -> str:
            return bodies.run(_name, json.loads(arguments))

        tools[name] = FunctionTool(
            name=name,
            description=DESCRIPTION,
            params_json_schema=tool_schema(name),
            on_invoke_tool=invoke,
        )
    return tools


@dataclass
class AgentsSurface:
    recorder: Recorder
    bodies: Bodies
    guarded: dict[PolicyName, dict[str, FunctionTool]]
    loop: asyncio.Runner  # one event loop for the module's rows: a loop per row costs more


@pytest.fixture(scope="module")
def surface() -> Iterator[AgentsSurface]:
    guards, recorder = make_guards()
    bodies = Bodies()
    tools = make_tools(bodies)
    guarded = {
        policy: {name: guard_tool(tool, guard) for name, tool in tools.items()}
        for policy, guard in guards.items()
    }
    with asyncio.Runner() as loop:
        yield AgentsSurface(recorder, bodies, guarded, loop)
    for guard in guards.values():
        guard.close()


@pytest.mark.parametrize("case", params())
def test_guarded_function_tool(case: Case, surface: AgentsSurface) -> None:
    arguments = json.dumps(dict(case.args))
    context = ToolContext(
        context=None, tool_name=case.tool, tool_call_id="call-1", tool_arguments=arguments
    )
    raised: Blocked | None = None
    with fresh(surface.recorder, surface.bodies):
        try:
            surface.loop.run(
                invoke_function_tool(
                    function_tool=surface.guarded[case.policy][case.tool],
                    context=context,
                    arguments=arguments,
                )
            )
        except Blocked as exc:
            raised = exc
        assert_outcome(case, surface.recorder.decisions, surface.bodies.ran, "openai-agents")
    assert (raised is None) is case.expect.allows, raised
