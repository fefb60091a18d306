"""Spans from a real LangChain ``create_agent`` loop (fake chat model), captured with the
OpenTelemetry SDK's in-memory exporter: one ``execute_tool`` span per tool call, parented
by the span open around the run, attributed by the GenAI conventions, refusals ERROR."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

pytest.importorskip("langchain")
pytest.importorskip("opentelemetry.sdk")

from langchain.agents import create_agent
from langchain_core.language_models.fake_chat_models import FakeMessagesListChatModel
from langchain_core.messages import AIMessage, ToolMessage
from langchain_core.tools import tool
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.trace import SpanKind, StatusCode

from interlock import Guard, load_policy_text
from interlock.adapters.langchain import InterlockMiddleware
from interlock.otel import Telemetry

from .conftest import Otel

POLICY = load_policy_text(
    """
version: 1
default: deny
rules:
  - id: allow-shell
    decision: allow
    reason: shell is allowed
    name: shell
  - id: no-rm
    decision: deny
    reason: no recursive deletes
    name: shell
    when: "args.command.startsWith('rm')"
  - id: models
    decision: allow
    reason: the fake model may answer
    kind: llm
pricing:
  default_max_tokens: {"*": 100}
budgets:
  - id: tokens
    limit: 100000
    unit: tokens
    kind: llm
