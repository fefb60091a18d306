"""The effect pipeline: capture → decide → prepare → grant → claim → record → execute
→ observe → report.

:func:`run_effect` runs one consequential action through an
:class:`~interlock.effects.protocol.EffectAdapter`, exactly once per idempotency key:

1. **capture** — the action's trusted context gets the runtime's idempotency key (the
   retry identity, never the model's call id) and the guard's context: its intent hash
   is what the grant binds;
2. **decide** — ``guard.check``; on anything but allow nothing runs and the usual
   :class:`~interlock.errors.Blocked` error is raised;
3. **prepare** (pure) → **issue** a grant for the prepared request's binding →
   **claim** it (once, atomically);
4. **record** the attempt, ``executing``, durably *before* anything leaves, holding
   the budget reservation past the reaper;
5. **execute** (once, with the key, the grant and the deadline) → **observe** →
   **report**: COMMITTED commits the reservation, FAILED releases it, INDETERMINATE
   holds it until :mod:`~interlock.effects.reconcile` learns what happened.

The same key never executes twice: a second call returns the recorded outcome (a
``replayed`` result), reconciles an open one first, and runs again only an attempt the
provider never executed. The guard needs a store (the record is durable state).

Example (the HTTP family; a provider at ``shop.example``)::

    from interlock.effects import run_effect
    from interlock.effects.http import HttpEffect

    refunds = HttpEffect("https://shop.example", audience="shop")
    result = run_effect(guard, refunds, Action.tool("refund", {"order": 42}, context=ctx),
                        idempotency_key="refund-42-v1", timeout=10)
    assert result.outcome is Outcome.COMMITTED
"""

from __future__ import annotations

import secrets
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final, cast

from interlock.core.action import Action
from interlock.effects.outcomes import digest_of, record_outcome, write_audit
from interlock.effects.protocol import (
    EffectAdapter,
    Execution,
    Outcome,
    PreparedEffect,
    ProviderResult,
)
from interlock.effects.reconcile import reconcile_record
from interlock.effects.records import (
    EffectRecord,
    EffectStatus,
    NewAttempt,
    begin_attempt,
    find_effect,
)
from interlock.errors import (
    EffectConflict,
    EffectError,
    EffectInFlight,
    EffectUnresolved,
    describe,
)

if TYPE_CHECKING:
    from interlock.approvals.grants import Grant
    from interlock.core.decision import Decision
    from interlock.guard import Guard
    from interlock.store.sql import SqlStore
    from interlock.verify.tokens import GrantClaims

__all__ = ["EffectResult", "arun_effect", "capture", "run_effect"]

#: The deadline of an effect given none (seconds).
DEFAULT_EFFECT_TIMEOUT: Final = 30.0
#: A grant outlives the attempt's deadline by this much (clock skew at the provider).
_GRANT_SLACK: Final = 30.0


@dataclass(frozen=True, slots=True)
class EffectResult:
    """What became of an effect. ``status`` is the record's (``never_executed``: a
    retry may run it); ``observed`` the adapter's projection of the provider's answer;
    ``replayed`` is true when this call ran nothing and returns an earlier attempt's
    outcome; ``decision`` is the check of this call (``None`` when replayed)."""

    effect_id: str
    outcome: Outcome
    status: EffectStatus
    attempt: int
    observed: dict[str, Any] | None
    reason: str
    replayed: bool = False
    decision: Decision | None = None


def capture(guard: Guard, adapter: EffectAdapter, action: Action, idempotency_key: str) -> Action:
    """The action as the guard judges it and the grant binds it: the runtime's
    idempotency key, the guard's context under the action's own, and what the policy
    declares of the tool (its target and downstream endpoint). An action that already
    names another key is refused (:class:`EffectConflict`)."""
    if not isinstance(action, Action):
        raise TypeError(f"run_effect needs an Action, not a {type(action).__name__}")
    if not isinstance(idempotency_key, str) or not idempotency_key.strip():
        raise ValueError("an effect needs a non-empty idempotency key (the runtime's)")
    if len(idempotency_key) > 255 or any(ord(c) < 0x21 or ord(c) == 0x7F for c in idempotency_key):
        raise ValueError(
            "the idempotency key must be 1-255 visible ASCII characters without spaces "
            "(it travels in an HTTP header)"
        )
    if any(ord(c) > 0x7E for c in idempotency_key):
        raise ValueError("the idempotency key must be ASCII (it travels in an HTTP header)")
    types = tuple(adapter.action_types)
    if types and action.name not in types:
        raise EffectError(
            f"effect adapter {adapter.id!r} answers for {', '.join(types)}, not {action.name!r}"
        )
    stated = action.context.idempotency_key
    if stated is not None and stated != idempotency_key:
        raise EffectConflict(
            f"the action carries idempotency key {stated!r}, not {idempotency_key!r}"
        )
    from dataclasses import replace

    keyed = action.with_context(replace(action.context, idempotency_key=idempotency_key))
    try:
        # What the guard judges: its context under the action's, and what the policy
        # declares of the tool (target, downstream system and endpoint).
        return guard._contextualise(keyed)
    except Exception:  # the check says why (undetermined): nothing runs
        return keyed.with_context(keyed.context.merged_over(guard.context))


