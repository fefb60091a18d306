"""The local engine with state: approvals, rate limits and budgets on top of the pure
verdict.

1. The pure engine decides (``evaluate``).
2. ``require_approval`` → the call's approval request: a claimed grant turns it into
   ``allow``; a standing denial into ``deny``; otherwise it stays pending. (Without a
   store there are no approval requests: the verdict stays as the engine gave it.)
3. ``allow`` → each rate limit that applies takes a slot, or the call is denied.
4. ``allow`` → one reservation, owned by the call's agent, on every budget that
   covers the call (a positive amount each, with its headroom), or: a deny naming
   the budget when nothing says what the call may cost, a deny when the budget is
   closed, else the budget's ``on_exceed`` verdict (``deny``, or an approval request
   of its own: once approved, the retried call reserves past the cap and the
   overspend is recorded).

The ledger is the store, or — for a guard without one — a
:class:`~interlock.ledger.memory.MemoryLedger` of this process.

Whatever this step holds for an ``allow`` — a reservation, a claimed grant — is given
back by :meth:`StatefulDecider.compensate` when the guard does not let the action run
after all (a timeout, a cancellation, an audit failure).
"""

from __future__ import annotations

import contextvars
import logging
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING

from interlock.core.deadline import deadline_scope
from interlock.core.decision import Decision, ReservationRef, Verdict
from interlock.core.redaction import Redactor
from interlock.deciders.joined import JOINED, DecisionRecord
from interlock.errors import CostUnknown, describe
from interlock.policy.engine import evaluate
from interlock.policy.specs import scope_key

# The approvals, the budget arithmetic and the store's records are imported by the
# first check that has state to settle, not by every guard whose policy has a budget:
# a one-call `interlock check` rarely needs them (ADR 0014).

if TYPE_CHECKING:
    import asyncio

    from interlock.core.action import Action
    from interlock.deciders.base import CancelToken
    from interlock.ledger.memory import MemoryLedger
    from interlock.policy.compiled import CompiledPolicy
    from interlock.store.records import BudgetLine, Reservation
    from interlock.store.sql import SqlStore

__all__ = ["EFFECT_CALL", "StatefulDecider"]

#: The effect call being checked (:mod:`interlock.effects.pipeline` sets it around its
#: check). A reservation is keyed by the runtime's idempotency key and the intent, so a
#: retry of the same call finds the first one again; an effect call keys its own apart:
#: its outcome settles it (a key never executed is released and its next attempt
#: reserves anew), and concurrent callers with one key must not share — and so release —
#: the reservation of the one that runs it.
EFFECT_CALL: contextvars.ContextVar[str | None] = contextvars.ContextVar(
    "interlock_effect_call", default=None
)

log = logging.getLogger("interlock")


