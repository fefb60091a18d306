"""A body's start record in its decision's commit (issue 13: no second durable write).

What runs a body (or a model) right after its check, if allowed — ``protect``, an
adapter's :func:`~interlock.adapters.base.run_settled`, ``llm_call`` — offers that
body's start record (``tool_invoke`` / ``llm_input``) to the check, in
:data:`STARTING`; the guard appends it right after an allowed decision's record, in the
same transaction (the reservation's, or the audit writer's batch), so the start is
durable with the decision: one commit before the body, not two. A check that does not
allow takes nothing (nothing is delayed, nothing starts);
:func:`interlock.core.phases.start_joined` closes a start that went with a decision
which does not stand. Kept apart from :mod:`interlock.core.phases`, which the guard
imports only when a body runs (ADR 0014: a fast start).
"""

from __future__ import annotations

import contextvars
from typing import TYPE_CHECKING, Any, Final

if TYPE_CHECKING:
    from interlock.core.phases import TokenCounts

__all__ = ["STARTING", "Starting"]


class Starting:
    """A start record on offer to the decision's own commit. What runs a body (or a
    model) right after its check, if allowed — ``protect``, an adapter's
    :func:`~interlock.adapters.base.run_settled`, ``llm_call`` — sets :data:`STARTING`
    to one of these around the check and nothing else. The guard, recording an allowed
    decision, appends the start record (``tool_invoke`` / ``llm_input``) right after it,
    in the same transaction — its reservation's, or the audit writer's batch — and
    ``decision_id`` says which decision's commit carried it: one durable write before
    the body, not two. A check that does not allow claims nothing (nothing is delayed,
    nothing starts); :func:`~interlock.core.phases.start_joined` closes a start that
    went with a decision which does not stand."""

    __slots__ = ("decision_id", "estimate", "kind", "name")

    def __init__(self, kind: str, name: str, estimate: TokenCounts | None = None) -> None:
        if kind not in ("tool_invoke", "llm_input"):
            raise ValueError(f"a start record is tool_invoke or llm_input, not {kind!r}")
        self.kind = kind
        self.name = name  # the tool, or the model
        self.estimate = estimate  # llm_input: the reserved estimate
        self.decision_id: str | None = None  # the decision whose commit carried it

    def record(self, decision_id: str, agent: str | None) -> dict[str, Any]:
        """The start record of the call ``decision_id`` allowed, as
        :func:`~interlock.core.phases.record_phase` writes it."""
        record: dict[str, Any] = {"decision_id": decision_id, "agent": agent}
        if self.kind == "tool_invoke":
            record["tool"] = self.name  # its arguments: in the decision's record
        else:
            estimate = self.estimate  # none stated: the record says zero, as the event does
            record["model"] = self.name
            record["estimate"] = {
                "input_tokens": estimate.input_tokens if estimate is not None else 0,
                "output_tokens": estimate.output_tokens if estimate is not None else 0,
            }
        return record


#: The start record on offer while a body's check runs (``None``: none follows).
STARTING: Final[contextvars.ContextVar[Starting | None]] = contextvars.ContextVar(
    "interlock_starting", default=None
)
