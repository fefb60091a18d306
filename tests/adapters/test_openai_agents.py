"""The OpenAI Agents SDK adapter, driven through real ``Runner`` loops with a fake model."""

from __future__ import annotations

import pytest

pytest.importorskip("agents")

import asyncio
import importlib
import json
import sys
import threading
from collections.abc import AsyncIterator, Callable
from typing import Any

from agents import (
    Agent,
    FileSearchTool,
    FunctionTool,
    LocalShellTool,
    Model,
    ModelProvider,
    ModelResponse,
    ModelRetrySettings,
    ModelSettings,
    ModelTracing,
    RetryDecision,
    RunConfig,
    Runner,
    ToolExecutionConfig,
    ToolGuardrailFunctionOutput,
    Usage,
    WebSearchTool,
    function_tool,
    set_tracing_disabled,
    tool_input_guardrail,
    tool_namespace,
)
from agents.exceptions import AgentsException, UserError
from agents.mcp import MCPServer
from agents.tool import invoke_function_tool, set_function_tool_failure_error_function
from agents.tool_context import ToolContext
from mcp import types as mcp_types
from openai.types.responses import (
    Response,
    ResponseCompletedEvent,
    ResponseFunctionToolCall,
    ResponseOutputItemDoneEvent,
    ResponseOutputMessage,
    ResponseOutputText,
    ResponseUsage,
)
from openai.types.responses.response_usage import InputTokensDetails, OutputTokensDetails

from interlock import (
    ActionDenied,
    ActionUndetermined,
    ApprovalRequired,
    Decision,
    Guard,
    Verdict,
    load_policy_text,
)
from interlock import Usage as Tokens
from interlock.adapters import base
from interlock.adapters.base import adapter_for
from interlock.adapters.openai_agents import (
    ADAPTER,
    AGENT_ADAPTER,
    FunctionToolAdapter,
    GuardedModel,
    GuardedModelProvider,
    estimate_usage,
    guard_handoff,
    guard_tool,
    guard_tools,
)

from .conformance import (
    CANCELLATION,
    POLICY,
    ROWS,
    STORE_UNREACHABLE,
    Row,
    approve_when_pending,
    assert_cancellation_never_runs,
    make_guard,
)

set_tracing_disabled(True)


# -- a scripted model: real Runner loops, nothing behind them --------------------------


def tool_calls(
    *calls: tuple[str, dict[str, Any]], tokens: tuple[int, int] = (0, 0)
) -> ModelResponse:
    """One model turn asking for ``calls`` at once (ids ``call-1``, ``call-2``, ...)."""
    items: list[Any] = [
        ResponseFunctionToolCall(
            type="function_call",
            name=name,
            arguments=json.dumps(args),
            call_id=f"call-{i}",
            id=f"fc-{i}",
            status="completed",
        )
        for i, (name, args) in enumerate(calls, 1)
    ]
    return ModelResponse(output=items, usage=_usage(*tokens), response_id=None)


def answer(text: str, tokens: tuple[int, int] = (0, 0)) -> ModelResponse:
    message = ResponseOutputMessage(
        id="msg",
        type="message",
        role="assistant",
        status="completed",
        content=[ResponseOutputText(type="output_text", text=text, annotations=[])],
    )
    return ModelResponse(output=[message], usage=_usage(*tokens), response_id=None)


def _usage(tokens_in: int, tokens_out: int) -> Usage:
    return Usage(
        requests=1 if tokens_in or tokens_out else 0,
        input_tokens=tokens_in,
        output_tokens=tokens_out,
        total_tokens=tokens_in + tokens_out,
    )


class ScriptedModel(Model):
    """Answers each call with the next scripted turn; ``fail`` makes every call raise
    (streaming: after the first event). Records what it was asked."""

    def __init__(self, turns: list[ModelResponse], *, fail: bool = False) -> None:
        self.turns = list(turns)
        self.fail = fail
        self.inputs: list[Any] = []
        self.model = "scripted-model"

    async def get_response(
        self, system_instructions: Any, input: Any, *args: Any, **kwargs: Any
    ) -> ModelResponse:
        self.inputs.append(input)
        if self.fail:
            raise RuntimeError("provider down")
        return self.turns.pop(0)

    async def stream_response(
        self, system_instructions: Any, input: Any, *args: Any, **kwargs: Any
    ) -> AsyncIterator[Any]:
        self.inputs.append(input)
        turn = self.turns.pop(0)
        for index, item in enumerate(turn.output):
            yield ResponseOutputItemDoneEvent(
                type="response.output_item.done",
                item=item,
                output_index=index,
                sequence_number=index,
            )
            if self.fail:
                raise RuntimeError("provider down")
        yield ResponseCompletedEvent(
            type="response.completed", response=_response(turn), sequence_number=len(turn.output)
        )


def _response(turn: ModelResponse) -> Response:
    usage = ResponseUsage(
        input_tokens=turn.usage.input_tokens,
        output_tokens=turn.usage.output_tokens,
        total_tokens=turn.usage.total_tokens,
        input_tokens_details=InputTokensDetails(cached_tokens=0, cache_write_tokens=0),
        output_tokens_details=OutputTokensDetails(reasoning_tokens=0),
    )
    return Response(
        id="resp",
        created_at=0,
        model="scripted-model",
        object="response",
        output=list(turn.output),
        tool_choice="auto",
        tools=[],
        parallel_tool_calls=True,
        status="completed",
        usage=usage,
    )


def final_input_outputs(model: ScriptedModel) -> dict[str, str]:
    """The tool outputs the model read on its last call, by call id."""
    return {
        item["call_id"]: item["output"]
        for item in model.inputs[-1]
        if isinstance(item, dict) and item.get("type") == "function_call_output"
    }


def run(agent: Agent[Any], mode: str, prompt: str = "go", **options: Any) -> Any:
    if mode == "sync":
        return Runner.run_sync(agent, prompt, **options)
    if mode == "async":
        return asyncio.run(Runner.run(agent, prompt, **options))

    async def streamed() -> Any:
        result = Runner.run_streamed(agent, prompt, **options)
        async for _ in result.stream_events():
            pass
        return result

    return asyncio.run(streamed())


