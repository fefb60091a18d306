"""``guard.coverage(obj)``: the tools (and, for the OpenAI Agents SDK, the model) an
adapter sees on a framework object, where each lives, and whether its calls pass this
guard — however it was guarded: ``attach``, a guarded copy, or middleware composed
into a ``create_agent`` graph. The shared attach/detach round trip over every adapter
is in ``test_detach.py``; these are the cases particular to each."""

from __future__ import annotations

from typing import Any

import pytest

pytest.importorskip("langchain")
pytest.importorskip("agents")
pytest.importorskip("mcp")

from agents import Agent, WebSearchTool, function_tool
from agents.mcp import MCPServer as AgentsMCPServer
from langchain.agents import create_agent
from langchain_core.language_models.fake_chat_models import FakeMessagesListChatModel
from langchain_core.tools import tool
from langgraph.prebuilt import ToolNode
from mcp.server.mcpserver import MCPServer

from interlock import Guard
from interlock.adapters import Coverage
from interlock.adapters.langchain import InterlockMiddleware, guard_tool, guarded_tool_node
from interlock.adapters.openai_agents import GuardedModel
from interlock.adapters.openai_agents import guard_tools as openai_guard_tools

from .conformance import POLICY


class _Model(FakeMessagesListChatModel):
    def bind_tools(self, tools: Any, **kwargs: Any) -> Any:
        return self


@tool
def shell(command: str) -> str:
    """Run a shell command."""
    return command


@tool
def read_file(path: str) -> str:
    """Read a file."""
    return path


def guarded_names(coverage: Coverage) -> dict[str, bool]:
    return {binding.name: binding.guarded for binding in coverage.tools}


# -- LangChain / LangGraph ----------------------------------------------------------------


def test_a_create_agent_graph_with_the_middleware_is_covered_by_its_guard_only() -> None:
    guard, other = Guard(POLICY), Guard(POLICY)
    agent = create_agent(
        _Model(responses=[]),
        [shell, read_file],
        middleware=[InterlockMiddleware(guard, models=True)],
    )
    coverage = guard.coverage(agent)
    assert guarded_names(coverage) == {"shell": True, "read_file": True}
    assert coverage.unguarded == []
    assert other.coverage(agent).unguarded == ["shell", "read_file", "model:_Model"]


def test_a_create_agent_model_is_named_unless_the_middleware_gates_it() -> None:
    guard = Guard(POLICY)  # no store: the middleware gates tool calls only
    agent = create_agent(_Model(responses=[]), [shell], middleware=[InterlockMiddleware(guard)])
    coverage = guard.coverage(agent)
    assert coverage.unguarded == ["model:_Model"]
    assert "model _Model: NOT guarded (its calls are not judged" in str(coverage)


def test_a_graph_node_that_is_not_a_tool_node_is_named() -> None:
    from langgraph.graph import END, START, MessagesState, StateGraph

    graph = StateGraph(MessagesState)
    graph.add_node("direct", lambda state: {})
    graph.add_node("tools", guarded_tool_node([shell], Guard(POLICY)))
    graph.add_edge(START, "direct")
    graph.add_edge("direct", "tools")
    graph.add_edge("tools", END)
    compiled = graph.compile()
    guard = Guard(POLICY)
    guard.attach(compiled)
    assert guard.coverage(compiled).unguarded == ["node:direct"]
    assert "what it runs directly is not judged" in str(guard.coverage(compiled))


def test_the_middleware_is_found_among_other_middleware() -> None:
    from langchain.agents.middleware import AgentMiddleware

    class Logging(AgentMiddleware):
        def wrap_tool_call(self, request: Any, handler: Any) -> Any:
            return handler(request)

        async def awrap_tool_call(self, request: Any, handler: Any) -> Any:
            return await handler(request)

    guard = Guard(POLICY)
    for middleware in (
        [Logging(), InterlockMiddleware(guard)],
        [InterlockMiddleware(guard), Logging()],
    ):
        agent = create_agent(_Model(responses=[]), [shell], middleware=middleware)
        assert guard.coverage(agent).unguarded == ["model:_Model"]  # no store: tools only
    plain = create_agent(_Model(responses=[]), [shell], middleware=[Logging()])
    assert guard.coverage(plain).unguarded == ["shell", "model:_Model"]


def test_a_graph_with_one_guarded_copy_names_the_tool_left_unguarded() -> None:
    guard = Guard(POLICY)
    agent = create_agent(_Model(responses=[]), [shell, guard_tool(read_file, guard)])
    coverage = guard.coverage(agent)
    assert coverage.unguarded == ["shell", "model:_Model"]
    assert "tool shell: NOT guarded" in str(coverage)
    assert "tool read_file: guarded" in str(coverage)


