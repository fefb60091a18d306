"""OpenTelemetry spans and metrics for a guard: the optional extra ``interlock[otel]``.

``Guard(policy, telemetry=True)`` reports through the OpenTelemetry API (the providers
the application configured, read when each span starts, so an SDK set up after the
guard is built is used); ``telemetry=Telemetry(tracer_provider=..., meter_provider=...)``
names them. Without ``telemetry`` nothing here is imported: a guard costs what it did.

What it reports (names from the OpenTelemetry GenAI semantic conventions where they
have one, ``interlock.*`` for the rest):

- a span ``interlock.check`` per decision — a child of the span current where the check
  ran (the framework's) — with the verdict, rule ids, decision id, approval id and
  reservation; an undetermined check has status ERROR;
- a span per guarded execution: ``execute_tool {tool}`` around an allowed tool body
  (current while it runs: what the tool traces is its child), ``chat {model}`` around
  an allowed model call (with ``gen_ai.usage.*``); a call the guard refused gets the
  same span, ended at once with status ERROR saying what refused it (the verdict and
  the rules). Each links to its decision's span;
- metrics: ``interlock.decisions`` (by verdict and kind), ``interlock.decision.duration``
  (seconds), ``interlock.budget.reserved`` / ``committed`` / ``released`` (by budget),
  and ``gen_ai.client.token.usage`` for guarded model calls.

No argument value is ever put on a span: names (tool, model, rule, budget), ids,
counts. A refusal's reason can quote the call (the paths an ``rm`` deletes), so it
goes on the spans only with ``Telemetry(reasons=True)`` — redacted with the policy's
patterns, as the agent is told it. A failure in here is logged and never changes a
verdict.

Example::

    from opentelemetry.sdk.trace import TracerProvider
    from interlock import Guard
    from interlock.otel import Telemetry

    guard = Guard("interlock.yaml", telemetry=Telemetry(tracer_provider=TracerProvider()))
"""

from __future__ import annotations

import logging
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final

try:
    from opentelemetry import context as otel_context
    from opentelemetry import metrics, trace
    from opentelemetry.trace import Link, SpanKind, Status, StatusCode
except ImportError as exc:  # pragma: no cover - exercised in a subprocess test
    raise ImportError(
        "Interlock's telemetry needs the OpenTelemetry API: pip install 'interlock[otel]'"
    ) from exc

from interlock.core.decision import Verdict

if TYPE_CHECKING:
    from types import TracebackType

    from opentelemetry.metrics import MeterProvider
    from opentelemetry.trace import Span, SpanContext, TracerProvider

    from interlock.core.action import Action
    from interlock.core.decision import Decision
    from interlock.core.events import Event, EventSink
    from interlock.ledger.usage import Usage
    from interlock.store.records import Reservation

__all__ = ["Execution", "Telemetry", "TelemetrySink"]

log = logging.getLogger("interlock")

_SCOPE: Final = "interlock"
_ALLOW: Final = Verdict.ALLOW
_UNDETERMINED: Final = Verdict.UNDETERMINED
#: Kinds whose decision is about running something: a refusal is a blocked execution.
_TOOL_KINDS: Final = frozenset({"tool", "mcp", "browser"})
#: What a refused call raises (the framework sees it, or a message saying it).
_BLOCKED_TYPE: Final = {
    Verdict.DENY: "ActionDenied",
    Verdict.REQUIRE_APPROVAL: "ApprovalRequired",
    Verdict.UNDETERMINED: "ActionUndetermined",
}
#: Decision latencies are micro- to milliseconds: the API's default buckets (0, 5 ms,
#: 10 ms, ...) would put every check in the first one.
_LATENCY_BUCKETS: Final = (
    0.000001,
    0.0000025,
    0.000005,
    0.00001,
    0.000025,
    0.00005,
    0.0001,
    0.00025,
    0.0005,
    0.001,
    0.0025,
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1.0,
    2.5,
    5.0,
    10.0,
)
#: The token buckets the GenAI conventions advise for gen_ai.client.token.usage.
_TOKEN_BUCKETS: Final = tuple(float(4**n) for n in range(14))
#: Allowed decisions remembered until their execution starts (then forgotten): enough
#: for every call in flight; the oldest goes first (its span then has no link).
_PENDING_MAX: Final = 4096


@dataclass(frozen=True, slots=True)
class _Decided:
    """What an execution span takes from its decision: the decision span's context
    (for the link) and the call's attributes."""

    span: SpanContext
    kind: str
    name: str
    attributes: dict[str, Any]