class Bodies:
    """The tools of the table, recording every body that ran and on which thread."""

    def __init__(self) -> None:
        self.ran: list[tuple[str, Any]] = []
        self.threads: set[int] = set()
        self._lock = threading.Lock()
        bodies = self

        @function_tool
        def shell(command: str) -> str:
            """Run a shell command."""
            bodies._record("shell", command)
            return f"ran {command}"

        @function_tool
        def pay(amount: float | str) -> str:
            """Pay an amount."""
            bodies._record("pay", amount)
            return f"paid {amount}"

        self.shell = shell
        self.pay = pay
        self.tools: list[FunctionTool] = [shell, pay]

    def _record(self, name: str, value: Any) -> None:
        with self._lock:
            self.ran.append((name, value))
            self.threads.add(threading.get_ident())


def agent_for(row: Row, bodies: Bodies, refusal: str) -> tuple[Agent[Any], ScriptedModel]:
    guard = make_guard(row)
    model = ScriptedModel([tool_calls((row.tool, row.args), (row.tool, row.args)), answer("done")])
    tools = guard_tools(bodies.tools, guard, refusal=refusal, mapper=row.mapper)  # type: ignore[arg-type]
    return Agent(name="bot", model=model, tools=tools), model


ids = [row.behaviour for row in ROWS]


# -- the verdict table, both styles, sync and async, two parallel calls ----------------


@pytest.mark.parametrize("mode", ["sync", "async"])
@pytest.mark.parametrize("row", ROWS, ids=ids)
def test_message_style_runs_only_on_allow_and_the_model_reads_the_refusal(
    row: Row, mode: str
) -> None:
    bodies = Bodies()
    agent, model = agent_for(row, bodies, "message")
    result = run(agent, mode)
    outputs = final_input_outputs(model)
    assert set(outputs) == {"call-1", "call-2"}
    if row.runs:
        assert len(bodies.ran) == 2
        assert threading.get_ident() not in bodies.threads  # sync bodies: worker threads
        assert all(output.startswith(("ran", "paid")) for output in outputs.values())
    else:
        assert bodies.ran == []
        assert all(row.says in output for output in outputs.values())
    verdicts = [r.output.output_info["interlock"] for r in result.tool_input_guardrail_results]
    assert verdicts == [row.verdict.value if row.verdict else "pass_through"] * 2
    assert result.final_output == "done"  # the loop went on


@pytest.mark.parametrize("mode", ["sync", "async"])
@pytest.mark.parametrize("row", ROWS, ids=ids)
def test_raise_style_runs_only_on_allow_and_the_error_propagates(row: Row, mode: str) -> None:
    bodies = Bodies()
    agent, _ = agent_for(row, bodies, "raise")
    if row.error is None:
        assert run(agent, mode).final_output == "done"
        assert len(bodies.ran) == 2
        assert threading.get_ident() not in bodies.threads
        return
    with pytest.raises(row.error) as caught:
        run(agent, mode)
    assert bodies.ran == []
    assert caught.value.decision.verdict is row.verdict
    # The Runner wraps foreign errors in UserError; ours is also an AgentsException, so
    # it comes out as it was, with the run's data attached.
    assert isinstance(caught.value, AgentsException)
    assert not isinstance(caught.value, UserError)
    assert caught.value.run_data is not None


def test_each_call_is_judged_once_when_the_guardrail_has_judged_it() -> None:
    seen: list[Decision] = []
    guard = Guard(POLICY, on_decision=lambda d, *_: seen.append(d))
    bodies = Bodies()
    model = ScriptedModel([tool_calls(("shell", {"command": "ls"})), answer("done")])
    agent = Agent(
        name="bot", model=model, tools=[guard_tool(bodies.shell, guard, refusal="message")]
    )
    run(agent, "sync")
    assert bodies.ran == [("shell", "ls")]
    assert [d.verdict for d in seen] == [Verdict.ALLOW]  # the invoker used the guardrail's


# -- every entry point of a guarded tool is judged --------------------------------------


def _context(args: dict[str, Any]) -> ToolContext[Any]:
    return ToolContext(
        context=None, tool_name="shell", tool_call_id="direct-1", tool_arguments=json.dumps(args)
    )


def _entry_points(
    bodies: Bodies, guard: Guard, args: dict[str, Any]
) -> dict[str, Callable[[], Any]]:
    guarded = guard_tool(bodies.shell, guard)
    spoken = guard_tool(bodies.shell, guard, refusal="message")
    arguments = json.dumps(args)

    def agent(tool: FunctionTool) -> Agent[Any]:
        return Agent(
            name="bot",
            model=ScriptedModel([tool_calls(("shell", args)), answer("done")]),
            tools=[tool],
        )

    def attached_agent() -> Any:
        return run(guard.attach(agent(bodies.shell)), "sync")

    return {
        "on_invoke_tool": lambda: asyncio.run(guarded.on_invoke_tool(_context(args), arguments)),
        "invoke_function_tool": lambda: asyncio.run(
            invoke_function_tool(function_tool=guarded, context=_context(args), arguments=arguments)
        ),
        "Runner.run_sync": lambda: run(agent(guarded), "sync"),
        "Runner.run": lambda: run(agent(guarded), "async"),
        "Runner.run_streamed": lambda: run(agent(guarded), "streamed"),
        "guard.attach(agent)": attached_agent,
        "message style, on_invoke_tool without the guardrail": lambda: asyncio.run(
            spoken.on_invoke_tool(_context(args), arguments)
        ),
    }


ENTRY_POINTS = list(_entry_points(Bodies(), Guard(POLICY), {}))