""",
    file="otel.yaml",
)
#: Argument values: none may appear in any attribute, span name or status.
SECRET_ARG = "ls /home/alice/secret-project-7Q"
DENIED_ARG = "rm -rf /srv/payroll-9Z"


class FakeToolModel(FakeMessagesListChatModel):
    """A scripted model; ``create_agent`` binds tools, which a script ignores."""

    def bind_tools(self, tools: Any, **kwargs: Any) -> Any:
        return self


def script() -> list[AIMessage]:
    calls = [
        {"name": "shell", "args": {"command": SECRET_ARG}, "id": "call-ok"},
        {"name": "shell", "args": {"command": DENIED_ARG}, "id": "call-no"},
    ]
    usage = {"input_tokens": 30, "output_tokens": 7, "total_tokens": 37}
    return [
        AIMessage(content="", tool_calls=calls, usage_metadata=usage),
        AIMessage(content="done", usage_metadata=usage),
    ]


def run(
    otel: Otel, mode: str, *, models: bool = False, telemetry: Telemetry | None = None
) -> tuple[dict[str, Any], ReadableSpan]:
    """Run the agent under a span ``agent run``; returns its result and that span."""
    tracer = otel.tracer_provider.get_tracer("test")

    @tool
    def shell(command: str) -> str:
        """Run a shell command."""
        with tracer.start_as_current_span("inside the tool"):
            return "listed"

    guard = Guard(POLICY, telemetry=telemetry or otel.telemetry())
    middleware = InterlockMiddleware(guard, models=models)
    agent = create_agent(FakeToolModel(responses=script()), [shell], middleware=[middleware])
    inputs = {"messages": [("user", "go")]}
    with tracer.start_as_current_span("agent run"):
        result = asyncio.run(agent.ainvoke(inputs)) if mode == "async" else agent.invoke(inputs)
    (root,) = otel.spans("agent run")
    return result, root


def by_call(spans: list[ReadableSpan]) -> dict[str, ReadableSpan]:
    return {str(s.attributes["gen_ai.tool.call.id"]): s for s in spans if s.attributes}


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_one_execute_tool_span_per_call_parented_by_the_run(otel: Otel, mode: str) -> None:
    result, root = run(otel, mode)
    answers = [m for m in result["messages"] if isinstance(m, ToolMessage)]
    assert {m.tool_call_id: m.status for m in answers} == {
        "call-ok": "success",
        "call-no": "error",
    }
    executions = otel.spans("execute_tool")
    assert [s.name for s in executions] == ["execute_tool shell"] * 2
    for span in executions:
        assert span.parent is not None
        assert span.parent.span_id == root.context.span_id
        assert span.context.trace_id == root.context.trace_id
        assert span.kind is SpanKind.INTERNAL
        assert span.attributes is not None
        assert span.attributes["gen_ai.operation.name"] == "execute_tool"
        assert span.attributes["gen_ai.tool.name"] == "shell"
        assert span.attributes["gen_ai.tool.type"] == "function"
    calls = by_call(executions)
    assert set(calls) == {"call-ok", "call-no"}
    assert calls["call-ok"].status.status_code is StatusCode.UNSET


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_a_decision_span_per_call_linked_from_its_execution(otel: Otel, mode: str) -> None:
    _, root = run(otel, mode)
    checks = otel.spans("interlock.check")
    assert len(checks) == 2
    for check in checks:
        assert check.parent is not None and check.parent.span_id == root.context.span_id
    decided = by_call(checks)
    assert decided["call-ok"].attributes is not None
    assert decided["call-ok"].attributes["interlock.verdict"] == "allow"
    assert decided["call-ok"].attributes["interlock.rule_ids"] == ("allow-shell",)
    assert decided["call-no"].attributes is not None
    assert decided["call-no"].attributes["interlock.verdict"] == "deny"
    assert decided["call-no"].attributes["interlock.rule_ids"] == ("no-rm",)
    executions = by_call(otel.spans("execute_tool"))
    for call_id, execution in executions.items():
        check = decided[call_id]
        assert execution.attributes is not None and check.attributes is not None
        assert (
            execution.attributes["interlock.decision_id"]
            == check.attributes["interlock.decision_id"]
        )
        assert [link.context.span_id for link in execution.links] == [check.context.span_id]


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_what_the_tool_traces_is_a_child_of_its_execution(otel: Otel, mode: str) -> None:
    run(otel, mode)
    (inner,) = otel.spans("inside the tool")
    execution = by_call(otel.spans("execute_tool"))["call-ok"]
    assert inner.parent is not None and inner.parent.span_id == execution.context.span_id


def test_a_denied_call_has_an_error_span_saying_what_refused_it(otel: Otel) -> None:
    run(otel, "sync")
    denied = by_call(otel.spans("execute_tool"))["call-no"]
    assert denied.status.status_code is StatusCode.ERROR
    assert denied.status.description == "denied by no-rm"
    assert denied.attributes is not None
    assert denied.attributes["error.type"] == "ActionDenied"
    assert denied.attributes["interlock.verdict"] == "deny"
    assert "interlock.reason" not in denied.attributes
    # the denied body never ran: nothing was traced inside it
    assert len(otel.spans("inside the tool")) == 1


def test_reasons_on_request_are_the_redacted_text_the_agent_reads(otel: Otel) -> None:
    telemetry = otel.telemetry()
    telemetry.reasons = True
    result, _ = run(otel, "sync", telemetry=telemetry)
    told = next(
        m.content for m in result["messages"] if isinstance(m, ToolMessage) and m.status == "error"
    )
    denied = by_call(otel.spans("execute_tool"))["call-no"]
    decided = by_call(otel.spans("interlock.check"))["call-no"]
    assert denied.status.description is not None
    assert "no recursive deletes" in denied.status.description
    assert denied.status.description in str(told)  # exactly what the model was told
    assert decided.attributes is not None
    assert decided.attributes["interlock.reason"] == denied.status.description


def test_no_argument_value_reaches_a_span(otel: Otel) -> None:
    run(otel, "sync", models=True)
    spans = otel.spans()
    assert spans
    for span in spans:
        texts = [span.name, span.status.description or ""]
        for value in (span.attributes or {}).values():
            texts.extend(str(v) for v in (value if isinstance(value, tuple) else (value,)))
        for text in texts:
            for secret in ("secret-project-7Q", "payroll-9Z", "/home/alice", "/srv/"):
                assert secret not in text, (span.name, text)


def test_model_calls_get_chat_spans_with_their_usage(otel: Otel) -> None:
    _, root = run(otel, "sync", models=True)
    chats = otel.spans("chat ")
    assert len(chats) == 2  # the turn that asks for the tools, and the final answer
    for chat in chats:
        assert chat.kind is SpanKind.CLIENT
        assert chat.parent is not None and chat.parent.span_id == root.context.span_id
        assert chat.attributes is not None
        assert chat.attributes["gen_ai.operation.name"] == "chat"
        assert chat.name == f"chat {chat.attributes['gen_ai.request.model']}"
        assert chat.attributes["gen_ai.usage.input_tokens"] == 30
        assert chat.attributes["gen_ai.usage.output_tokens"] == 7
        assert str(chat.attributes["interlock.reservation_id"])
    tokens = otel.points("gen_ai.client.token.usage")
    by_type = {p.attributes["gen_ai.token.type"]: p for p in tokens}
    assert by_type["input"].sum == 60 and by_type["input"].count == 2
    assert by_type["output"].sum == 14
    # the budget reserved the estimates and was charged what the model reported
    assert otel.total("interlock.budget.committed", **{"interlock.budget.id": "tokens"}) == 74
    assert otel.total("interlock.budget.reserved", **{"interlock.budget.id": "tokens"}) > 0
