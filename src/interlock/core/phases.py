"""The four phases around an allowed call, as events: what went into a tool or a model,
and what came out.

A decision event says whether a call may run; these say what happened when it did:

- ``tool_invoke`` — an allowed tool body starts (its name and arguments);
- ``tool_result`` — it returned or raised (a preview of the output, or the error);
- ``llm_input`` — an allowed model call starts (the model, the reserved estimate);
- ``llm_output`` — it returned or raised (the usage it reported).

Each carries the ``decision_id`` of the decision that let it run, so a reader joins
them. They go to the guard's event sink (redacted there, like every event) and cost
nothing when the guard has none; a guard with an audit log also appends them to its
chain (:mod:`interlock.store.outcomes`): a start durable before the body runs, an end
group-committed after it. Every adapter emits them: the tool phases from the
shared settle path (:func:`interlock.adapters.base.run_settled`), the model phases
from :meth:`interlock.Guard.llm_call`.
"""

from __future__ import annotations

import hashlib
import logging
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final, Protocol

from interlock.core.decision import Verdict
from interlock.core.events import Event
from interlock.core.redaction import Redactor
from interlock.core.starting import Starting
from interlock.errors import describe

if TYPE_CHECKING:
    from interlock.core.action import Context
    from interlock.core.decision import Decision
    from interlock.core.events import EventSink

__all__ = [
    "LLMInput",
    "LLMOutput",
    "Observed",
    "OutcomeLog",
    "Phase",
    "TokenCounts",
    "ToolInvoke",
    "ToolResult",
    "emit_phase",
    "preview",
    "start_joined",
]

log = logging.getLogger("interlock")

#: The longest output preview a tool_result carries, in characters.
PREVIEW_CHARS: Final = 200
_REDACTOR: Final = Redactor()


class OutcomeLog(Protocol):
    """Where outcome records go: the guard's audit writer
    (:class:`interlock.store.audit.AuditWriter` is one)."""

    @property
    def waits(self) -> bool: ...

    def write_record(self, tenant: str, kind: str, record: dict[str, Any]) -> int | None: ...

    def write_record_nowait(self, tenant: str, kind: str, record: dict[str, Any]) -> None: ...


class Observed(Protocol):
    """What the phases need of a guard (core knows nothing above it): the sink the
    events go to, if any, the redactor they pass through, and the audit log (with
    the guard's context: its tenant and agent) outcome records go to, if any."""

    @property
    def sink(self) -> EventSink | None: ...

    @property
    def redactor(self) -> Redactor: ...

    @property
    def audit(self) -> OutcomeLog | None: ...

    @property
    def context(self) -> Context: ...

    def outcome_owner(self, decision_id: str, phase: str = "") -> tuple[str, str | None]:
        """The tenant and agent of the call ``decision_id`` allowed: the chain its
        outcome records belong to (a guard serving many tenants decides for each);
        ``phase``, the record's kind (a start holds the owner until its end)."""
        ...


class TokenCounts(Protocol):
    """A model call's token counts (:class:`interlock.ledger.usage.Usage` is one)."""

    @property
    def input_tokens(self) -> int: ...

    @property
    def output_tokens(self) -> int: ...


def preview(value: object, redactor: Redactor | None = None) -> str:
    """A short text form of a result, for the record: redacted before it is cut (a cut
    must not leave part of a secret too short to be recognised), then by the sink."""
    text = value if isinstance(value, str) else _repr(value)
    return (redactor or _REDACTOR).cut(text, PREVIEW_CHARS)


def _repr(value: object) -> str:
    try:
        return repr(value)
    except Exception:
        return f"<unrepresentable: {type(value).__name__}>"


@dataclass(frozen=True, slots=True)
class ToolInvoke:
    name: str
    arguments: str  # canonical JSON
    decision_id: str
    kind: str = "tool_invoke"

    def fields(self) -> dict[str, Any]:
        return {"tool": self.name, "arguments": self.arguments, "decision_id": self.decision_id}


@dataclass(frozen=True, slots=True)
class ToolResult:
    name: str
    decision_id: str
    ok: bool
    output: str | None
    error: str | None
    duration_ns: int
    kind: str = "tool_result"

    def fields(self) -> dict[str, Any]:
        out: dict[str, Any] = {"tool": self.name, "decision_id": self.decision_id, "ok": self.ok}
        if self.output is not None:
            out["output"] = self.output
        if self.error is not None:
            out["error"] = self.error
        return out


@dataclass(frozen=True, slots=True)
class LLMInput:
    model: str
    decision_id: str
    estimate: TokenCounts
    kind: str = "llm_input"

    def fields(self) -> dict[str, Any]:
        return {
            "model": self.model,
            "decision_id": self.decision_id,
            "estimate": {
                "input_tokens": self.estimate.input_tokens,
                "output_tokens": self.estimate.output_tokens,
            },
        }


@dataclass(frozen=True, slots=True)
class LLMOutput:
    model: str
    decision_id: str
    ok: bool
    usage: TokenCounts | None
    error: str | None
    duration_ns: int
    kind: str = "llm_output"

    def fields(self) -> dict[str, Any]:
        out: dict[str, Any] = {"model": self.model, "decision_id": self.decision_id, "ok": self.ok}
        if self.usage is not None:
            out["usage"] = {
                "input_tokens": self.usage.input_tokens,
                "output_tokens": self.usage.output_tokens,
            }
        if self.error is not None:
            out["error"] = self.error
        return out


