"""The Google ADK adapter, driven through real ``Runner`` loops with a fake model."""

from __future__ import annotations

import os

import pytest

pytest.importorskip("google.adk")

# Nothing here may call out: no key that works (and no OpenTelemetry exporter is
# configured, so ADK's spans go nowhere; OTEL_SDK_DISABLED is not set here: set at
# import, it would turn the SDK off for every test of the run, tests/otel's included).
os.environ.setdefault("GOOGLE_API_KEY", "offline-test-key")

import asyncio
import sys
import threading
from collections.abc import AsyncGenerator, Callable
from importlib import metadata
from pathlib import Path
from typing import Any

from google.adk.agents import LlmAgent
from google.adk.agents.run_config import RunConfig, StreamingMode
from google.adk.apps import App
from google.adk.models import BaseLlm, LlmRequest, LlmResponse
from google.adk.plugins import BasePlugin
from google.adk.runners import InMemoryRunner
from google.adk.tools import AgentTool, FunctionTool, LongRunningFunctionTool, google_search
from google.adk.tools.tool_context import ToolContext
from google.genai import types
from packaging.version import Version
from pydantic import Field

from interlock import Decision, Guard, Verdict, load_policy_text
from interlock import Usage as Tokens
from interlock.adapters import base
from interlock.adapters.google_adk import (
    ADAPTER,
    AgentAdapter,
    InterlockPlugin,
    guard_agent,
    refusal_of,
    unguard_agent,
    usage_of,
)

from .conformance import (
    CANCELLATION,
    POLICY,
    POLICY_YAML,
    ROWS,
    STORE_UNREACHABLE,
    Row,
    approve_when_pending,
    assert_cancellation_never_runs,
    make_guard,
)

#: Runner.run (sync) re-raises what the run raised from google-adk 2.8 on.
SYNC_RUN_RERAISES = Version(metadata.version("google-adk")) >= Version("2.8")

# -- a scripted model: real Runner loops, nothing behind them --------------------------


def usage(tokens_in: int, tokens_out: int) -> types.GenerateContentResponseUsageMetadata:
    return types.GenerateContentResponseUsageMetadata(
        prompt_token_count=tokens_in,
        candidates_token_count=tokens_out,
        total_token_count=tokens_in + tokens_out,
    )


def calls(*wanted: tuple[str, dict[str, Any]], tokens: tuple[int, int] = (10, 5)) -> LlmResponse:
    """One model turn asking for ``wanted`` at once (ids ``call-1``, ``call-2``, ...)."""
    parts = [
        types.Part(function_call=types.FunctionCall(id=f"call-{i}", name=name, args=args))
        for i, (name, args) in enumerate(wanted, 1)
    ]
    return LlmResponse(
        content=types.Content(role="model", parts=parts), usage_metadata=usage(*tokens)
    )


def answer(text: str, tokens: tuple[int, int] = (10, 5)) -> LlmResponse:
    return LlmResponse(
        content=types.Content(role="model", parts=[types.Part(text=text)]),
        usage_metadata=usage(*tokens),
    )


class FakeLlm(BaseLlm):
    """Answers each call with the next scripted turn; streamed (``stream=True``), as
    two fragments then the whole turn, with usage on the last only. ``fail``: raise."""

    turns: list[LlmResponse] = Field(default_factory=list)
    requests: list[LlmRequest] = Field(default_factory=list)
    fail: bool = False

    async def generate_content_async(
        self, llm_request: LlmRequest, stream: bool = False
    ) -> AsyncGenerator[LlmResponse, None]:
        self.requests.append(llm_request)
        if self.fail:
            raise RuntimeError("provider down")
        turn = self.turns.pop(0)
        if stream:
            for _ in range(2):
                yield LlmResponse(content=types.Content(role="model", parts=[]), partial=True)
        yield turn


def fake(*turns: LlmResponse, fail: bool = False) -> FakeLlm:
    return FakeLlm(model="fake-model", turns=list(turns), requests=[], fail=fail)


class Bodies:
    """The tools of the table, recording every body that ran and on which thread."""

    def __init__(self) -> None:
        self.ran: list[tuple[str, Any]] = []
        self.threads: set[int] = set()
        self._lock = threading.Lock()
        bodies = self

        def shell(command: str) -> str:
            """Run a shell command."""
            bodies._record("shell", command)
            return f"ran {command}"

        def pay(amount: float) -> str:
            """Pay an amount."""
            bodies._record("pay", amount)
            return f"paid {amount}"

        self.shell = shell
        self.pay = pay

    def _record(self, name: str, value: Any) -> None:
        with self._lock:
            self.ran.append((name, value))
            self.threads.add(threading.get_ident())