class Telemetry:
    """Spans and metrics for one or more guards (see the module docstring).

    ``tracer_provider`` / ``meter_provider``: ``None`` uses the global ones, as
    configured by the application (or not at all: then the API's no-op).
    ``reasons=True`` puts each refusal's reason (as the agent is told it: redacted
    with the policy's patterns) on its spans; off by default, because a reason can
    quote what the call would have done (``rm`` deletes /srv/...): a refused span
    then says the verdict and the rules that decided, and the audit record under
    ``interlock.decision_id`` has the rest.
    """

    def __init__(
        self,
        *,
        tracer_provider: TracerProvider | None = None,
        meter_provider: MeterProvider | None = None,
        reasons: bool = False,
    ) -> None:
        from interlock import __version__

        self.reasons = reasons

        self.tracer = trace.get_tracer(_SCOPE, __version__, tracer_provider)
        meter = metrics.get_meter(_SCOPE, __version__, meter_provider)
        self.decisions = meter.create_counter(
            "interlock.decisions", unit="{decision}", description="Decisions, by verdict"
        )
        self.duration = meter.create_histogram(
            "interlock.decision.duration",
            unit="s",
            description="How long a check took to reach its verdict",
            explicit_bucket_boundaries_advisory=_LATENCY_BUCKETS,
        )
        self.reserved = meter.create_counter(
            "interlock.budget.reserved", unit="{unit}", description="Budget units reserved"
        )
        self.committed = meter.create_counter(
            "interlock.budget.committed", unit="{unit}", description="Budget units spent"
        )
        self.released = meter.create_counter(
            "interlock.budget.released", unit="{unit}", description="Budget units given back"
        )
        self.tokens = meter.create_histogram(
            "gen_ai.client.token.usage",
            unit="{token}",
            description="Tokens used by guarded model calls",
            explicit_bucket_boundaries_advisory=_TOKEN_BUCKETS,
        )
        self._labels: dict[tuple[Verdict, str], dict[str, str]] = {}
        self._pending: OrderedDict[str, _Decided] = OrderedDict()
        self._lock = threading.Lock()

    def sink(self, inner: EventSink | None) -> TelemetrySink:
        """The event sink a guard with this telemetry is given: it reports each
        decision, then hands every event to ``inner`` (the user's sink, if any)."""
        return TelemetrySink(self, inner)

    # -- decisions -----------------------------------------------------------------------

    def decided(self, event: Event) -> None:
        """Report one decision event: its span, its metrics, and (for a refused call)
        the blocked execution's span. Runs where the check ran: its current span is the
        parent."""
        decision = event.decision
        if decision is None:
            return
        action = event.action
        end = time.time_ns()
        start = min(int(event.ts * 1e9) - event.latency_ns, end)
        kind = action.kind if action is not None else "unknown"
        verdict = decision.verdict
        labels = self._labels.get((verdict, kind))
        if labels is None:  # one dict per verdict and kind, not one per decision
            labels = self._labels[(verdict, kind)] = {
                "interlock.verdict": verdict.value,
                "interlock.action.kind": kind,
            }
        self.decisions.add(1, labels)
        self.duration.record((end - start) / 1e9, labels)
        reservation = decision.reservation
        if reservation is not None:
            for budget, units, unit in reservation.amounts:
                self.reserved.add(
                    units, {"interlock.budget.id": budget, "interlock.budget.unit": unit}
                )
        span = self.tracer.start_span("interlock.check", kind=SpanKind.INTERNAL, start_time=start)
        if not span.is_recording():
            # No SDK (the API's no-op), or not sampled: nothing to describe, and a
            # refused call's span would not be recorded either.
            span.end(end_time=end)
            return
        call = _call_attributes(action)
        attributes = _decision_attributes(decision)
        attributes.update(call)
        if self.reasons and (verdict is not _ALLOW or decision.fail_open):
            attributes["interlock.reason"] = decision.reason  # as told: redacted
        if verdict is _UNDETERMINED and decision.cause is not None:
            attributes["error.type"] = type(decision.cause).__name__
        span.set_attributes(attributes)
        if verdict is _UNDETERMINED:
            span.set_status(Status(StatusCode.ERROR, self._why(decision)))
        span.end(end_time=end)
        if action is None:
            return
        if verdict is _ALLOW:
            if kind in _TOOL_KINDS or kind == "llm":
                self._remember(
                    decision.decision_id, _Decided(span.get_span_context(), kind, action.name, call)
                )
        elif kind in _TOOL_KINDS or kind == "llm":
            self._blocked(decision, action, call, span.get_span_context(), start, end)

    def _blocked(
        self,
        decision: Decision,
        action: Action,
        call: dict[str, Any],
        decided: SpanContext,
        start: int,
        end: int,
    ) -> None:
        """The span of an execution the guard refused: it never ran."""
        name, kind, attributes = _execution(action.kind, action.name, call)
        attributes.update(
            {
                "interlock.verdict": decision.verdict.value,
                "interlock.decision_id": decision.decision_id,
                "error.type": _BLOCKED_TYPE.get(decision.verdict, "Blocked"),
            }
        )
        if decision.approval is not None and decision.approval.id is not None:
            attributes["interlock.approval_id"] = decision.approval.id
        span = self.tracer.start_span(
            name,
            kind=kind,
            attributes=attributes,
            links=_link(decided),
            start_time=start,
        )
        span.set_status(Status(StatusCode.ERROR, self._why(decision)))
        span.end(end_time=end)

    def _why(self, decision: Decision) -> str:
        """A refused span's status: the reason when asked for, else what decided."""
        return decision.reason if self.reasons else _summary(decision)

    def _remember(self, decision_id: str, decided: _Decided) -> None:
        with self._lock:
            pending = self._pending
            pending[decision_id] = decided
            if len(pending) > _PENDING_MAX:
                pending.popitem(last=False)

    def _recall(self, decision_id: str) -> _Decided | None:
        with self._lock:
            return self._pending.pop(decision_id, None)

    # -- executions ----------------------------------------------------------------------

    def executing(self, decision: Decision, name: str | None = None) -> Execution:
        """A context manager around the body of an allowed call: its span is current
        while the body runs, and records how it ended. ``name`` is the tool's, when
        the decision's own action is not known here."""
        decided = self._recall(decision.decision_id)
        if decided is None:
            call = {"gen_ai.tool.name": name} if name else {}
            span_name, kind, attributes = _execution("tool", name or "tool", call)
            links = None
        else:
            span_name, kind, attributes = _execution(decided.kind, decided.name, decided.attributes)
            links = _link(decided.span)
        attributes["interlock.decision_id"] = decision.decision_id
        if decision.reservation is not None:
            attributes["interlock.reservation_id"] = decision.reservation.id
        return Execution(self, span_name, kind, attributes, links)

    def model_call(self, decision: Decision, model: str) -> Execution:
        """The span of an allowed model call (see :meth:`executing`)."""
        decided = self._recall(decision.decision_id)
        call = decided.attributes if decided is not None else {"gen_ai.request.model": model}
        span_name, kind, attributes = _execution("llm", model, call)
        attributes["interlock.decision_id"] = decision.decision_id
        if decision.reservation is not None:
            attributes["interlock.reservation_id"] = decision.reservation.id
        links = _link(decided.span) if decided is not None else None
        return Execution(self, span_name, kind, attributes, links)

    # -- budgets -------------------------------------------------------------------------

    def settled(self, reservation: Reservation) -> None:
        """Count a settled reservation: what it spent, or what it gave back."""
        status = reservation.status.value
        if reservation.replayed:
            return
        for line in reservation.lines:
            labels = {"interlock.budget.id": line.budget_id, "interlock.budget.unit": line.unit}
            if status == "released":
                self.released.add(line.amount, labels)
            elif status in ("committed", "expired"):
                actual = reservation.actual or {}
                self.committed.add(actual.get(line.budget_id, line.amount), labels)