@pytest.mark.parametrize("entry", ENTRY_POINTS)
def test_every_entry_point_is_judged_and_a_deny_never_runs_the_body(entry: str) -> None:
    bodies = Bodies()
    call = _entry_points(bodies, Guard(POLICY), {"command": "rm -rf /"})[entry]
    if entry.startswith("message style"):
        assert "no recursive deletes" in call()  # the refusal is the tool's output
    else:
        with pytest.raises(ActionDenied, match="no recursive deletes"):
            call()
    assert bodies.ran == []


@pytest.mark.parametrize("entry", ENTRY_POINTS)
def test_every_entry_point_runs_an_allowed_call_once_judged_once(entry: str) -> None:
    bodies = Bodies()
    seen: list[Decision] = []
    guard = Guard(POLICY, on_decision=lambda d, *_: seen.append(d))
    _entry_points(bodies, guard, {"command": "ls"})[entry]()
    assert bodies.ran == [("shell", "ls")]
    assert [d.verdict for d in seen] == [Verdict.ALLOW]


def test_the_raw_callable_is_not_reachable_through_a_guarded_tool() -> None:
    bodies = Bodies()
    assert callable(bodies.shell.__wrapped__)  # the SDK exposes it on a plain tool
    with pytest.raises(AttributeError):
        _ = guard_tool(bodies.shell, Guard(POLICY)).__wrapped__


# -- guarded copies ------------------------------------------------------------------------


@tool_input_guardrail
def _users_own(data: Any) -> ToolGuardrailFunctionOutput:
    return ToolGuardrailFunctionOutput.allow()


@pytest.mark.parametrize("refusal", ["raise", "message"])
def test_guard_tool_returns_a_copy_and_leaves_the_tool_unchanged(refusal: str) -> None:
    bodies = Bodies()
    original = bodies.shell
    own = [_users_own]
    original.tool_input_guardrails = own
    invoker = original.on_invoke_tool
    guarded = guard_tool(original, Guard(POLICY), refusal=refusal)  # type: ignore[arg-type]
    assert guarded is not original
    assert (guarded.name, guarded.description, guarded.params_json_schema) == (
        original.name,
        original.description,
        original.params_json_schema,
    )
    assert original.on_invoke_tool is invoker
    assert original.tool_input_guardrails is own and own == [_users_own]
    names = [g.get_name() for g in guarded.tool_input_guardrails or []]
    assert names == (["_users_own", "interlock"] if refusal == "message" else ["_users_own"])
    model = ScriptedModel([tool_calls(("shell", {"command": "rm -rf /"})), answer("done")])
    run(Agent(name="bot", model=model, tools=[original]), "sync")
    assert bodies.ran == [("shell", "rm -rf /")]  # the caller's tool is still unguarded


def test_guarding_again_with_the_same_guard_replaces_and_never_stacks() -> None:
    seen: list[Decision] = []
    guard = Guard(POLICY, on_decision=lambda d, *_: seen.append(d))
    bodies = Bodies()
    twice = guard_tool(guard_tool(bodies.shell, guard, refusal="message"), guard)
    assert [g.get_name() for g in twice.tool_input_guardrails or []] == []  # now raise style
    asyncio.run(twice.on_invoke_tool(_context({"command": "ls"}), '{"command": "ls"}'))
    assert len(seen) == 1
    other = Guard(POLICY, on_decision=lambda d, *_: seen.append(d))
    both = guard_tool(twice, other)  # another guard judges as well
    asyncio.run(both.on_invoke_tool(_context({"command": "ls"}), '{"command": "ls"}'))
    assert len(seen) == 3


def test_a_copy_the_sdk_makes_of_a_guarded_tool_stays_guarded_with_its_own_settings() -> None:
    @function_tool
    def flaky(command: str) -> str:
        """Fail."""
        raise RuntimeError("boom")

    guarded = guard_tool(flaky, Guard(POLICY))
    (namespaced,) = tool_namespace(name="ops", description="Ops tools.", tools=[guarded])
    set_function_tool_failure_error_function(namespaced, lambda ctx, error: "the copy's own")
    with pytest.raises(ActionDenied):  # still judged (the policy knows no 'flaky')
        asyncio.run(namespaced.on_invoke_tool(_context({"command": "ls"}), '{"command": "ls"}'))
    allowing = guard_tool(flaky, Guard(POLICY), mapper=lambda *_: None)
    (namespaced,) = tool_namespace(name="ops", description="Ops tools.", tools=[allowing])
    set_function_tool_failure_error_function(namespaced, lambda ctx, error: "the copy's own")
    output = asyncio.run(
        namespaced.on_invoke_tool(_context({"command": "ls"}), '{"command": "ls"}')
    )
    assert output == "the copy's own"  # its invoker is bound to the copy, behind the gate


def test_a_refusal_style_that_does_not_exist_is_refused() -> None:
    with pytest.raises(ValueError, match="refusal must be"):
        guard_tool(Bodies().shell, Guard(POLICY), refusal="later")  # type: ignore[arg-type]


HOSTED = [WebSearchTool(), FileSearchTool(vector_store_ids=["vs_1"])]


@pytest.mark.parametrize("tool", HOSTED, ids=lambda t: type(t).__name__)
def test_a_hosted_tool_is_refused_with_its_name(tool: Any) -> None:
    with pytest.raises(TypeError, match=rf"{type(tool).__name__}.*provider's side"):
        guard_tool(tool, Guard(POLICY))
    with pytest.raises(TypeError, match=type(tool).__name__):
        guard_tools([Bodies().shell, tool], Guard(POLICY))


def test_a_tool_the_runner_runs_without_on_invoke_tool_is_refused() -> None:
    local = LocalShellTool(executor=lambda request: "")
    with pytest.raises(TypeError, match=r"LocalShellTool 'local_shell' is not a FunctionTool"):
        guard_tool(local, Guard(POLICY))  # type: ignore[arg-type]