def make_runner(agent: LlmAgent, *plugins: BasePlugin) -> InMemoryRunner:
    """A runner for ``agent`` with ``plugins`` (through an ``App``, as ADK asks)."""
    return InMemoryRunner(app=App(name="interlock_test", root_agent=agent, plugins=list(plugins)))


def message(text: str = "go") -> types.Content:
    return types.Content(role="user", parts=[types.Part(text=text)])


async def arun(
    runner: InMemoryRunner, text: str = "go", *, stream: bool = False, session: str | None = None
) -> list[Any]:
    if session is None:
        created = await runner.session_service.create_session(app_name=runner.app_name, user_id="u")
        session = created.id
    config = RunConfig(streaming_mode=StreamingMode.SSE if stream else StreamingMode.NONE)
    return [
        event
        async for event in runner.run_async(
            user_id="u", session_id=session, new_message=message(text), run_config=config
        )
    ]


def run(runner: InMemoryRunner, mode: str, text: str = "go") -> list[Any]:
    if mode == "async":
        return asyncio.run(arun(runner, text))
    if mode == "stream":
        return asyncio.run(arun(runner, text, stream=True))
    session = asyncio.run(
        runner.session_service.create_session(app_name=runner.app_name, user_id="u")
    )
    return list(runner.run(user_id="u", session_id=session.id, new_message=message(text)))


def responses(events: list[Any]) -> list[dict[str, Any]]:
    """The function responses the model was given, in order."""
    return [
        dict(part.function_response.response or {})
        for event in events
        if event.content
        for part in event.content.parts or []
        if part.function_response is not None
    ]


def final_text(events: list[Any]) -> str:
    texts = [p.text for e in events if e.content for p in e.content.parts or [] if p.text]
    return texts[-1] if texts else ""


def agent_for(row: Row, bodies: Bodies, **options: Any) -> tuple[LlmAgent, FakeLlm]:
    model = fake(calls((row.tool, row.args), (row.tool, row.args)), answer("done"))
    agent = LlmAgent(name="bot", model=model, tools=[bodies.shell, bodies.pay])
    return agent, model


def plugin_runner(row: Row, bodies: Bodies, refusal: str) -> InMemoryRunner:
    agent, _ = agent_for(row, bodies)
    plugin = InterlockPlugin(
        make_guard(row),
        refusal=refusal,  # type: ignore[arg-type]
        mapper=row.mapper,
        models=row.store_gone,  # the table's policy names no model
    )
    return make_runner(agent, plugin)


def callback_runner(row: Row, bodies: Bodies, refusal: str) -> InMemoryRunner:
    agent, _ = agent_for(row, bodies)
    guard_agent(
        agent,
        make_guard(row),
        refusal=refusal,  # type: ignore[arg-type]
        mapper=row.mapper,
        models=row.store_gone,
    )
    return make_runner(agent)


RUNNERS: dict[str, Callable[[Row, Bodies, str], InMemoryRunner]] = {
    "plugin": plugin_runner,
    "agent callbacks": callback_runner,
}
ids = [row.behaviour for row in ROWS]


# -- the verdict table: both ways in, both styles, sync and async, two parallel calls ----


@pytest.mark.parametrize("mode", ["sync", "async", "stream"])
@pytest.mark.parametrize("way", sorted(RUNNERS))
@pytest.mark.parametrize("row", [*ROWS, STORE_UNREACHABLE], ids=[*ids, "store unreachable"])
def test_message_style_runs_only_on_allow_and_the_model_reads_the_refusal(
    row: Row, way: str, mode: str
) -> None:
    bodies = Bodies()
    events = run(RUNNERS[way](row, bodies, "message"), mode)
    if row.store_gone:
        # Model calls are judged too: the first is refused the same way, before any tool.
        assert bodies.ran == []
        assert row.says in final_text(events)
        return
    answered = responses(events)
    assert len(answered) == 2
    if row.runs:
        assert len(bodies.ran) == 2
        assert all(r.get("result", "").startswith(("ran", "paid")) for r in answered)
    else:
        assert bodies.ran == []
        assert all(row.says in r["error"] for r in answered)
        assert all(r["interlock"] == row.verdict.value for r in answered)  # type: ignore[union-attr]
    assert final_text(events) == "done"  # the loop went on