def run_effect(
    guard: Guard,
    adapter: EffectAdapter,
    action: Action,
    *,
    idempotency_key: str,
    deadline: float | None = None,
    timeout: float = DEFAULT_EFFECT_TIMEOUT,
) -> EffectResult:
    """Run ``action`` through ``adapter`` once for ``idempotency_key`` (see the module).
    ``deadline`` is a ``time.monotonic()`` instant (default: ``timeout`` seconds from
    now). Raises the guard's :class:`~interlock.errors.Blocked` errors on anything but
    allow, :class:`EffectConflict` for a key used for another intent,
    :class:`EffectInFlight` while another attempt with the key executes, and
    :class:`EffectUnresolved` while an earlier attempt cannot be reconciled."""
    from interlock.core.intent import intent_hash
    from interlock.core.refusal import raise_for
    from interlock.deciders.stateful import EFFECT_CALL

    store = _store_of(guard)
    if deadline is None:
        deadline = time.monotonic() + timeout
    action = capture(guard, adapter, action, idempotency_key)
    tenant = action.context.tenant
    intent = intent_hash(action)
    after = 0
    existing = find_effect(store, tenant, idempotency_key)
    if existing is not None:
        outcome = _earlier(store, guard, adapter, existing, intent)
        if outcome is not None:
            return outcome
        after = existing.attempt
    token = EFFECT_CALL.set(f"effect-{secrets.token_hex(8)}")  # its own reservation
    try:
        decision = guard.check(action)
    finally:
        EFFECT_CALL.reset(token)
    raise_for(decision, action)
    try:
        record, prepared, grant, claims = _start(
            guard, store, adapter, action, decision, intent, idempotency_key, deadline, after
        )
    except BaseException:
        _give_back(guard, decision)
        raise
    try:
        write_audit(guard.audit, record, "attempt")
    except Exception as exc:  # no attempt runs unrecorded: it ends here, never sent
        unsent = ProviderResult(
            Outcome.FAILED, reason=f"the attempt could not be audited: {describe(exc)}", sent=False
        )
        record_outcome(store, None, record, unsent, None)
        raise
    execution = Execution(
        prepared, idempotency_key, deadline, grant.token, record.id, record.attempt, claims
    )
    try:
        result = adapter.execute(execution)
        if not isinstance(result, ProviderResult):
            raise TypeError(f"execute returned a {type(result).__name__}, not a ProviderResult")
    except Exception as exc:  # the request may have left: nobody can say it did not
        result = ProviderResult(
            Outcome.INDETERMINATE, reason=f"the adapter failed during execute: {describe(exc)}"
        )
    observed = _observe(adapter, result, prepared)
    settled = record_outcome(store, guard.audit, record, result, observed)
    return _result(settled, decision=decision, replayed=False, outcome=result.outcome)


async def arun_effect(
    guard: Guard,
    adapter: EffectAdapter,
    action: Action,
    *,
    idempotency_key: str,
    deadline: float | None = None,
    timeout: float = DEFAULT_EFFECT_TIMEOUT,
) -> EffectResult:
    """The async twin of :func:`run_effect`: the pipeline runs in a worker thread (the
    loop never waits on the store or the provider). Cancelling the await does not stop
    an attempt already recorded: it runs to its outcome (or its deadline), which is
    recorded; the next call with the key returns it."""
    import asyncio

    if deadline is None:
        deadline = time.monotonic() + timeout
    return await asyncio.to_thread(
        run_effect, guard, adapter, action, idempotency_key=idempotency_key, deadline=deadline
    )


# -- the steps ---------------------------------------------------------------------------


def _store_of(guard: Guard) -> SqlStore:
    store = guard.store
    if store is None:
        raise EffectError(
            "effects need a guard with a store (Guard(..., store=URL)): the attempt is "
            "recorded durably before it runs"
        )
    return store