def test_attaching_an_agent_with_a_hosted_tool_patches_nothing() -> None:
    bodies = Bodies()
    tools: list[Any] = [bodies.shell, WebSearchTool()]
    agent = Agent(name="bot", tools=tools)
    invoker = bodies.shell.on_invoke_tool
    with pytest.raises(TypeError, match="WebSearchTool"):
        Guard(POLICY).attach(agent)
    assert agent.tools is tools and tools[0] is bodies.shell
    assert "get_mcp_tools" not in vars(agent)
    assert bodies.shell.on_invoke_tool is invoker
    assert not AGENT_ADAPTER.is_attached(agent)


# -- attach / detach ------------------------------------------------------------------------

_MISSING = object()


def _patched_state(obj: object, adapter: Any) -> dict[str, object]:
    return {target.attr: vars(obj).get(target.attr, _MISSING) for target in adapter.targets}


def test_attaching_a_tool_then_detaching_restores_on_invoke_tool_exactly() -> None:
    bodies = Bodies()
    shell = bodies.shell
    guard = Guard(POLICY)
    before = _patched_state(shell, ADAPTER)
    assert before["on_invoke_tool"] is not _MISSING  # a dataclass field: in the instance
    guard.attach(shell)
    during = _patched_state(shell, ADAPTER)
    assert during["on_invoke_tool"] is not before["on_invoke_tool"]
    guard.attach(shell)  # idempotent: the same replacement stays
    assert _patched_state(shell, ADAPTER)["on_invoke_tool"] is during["on_invoke_tool"]
    with pytest.raises(ActionDenied):
        asyncio.run(
            shell.on_invoke_tool(_context({"command": "rm -rf /"}), '{"command": "rm -rf /"}')
        )
    guard.detach(shell)
    assert all(_patched_state(shell, ADAPTER)[a] is before[a] for a in before)
    guard.detach(shell)  # a second detach changes nothing
    asyncio.run(shell.on_invoke_tool(_context({"command": "rm -rf /"}), '{"command": "rm -rf /"}'))
    assert bodies.ran == [("shell", "rm -rf /")]


def test_attaching_an_agent_guards_its_tools_and_detach_restores_the_list() -> None:
    bodies = Bodies()
    tools: list[Any] = list(bodies.tools)
    rm = tool_calls(("shell", {"command": "rm -rf /"}))
    model = ScriptedModel([rm, rm, answer("done")])  # the first run stops at its refusal
    agent = Agent(name="bot", model=model, tools=tools)
    guard = Guard(POLICY)
    before = _patched_state(agent, AGENT_ADAPTER)
    guard.attach(agent)
    assert agent.tools is not tools and [t.name for t in agent.tools] == ["shell", "pay"]
    assert tools == bodies.tools  # the caller's list and tools are untouched
    during = _patched_state(agent, AGENT_ADAPTER)
    guard.attach(agent)
    assert all(_patched_state(agent, AGENT_ADAPTER)[a] is during[a] for a in before)
    with pytest.raises(ActionDenied):
        run(agent, "sync")
    assert bodies.ran == []
    guard.detach(agent)
    after = _patched_state(agent, AGENT_ADAPTER)
    assert all(after[a] is before[a] for a in before)
    assert agent.tools is tools
    run(agent, "sync")
    assert bodies.ran == [("shell", "rm -rf /")]


def test_attaching_an_agent_keeps_tools_this_guard_already_guards() -> None:
    bodies = Bodies()
    guard = Guard(POLICY)
    spoken = guard_tool(bodies.shell, guard, refusal="message")
    agent = guard.attach(Agent(name="bot", tools=[spoken, bodies.pay]))
    assert agent.tools[0] is spoken
    assert agent.tools[1] is not bodies.pay
    AGENT_ADAPTER.detach(agent)


def test_attaching_to_a_second_guard_is_refused() -> None:
    bodies = Bodies()
    agent = Agent(name="bot", tools=[bodies.pay])
    Guard(POLICY).attach(bodies.shell)
    Guard(POLICY).attach(agent)
    try:
        with pytest.raises(ValueError, match="another guard"):
            Guard(POLICY).attach(bodies.shell)
        with pytest.raises(ValueError, match="another guard"):
            Guard(POLICY).attach(agent)
    finally:
        ADAPTER.detach(bodies.shell)
        AGENT_ADAPTER.detach(agent)


def test_adapter_for_finds_the_tool_and_the_agent_adapters() -> None:
    assert adapter_for(Bodies().shell) is ADAPTER
    assert adapter_for(Agent(name="bot")) is AGENT_ADAPTER
    with pytest.raises(TypeError):
        adapter_for(WebSearchTool())


@pytest.mark.parametrize("version", ["0.23.9", "0.25.0", "1.0.0"])
def test_a_version_outside_the_range_names_the_range_and_the_extra(
    version: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(base.metadata, "version", lambda distribution: version)
    pattern = rf"openai-agents>=0.24,<0.25, not {version}.*interlock\[openai-agents\]"
    with pytest.raises(ImportError, match=pattern):
        FunctionToolAdapter.check_version()
    with pytest.raises(ImportError, match=pattern):
        FunctionToolAdapter()


def test_a_missing_framework_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "agents", None)  # type: ignore[arg-type]
    monkeypatch.delitem(sys.modules, "interlock.adapters.openai_agents")
    with pytest.raises(ImportError, match=r"pip install 'interlock\[openai-agents\]'"):
        importlib.import_module("interlock.adapters.openai_agents")


# -- an agent used as a tool: its own calls are judged too ----------------------------------


HELPER_POLICY = """
version: 1
default: deny
rules:
  - id: helper-ok
    decision: allow
    reason: the helper may be asked
    name: ask_helper
  - id: shell-ok
    decision: allow
    reason: shell is allowed
    name: shell
  - id: no-rm
    decision: deny
    reason: no recursive deletes
    name: shell
    when: "args.command.startsWith('rm')"
"""