@pytest.mark.parametrize("mode", ["sync", "async"])
@pytest.mark.parametrize("way", sorted(RUNNERS))
@pytest.mark.parametrize("row", [*ROWS, STORE_UNREACHABLE], ids=[*ids, "store unreachable"])
def test_raise_style_runs_only_on_allow_and_the_refusal_propagates(
    row: Row, way: str, mode: str
) -> None:
    bodies = Bodies()
    runner = RUNNERS[way](row, bodies, "raise")
    if mode == "sync" and row.error is not None and not SYNC_RUN_RERAISES:
        # ADK before 2.8 ends Runner.run quietly on any error (it logs it): the body
        # still never runs, but nothing reaches the caller.
        run(runner, mode)
        assert bodies.ran == []
        return
    if row.error is None:
        assert final_text(run(runner, mode)) == "done"
        assert len(bodies.ran) == 2
        return
    with pytest.raises(Exception) as caught:
        run(runner, mode)
    assert bodies.ran == []
    refusal = refusal_of(caught.value)
    assert isinstance(refusal, row.error)
    assert refusal.decision.verdict is row.verdict
    if way == "agent callbacks":
        assert caught.value is refusal  # an agent callback's exception comes out as it is
    else:
        assert isinstance(caught.value, RuntimeError)  # ADK wraps a plugin's exception


def test_sync_tool_bodies_run_in_adk_worker_threads_when_configured() -> None:
    bodies = Bodies()
    events = run(plugin_runner(ROWS[0], bodies, "message"), "async")
    assert len(bodies.ran) == 2 and final_text(events) == "done"


# -- cancellation -------------------------------------------------------------------------


@pytest.mark.parametrize("way", ["plugin", "agent callbacks"])
async def test_a_run_cancelled_while_the_call_is_judged_never_runs_the_body(way: str) -> None:
    bodies = Bodies()

    async def call(guard: Guard) -> Any:
        agent = LlmAgent(
            name="bot",
            model=fake(calls((CANCELLATION.tool, CANCELLATION.args)), answer("done")),
            tools=[bodies.shell],
        )
        if way == "plugin":
            runner = make_runner(agent, InterlockPlugin(guard, models=False))
        else:
            runner = make_runner(guard_agent(agent, guard, models=False))
        return await arun(runner)

    await assert_cancellation_never_runs(call, lambda: len(bodies.ran))


# -- ordering: plugins first; no agent callback can un-deny --------------------------------


def test_an_agent_callback_cannot_run_a_call_the_plugin_refused() -> None:
    bodies = Bodies()
    seen: list[str] = []

    def user_callback(tool: Any, args: dict[str, Any], tool_context: Any) -> None:
        seen.append(tool.name)  # it would let anything through ...

    model = fake(calls(("shell", {"command": "rm -rf /"})), answer("done"))
    agent = LlmAgent(
        name="bot", model=model, tools=[bodies.shell], before_tool_callback=user_callback
    )
    runner = make_runner(agent, InterlockPlugin(Guard(POLICY), models=False))
    events = run(runner, "async")
    assert bodies.ran == [] and seen == []  # ... and never ran: the plugin answered first
    assert "no recursive deletes" in responses(events)[0]["error"]


def test_the_agent_gate_runs_after_the_users_callbacks_and_judges_what_the_tool_receives() -> None:
    bodies = Bodies()

    def rewrite(tool: Any, args: dict[str, Any], tool_context: Any) -> None:
        args["command"] = "rm -rf /"  # an allowed call rewritten in place

    model = fake(calls(("shell", {"command": "ls"})), answer("done"))
    agent = LlmAgent(name="bot", model=model, tools=[bodies.shell], before_tool_callback=rewrite)
    guard = Guard(POLICY)
    guard_agent(agent, guard, refusal="message", models=False)
    assert agent.before_tool_callback[0] is rewrite  # type: ignore[index]
    # With the plugin too: the plugin allowed "ls"; the agent gate sees the rewrite.
    runner = make_runner(agent, InterlockPlugin(guard, models=False))
    events = run(runner, "async")
    assert bodies.ran == []
    assert "no recursive deletes" in responses(events)[0]["error"]