def _earlier(
    store: SqlStore, guard: Guard, adapter: EffectAdapter, record: EffectRecord, intent: str
) -> EffectResult | None:
    """The recorded outcome of the key's earlier attempt (reconciled first when it is
    open), or ``None`` when a new attempt may run."""
    if record.intent_hash != intent or record.adapter_id != adapter.id:
        raise EffectConflict(
            f"idempotency key {record.idempotency_key!r} was used for another effect "
            f"({record.id}: adapter {record.adapter_id!r}, intent {record.intent_hash}); "
            "a key names one effect",
            effect_id=record.id,
        )
    if record.status.open:
        record = reconcile_record(store, {adapter.id: adapter}, record, audit=guard.audit)
        if record.status is EffectStatus.EXECUTING:  # pragma: no cover - reconcile raises
            raise EffectInFlight(f"effect {record.id} is executing", effect_id=record.id)
        if record.status is EffectStatus.INDETERMINATE:
            raise EffectUnresolved(
                f"effect {record.id} (key {record.idempotency_key!r}) is indeterminate and its "
                f"provider cannot say what became of it: {record.reason}; it is not attempted "
                "again until `interlock effects reconcile` resolves it",
                effect_id=record.id,
            )
    if record.status.retryable:
        return None
    return _result(record, decision=None, replayed=True)


def _start(
    guard: Guard,
    store: SqlStore,
    adapter: EffectAdapter,
    action: Action,
    decision: Decision,
    intent: str,
    idempotency_key: str,
    deadline: float,
    after: int,
) -> tuple[EffectRecord, PreparedEffect, Grant, GrantClaims]:
    """prepare → issue → claim → record; the durable record of the attempt."""
    prepared = adapter.prepare(action)
    left = deadline - time.monotonic()
    if left <= 0:
        raise EffectError("the effect's deadline passed before it could be attempted")
    # the approvals layer's Grant (core names it by a protocol only: ADR 0025)
    grant = cast("Grant | None", decision.grant)
    if grant is None:
        grant = guard.issue_grant(
            decision, audience=prepared.audience, binding=prepared.binding, ttl=left + _GRANT_SLACK
        )
    elif grant.claims.audience != prepared.audience or grant.claims.binding not in (
        None,
        prepared.binding,
    ):
        raise EffectError(
            f"the policy granted this call for audience {grant.claims.audience!r}, but "
            f"adapter {adapter.id!r} sends it to {prepared.audience!r} (or another request)"
        )
    claims = guard.claim_grant(grant)
    reservation = decision.reservation
    new = NewAttempt(
        id="eff_" + secrets.token_hex(12),
        tenant=action.context.tenant,
        idempotency_key=idempotency_key,
        adapter_id=adapter.id,
        adapter_version=adapter.version,
        intent_hash=intent,
        binding=prepared.binding,
        grant_id=claims.grant_id,
        decision_id=decision.decision_id,
        reservation_id=reservation.id if reservation is not None else None,
        agent=action.context.agent,
        request=dict(prepared.request),
        # An adapter bounds each phase (connecting, answering) by the time left, so an
        # attempt may run up to twice that: the record is nobody else's before then.
        deadline_us=store.clock() + int(2 * left * 1_000_000),
    )
    record = begin_attempt(store, new, after=after)
    if record is None:
        raise EffectInFlight(
            f"another attempt with idempotency key {idempotency_key!r} started first",
        )
    return record, prepared, grant, claims


def _give_back(guard: Guard, decision: Decision) -> None:
    """Nothing ran: the reservation goes back (quietly: the reaper takes it else)."""
    from interlock.store.records import ANY_AGENT

    try:
        guard.release(decision, by=ANY_AGENT)
    except Exception as exc:
        import logging

        logging.getLogger("interlock.effects").warning(
            "interlock: could not release the reservation of an effect that did not run: %s",
            describe(exc),
        )


def _observe(
    adapter: EffectAdapter, result: ProviderResult, prepared: Any
) -> dict[str, Any] | None:
    try:
        observed = adapter.observe_effect(result, prepared)
    except Exception as exc:  # a projection's failure does not change the outcome
        return {"observe_error": describe(exc)}
    if observed is not None and digest_of(observed) is None:
        return {"observe_error": "the observed effect has no JSON form"}
    return observed


def _result(
    record: EffectRecord,
    *,
    decision: Decision | None,
    replayed: bool,
    outcome: Outcome | None = None,
) -> EffectResult:
    status = record.status
    if outcome is None or status is not EffectStatus.EXECUTING:
        outcome = {
            EffectStatus.COMMITTED: Outcome.COMMITTED,
            EffectStatus.FAILED: Outcome.FAILED,
            EffectStatus.NEVER_EXECUTED: Outcome.FAILED,
        }.get(status, Outcome.INDETERMINATE)
    return EffectResult(
        effect_id=record.id,
        outcome=outcome,
        status=status,
        attempt=record.attempt,
        observed=record.result,
        reason=record.reason,
        replayed=replayed,
        decision=decision,
    )