Phase = ToolInvoke | ToolResult | LLMInput | LLMOutput


def emit_phase(guard: Observed, phase: Phase) -> None:
    """Hand ``phase`` to the guard's sink, if it has one; a failing sink is logged."""
    sink = guard.sink
    if sink is None:
        return
    duration = getattr(phase, "duration_ns", 0)
    try:
        sink.emit(
            Event(phase.kind, time.time(), None, None, duration, phase.fields(), guard.redactor)
        )
    except Exception:
        log.exception("interlock: the event sink failed on a %s event", phase.kind)


def record_phase(
    guard: Observed, phase: Phase, *, result: object = None, error_type: str | None = None
) -> None:
    """Append ``phase`` to the guard's audit chain, if it has one: a start waits until
    it is durable (a crash mid-body leaves it, see :mod:`interlock.store.outcomes`), an
    end is queued for the next group commit. A start that cannot be made durable
    raises (:class:`~interlock.errors.AuditFailure`): the body does not run."""
    audit = guard.audit
    if audit is None:
        return
    tenant, agent = guard.outcome_owner(phase.decision_id, phase.kind)
    record: dict[str, Any] = {
        "decision_id": phase.decision_id,
        "agent": agent,
    }
    if isinstance(phase, ToolInvoke):
        record["tool"] = phase.name  # its arguments: in the decision's record
    elif isinstance(phase, LLMInput):
        record.update(phase.fields())
    else:
        record.update(phase.fields())
        record["duration_us"] = phase.duration_ns // 1000
        if phase.ok and isinstance(phase, ToolResult):
            record["digest"] = digest(result)
            record.pop("output", None)
            record["preview"] = phase.output
        if error_type is not None:
            record["error_type"] = error_type
    if phase.kind in ("tool_invoke", "llm_input"):
        audit.write_record(tenant, phase.kind, record)
        return
    try:
        audit.write_record_nowait(tenant, phase.kind, record)
    except Exception:  # the writer closed: the outcome is lost, the recovery pass says so
        log.exception("interlock: could not queue a %s record", phase.kind)


def digest(value: object) -> str:
    """``sha256:<hex>`` of a result's text form (``str`` as it is, bytes as they are,
    else ``repr``): who holds the result can show it is the one recorded."""
    if isinstance(value, bytes):
        data = value
    else:
        text = value if isinstance(value, str) else _repr(value)
        data = text.encode("utf-8", "surrogatepass")
    return "sha256:" + hashlib.sha256(data).hexdigest()


def failure(error: BaseException, redactor: Redactor | None = None) -> tuple[str, str]:
    """An error as the record shows it: its type and its redacted, bounded message."""
    try:
        message = str(error)
    except Exception:
        message = "<unprintable>"
    return type(error).__name__, (redactor or _REDACTOR).cut(message, PREVIEW_CHARS)


def error_text(exc: BaseException) -> str:
    return describe(exc)


def tool_started(
    guard: Observed, decision: Decision, name: str, arguments: str, *, recorded: bool = False
) -> int:
    """Emit ``tool_invoke`` (and record it, durable, in the audit log — unless
    ``recorded``: the decision's commit carried it, see :func:`start_joined`); returns
    the start time for :func:`tool_finished`."""
    if guard.sink is not None:
        emit_phase(guard, ToolInvoke(name, arguments, decision.decision_id))
    if guard.audit is not None and not recorded:
        record_phase(guard, ToolInvoke(name, arguments, decision.decision_id))
    return time.perf_counter_ns()


def tool_finished(
    guard: Observed,
    decision: Decision,
    name: str,
    started: int,
    *,
    result: object = None,
    error: BaseException | None = None,
) -> None:
    if guard.sink is None and guard.audit is None:
        return
    phase = ToolResult(
        name,
        decision.decision_id,
        ok=error is None,
        output=None if error is not None else preview(result, guard.redactor),
        error=None if error is None else describe(error),
        duration_ns=time.perf_counter_ns() - started,
    )
    if guard.sink is not None:
        emit_phase(guard, phase)
    if guard.audit is not None:
        if error is not None:
            error_type, message = failure(error, guard.redactor)
            phase = ToolResult(name, phase.decision_id, False, None, message, phase.duration_ns)
            record_phase(guard, phase, error_type=error_type)
        else:
            record_phase(guard, phase, result=result)


# -- a start record in its decision's commit ---------------------------------------------


def start_joined(guard: Observed, decision: Decision | None, starting: Starting) -> bool:
    """Whether ``decision``'s commit carried the start record offered in ``starting``
    (the body may run without writing it again). One that went with another decision
    (a mapper's several actions) or with a decision that does not stand (its record
    was late, a deadline passed after the reservation: not allow) is closed now, with
    an end record saying the call did not run under it: no start is left dangling for
    the recovery pass to call ``outcome unknown``."""
    joined = starting.decision_id
    if joined is None:
        return False
    if (
        decision is not None
        and joined == decision.decision_id
        and decision.verdict is Verdict.ALLOW
    ):
        return True
    not_run = "the call did not run under it"
    phase: Phase
    if starting.kind == "tool_invoke":
        phase = ToolResult(starting.name, joined, False, None, not_run, 0)
    else:
        phase = LLMOutput(starting.name, joined, False, None, not_run, 0)
    try:
        record_phase(guard, phase, error_type="NotRun")
    except Exception:
        log.exception("interlock: could not close the %s of %s", starting.kind, joined)
    return False