def test_a_plugin_allowed_call_is_judged_once_when_the_agent_gate_sees_it_unchanged() -> None:
    seen: list[Decision] = []
    guard = Guard(POLICY, on_decision=lambda d, *_: seen.append(d))
    bodies = Bodies()
    model = fake(calls(("shell", {"command": "ls"})), answer("done"))
    agent = guard_agent(
        LlmAgent(name="bot", model=model, tools=[bodies.shell]), guard, models=False
    )
    run(make_runner(agent, InterlockPlugin(guard, models=False)), "async")
    assert bodies.ran == [("shell", "ls")]
    assert [d.verdict for d in seen] == [Verdict.ALLOW]


@pytest.mark.parametrize("way", ["plugin", "agent callbacks", "both"])
def test_the_same_call_made_twice_is_judged_twice(way: str) -> None:
    seen: list[Decision] = []
    guard = Guard(POLICY, on_decision=lambda d, *_: seen.append(d))
    bodies = Bodies()
    ls = ("shell", {"command": "ls"})
    agent = LlmAgent(
        name="bot", model=fake(calls(ls), calls(ls), answer("done")), tools=[bodies.shell]
    )
    plugins = [] if way == "agent callbacks" else [InterlockPlugin(guard, models=False)]
    if way != "plugin":
        guard_agent(agent, guard, models=False)
    run(make_runner(agent, *plugins), "async")
    assert bodies.ran == [("shell", "ls")] * 2
    assert [d.verdict for d in seen] == [Verdict.ALLOW] * 2  # once per call, never skipped


# -- side doors: every public way to run a guarded tool ----------------------------------


class OtherPlugin(BasePlugin):
    """A plugin registered before ours that answers every tool call itself."""

    def __init__(self) -> None:
        super().__init__(name="first")

    async def before_tool_callback(self, **_: Any) -> dict[str, Any]:
        return {"result": "cached"}


def _tool_context(runner: InMemoryRunner) -> ToolContext:
    from google.adk.agents.invocation_context import InvocationContext
    from google.adk.sessions import Session

    invocation = InvocationContext(
        session_service=runner.session_service,
        invocation_id="direct",
        agent=runner.agent,
        session=Session(id="s", app_name=runner.app_name, user_id="u"),
        plugin_manager=runner.plugin_manager,
    )
    return ToolContext(invocation, function_call_id="direct-1")


def bypass_table(
    bodies: Bodies, guard: Guard, command: str = "rm -rf /"
) -> dict[str, tuple[Callable[[], Any], bool]]:
    """entry point → (how to reach the body with ``command``, whether it is gated)."""
    args = {"command": command}

    def agent(*tools: Any, **fields: Any) -> LlmAgent:
        model = fake(calls(("shell", args)), answer("done"))
        return LlmAgent(name="bot", model=model, tools=list(tools) or [bodies.shell], **fields)

    def plugin_run(**fields: Any) -> Any:
        return run(make_runner(agent(**fields), InterlockPlugin(guard)), "async")

    def agent_tool(include_plugins: bool) -> Any:
        inner = agent()
        outer = LlmAgent(
            name="outer",
            model=fake(calls(("bot", {"request": "go"})), answer("done")),
            tools=[AgentTool(inner, include_plugins=include_plugins)],
        )
        return run(make_runner(outer, InterlockPlugin(guard)), "async")

    def direct_run_async() -> Any:
        runner = make_runner(agent(), InterlockPlugin(guard))
        return asyncio.run(
            FunctionTool(bodies.shell).run_async(args=args, tool_context=_tool_context(runner))
        )

    def sub_agent() -> Any:
        child = agent()
        parent = LlmAgent(
            name="parent",
            model=fake(calls(("transfer_to_agent", {"agent_name": "bot"}))),
            sub_agents=[child],
        )
        return run(make_runner(parent, InterlockPlugin(guard)), "async")

    return {
        "Runner.run_async + plugin": (plugin_run, True),
        "Runner.run + plugin": (
            lambda: run(make_runner(agent(), InterlockPlugin(guard)), "sync"),
            True,
        ),
        "SSE streaming + plugin": (
            lambda: run(make_runner(agent(), InterlockPlugin(guard)), "stream"),
            True,
        ),
        "FunctionTool(fn) in tools + plugin": (
            lambda: run(
                make_runner(agent(FunctionTool(bodies.shell)), InterlockPlugin(guard)),
                "async",
            ),
            True,
        ),
        "long-running tool + plugin": (
            lambda: run(
                make_runner(agent(LongRunningFunctionTool(bodies.shell)), InterlockPlugin(guard)),
                "async",
            ),
            True,
        ),
        "sub-agent after transfer + plugin": (sub_agent, True),
        "AgentTool (include_plugins=True) + plugin": (lambda: agent_tool(True), True),
        "guard_agent, no plugin": (
            lambda: run(make_runner(guard_agent(agent(), guard, refusal="message")), "async"),
            True,
        ),
        "an earlier plugin answers the call": (
            lambda: run(
                make_runner(agent(), OtherPlugin(), InterlockPlugin(guard)),
                "async",
            ),
            True,  # it answered instead of the tool: the body never ran either
        ),
        # The documented boundaries: nothing in the runner's path is asked.
        "AgentTool (include_plugins=False) + plugin": (lambda: agent_tool(False), False),
        "FunctionTool.run_async called directly": (direct_run_async, False),
        "the function itself": (lambda: bodies.shell(**args), False),
    }


