"""The four phases around an allowed call, as events: what went into a tool or a model,
and what came out.

A decision event says whether a call may run; these say what happened when it did:

- ``tool_invoke`` — an allowed tool body starts (its name and arguments);
- ``tool_result`` — it returned or raised (a preview of the output, or the error);
- ``llm_input`` — an allowed model call starts (the model, the reserved estimate);
- ``llm_output`` — it returned or raised (the usage it reported).

Each carries the ``decision_id`` of the decision that let it run, so a reader joins
them. They go to the guard's event sink (redacted there, like every event) and cost
nothing when the guard has none. Every adapter emits them: the tool phases from the
shared settle path (:func:`interlock.adapters.base.run_settled`), the model phases
from :meth:`interlock.Guard.llm_call`.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final, Protocol

from interlock.core.events import Event
from interlock.core.redaction import Redactor
from interlock.errors import describe

if TYPE_CHECKING:
    from interlock.core.decision import Decision
    from interlock.core.events import EventSink

__all__ = [
    "LLMInput",
    "LLMOutput",
    "Observed",
    "Phase",
    "TokenCounts",
    "ToolInvoke",
    "ToolResult",
    "emit_phase",
    "preview",
]

log = logging.getLogger("interlock")

#: The longest output preview a tool_result carries, in characters.
PREVIEW_CHARS: Final = 200
_REDACTOR: Final = Redactor()


class Observed(Protocol):
    """What the phases need of a guard (core knows nothing above it): the sink the
    events go to, if any, and the redactor they pass through."""

    @property
    def sink(self) -> EventSink | None: ...

    @property
    def redactor(self) -> Redactor: ...


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


def error_text(exc: BaseException) -> str:
    return describe(exc)


def tool_started(guard: Observed, decision: Decision, name: str, arguments: str) -> int:
    """Emit ``tool_invoke``; returns the start time for :func:`tool_finished`."""
    if guard.sink is not None:
        emit_phase(guard, ToolInvoke(name, arguments, decision.decision_id))
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
    if guard.sink is None:
        return
    emit_phase(
        guard,
        ToolResult(
            name,
            decision.decision_id,
            ok=error is None,
            output=None if error is not None else preview(result, guard.redactor),
            error=None if error is None else describe(error),
            duration_ns=time.perf_counter_ns() - started,
        ),
    )
