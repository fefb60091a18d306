"""One detach test over every registered adapter: ``guard.detach`` leaves every object
the adapter touched exactly as it was — the same attributes holding the same objects.

A new adapter adds one entry to ``SUBJECTS``: how to make a fresh object it guards,
and which objects' attributes it may patch. The first test fails until it does.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest

pytest.importorskip("langchain")
pytest.importorskip("agents")
pytest.importorskip("mcp")
pytest.importorskip("autogen_agentchat")
pytest.importorskip("llama_index.core")
pytest.importorskip("interlock.adapters.openai_client")
pytest.importorskip("interlock.adapters.anthropic_client")
pytest.importorskip("google.adk")
pytest.importorskip("pydantic_ai")
pytest.importorskip("smolagents")

from agents import Agent, function_tool
from autogen_agentchat.agents import AssistantAgent
from autogen_core.models import ModelFamily, ModelInfo
from autogen_core.tools import FunctionTool
from autogen_ext.models.replay import ReplayChatCompletionClient
from google.adk.agents import LlmAgent
from langchain.agents import create_agent
from langchain_core.language_models.fake_chat_models import FakeMessagesListChatModel
from langchain_core.tools import tool
from langgraph.prebuilt import ToolNode
from llama_index.core.llms.mock import MockFunctionCallingLLM
from llama_index.core.tools import FunctionTool as LlamaFunctionTool
from mcp import Client
from mcp.server.mcpserver import MCPServer
from pydantic_ai import Agent as PydanticAgent
from pydantic_ai.models.test import TestModel
from smolagents import Model as SmolModel
from smolagents import Tool as SmolTool
from smolagents import ToolCallingAgent

import interlock.adapters.anthropic_client
import interlock.adapters.autogen
import interlock.adapters.google_adk
import interlock.adapters.langchain
import interlock.adapters.llama_index
import interlock.adapters.mcp
import interlock.adapters.openai_agents
import interlock.adapters.openai_client
import interlock.adapters.pydantic_ai
import interlock.adapters.smolagents  # noqa: F401 - registers its adapters
from interlock import Guard
from interlock.adapters import base
from interlock.core import registry

from .conformance import POLICY

#: A fresh guarded object and the objects whose attributes attaching may change.
Subject = Callable[[], contextlib.AbstractAsyncContextManager[tuple[object, list[object]]]]


class _Model(FakeMessagesListChatModel):
    def bind_tools(self, tools: Any, **kwargs: Any) -> Any:
        return self


@tool
def shell(command: str) -> str:
    """Run a shell command."""
    return command


@contextlib.asynccontextmanager
async def langchain_tool() -> AsyncIterator[tuple[object, list[object]]]:
    fresh = shell.model_copy()
    yield fresh, [fresh]


@contextlib.asynccontextmanager
async def langgraph_tool_node() -> AsyncIterator[tuple[object, list[object]]]:
    node = ToolNode([shell])
    yield node, [node]


@contextlib.asynccontextmanager
async def langgraph_graph() -> AsyncIterator[tuple[object, list[object]]]:
    agent = create_agent(_Model(responses=[]), [shell])
    nodes = [n.bound for n in agent.nodes.values() if isinstance(n.bound, ToolNode)]
    yield agent, [agent, *nodes]


def _pay() -> Any:
    @function_tool
    def pay(amount: float) -> str:
        """Pay an amount."""
        return str(amount)

    return pay


@contextlib.asynccontextmanager
async def openai_function_tool() -> AsyncIterator[tuple[object, list[object]]]:
    fresh = _pay()
    yield fresh, [fresh]


@contextlib.asynccontextmanager
async def openai_agent() -> AsyncIterator[tuple[object, list[object]]]:
    agent: Agent[Any] = Agent(name="payer", tools=[_pay()])
    yield agent, [agent, *agent.tools]


def _server() -> MCPServer:
    server = MCPServer("detach")

    @server.tool()
    def echo(text: str) -> str:
        """Echo."""
        return text

    return server


@contextlib.asynccontextmanager
async def mcp_server() -> AsyncIterator[tuple[object, list[object]]]:
    server = _server()
    yield server, [server, server._lowlevel_server]


@contextlib.asynccontextmanager
async def mcp_lowlevel_server() -> AsyncIterator[tuple[object, list[object]]]:
    lowlevel = _server()._lowlevel_server
    yield lowlevel, [lowlevel]


@contextlib.asynccontextmanager
async def mcp_client_session() -> AsyncIterator[tuple[object, list[object]]]:
    async with Client(_server()) as client:
        yield client.session, [client.session]


def _model_client(make: Callable[[], object]) -> Subject:
    @contextlib.asynccontextmanager
    async def subject() -> AsyncIterator[tuple[object, list[object]]]:
        client = make()
        yield client, [client]

    return subject


def _openai(asynchronous: bool) -> object:
    from openai import AsyncOpenAI, OpenAI

    return (AsyncOpenAI if asynchronous else OpenAI)(api_key="sk-fake")


def _anthropic(asynchronous: bool) -> object:
    from anthropic import Anthropic, AsyncAnthropic

    return (AsyncAnthropic if asynchronous else Anthropic)(api_key="sk-fake")


def _adk_callback(tool: Any, args: Any, tool_context: Any) -> None:
    return None


@contextlib.asynccontextmanager
async def adk_agent() -> AsyncIterator[tuple[object, list[object]]]:
    def lookup(query: str) -> str:
        """Look something up."""
        return query

    # One callback of the user's already set (a single one, not a list): kept as it was.
    agent = LlmAgent(
        name="bot", model="gemini-2.5-flash", tools=[lookup], before_tool_callback=_adk_callback
    )
    yield agent, [agent]


@contextlib.asynccontextmanager
async def pydantic_ai_agent() -> AsyncIterator[tuple[object, list[object]]]:
    agent: PydanticAgent[None, str] = PydanticAgent(TestModel())

    @agent.tool_plain
    def pay(amount: float) -> str:
        """Pay an amount."""
        return str(amount)

    yield agent, [agent]


class _SmolPay(SmolTool):
    name = "pay"
    description = "Pay an amount."
    inputs = {"amount": {"type": "number", "description": "How much."}}  # noqa: RUF012
    output_type = "string"

    def forward(self, amount: float) -> str:
        return str(amount)


def _smol_pay() -> Any:
    return _SmolPay()


@contextlib.asynccontextmanager
async def smolagents_tool() -> AsyncIterator[tuple[object, list[object]]]:
    fresh = _smol_pay()
    yield fresh, [fresh]


@contextlib.asynccontextmanager
async def smolagents_agent() -> AsyncIterator[tuple[object, list[object]]]:
    helper = ToolCallingAgent(
        tools=[_smol_pay()], model=SmolModel(), name="helper", description="Helps."
    )
    agent = ToolCallingAgent(tools=[_smol_pay()], model=SmolModel(), managed_agents=[helper])
    tools = [t for a in (agent, helper) for t in a.tools.values() if t.name != "final_answer"]
    yield agent, [agent, helper, *tools]


def _autogen_tool() -> FunctionTool:
    def pay(amount: float) -> str:
        """Pay an amount."""
        return str(amount)

    return FunctionTool(pay, description="Pay an amount.")


@contextlib.asynccontextmanager
async def autogen_tool() -> AsyncIterator[tuple[object, list[object]]]:
    fresh = _autogen_tool()
    yield fresh, [fresh]


@contextlib.asynccontextmanager
async def autogen_agent() -> AsyncIterator[tuple[object, list[object]]]:
    info = ModelInfo(
        vision=False,
        function_calling=True,
        json_output=False,
        family=ModelFamily.UNKNOWN,
        structured_output=False,
    )
    agent = AssistantAgent(
        "payer", ReplayChatCompletionClient([], model_info=info), tools=[_autogen_tool()]
    )
    yield agent, [agent, *agent._workbench]


@contextlib.asynccontextmanager
async def llama_index_tool() -> AsyncIterator[tuple[object, list[object]]]:
    def pay(amount: float) -> str:
        """Pay an amount."""
        return str(amount)

    fresh = LlamaFunctionTool.from_defaults(pay)
    yield fresh, [fresh]


@contextlib.asynccontextmanager
async def llama_index_llm() -> AsyncIterator[tuple[object, list[object]]]:
    llm = MockFunctionCallingLLM()
    yield llm, [llm]


@contextlib.asynccontextmanager
async def llama_index_agent() -> AsyncIterator[tuple[object, list[object]]]:
    from llama_index.core.agent.workflow import FunctionAgent

    def pay(amount: float) -> str:
        """Pay an amount."""
        return str(amount)

    agent = FunctionAgent(
        tools=[LlamaFunctionTool.from_defaults(pay)], llm=MockFunctionCallingLLM()
    )
    yield agent, [agent, *agent.tools]


#: adapter framework name → how to make what it guards
SUBJECTS: dict[str, Subject] = {
    "autogen": autogen_tool,
    "autogen-agent": autogen_agent,
    "llama-index": llama_index_tool,
    "llama-index-llm": llama_index_llm,
    "llama-index-agent": llama_index_agent,
    "openai": _model_client(lambda: _openai(False)),
    "openai-async": _model_client(lambda: _openai(True)),
    "anthropic": _model_client(lambda: _anthropic(False)),
    "anthropic-async": _model_client(lambda: _anthropic(True)),
    "langchain": langchain_tool,
    "langgraph": langgraph_tool_node,
    "langgraph-graph": langgraph_graph,
    "openai-agents": openai_function_tool,
    "openai-agents-agent": openai_agent,
    "mcp server": mcp_server,
    "mcp lowlevel server": mcp_lowlevel_server,
    "mcp client": mcp_client_session,
    "google-adk": adk_agent,
    "pydantic-ai": pydantic_ai_agent,
    "smolagents": smolagents_tool,
    "smolagents-agent": smolagents_agent,
}


def _state(parts: list[object]) -> list[dict[str, int]]:
    """Each part's attributes, by the identity of what they hold."""
    return [{name: id(value) for name, value in vars(part).items()} for part in parts]