#: The table's policy, and the agent as a tool and the transfer to a sub-agent allowed:
#: what then runs inside them is what each row is about.
BYPASS_POLICY = load_policy_text(
    POLICY_YAML
    + """
  - id: delegate
    decision: allow
    reason: the agent as a tool
    name: bot
  - id: transfer
    decision: allow
    reason: handing over
    name: transfer_to_agent
  - id: models
    decision: allow
    reason: the model may think
    kind: llm
"""
)
BYPASS = list(bypass_table(Bodies(), Guard(BYPASS_POLICY)))


@pytest.mark.parametrize("entry", BYPASS)
def test_bypass_table(entry: str) -> None:
    bodies = Bodies()
    call, gated = bypass_table(bodies, Guard(BYPASS_POLICY))[entry]
    call()
    if gated:
        assert bodies.ran == [], f"{entry} ran a denied call"
    else:  # the documented boundary: the body runs, nothing in the runner judged it
        assert bodies.ran == [("shell", "rm -rf /")]


@pytest.mark.parametrize("entry", [e for e in BYPASS if e != "an earlier plugin answers the call"])
def test_every_entry_point_runs_an_allowed_call_once(entry: str) -> None:
    bodies = Bodies()
    call, _ = bypass_table(bodies, Guard(BYPASS_POLICY), "ls")[entry]
    call()
    assert bodies.ran == [("shell", "ls")]  # so a refused row above was refused, not lost


def test_coverage_names_code_executors_and_unguarded_sub_agents() -> None:
    from google.adk.code_executors import BuiltInCodeExecutor

    guard = Guard(POLICY)
    child = LlmAgent(name="child", model=fake())
    agent = LlmAgent(
        name="bot", model=fake(), sub_agents=[child], code_executor=BuiltInCodeExecutor()
    )
    guard.attach(agent)
    assert guard.coverage(agent).unguarded == [
        "code_executor:BuiltInCodeExecutor",
        "sub_agent:child",
    ]
    guard.attach(child)
    assert guard.coverage(agent).unguarded == ["code_executor:BuiltInCodeExecutor"]
    assert guard.coverage(agent).llms[0].guarded


def test_a_tool_error_releases_the_tools_reservation(stateful_guard: Guard) -> None:
    def paid_lookup(query: str, est_cost: float) -> str:
        """Look something up (at a declared cost)."""
        raise ConnectionError("lookup service down")

    model = fake(calls(("paid_lookup", {"query": "q", "est_cost": 0.1})), answer("done"))
    agent = LlmAgent(name="bot", model=model, tools=[paid_lookup])
    with pytest.raises(ConnectionError):
        run(make_runner(agent, InterlockPlugin(stateful_guard)), "async")
    assert _budget(stateful_guard, "tool-spend") == (0, 0)