class Execution:
    """The span of one guarded execution, current between ``__enter__`` and
    ``__exit__`` (which must run in the same thread or task). A failure to make or
    end the span is logged: the body runs, and its result or error is its own."""

    __slots__ = ("_attributes", "_kind", "_links", "_name", "_span", "_telemetry", "_token")

    def __init__(
        self,
        telemetry: Telemetry,
        name: str,
        kind: SpanKind,
        attributes: dict[str, Any],
        links: list[Link] | None,
    ) -> None:
        self._telemetry = telemetry
        self._name = name
        self._kind = kind
        self._attributes = attributes
        self._links = links
        self._span: Span | None = None
        self._token: object = None

    def __enter__(self) -> Execution:
        try:
            span = self._telemetry.tracer.start_span(
                self._name, kind=self._kind, attributes=self._attributes, links=self._links
            )
            self._token = otel_context.attach(trace.set_span_in_context(span))
            self._span = span
        except Exception:
            log.exception("interlock: could not start the %s span; the call runs", self._name)
        return self

    def usage(self, usage: Usage | None) -> None:
        """Record what a model call used (on the span and as token metrics)."""
        span = self._span
        if usage is None or span is None:
            return
        try:
            span.set_attribute("gen_ai.usage.input_tokens", usage.input_tokens)
            span.set_attribute("gen_ai.usage.output_tokens", usage.output_tokens)
            labels = {
                "gen_ai.operation.name": "chat",
                "gen_ai.request.model": self._attributes.get("gen_ai.request.model", ""),
            }
            tokens = self._telemetry.tokens
            tokens.record(usage.input_tokens, {**labels, "gen_ai.token.type": "input"})
            tokens.record(usage.output_tokens, {**labels, "gen_ai.token.type": "output"})
        except Exception:
            log.exception("interlock: could not record a model call's usage")

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        span = self._span
        if span is None:
            return
        self._span = None
        try:
            if exc is not None:
                span.set_attribute("error.type", type(exc).__qualname__)
                span.set_status(Status(StatusCode.ERROR, f"{type(exc).__name__}"))
            otel_context.detach(self._token)  # type: ignore[arg-type]
            span.end()
        except Exception:
            log.exception("interlock: could not end the %s span", self._name)


