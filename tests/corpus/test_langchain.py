"""The corpus through LangChain: a guarded tool (``guard_tool``, raise style) and the
``InterlockMiddleware`` of a real ``create_agent`` loop (message style), its model a
script that asks for the row's call. The tools and agents are built once per module."""

from __future__ import annotations

import pytest

pytest.importorskip("langchain")

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from langchain.agents import create_agent
from langchain_core.callbacks import CallbackManagerForLLMRun
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage, ToolMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from langchain_core.tools import BaseTool, StructuredTool
from pydantic import BaseModel, ConfigDict, create_model

from interlock import Blocked
from interlock.adapters.langchain import InterlockMiddleware, guard_tool

from .case import DESCRIPTION, TOOLS, Case, PolicyName
from .surfaces import Bodies, Recorder, assert_outcome, fresh, make_guards
from .table import params


def _args_model(tool: str) -> type[BaseModel]:
    fields: dict[str, Any] = {
        name: (str if kind == "str" else list[str], ...) for name, kind in TOOLS[tool].items()
    }
    return create_model(  # type: ignore[call-overload,no-any-return]
        f"{tool}_arguments", __config__=ConfigDict(extra="forbid"), **fields
    )


def make_tools(bodies: Bodies) -> dict[str, BaseTool]:
    """A StructuredTool per corpus tool, its body recording each run."""
    tools: dict[str, BaseTool] = {}
    for name in TOOLS:

        def body(_name: str = name, **arguments: Any) -> str:
            return bodies.run(_name, arguments)

        tools[name] = StructuredTool.from_function(
            func=body, name=name, description=DESCRIPTION, args_schema=_args_model(name)
        )
    return tools


class _Script:
    """The row the scripted model asks for next (rows run one at a time)."""

    case: Case | None = None


class ScriptedModel(BaseChatModel):
    """Asks for the current row's tool call, then answers "done" once a tool replied."""

    def bind_tools(self, tools: Any, **kwargs: Any) -> Any:
        return self

    def _generate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        if isinstance(messages[-1], ToolMessage) or _Script.case is None:
            reply = AIMessage(content="done")
        else:
            call = {"name": _Script.case.tool, "args": dict(_Script.case.args), "id": "call-1"}
            reply = AIMessage(content="", tool_calls=[call])
        return ChatResult(generations=[ChatGeneration(message=reply)])

    @property
    def _llm_type(self) -> str:
        return "corpus-scripted"


@dataclass
class LangChainSurface:
    recorder: Recorder
    bodies: Bodies
    guarded: dict[PolicyName, dict[str, BaseTool]]
    agents: dict[PolicyName, Any]


@pytest.fixture(scope="module")
def surface() -> Iterator[LangChainSurface]:
    guards, recorder = make_guards()
    bodies = Bodies()
    tools = make_tools(bodies)
    guarded = {
        policy: {name: guard_tool(tool, guard) for name, tool in tools.items()}
        for policy, guard in guards.items()
    }
    agents = {
        policy: create_agent(
            ScriptedModel(), list(tools.values()), middleware=[InterlockMiddleware(guard)]
        )
        for policy, guard in guards.items()
    }
    yield LangChainSurface(recorder, bodies, guarded, agents)
    for guard in guards.values():
        guard.close()


@pytest.mark.parametrize("case", params())
def test_guarded_tool(case: Case, surface: LangChainSurface) -> None:
    raised: Blocked | None = None
    with fresh(surface.recorder, surface.bodies):
        try:
            surface.guarded[case.policy][case.tool].invoke(dict(case.args))
        except Blocked as exc:
            raised = exc
        assert_outcome(case, surface.recorder.decisions, surface.bodies.ran, "langchain guard_tool")
    assert (raised is None) is case.expect.allows, raised


@pytest.mark.parametrize("case", params())
def test_agent_middleware(case: Case, surface: LangChainSurface) -> None:
    _Script.case = case
    try:
        with fresh(surface.recorder, surface.bodies):
            result = surface.agents[case.policy].invoke({"messages": [("user", "go")]})
            assert_outcome(
                case, surface.recorder.decisions, surface.bodies.ran, "langchain middleware"
            )
    finally:
        _Script.case = None
    answers = [m for m in result["messages"] if isinstance(m, ToolMessage)]
    assert [m.status for m in answers] == ["success" if case.expect.allows else "error"]
    assert result["messages"][-1].content == "done"  # the model read the answer and went on