@pytest.mark.parametrize("command", ["ls", "rm -rf /"])
def test_an_mcp_toolsets_tools_are_judged_like_any_other(tmp_path: Path, command: str) -> None:
    mcp_tool = pytest.importorskip("google.adk.tools.mcp_tool")
    if not hasattr(mcp_tool, "McpToolset"):  # ADK's MCP support needs an mcp it can import
        pytest.skip("this google-adk cannot import the installed mcp")
    from mcp import StdioServerParameters

    import interlock

    log = tmp_path / "calls.jsonl"
    server = Path(__file__).parent / "mcp_servers" / "tools_server.py"
    params = StdioServerParameters(
        command=sys.executable,
        args=[str(server)],
        env={
            "PYTHONPATH": str(Path(interlock.__file__).resolve().parents[1]),
            "MCP_TEST_LOG": str(log),
        },
    )
    connection = mcp_tool.StdioConnectionParams(server_params=params, timeout=30)
    toolset = mcp_tool.McpToolset(connection_params=connection)
    model = fake(calls(("shell", {"command": command})), answer("done"))
    agent = LlmAgent(name="bot", model=model, tools=[toolset])

    async def go() -> list[Any]:
        try:
            return await arun(make_runner(agent, InterlockPlugin(Guard(POLICY), models=False)))
        finally:
            await toolset.close()

    events = asyncio.run(go())
    ran = log.read_text().splitlines() if log.exists() else []
    if command == "ls":
        assert len(ran) == 1  # the server's body ran, once
    else:
        assert ran == []
        assert "no recursive deletes" in responses(events)[0]["error"]


def test_a_server_side_tool_is_reported_unguarded_in_coverage() -> None:
    guard = Guard(POLICY)
    bodies = Bodies()
    agent = guard.attach(LlmAgent(name="bot", model=fake(), tools=[bodies.shell, google_search]))
    coverage = guard.coverage(agent)
    assert coverage.unguarded == ["google_search"]
    assert "model provider's side" in str(coverage)


# -- budgets: reserved before, committed from the real usage after -------------------------


def _budget(guard: Guard, budget_id: str) -> tuple[int, int]:
    """(spent, still reserved) on one budget."""
    assert guard.store is not None
    rows = guard.store.budget_rows(budget_id=budget_id)
    return (rows[0].spent, rows[0].reserved) if rows else (0, 0)


def paid_lookup(query: str, est_cost: float) -> str:
    """Look something up (at a declared cost)."""
    return "found"


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("way", ["plugin", "agent callbacks"])
def test_each_model_call_commits_its_real_usage_exactly_once(
    stateful_guard: Guard, stream: bool, way: str
) -> None:
    lookup = ("paid_lookup", {"query": "q", "est_cost": 0.1})
    model = fake(calls(lookup, tokens=(100, 20)), answer("done", tokens=(150, 30)))
    agent = LlmAgent(name="bot", model=model, tools=[paid_lookup])
    if way == "plugin":
        runner = make_runner(agent, InterlockPlugin(stateful_guard))
    else:
        runner = make_runner(guard_agent(agent, stateful_guard))
    events = asyncio.run(arun(runner, stream=stream))
    assert final_text(events) == "done"
    # The streamed fragments carry no usage; the whole turn does: committed once each.
    assert _budget(stateful_guard, "model-tokens") == (100 + 20 + 150 + 30, 0)
    spent, reserved = _budget(stateful_guard, "tool-spend")
    assert spent > 0 and reserved == 0  # the tool's declared cost, committed after it ran


def test_a_model_call_over_budget_never_reaches_the_model(stateful_guard: Guard) -> None:
    model = fake(answer("never"))
    plugin = InterlockPlugin(stateful_guard, estimate=lambda _: Tokens(2000, 0))
    events = run(make_runner(LlmAgent(name="bot", model=model), plugin), "async")
    assert model.requests == []
    assert "model-tokens" in final_text(events)
    assert _budget(stateful_guard, "model-tokens") == (0, 0)


class SlowEcho(BaseLlm):
    """Asks for one lookup, then answers; slow enough that concurrent runs interleave."""

    async def generate_content_async(
        self, llm_request: LlmRequest, stream: bool = False
    ) -> AsyncGenerator[LlmResponse, None]:
        await asyncio.sleep(0.02)
        last = llm_request.contents[-1]
        answered = any(part.function_response for part in last.parts or [])
        lookup = ("paid_lookup", {"query": "q", "est_cost": 0.1})
        yield answer("done", tokens=(50, 5)) if answered else calls(lookup, tokens=(40, 4))