def test_the_tools_of_an_agent_used_as_a_tool_are_still_judged() -> None:
    seen: list[Decision] = []
    guard = Guard(load_policy_text(HELPER_POLICY), on_decision=lambda d, *_: seen.append(d))
    bodies = Bodies()
    inner_model = ScriptedModel([tool_calls(("shell", {"command": "rm -rf /"})), answer("inner")])
    helper = guard.attach(Agent(name="helper", model=inner_model, tools=[bodies.shell]))
    ask_helper = helper.as_tool(tool_name="ask_helper", tool_description="Ask the helper.")
    outer_model = ScriptedModel([tool_calls(("ask_helper", {"input": "tidy up"})), answer("done")])
    outer = guard.attach(Agent(name="boss", model=outer_model, tools=[ask_helper]))
    run(outer, "sync")
    assert bodies.ran == []  # allowing the outer call did not let the inner one through
    assert [(d.verdict, d.rule_ids) for d in seen] == [
        (Verdict.ALLOW, ("helper-ok",)),
        (Verdict.DENY, ("no-rm",)),
    ]
    # The inner refusal is raised inside the outer tool's body, where as_tool's own
    # failure handling turns it into the SDK's generic error for the outer model.
    assert "error occurred" in final_input_outputs(outer_model)["call-1"]


def test_an_agent_used_as_a_tool_without_failure_handling_lets_the_refusal_out() -> None:
    guard = Guard(load_policy_text(HELPER_POLICY))
    bodies = Bodies()
    inner_model = ScriptedModel([tool_calls(("shell", {"command": "rm -rf /"}))])
    helper = guard.attach(Agent(name="helper", model=inner_model, tools=[bodies.shell]))
    ask_helper = helper.as_tool(
        tool_name="ask_helper", tool_description="Ask the helper.", failure_error_function=None
    )
    outer_model = ScriptedModel([tool_calls(("ask_helper", {"input": "tidy up"}))])
    outer = guard.attach(Agent(name="boss", model=outer_model, tools=[ask_helper]))
    with pytest.raises(ActionDenied, match="no recursive deletes"):
        run(outer, "sync")
    assert bodies.ran == []


# -- state: budgets, approvals, correlation -----------------------------------------------


def _budget(guard: Guard, budget_id: str) -> tuple[int, int]:
    assert guard.store is not None
    rows = guard.store.budget_rows(budget_id=budget_id)
    return (rows[0].spent, rows[0].reserved) if rows else (0, 0)


def _records(guard: Guard, kind: str) -> list[dict[str, Any]]:
    assert guard.store is not None
    rows = guard.store.audit_rows(kind="decision")
    return [r for r in (json.loads(row.body) for row in rows) if r["action"]["kind"] == kind]


def _paid_tools(fails: str = "") -> tuple[FunctionTool, FunctionTool]:
    """``fails``: "" (works), "message" (the SDK turns the error into a message) or
    "raise" (``failure_error_function=None``: the error propagates)."""

    def paid_lookup(query: str, est_cost: float) -> str:
        """Look something up, at a cost."""
        if fails:
            raise RuntimeError("upstream down")
        return "found"

    def wire(amount: float) -> str:
        """Wire money."""
        raise AssertionError("the body must not run")

    if fails == "raise":
        return function_tool(paid_lookup, failure_error_function=None), function_tool(wire)
    return function_tool(paid_lookup), function_tool(wire)


def _paid_agent(
    guard: Guard, refusal: str, fails: str, *calls: tuple[str, dict[str, Any]]
) -> tuple[Agent[Any], ScriptedModel]:
    model = ScriptedModel([tool_calls(*calls), answer("done")])
    tools = guard_tools(_paid_tools(fails), guard, refusal=refusal)  # type: ignore[arg-type]
    return Agent(name="bot", model=model, tools=tools), model


LOOKUP = ("paid_lookup", {"query": "a", "est_cost": 0.4})


@pytest.mark.parametrize("refusal", ["raise", "message"])
@pytest.mark.parametrize("mode", ["sync", "async"])
def test_an_allowed_call_commits_its_reservation(
    stateful_guard: Guard, refusal: str, mode: str
) -> None:
    agent, _ = _paid_agent(stateful_guard, refusal, "", LOOKUP)
    run(agent, mode)
    assert _budget(stateful_guard, "tool-spend") == (400_000, 0)
    assert len(_records(stateful_guard, "tool")) == 1  # judged once, in either style


@pytest.mark.parametrize("refusal", ["raise", "message"])
def test_a_tool_error_that_propagates_releases_the_reservation(
    stateful_guard: Guard, refusal: str
) -> None:
    agent, _ = _paid_agent(stateful_guard, refusal, "raise", LOOKUP)
    with pytest.raises(UserError, match="upstream down"):
        run(agent, "sync")
    assert _budget(stateful_guard, "tool-spend") == (0, 0)


def test_a_tool_error_the_sdk_turns_into_a_message_counts_as_run(stateful_guard: Guard) -> None:
    agent, model = _paid_agent(stateful_guard, "message", "message", LOOKUP)
    assert run(agent, "sync").final_output == "done"
    assert "error occurred" in final_input_outputs(model)["call-1"]
    assert _budget(stateful_guard, "tool-spend") == (400_000, 0)


def test_the_sdks_pre_approval_guardrail_pass_holds_one_reservation_per_call(
    stateful_guard: Guard,
) -> None:
    def paid_lookup(query: str, est_cost: float) -> str:
        """Look something up, at a cost."""
        return "found"

    lookup = guard_tool(
        function_tool(paid_lookup, needs_approval=True), stateful_guard, refusal="message"
    )
    model = ScriptedModel([tool_calls(LOOKUP), answer("done")])
    agent = Agent(name="bot", model=model, tools=[lookup])
    config = RunConfig(tool_execution=ToolExecutionConfig(pre_approval_tool_input_guardrails=True))
    paused = Runner.run_sync(agent, "go", run_config=config)
    (pending,) = paused.interruptions  # the SDK's own human step, after our guardrail
    assert _budget(stateful_guard, "tool-spend") == (0, 400_000)
    state = paused.to_state()
    state.approve(pending)
    done = Runner.run_sync(agent, state, run_config=config)  # our guardrail runs again
    assert done.final_output == "done"
    assert _budget(stateful_guard, "tool-spend") == (400_000, 0)  # the first hold given back


