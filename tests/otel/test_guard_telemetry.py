"""Telemetry at the guard: decision spans and metrics read with the SDK's in-memory
reader, ``protect`` executions, and failures that never change a verdict."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

pytest.importorskip("opentelemetry.sdk")

from opentelemetry.sdk.trace import ReadableSpan, SpanProcessor, TracerProvider
from opentelemetry.trace import StatusCode

from interlock import Action, ActionDenied, Decision, Guard, Usage, Verdict, load_policy_text
from interlock.core.events import MemorySink
from interlock.otel import Telemetry

from .conftest import Otel

POLICY = load_policy_text(
    """
version: 1
default: deny
rules:
  - id: read
    decision: allow
    reason: reading is fine
    name: read_file
  - id: pay-big
    decision: require_approval
    reason: big payments need a human
    name: pay
    when: "args.amount > 100"
  - id: pay
    decision: allow
    reason: small payments
    name: pay
  - id: models
    decision: allow
    reason: models may answer
    kind: llm
budgets:
  - id: spend
    limit: 1000
    unit: USD
    default_estimate: 1
    name: pay
  - id: tokens
    limit: 100000
    unit: tokens
    kind: llm
""",
    file="otel-guard.yaml",
)


def only(spans: list[ReadableSpan]) -> ReadableSpan:
    assert len(spans) == 1, [s.name for s in spans]
    return spans[0]


def test_decisions_are_counted_by_verdict_and_kind(otel: Otel) -> None:
    guard = Guard(POLICY, telemetry=otel.telemetry())
    for _ in range(3):
        assert guard.check(Action.tool("read_file", {"path": "a"})).allowed
    assert guard.check(Action.tool("rm", {})).verdict is Verdict.DENY
    pending = guard.check(Action.tool("pay", {"amount": 500}))
    assert pending.verdict is Verdict.REQUIRE_APPROVAL

    def count(verdict: str) -> float:
        labels = {"interlock.verdict": verdict, "interlock.action.kind": "tool"}
        return otel.total("interlock.decisions", **labels)

    assert (count("allow"), count("deny"), count("require_approval")) == (3, 1, 1)
    durations = otel.points("interlock.decision.duration")
    assert sum(p.count for p in durations) == 5
    assert all(p.min >= 0 for p in durations)
    # micro-second buckets, not the API's default ones (0, 5 ms, 10 ms, ...)
    assert durations[0].explicit_bounds[0] == pytest.approx(1e-6)


def test_a_decision_span_carries_the_verdict_and_the_rules(otel: Otel) -> None:
    guard = Guard(POLICY, telemetry=otel.telemetry())
    decision = guard.check(Action.tool("pay", {"amount": 500}))
    span = only(otel.spans("interlock.check"))
    assert span.attributes is not None
    assert span.attributes["interlock.verdict"] == "require_approval"
    assert span.attributes["interlock.rule_ids"] == ("pay-big",)
    assert span.attributes["interlock.decision_id"] == decision.decision_id
    assert "interlock.reason" not in span.attributes  # reasons only when asked for
    assert span.status.status_code is StatusCode.UNSET  # the check did its job
    blocked = only(otel.spans("execute_tool"))
    assert blocked.attributes is not None
    assert blocked.attributes["error.type"] == "ApprovalRequired"
    assert blocked.status.status_code is StatusCode.ERROR
    assert blocked.status.description == "requires approval (pay-big)"


def test_an_undetermined_check_is_an_error_span(otel: Otel) -> None:
    def broken(*_: Any) -> Any:
        raise RuntimeError("the mapper broke")

    guard = Guard(POLICY, telemetry=otel.telemetry())
    decision = guard.check_mapped(broken, "x")
    assert decision is not None and decision.verdict is Verdict.UNDETERMINED
    span = only(otel.spans("interlock.check"))
    assert span.status.status_code is StatusCode.ERROR
    assert span.attributes is not None
    assert span.attributes["error.type"] == "MappingError"
    assert otel.total("interlock.decisions", **{"interlock.verdict": "undetermined"}) == 1


def test_budgets_reserved_and_committed_are_metrics(otel: Otel) -> None:
    guard = Guard(POLICY, telemetry=otel.telemetry())

    @guard.protect
    def pay(amount: int) -> str:
        return f"paid {amount}"

    assert pay(5) == "paid 5"
    assert pay(7) == "paid 7"
    decision = guard.check(Action.tool("pay", {"amount": 1}))
    guard.release(decision)
    spend = {"interlock.budget.id": "spend"}
    assert decision.reservation is not None
    ((_, each, _),) = decision.reservation.amounts  # one call's reservation, in units
    assert each > 0
    assert otel.total("interlock.budget.reserved", **spend) == 3 * each
    assert otel.total("interlock.budget.committed", **spend) == 2 * each
    assert otel.total("interlock.budget.released", **spend) == each
    executions = otel.spans("execute_tool pay")
    assert len(executions) == 2
    assert all(s.attributes and s.attributes["interlock.reservation_id"] for s in executions)


def test_protect_runs_the_body_inside_its_span(otel: Otel) -> None:
    guard = Guard(POLICY, telemetry=otel.telemetry())
    tracer = otel.tracer_provider.get_tracer("test")

    @guard.protect
    def read_file(path: str) -> str:
        with tracer.start_as_current_span("reading"):
            return "text"

    @guard.protect
    async def fetch(url: str) -> str:
        return "never"

    with tracer.start_as_current_span("outer"):
        assert read_file("notes.txt") == "text"
        with pytest.raises(ActionDenied):
            asyncio.run(fetch("https://example.test"))
    outer = only(otel.spans("outer"))
    execution = only(otel.spans("execute_tool read_file"))
    assert execution.parent is not None and execution.parent.span_id == outer.context.span_id
    reading = only(otel.spans("reading"))
    assert reading.parent is not None and reading.parent.span_id == execution.context.span_id
    refused = only(otel.spans("execute_tool fetch"))
    assert refused.status.status_code is StatusCode.ERROR


def test_a_body_that_raises_ends_its_span_in_error(otel: Otel) -> None:
    guard = Guard(POLICY, telemetry=otel.telemetry())

    @guard.protect
    def read_file(path: str) -> str:
        raise FileNotFoundError(path)

    with pytest.raises(FileNotFoundError):
        read_file("/nope")
    span = only(otel.spans("execute_tool read_file"))
    assert span.status.status_code is StatusCode.ERROR
    assert span.attributes is not None and span.attributes["error.type"] == "FileNotFoundError"
    assert "/nope" not in (span.status.description or "")  # the message may quote arguments


def test_llm_call_spans_and_token_metrics(otel: Otel) -> None:
    guard = Guard(POLICY, telemetry=otel.telemetry())
    with guard.llm_call("fake-model", estimate=Usage(100, 50)) as call:
        call.record(Usage(80, 20))

    async def twice() -> None:
        async with guard.llm_call("fake-model", estimate=Usage(10, 5)) as call:
            call.record({"input_tokens": 9, "output_tokens": 4})

    asyncio.run(twice())
    chats = otel.spans("chat fake-model")
    assert len(chats) == 2
    assert [(s.attributes or {}).get("gen_ai.usage.input_tokens") for s in chats] == [80, 9]
    assert all((s.attributes or {})["gen_ai.request.model"] == "fake-model" for s in chats)
    assert otel.total("interlock.budget.committed", **{"interlock.budget.id": "tokens"}) == 113


class Exploding(SpanProcessor):
    """A span processor that fails on every span: telemetry must not matter."""

    def on_start(self, span: Any, parent_context: Any = None) -> None:
        raise RuntimeError("processor exploded on start")

    def on_end(self, span: Any) -> None:
        raise RuntimeError("processor exploded on end")


class ExplodingTelemetry(Telemetry):
    def decided(self, event: Any) -> None:
        raise RuntimeError("telemetry exploded")

    def executing(self, decision: Decision, name: str | None = None) -> Any:
        raise RuntimeError("telemetry exploded")


@pytest.mark.parametrize("make", ["processor", "telemetry"])
def test_failing_telemetry_never_changes_a_verdict_or_stops_a_body(make: str) -> None:
    if make == "processor":
        provider = TracerProvider()
        provider.add_span_processor(Exploding())
        telemetry = Telemetry(tracer_provider=provider)
    else:
        telemetry = ExplodingTelemetry(tracer_provider=TracerProvider())
    sink = MemorySink()
    guard = Guard(POLICY, telemetry=telemetry, sink=sink)
    ran: list[str] = []

    @guard.protect
    def read_file(path: str) -> str:
        ran.append(path)
        return "text"

    @guard.protect
    def rm(path: str) -> None:
        ran.append("rm " + path)

    assert read_file("a") == "text"
    with pytest.raises(ActionDenied):
        rm("/")  # still denied: fails closed
    assert guard.check(Action.tool("rm", {})).verdict is Verdict.DENY
    assert ran == ["a"]
    # the user's own sink still sees every decision
    assert [r["decision"] for r in sink.records() if r["kind"] == "decision"] == [
        "allow",
        "deny",
        "deny",
    ]


def test_telemetry_must_be_a_telemetry() -> None:
    with pytest.raises(TypeError, match="Telemetry"):
        Guard(POLICY, telemetry="yes")  # type: ignore[arg-type]


def test_a_guard_without_telemetry_has_none() -> None:
    guard = Guard(POLICY)
    assert guard.telemetry is None
    assert guard.sink is None