def test_concurrent_runs_of_one_plugin_settle_each_call_once(stateful_guard: Guard) -> None:
    agent = LlmAgent(name="bot", model=SlowEcho(model="slow"), tools=[paid_lookup])
    runner = make_runner(agent, InterlockPlugin(stateful_guard))

    async def both() -> list[list[Any]]:
        return list(await asyncio.gather(arun(runner), arun(runner)))

    for events in asyncio.run(both()):
        assert final_text(events) == "done"
    # Each run's end sweeps its own holds only: no call of another run is released.
    assert _budget(stateful_guard, "model-tokens") == (2 * (44 + 55), 0)


class Rewriter(BasePlugin):
    """A plugin registered first that replaces every model response (no usage on it)."""

    def __init__(self) -> None:
        super().__init__(name="rewriter")

    async def after_model_callback(self, **_: Any) -> LlmResponse:
        return answer("rewritten", tokens=(0, 0)).model_copy(update={"usage_metadata": None})


@pytest.mark.skipif(
    Version(metadata.version("google-adk")) < Version("2.5"),
    reason="google-adk 2.0 does not call after_run_callback here (seen on 2.0; 2.5 does): "
    "the reservation is left to the ledger's reaper",
)
def test_a_model_call_whose_after_callback_another_plugin_took_is_charged_at_run_end(
    stateful_guard: Guard,
) -> None:
    agent = LlmAgent(name="bot", model=fake(answer("done", tokens=(30, 3))))
    events = run(make_runner(agent, Rewriter(), InterlockPlugin(stateful_guard)), "async")
    assert final_text(events) == "rewritten"
    spent, reserved = _budget(stateful_guard, "model-tokens")
    assert spent > 0 and reserved == 0  # charged what it reserved, never left open


@pytest.mark.parametrize("way", ["plugin", "agent callbacks"])
def test_a_failed_model_call_releases_its_reservation(stateful_guard: Guard, way: str) -> None:
    agent = LlmAgent(name="bot", model=fake(fail=True))
    if way == "plugin":
        runner = make_runner(agent, InterlockPlugin(stateful_guard))
    else:
        runner = make_runner(guard_agent(agent, stateful_guard))
    with pytest.raises(RuntimeError, match="provider down"):
        asyncio.run(arun(runner))
    assert _budget(stateful_guard, "model-tokens") == (0, 0)


def test_usage_of_reads_gemini_usage_metadata() -> None:
    metadata = types.GenerateContentResponseUsageMetadata(
        prompt_token_count=10, candidates_token_count=4, thoughts_token_count=3
    )
    assert (usage_of(metadata).input_tokens, usage_of(metadata).output_tokens) == (10, 7)  # type: ignore[union-attr]
    assert usage_of(None) is None
    assert usage_of(types.GenerateContentResponseUsageMetadata()) is None


# -- approvals ------------------------------------------------------------------------------


def test_waiting_for_an_approval_runs_the_call_once_approved(stateful_guard: Guard) -> None:
    wired: list[int] = []

    def wire(amount: int) -> str:
        """Wire money."""
        wired.append(amount)
        return "sent"

    model = fake(calls(("wire", {"amount": 5})), answer("done"))
    plugin = InterlockPlugin(stateful_guard, on_approval="wait", approval_timeout=10)
    runner = make_runner(LlmAgent(name="bot", model=model, tools=[wire]), plugin)
    supervisor = approve_when_pending(stateful_guard)
    events = asyncio.run(arun(runner))
    supervisor.join(5)
    assert wired == [5] and final_text(events) == "done"


def _confirmation_request(events: list[Any]) -> types.FunctionCall:
    for event in events:
        for call in event.get_function_calls():
            if call.name == "adk_request_confirmation":
                return call
    raise AssertionError("no confirmation was requested")


#: (decided in Interlock first, confirmed in ADK) → (the call runs, the approval's end
#: state, who decided it)
CONFIRMATIONS = {
    "ADK confirms": (None, True, True, "claimed", "adk-confirmation"),
    "ADK rejects": (None, False, False, "denied", "adk-confirmation"),
    "Interlock approved, ADK confirms": (True, True, True, "claimed", "supervisor"),
    "Interlock denied, ADK confirms": (False, True, False, "denied", "supervisor"),
    "Interlock approved, ADK rejects": (True, False, False, "claimed", "supervisor"),
}