def test_a_tool_node_binding_says_where_the_tool_lives_and_what_it_takes() -> None:
    guard = Guard(POLICY)
    node = guarded_tool_node([shell], guard)
    (binding,) = guard.coverage(node).tools
    assert binding.guarded
    assert binding.container is node.tools_by_name and binding.key == "shell"
    assert binding.description == "Run a shell command."
    assert binding.schema is not None and binding.schema["required"] == ["command"]
    assert binding.callable is shell.func  # the body that runs
    assert guard.coverage(ToolNode([shell])).unguarded == ["shell"]


def test_a_tool_binding_lives_at_its_patch_point() -> None:
    guard = Guard(POLICY)
    copy = guard_tool(shell, guard)
    (binding,) = guard.coverage(copy).tools
    assert (binding.owner, binding.attr, binding.guarded) == (copy, "run", True)
    assert not guard.coverage(shell).tools[0].guarded  # the original is untouched
    assert guard.coverage(copy).models_inspected is False
    assert "model calls are not inspected" in str(guard.coverage(copy))


# -- OpenAI Agents SDK --------------------------------------------------------------------


def _pay() -> Any:
    @function_tool
    def pay(amount: float) -> str:
        """Pay an amount."""
        return str(amount)

    return pay


def test_an_agent_with_guarded_copies_and_a_guarded_model_is_covered() -> None:
    from agents.models.openai_responses import OpenAIResponsesModel

    guard = Guard(POLICY)
    model = GuardedModel(OpenAIResponsesModel("gpt-4.1-mini", openai_client=None), guard)  # type: ignore[arg-type]
    agent: Agent[Any] = Agent(name="payer", model=model, tools=openai_guard_tools([_pay()], guard))
    coverage = guard.coverage(agent)
    assert coverage.unguarded == []
    ((tool_binding), (model_binding)) = (coverage.tools[0], coverage.llms[0])
    assert (tool_binding.name, tool_binding.container, tool_binding.key) == ("pay", agent.tools, 0)
    assert tool_binding.schema is not None and "amount" in tool_binding.schema["properties"]
    assert (model_binding.label, model_binding.guarded) == ("gpt-4.1-mini", True)


def test_hosted_tools_string_models_and_mcp_servers_are_reported_as_they_are() -> None:
    guard = Guard(POLICY)
    agent: Agent[Any] = Agent(name="searcher", model="gpt-4.1", tools=[_pay(), WebSearchTool()])
    coverage = guard.coverage(agent)
    assert coverage.unguarded == ["pay", "web_search", "model:gpt-4.1"]
    hosted = coverage.tools[1]
    assert hosted.callable is None and "nothing in this process can gate it" in (hosted.note or "")
    assert "GuardedModelProvider" in (coverage.llms[0].note or "")

    class _Server(AgentsMCPServer):  # the tools it lists arrive at run time
        name = "files"  # type: ignore[assignment]

        async def connect(self) -> None: ...
        async def cleanup(self) -> None: ...
        async def list_tools(self, *args: Any, **kwargs: Any) -> list[Any]:
            return []

        async def call_tool(self, *args: Any, **kwargs: Any) -> Any: ...
        async def list_prompts(self) -> Any: ...
        async def get_prompt(self, *args: Any, **kwargs: Any) -> Any: ...

    with_mcp: Agent[Any] = Agent(name="ops", tools=[_pay()], mcp_servers=[_Server()])
    assert guard.coverage(with_mcp).unguarded[:2] == ["pay", "mcp:files"]
    guard.attach(with_mcp)
    assert [b.guarded for b in guard.coverage(with_mcp).tools] == [True, True]
    guard.detach(with_mcp)


# -- MCP ----------------------------------------------------------------------------------


def test_an_mcp_server_lists_its_registered_tools_guarded_only_with_both_gates() -> None:
    server = MCPServer("cover")

    @server.tool()
    def echo(text: str) -> str:
        """Echo the text."""
        return text

    guard = Guard(POLICY)
    (binding,) = guard.coverage(server).tools
    assert (binding.name, binding.description, binding.guarded) == ("echo", "Echo the text.", False)
    assert binding.schema is not None and binding.schema["required"] == ["text"]
    assert binding.callable is echo and (binding.owner, binding.attr) == (server, "call_tool")
    guard.attach(server)
    assert guard.coverage(server).unguarded == []
    # the low-level gate alone is not the whole server: call_tool would pass unjudged
    guard.detach(server)
    guard.attach(server._lowlevel_server)
    assert guard.coverage(server).unguarded == ["echo"]
    assert guard.coverage(server._lowlevel_server).unguarded == []
    guard.detach(server._lowlevel_server)