def test_a_refusal_for_approval_carries_the_approval_url(stateful_guard: Guard) -> None:
    agent, model = _paid_agent(stateful_guard, "message", "", ("wire", {"amount": 5}))
    run(agent, "sync")
    assert "https://approvals.example.com/a/" in final_input_outputs(model)["call-1"]
    agent, _ = _paid_agent(stateful_guard, "raise", "", ("wire", {"amount": 5}))
    with pytest.raises(ApprovalRequired) as caught:
        run(agent, "sync")
    assert (caught.value.approval_url or "").startswith("https://approvals.example.com/a/")


def _wire_agent(guard: Guard, ran: list[float], **options: Any) -> tuple[Agent[Any], ScriptedModel]:
    def wire(amount: float) -> str:
        """Wire money."""
        ran.append(amount)
        return f"wired {amount}"

    model = ScriptedModel([tool_calls(("wire", {"amount": 5})), answer("done")])
    tools = guard_tools([function_tool(wire)], guard, **options)
    return Agent(name="bot", model=model, tools=tools), model


@pytest.mark.parametrize("refusal", ["raise", "message"])
@pytest.mark.parametrize("mode", ["sync", "async", "streamed"])
def test_on_approval_wait_runs_the_call_once_a_human_approves(
    stateful_guard: Guard, refusal: str, mode: str
) -> None:
    ran: list[float] = []
    supervisor = approve_when_pending(stateful_guard)
    agent, model = _wire_agent(
        stateful_guard, ran, refusal=refusal, on_approval="wait", approval_timeout=60
    )
    assert run(agent, mode).final_output == "done"
    supervisor.join()
    assert ran == [5]
    assert final_input_outputs(model)["call-1"] == "wired 5.0"
    assert stateful_guard.store is not None
    (approval,) = stateful_guard.store.list_approvals()
    assert approval.status.value == "claimed"  # the grant was used, once


@pytest.mark.parametrize("refusal", ["raise", "message"])
def test_on_approval_wait_refuses_when_the_human_denies(
    stateful_guard: Guard, refusal: str
) -> None:
    ran: list[float] = []
    supervisor = approve_when_pending(stateful_guard, approve=False)
    agent, model = _wire_agent(
        stateful_guard, ran, refusal=refusal, on_approval="wait", approval_timeout=60
    )
    if refusal == "raise":
        with pytest.raises(ActionDenied, match="denied"):
            run(agent, "sync")
    else:
        assert run(agent, "sync").final_output == "done"
        assert "denied" in final_input_outputs(model)["call-1"]
    supervisor.join()
    assert ran == []


def test_on_approval_wait_refuses_when_nobody_decides_in_time(stateful_guard: Guard) -> None:
    ran: list[float] = []
    agent, _ = _wire_agent(stateful_guard, ran, on_approval="wait", approval_timeout=0.05)
    with pytest.raises(ApprovalRequired) as caught:
        run(agent, "async")
    assert ran == []
    assert (caught.value.approval_url or "").startswith("https://approvals.example.com/a/")


def test_on_approval_is_checked_when_the_tool_is_guarded() -> None:
    def wire(amount: float) -> str:
        """Wire money."""
        return "wired"

    with pytest.raises(ValueError, match="needs a guard with a store"):
        guard_tool(function_tool(wire), Guard(POLICY), on_approval="wait")
    with pytest.raises(ValueError, match="on_approval must be"):
        guard_tool(function_tool(wire), Guard(POLICY), on_approval="later")  # type: ignore[arg-type]


@pytest.mark.parametrize("refusal", ["raise", "message"])
def test_the_model_tool_call_id_is_recorded_for_correlation(
    stateful_guard: Guard, refusal: str
) -> None:
    agent, _ = _paid_agent(stateful_guard, refusal, "", LOOKUP)
    run(agent, "async")
    assert [r.get("call_id") for r in _records(stateful_guard, "tool")] == ["call-1"]


# -- model calls: checked and reserved before, committed from real usage after ----------

MODES = ["sync", "async", "streamed"]


def _lookup_tool() -> FunctionTool:
    return _paid_tools()[0]


@pytest.mark.parametrize("mode", MODES)
def test_every_model_call_is_checked_and_commits_its_real_usage(
    stateful_guard: Guard, mode: str
) -> None:
    inner = ScriptedModel(
        [
            tool_calls(("paid_lookup", {"query": "q", "est_cost": 0.1}), tokens=(120, 30)),
            answer("done", (200, 5)),
        ]
    )
    agent = Agent(name="bot", model=GuardedModel(inner, stateful_guard), tools=[_lookup_tool()])
    assert run(agent, mode).final_output == "done"
    assert _budget(stateful_guard, "model-tokens") == (120 + 30 + 200 + 5, 0)
    records = _records(stateful_guard, "llm")
    assert [(r["decision"], r["action"]["name"]) for r in records] == [
        ("allow", "scripted-model")
    ] * 2


@pytest.mark.parametrize("mode", MODES)
def test_a_model_call_over_budget_never_reaches_the_model(stateful_guard: Guard, mode: str) -> None:
    inner = ScriptedModel([answer("never")])
    model = GuardedModel(inner, stateful_guard, estimate=lambda *_: Tokens(2000, 0))
    with pytest.raises(ActionDenied, match="model-tokens") as caught:
        run(Agent(name="bot", model=model), mode)
    assert inner.inputs == []
    assert isinstance(caught.value, AgentsException)
    assert _budget(stateful_guard, "model-tokens") == (0, 0)