@pytest.mark.parametrize("case", list(CONFIRMATIONS))
def test_adk_confirmation_and_the_interlock_approval_decide_together(
    stateful_guard: Guard, case: str
) -> None:
    interlock_first, confirmed, runs, status, decided_by = CONFIRMATIONS[case]
    wired: list[int] = []

    def wire(amount: int) -> str:
        """Wire money."""
        wired.append(amount)
        return "sent"

    model = fake(calls(("wire", {"amount": 5})), answer("asked"), answer("done"))
    plugin = InterlockPlugin(stateful_guard, on_approval="confirm")
    runner = make_runner(LlmAgent(name="bot", model=model, tools=[wire]), plugin)
    store = stateful_guard.store
    assert store is not None

    async def scenario() -> list[Any]:
        session = await runner.session_service.create_session(app_name=runner.app_name, user_id="u")
        first = [
            e
            async for e in runner.run_async(
                user_id="u", session_id=session.id, new_message=message()
            )
        ]
        request = _confirmation_request(first)
        assert wired == []  # paused: nothing ran
        (pending,) = store.list_approvals(status="pending")
        assert request.args["toolConfirmation"]["payload"] == {"interlock_approval": pending.id}
        if interlock_first is not None:  # a human decides in Interlock (its UI, the CLI)
            decide = store.approve if interlock_first else store.deny
            decide(pending.id, by="supervisor", reason="checked")
        reply = types.Content(
            role="user",
            parts=[
                types.Part(
                    function_response=types.FunctionResponse(
                        id=request.id, name=request.name, response={"confirmed": confirmed}
                    )
                )
            ],
        )
        return [
            e async for e in runner.run_async(user_id="u", session_id=session.id, new_message=reply)
        ]

    asyncio.run(scenario())
    assert wired == ([5] if runs else [])
    (record,) = store.list_approvals()
    assert (record.status, record.decided_by) == (status, decided_by)


# -- attach / detach, version range ----------------------------------------------------------


def test_attach_composes_with_the_users_callbacks_and_detach_restores_them_exactly() -> None:
    def mine(tool: Any, args: Any, tool_context: Any) -> None:
        return None

    theirs = [mine]
    agent = LlmAgent(
        name="bot", model=fake(), before_tool_callback=theirs, after_model_callback=mine
    )
    fields = [t.attr for t in ADAPTER.targets]
    held = {name: getattr(agent, name) for name in fields}
    guard = Guard(POLICY)
    assert guard.attach(agent) is agent
    assert agent.before_tool_callback[0] is mine and len(agent.before_tool_callback) == 2  # type: ignore[index]
    assert agent.after_model_callback[1] is mine  # type: ignore[index]
    assert theirs == [mine]  # the user's own list is not mutated
    guard.detach(agent)
    assert {name: getattr(agent, name) for name in fields} == held
    assert all(getattr(agent, name) is held[name] for name in fields)


def test_unguard_agent_takes_the_gate_out_and_guarding_again_never_stacks() -> None:
    guard = Guard(POLICY)
    agent = LlmAgent(name="bot", model=fake())
    guard_agent(guard_agent(agent, guard), guard)
    assert len(agent.before_tool_callback) == 1  # type: ignore[arg-type]
    unguard_agent(agent)
    assert agent.before_tool_callback == []


def test_two_guards_on_one_agent_both_judge_and_come_off_separately() -> None:
    first, second = Guard(POLICY), Guard(POLICY)
    bodies = Bodies()
    agent = LlmAgent(name="bot", model=fake(), tools=[bodies.shell])
    guard_agent(guard_agent(agent, first), second)
    assert len(agent.before_tool_callback) == 2  # type: ignore[arg-type]
    unguard_agent(agent, second)
    assert first.coverage(agent).unguarded == []
    assert second.coverage(agent).unguarded == ["shell", "model:fake-model"]


def test_an_out_of_range_version_is_refused_with_the_range_and_the_pip_command(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(base.metadata, "version", lambda _: "1.9.0")
    with pytest.raises(
        ImportError, match=r"google-adk>=2.0,<3.*pip install 'interlock\[google-adk\]'"
    ):
        AgentAdapter()
    monkeypatch.setattr(base.metadata, "version", lambda _: "3.0.0")
    with pytest.raises(ImportError, match=r"not 3\.0\.0"):
        AgentAdapter.check_version()


def test_adapter_for_finds_the_adk_adapter() -> None:
    assert base.adapter_for(LlmAgent(name="bot", model=fake())) is ADAPTER