def _values(parts: list[object]) -> list[dict[str, object]]:
    return [dict(vars(part)) for part in parts]  # keeps the objects alive for the ids


def test_every_registered_adapter_is_in_the_detach_test() -> None:
    registered = {adapter.framework for adapter in registry.registered()}
    assert registered == set(SUBJECTS)


@pytest.mark.parametrize("framework", sorted(SUBJECTS))
async def test_detach_leaves_everything_attach_touched_exactly_as_it_was(framework: str) -> None:
    guard = Guard(POLICY)
    async with SUBJECTS[framework]() as (obj, parts):
        adapter = base.adapter_for(obj)
        assert adapter.framework == framework
        held = _values(parts)
        before = _state(parts)
        guard.attach(obj)
        during = _state(parts)
        assert during != before  # attaching changed something ...
        guard.attach(obj)
        assert _state(parts) == during  # ... and attaching again nothing more
        guard.detach(obj)
        assert _state(parts) == before  # ... which detach put back, object for object
        guard.detach(obj)  # detaching twice changes nothing
        assert _state(parts) == before
        guard.attach(obj)  # and it can be guarded again
        guard.detach(obj)
        assert _state(parts) == before
        del held


@pytest.mark.parametrize("framework", sorted(SUBJECTS))
async def test_coverage_follows_attach_and_detach_for_this_guard_only(framework: str) -> None:
    guard, other = Guard(POLICY), Guard(POLICY)
    async with SUBJECTS[framework]() as (obj, _):

        def guarded(by: Guard) -> list[bool]:
            coverage = by.coverage(obj)
            if coverage.tools:
                return [binding.guarded for binding in coverage.tools]
            # A model client: its model endpoints (its side doors are never guarded).
            return [binding.guarded for binding in coverage.llms if binding.callable]

        assert guarded(guard) and not any(guarded(guard))  # tools seen, none guarded
        guard.attach(obj)
        assert all(guarded(guard))
        assert not any(guarded(other))  # guarded, but not by that guard
        guard.detach(obj)
        assert not any(guarded(guard))