class StatefulDecider:
    """Evaluates in-process and keeps approvals, rate limits and budgets in ``store``
    — or, with ``store=None``, rate limits and budgets in ``ledger`` (a
    :class:`~interlock.ledger.memory.MemoryLedger`, or a function that returns the
    same one each time, called when a check first needs it) and no approval requests.
    ``reservation_ttl`` (seconds) is how long an unsettled reservation is held before
    the reaper charges it."""

    def __init__(
        self,
        policy: CompiledPolicy,
        store: SqlStore | None = None,
        *,
        ledger: MemoryLedger | Callable[[], MemoryLedger] | None = None,
        reservation_ttl: float = 300.0,
        redactor: Redactor | None = None,
    ) -> None:
        if reservation_ttl <= 0:
            raise ValueError(f"reservation_ttl must be positive, not {reservation_ttl!r}")
        if (store is None) == (ledger is None):
            raise ValueError("a StatefulDecider keeps its state in a store or in a ledger")
        self.policy = policy
        self.store = store
        self._ledger: SqlStore | MemoryLedger | None = store
        self._make_ledger: Callable[[], MemoryLedger] | None = None
        if store is None:
            if callable(ledger):
                self._make_ledger = ledger
            else:
                self._ledger = ledger
        # The store does I/O: an async check settles on a thread. Memory does not.
        self._blocking = store is not None
        self.reservation_ttl = reservation_ttl
        self.redactor = redactor or Redactor(extra_patterns=policy.redaction_patterns)

    @property
    def ledger(self) -> SqlStore | MemoryLedger:
        """Where the rate limits and budgets are kept: the store, or the memory ledger."""
        ledger = self._ledger
        if ledger is None:
            assert self._make_ledger is not None  # one of the three was given
            ledger = self._ledger = self._make_ledger()
        return ledger

    # -- the Decider protocol --------------------------------------------------------

    def decide(
        self, action: Action, *, deadline: float | None, cancel: CancelToken | None
    ) -> Decision:
        decision = evaluate(action, self.policy)
        if not self._needs_state(action, decision):
            return decision
        lines = self._lines(action, decision)
        if isinstance(lines, Decision):
            return lines
        return self.settle(action, decision, lines)

    async def adecide(
        self, action: Action, *, deadline: float | None, cancel: CancelToken | None
    ) -> Decision:
        decision = evaluate(action, self.policy)
        if not self._needs_state(action, decision):
            return decision
        lines = self._lines(action, decision)
        if isinstance(lines, Decision):
            return lines
        if not self._blocking:
            return self.settle(action, decision, lines)
        # The store is synchronous: run it in a thread (it inherits the check's
        # deadline). If this task is cancelled or times out meanwhile, whatever the
        # thread ends up holding is given back.
        import asyncio  # running: already loaded by the loop; never at import (ADR 0014)

        work = asyncio.ensure_future(asyncio.to_thread(self.settle, action, decision, lines))
        try:
            return await asyncio.shield(work)
        except asyncio.CancelledError:
            work.add_done_callback(self._compensate_when_done)
            raise

    def _needs_state(self, action: Action, decision: Decision) -> bool:
        """Whether the ledger has a say: an approval to find or open, or an allowed
        call some rate limit or budget covers (worked out here, from the policy alone,
        so the calls nothing covers never reach the store — nor, async, a thread)."""
        verdict = decision.verdict
        if verdict is Verdict.REQUIRE_APPROVAL:
            return self.store is not None
        if verdict is not Verdict.ALLOW:
            return False
        rule_ids = decision.rule_ids
        policy = self.policy
        return any(spec.selector.matches(action, rule_ids) for spec in policy.rate_limits) or any(
            spec.selector.matches(action, rule_ids) for spec in policy.budgets
        )

    def _lines(self, action: Action, decision: Decision) -> list[BudgetLine] | Decision:
        """What the call would reserve, worked out from the policy alone — or the deny
        of a budget that covers it when nothing says what it may cost (so that refusal
        never reaches the store)."""
        from interlock.ledger.budgets import budget_lines

        try:
            return budget_lines(self.policy, action, decision.rule_ids)
        except CostUnknown as unknown:  # a refusal of the policy's, not a failure
            return Decision(
                Verdict.DENY,
                str(unknown),
                (f"budget:{unknown.budget_id}",),
                None,
                decision.decision_id,
            )

    # -- the stateful steps ----------------------------------------------------------

    def settle(
        self, action: Action, decision: Decision, lines: list[BudgetLine] | None = None
    ) -> Decision:
        """Steps 2–4 on a pure verdict (``lines``: what :func:`budget_lines` gives the
        call, when already worked out). Store failures propagate (the guard makes
        them undetermined)."""
        claimed: str | None = None
        if decision.verdict is Verdict.REQUIRE_APPROVAL:
            decision = self._approval(action, decision, decision.rule_ids, decision.reason)
            if decision.verdict is not Verdict.ALLOW:
                return decision
            claimed = decision.approval.id if decision.approval else None
        try:
            limited = self._rate_limited(action, decision)
            if limited is not None:
                self.compensate(decision)
                return limited
            return self._reserve(action, decision, claimed, lines)
        except BaseException:
            self.compensate(decision)
            raise

    def _approval(
        self, action: Action, decision: Decision, rule_ids: tuple[str, ...], reason: str
    ) -> Decision:
        if self.store is None:  # no store, no approval requests: the verdict stands
            return Decision(Verdict.REQUIRE_APPROVAL, reason, rule_ids, None, decision.decision_id)
        from interlock.approvals.requests import approval_decision, request_approval

        outcome = request_approval(
            self.store,
            self.policy,
            action,
            rule_ids=rule_ids,
            reason=reason,
            redactor=self.redactor,
        )
        return approval_decision(
            outcome,
            self.policy,
            decision._replace(rule_ids=rule_ids),
            reason=reason,
        )

    def _rate_limited(self, action: Action, decision: Decision) -> Decision | None:
        for spec in self.policy.rate_limits:
            if not spec.selector.matches(action, decision.rule_ids):
                continue
            key = scope_key(spec.key, action)
            outcome = self.ledger.rate_acquire(
                tenant=action.context.tenant,
                limit_id=spec.id,
                key=key,
                interval_us=spec.interval_us,
                window_us=spec.window_us,
            )
            if not outcome.allowed:
                why = f"{spec.reason}: " if spec.reason else ""
                return Decision(
                    Verdict.DENY,
                    f"{why}rate limit {spec.id!r} ({key}) allows {spec.limit} per "
                    f"{spec.per_seconds:g} s; retry in {outcome.retry_after:.2f} s",
                    (f"rate:{spec.id}",),
                    None,
                    decision.decision_id,
                )
        return None

    def _reserve(
        self,
        action: Action,
        decision: Decision,
        claimed: str | None,
        lines: list[BudgetLine] | None = None,
    ) -> Decision:
        if lines is None:
            found = self._lines(action, decision)
            if isinstance(found, Decision):
                return found
            lines = found
        if not lines:
            return decision
        context = action.context
        key = context.idempotency_key
        idempotency_key = f"{key}:{_intent(action)}" if key else decision.decision_id
        effect_call = EFFECT_CALL.get()
        if key and effect_call is not None:
            idempotency_key = f"{idempotency_key}:{effect_call}"
        joined = JOINED.get() if self.store is not None else None
        if joined is None:
            outcome = self.ledger.reserve(
                tenant=context.tenant,
                idempotency_key=idempotency_key,
                lines=lines,
                ttl_us=int(self.reservation_ttl * 1_000_000),
                force=claimed is not None,
                owner=context.agent,
            )
        else:  # the decision's record commits with the reservation (deciders.joined)
            assert self.store is not None
            record = DecisionRecord(joined, decision, _holding)
            outcome = self.store.reserve(
                tenant=context.tenant,
                idempotency_key=idempotency_key,
                lines=lines,
                ttl_us=int(self.reservation_ttl * 1_000_000),
                force=claimed is not None,
                owner=context.agent,
                record=record,
            )
            recorded = joined.decision
            if outcome.reservation is not None and recorded is not None and joined.landed:
                return recorded  # the very decision in the chain: the guard records nothing
        if outcome.reservation is not None:
            return _holding(decision, outcome.reservation)
        from interlock.ledger.budgets import refusal_reason

        refusal = outcome.refusal
        assert refusal is not None
        spec = next(b for b in self.policy.budgets if b.id == refusal.line.budget_id)
        reason = refusal_reason(refusal)
        if spec.reason:
            reason = f"{spec.reason}: {reason}"
        budget_rule = (f"budget:{spec.id}",)
        # A closed budget waits for an admin, not for an approver.
        if spec.on_exceed is Verdict.REQUIRE_APPROVAL and refusal.closed is None:
            asked = self._approval(action, decision, budget_rule, reason)
            if asked.verdict is Verdict.ALLOW:  # approved: reserve past the cap
                claim = asked.approval.id if asked.approval else ""
                return self._reserve(action, asked, claim, lines)
            return asked
        return Decision(Verdict.DENY, reason, budget_rule, None, decision.decision_id)

    # -- giving back -------------------------------------------------------------------

    def compensate(self, decision: Decision) -> None:
        """Give back what an ``allow`` held: release its reservation, return a claimed
        grant. Never raises (a failure is logged; the reaper releases the
        reservation after its TTL)."""
        from interlock.store.records import ANY_AGENT, ApprovalStatus

        reservation = decision.reservation
        if reservation is not None:
            try:
                self.ledger.release(reservation.id, by=ANY_AGENT)
            except Exception as exc:
                log.warning(
                    "interlock: could not release reservation %s: %s",
                    reservation.id,
                    describe(exc),
                )
        approval = decision.approval
        if (
            self.store is None
            or approval is None
            or approval.id is None
            or approval.status != ApprovalStatus.CLAIMED.value
        ):
            return
        try:
            returned = self.store.unclaim_approval(approval.id)
        except Exception as exc:
            returned = False
            log.warning("interlock: could not return approval %s: %s", approval.id, describe(exc))
        if not returned:
            log.warning(
                "interlock: approval %s was used by a call that did not run and could "
                "not be returned; it must be approved again",
                approval.id,
            )

    def _compensate_when_done(self, work: asyncio.Future[Decision]) -> None:
        if work.cancelled() or work.exception() is not None:
            return
        decision = work.result()
        if decision.reservation is None and decision.approval is None:
            return
        # Not on the event loop (this callback runs there), and not under the check's
        # deadline, which has passed: a thread of its own, on the store's bounds.
        threading.Thread(
            target=self._compensate_unbounded,
            args=(decision,),
            name="interlock-compensate",
            daemon=True,
        ).start()

    def _compensate_unbounded(self, decision: Decision) -> None:
        with deadline_scope(None):
            self.compensate(decision)


def _intent(action: Action) -> str:
    from interlock.core.intent import intent_hash

    try:
        return intent_hash(action)
    except (TypeError, ValueError):
        return f"{action.kind}:{action.name}"


def _holding(decision: Decision, reservation: Reservation) -> Decision:
    """``decision``, holding ``reservation``."""
    return decision._replace(reservation=_ref(reservation))


def _ref(reservation: Reservation) -> ReservationRef:
    return ReservationRef(
        id=reservation.id,
        amounts=tuple((line.budget_id, line.amount, line.unit) for line in reservation.lines),
        owner=reservation.owner,
    )