class TelemetrySink:
    """An event sink that reports decisions to a :class:`Telemetry` and passes every
    event on to ``inner``. Reporting never raises; ``inner`` raises as it would."""

    __slots__ = ("inner", "telemetry")

    def __init__(self, telemetry: Telemetry, inner: EventSink | None) -> None:
        self.telemetry = telemetry
        self.inner = inner

    def emit(self, event: Event) -> None:
        if event.kind == "decision":
            try:
                self.telemetry.decided(event)
            except Exception:
                log.exception("interlock: telemetry failed on a decision; the decision stands")
        if self.inner is not None:
            self.inner.emit(event)


def _call_attributes(action: Action | None) -> dict[str, Any]:
    """The GenAI attributes of the call an action stands for: names and ids only."""
    if action is None:
        return {}
    attributes: dict[str, Any] = {"interlock.action.kind": action.kind}
    if action.kind == "llm":
        attributes["gen_ai.request.model"] = action.name
    else:
        attributes["gen_ai.tool.name"] = action.name
    context = action.context
    if context.call_id is not None:
        attributes["gen_ai.tool.call.id"] = context.call_id
    if context.agent is not None:
        attributes["gen_ai.agent.id"] = context.agent
    if context.session_id is not None:
        attributes["gen_ai.conversation.id"] = context.session_id
    attributes["interlock.tenant"] = context.tenant
    if action.scope is not None:
        attributes["interlock.scope"] = action.scope
    return attributes


def _decision_attributes(decision: Decision) -> dict[str, Any]:
    attributes: dict[str, Any] = {
        "interlock.verdict": decision.verdict.value,
        "interlock.decision_id": decision.decision_id,
    }
    if decision.rule_ids:
        attributes["interlock.rule_ids"] = list(decision.rule_ids)
    approval = decision.approval
    if approval is not None:
        if approval.id is not None:
            attributes["interlock.approval_id"] = approval.id
        if approval.status is not None:
            attributes["interlock.approval.status"] = approval.status
    reservation = decision.reservation
    if reservation is not None:
        attributes["interlock.reservation_id"] = reservation.id
        attributes["interlock.budget.ids"] = [budget for budget, _, _ in reservation.amounts]
        attributes["interlock.budget.reserved"] = [units for _, units, _ in reservation.amounts]
    if decision.shadow is not None:
        attributes["interlock.shadow.verdict"] = decision.shadow.verdict.value
    if decision.fail_open:
        attributes["interlock.fail_open"] = True
    return attributes


def _summary(decision: Decision) -> str:
    """What decided a refusal, with no text of the call in it: the verdict, the rules
    (or the policy's default), the cause's type, the approval to decide."""
    verdict = decision.verdict
    if verdict is _UNDETERMINED:
        cause = type(decision.cause).__name__ if decision.cause is not None else "no verdict"
        return f"undetermined ({cause}): the call did not run"
    rules = ", ".join(decision.rule_ids) or "the policy's default"
    if verdict is Verdict.REQUIRE_APPROVAL:
        approval = decision.approval.id if decision.approval is not None else None
        pending = f"; approval {approval}" if approval else ""
        return f"requires approval ({rules}){pending}"
    return f"denied by {rules}"


def _execution(kind: str, name: str, call: dict[str, Any]) -> tuple[str, SpanKind, dict[str, Any]]:
    """The span name, kind and attributes of an execution, by the GenAI conventions:
    ``chat {model}`` (a client span) for a model call, ``execute_tool {tool}`` else."""
    attributes = {k: v for k, v in call.items() if not k.startswith("interlock.")}
    attributes["interlock.action.kind"] = kind
    if kind == "llm":
        attributes["gen_ai.operation.name"] = "chat"
        return f"chat {name}", SpanKind.CLIENT, attributes
    attributes["gen_ai.operation.name"] = "execute_tool"
    attributes["gen_ai.tool.type"] = "extension" if kind == "mcp" else "function"
    return f"execute_tool {name}", SpanKind.INTERNAL, attributes


def _link(context: SpanContext) -> list[Link] | None:
    return [Link(context)] if context.is_valid else None