@pytest.mark.parametrize("mode", ["async", "streamed"])
def test_a_refused_model_call_is_never_retried(stateful_guard: Guard, mode: str) -> None:
    inner = ScriptedModel([answer("never")])
    model = GuardedModel(inner, stateful_guard, estimate=lambda *_: Tokens(2000, 0))
    always = ModelRetrySettings(
        max_retries=3, policy=lambda context: RetryDecision(retry=True, delay=0)
    )
    agent = Agent(name="bot", model=model, model_settings=ModelSettings(retry=always))
    with pytest.raises(ActionDenied):
        run(agent, mode)
    assert [r["decision"] for r in _records(stateful_guard, "llm")] == ["deny"]


@pytest.mark.parametrize("mode", MODES)
def test_a_model_that_raises_releases_its_reservation(stateful_guard: Guard, mode: str) -> None:
    inner = ScriptedModel([tool_calls(("paid_lookup", {"query": "q", "est_cost": 0.1}))], fail=True)
    agent = Agent(name="bot", model=GuardedModel(inner, stateful_guard), tools=[_lookup_tool()])
    with pytest.raises(RuntimeError, match="provider down"):
        run(agent, mode)
    assert len(inner.inputs) == 1
    assert _budget(stateful_guard, "model-tokens") == (0, 0)
    assert [r["decision"] for r in _records(stateful_guard, "llm")] == ["allow"]


def test_a_provider_of_guarded_models_serves_agents_that_name_their_model(
    stateful_guard: Guard,
) -> None:
    inner = ScriptedModel([answer("done", (10, 2))])

    class Provider(ModelProvider):
        def get_model(self, model_name: str | None) -> Model:
            return inner

    config = RunConfig(model_provider=GuardedModelProvider(Provider(), stateful_guard))
    result = run(Agent(name="bot", model="house-model"), "sync", run_config=config)
    assert result.final_output == "done"
    assert [r["action"]["name"] for r in _records(stateful_guard, "llm")] == ["house-model"]
    assert _budget(stateful_guard, "model-tokens") == (12, 0)


def test_the_default_estimate_counts_the_prompt_and_the_output_ceiling() -> None:
    items: Any = [{"role": "user", "content": "a" * 10}]
    chars = len(json.dumps(items)) + len("b" * 6)
    assert estimate_usage("b" * 6, items, ModelSettings(max_tokens=50)) == Tokens(
        -(-chars // 4), 50
    )
    assert estimate_usage(None, "abcd", ModelSettings()) == Tokens(1, 0)


@pytest.mark.parametrize(
    ("stop_after", "settled"),
    [("response.completed", (12, 0)), ("response.output_item.done", (0, 0))],
)
def test_a_stream_closed_after_its_completed_event_is_spent_and_one_abandoned_before_is_not(
    stateful_guard: Guard, stop_after: str, settled: tuple[int, int]
) -> None:
    model = GuardedModel(ScriptedModel([answer("done", (10, 2))]), stateful_guard)

    async def consume() -> None:
        stream: Any = model.stream_response(
            None,
            "hi",
            ModelSettings(),
            [],
            None,
            [],
            ModelTracing.DISABLED,
            previous_response_id=None,
            conversation_id=None,
            prompt=None,
        )
        async for event in stream:
            if event.type == stop_after:
                break
        await stream.aclose()

    asyncio.run(consume())
    assert _budget(stateful_guard, "model-tokens") == settled


# -- tools an agent's MCP servers list at run time ----------------------------------------


class FakeMCPServer(MCPServer):
    """An in-process MCP server with one ``shell`` tool that records its calls."""

    def __init__(self) -> None:
        super().__init__()
        self.calls: list[dict[str, Any] | None] = []

    @property
    def name(self) -> str:
        return "fake"

    async def connect(self) -> None:
        return None

    async def cleanup(self) -> None:
        return None

    async def list_tools(self, run_context: Any = None, agent: Any = None) -> list[Any]:
        schema = {
            "type": "object",
            "properties": {"command": {"type": "string"}},
            "required": ["command"],
        }
        return [
            mcp_types.Tool(name="shell", description="Run a shell command.", input_schema=schema)
        ]

    async def call_tool(
        self, tool_name: str, arguments: dict[str, Any] | None, meta: Any = None
    ) -> Any:
        self.calls.append(arguments)
        return mcp_types.CallToolResult(content=[mcp_types.TextContent(type="text", text="ran")])

    async def list_prompts(self) -> Any:
        raise NotImplementedError

    async def get_prompt(self, name: str, arguments: dict[str, Any] | None = None) -> Any:
        raise NotImplementedError


def test_attaching_an_agent_guards_the_tools_its_mcp_servers_list() -> None:
    server = FakeMCPServer()
    rm = tool_calls(("shell", {"command": "rm -rf /"}))
    model = ScriptedModel([rm, rm, answer("done")])
    agent = Guard(POLICY).attach(Agent(name="bot", model=model, mcp_servers=[server]))
    with pytest.raises(ActionDenied, match="no recursive deletes"):
        run(agent, "sync")
    assert server.calls == []
    AGENT_ADAPTER.detach(agent)
    assert "get_mcp_tools" not in vars(agent)
    run(agent, "sync")
    assert server.calls == [{"command": "rm -rf /"}]


# -- the store-unreachable row and cancellation, through whole loops ---------------------


def _unreachable_agent(bodies: Bodies, refusal: str) -> tuple[Agent[Any], ScriptedModel]:
    row = STORE_UNREACHABLE
    model = ScriptedModel([tool_calls((row.tool, row.args), (row.tool, row.args)), answer("done")])
    tools = guard_tools(bodies.tools, make_guard(row), refusal=refusal)  # type: ignore[arg-type]
    return Agent(name="bot", model=model, tools=tools), model


@pytest.mark.parametrize("mode", MODES)
def test_an_unreachable_store_refuses_every_tool_call_and_the_model_reads_it(mode: str) -> None:
    bodies = Bodies()
    agent, model = _unreachable_agent(bodies, "message")
    result = run(agent, mode)
    assert bodies.ran == []
    outputs = final_input_outputs(model)
    assert set(outputs) == {"call-1", "call-2"}
    assert all(STORE_UNREACHABLE.says in output for output in outputs.values())
    assert result.final_output == "done"


@pytest.mark.parametrize("mode", MODES)
def test_an_unreachable_store_raises_out_of_the_runner_in_raise_style(mode: str) -> None:
    bodies = Bodies()
    agent, _ = _unreachable_agent(bodies, "raise")
    with pytest.raises(ActionUndetermined, match=STORE_UNREACHABLE.says) as caught:
        run(agent, mode)
    assert bodies.ran == []
    assert isinstance(caught.value, AgentsException)


@pytest.mark.parametrize("mode", MODES)
def test_an_unreachable_store_refuses_the_model_call_before_the_model(mode: str) -> None:
    bodies = Bodies()
    row = STORE_UNREACHABLE
    inner = ScriptedModel([tool_calls((row.tool, row.args)), answer("done")])
    guard = make_guard(row)
    agent = Agent(
        name="bot",
        model=GuardedModel(inner, guard),
        tools=guard_tools(bodies.tools, guard, refusal="message"),
    )
    with pytest.raises(ActionUndetermined, match=row.says):
        run(agent, mode)
    assert inner.inputs == []
    assert bodies.ran == []


@pytest.mark.parametrize("refusal", ["message", "raise"])
@pytest.mark.parametrize("streamed", [False, True], ids=["run", "run_streamed"])
def test_a_run_cancelled_while_its_tool_call_is_judged_never_runs_the_body(
    refusal: str, streamed: bool
) -> None:
    bodies = Bodies()

    async def loop(guard: Guard) -> Any:
        row = CANCELLATION
        model = ScriptedModel([tool_calls((row.tool, row.args)), answer("done")])
        tools = guard_tools(bodies.tools, guard, refusal=refusal)  # type: ignore[arg-type]
        agent = Agent(name="bot", model=model, tools=tools)
        if not streamed:
            return await Runner.run(agent, "go")
        result = Runner.run_streamed(agent, "go")
        async for _ in result.stream_events():
            pass
        return result

    asyncio.run(assert_cancellation_never_runs(loop, lambda: len(bodies.ran)))


def test_a_direct_tool_call_cancelled_while_it_is_judged_never_runs_the_body() -> None:
    bodies = Bodies()
    arguments = json.dumps(CANCELLATION.args)

    async def call(guard: Guard) -> Any:
        guarded = guard_tool(bodies.shell, guard)
        return await guarded.on_invoke_tool(_context(CANCELLATION.args), arguments)

    asyncio.run(assert_cancellation_never_runs(call, lambda: len(bodies.ran)))


# -- handoffs are actions: judged before the transfer, listed by coverage ----------------

HANDOFF_POLICY = """
version: 1
default: deny
rules:
  - id: to-billing
    decision: allow
    reason: billing may take over
    kind: tool
    scope: handoff
    name: transfer_to_billing
  - id: to-payouts
    decision: require_approval
    reason: payouts need a human
    kind: tool
    scope: handoff
    params: {target: "agent:payouts"}
"""


def _handoff_call(name: str) -> ModelResponse:
    call = ResponseFunctionToolCall(
        type="function_call", name=name, arguments="{}", call_id="h-1", status="completed"
    )
    return ModelResponse(output=[call], usage=_usage(0, 0), response_id=None)


def _triage(to: str) -> tuple[Agent[Any], dict[str, ScriptedModel]]:
    models = {n: ScriptedModel([answer(f"{n} here")]) for n in ("billing", "payouts", "legal")}
    agents = {n: Agent(name=n, model=m) for n, m in models.items()}
    triage = Agent(
        name="triage",
        model=ScriptedModel([_handoff_call(f"transfer_to_{to}")]),
        handoffs=list(agents.values()),
    )
    return triage, models


@pytest.mark.parametrize("mode", MODES)
def test_an_allowed_handoff_transfers(mode: str) -> None:
    guard = Guard(load_policy_text(HANDOFF_POLICY))
    triage, _ = _triage("billing")
    guard.attach(triage)
    assert run(triage, mode).final_output == "billing here"


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize(("to", "error"), [("legal", ActionDenied), ("payouts", ApprovalRequired)])
def test_a_refused_handoff_never_transfers(mode: str, to: str, error: type[Exception]) -> None:
    seen: list[Any] = []
    guard = Guard(load_policy_text(HANDOFF_POLICY), on_decision=lambda d, a: seen.append(a))
    triage, models = _triage(to)
    guard.attach(triage)
    with pytest.raises(error):
        run(triage, mode)
    assert models[to].inputs == []  # the target agent never ran
    (action,) = seen
    assert (action.kind, action.name, action.scope, action.target) == (
        "tool",
        f"transfer_to_{to}",
        "handoff",
        f"agent:{to}",
    )


def test_guard_handoff_gates_an_agent_or_a_handoff_in_place_of_attach() -> None:
    from agents import handoff

    guard = Guard(load_policy_text(HANDOFF_POLICY))
    triage, models = _triage("legal")
    triage.handoffs = [
        guard_handoff(h, guard) for h in [handoff(models_agent) for models_agent in triage.handoffs]
    ]  # type: ignore[arg-type]
    with pytest.raises(ActionDenied):
        run(triage, "async")
    assert models["legal"].inputs == []


def test_coverage_lists_every_handoff_and_detach_restores_them() -> None:
    guard = Guard(load_policy_text(HANDOFF_POLICY))
    triage, _ = _triage("billing")
    before = list(triage.handoffs)
    names = lambda: {b.name: b.guarded for b in guard.coverage(triage).tools}  # noqa: E731
    assert names() == {"handoff:billing": False, "handoff:payouts": False, "handoff:legal": False}
    guard.attach(triage)
    assert names() == {
        "transfer_to_billing": True,
        "transfer_to_payouts": True,
        "transfer_to_legal": True,
    }
    assert "own tools and model only if that agent is guarded" in str(guard.coverage(triage))
    guard.detach(triage)
    assert triage.handoffs == before and all(
        a is b for a, b in zip(triage.handoffs, before, strict=True)
    )
