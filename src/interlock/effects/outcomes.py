"""Reporting an attempt's outcome: the budget follows it, the record says it, the
audit chain keeps it — the one path the pipeline and the reconciler both take.

The budget reservation is settled *before* the record moves: a process that dies in
between leaves an open record, which the reconciler settles again — and settling is
idempotent (a second commit or release of a reservation changes nothing), so the
budget is charged at most once whatever the interleaving.

| outcome | record | reservation |
| --- | --- | --- |
| COMMITTED | ``committed`` | committed (charged) |
| FAILED, the request was sent | ``failed`` | released |
| FAILED, known never sent / reconciled never executed | ``never_executed`` | released |
| INDETERMINATE / unknowable | ``indeterminate`` | held (the reaper never takes it) |

Example::

    from interlock.effects.outcomes import status_for
    from interlock.effects.protocol import Outcome, ProviderResult
    from interlock.effects.records import EffectStatus

    assert status_for(ProviderResult(Outcome.FAILED, sent=False)) is EffectStatus.NEVER_EXECUTED
"""

from __future__ import annotations

import hashlib
import logging
from typing import TYPE_CHECKING, Any

import rfc8785

from interlock.effects.protocol import Outcome, ProviderResult
from interlock.effects.records import EffectRecord, EffectStatus, finish_attempt, get_effect
from interlock.errors import ReservationClosed, describe

if TYPE_CHECKING:
    from interlock.store.audit import AuditWriter
    from interlock.store.sql import SqlStore

__all__ = ["digest_of", "record_outcome", "settle_reservation", "status_for", "write_audit"]

log = logging.getLogger("interlock.effects")


def status_for(result: ProviderResult) -> EffectStatus:
    """The record's status for a provider's answer (see the module's table)."""
    if result.outcome is Outcome.COMMITTED:
        return EffectStatus.COMMITTED
    if result.outcome is Outcome.FAILED:
        return EffectStatus.FAILED if result.sent else EffectStatus.NEVER_EXECUTED
    return EffectStatus.INDETERMINATE


def digest_of(value: Any) -> str | None:
    """``sha256:`` of the RFC 8785 JSON of ``value`` (``None`` for ``None``, or for a
    value with no canonical JSON form)."""
    if value is None:
        return None
    try:
        return "sha256:" + hashlib.sha256(rfc8785.dumps(value)).hexdigest()
    except (rfc8785.CanonicalizationError, TypeError, ValueError):
        return None


def settle_reservation(
    store: SqlStore, audit: AuditWriter | None, reservation_id: str | None, status: EffectStatus
) -> None:
    """Commit (``committed``) or release (``failed``, ``never_executed``) the
    attempt's reservation; leave it held otherwise. Idempotent."""
    if reservation_id is None or status.open:
        return
    from interlock.store.records import ANY_AGENT

    if status is EffectStatus.COMMITTED:
        try:
            settled = store.commit(reservation_id, by=ANY_AGENT)
        except ReservationClosed:  # released by a settlement that thought otherwise
            log.error(
                "interlock: reservation %s was released already, but its effect committed: "
                "the budget was not charged for it",
                reservation_id,
            )
            return
    else:
        try:
            settled = store.release(reservation_id, by=ANY_AGENT)
        except ReservationClosed:  # committed by an earlier settlement: it stands
            log.warning(
                "interlock: reservation %s was committed already; not released", reservation_id
            )
            return
    if audit is not None and not settled.replayed:
        audit.write_record(
            settled.tenant,
            "budget",
            {
                "reservation_id": settled.id,
                "status": settled.status.value,
                "owner": settled.owner,
                "reserved": {line.budget_id: line.amount for line in settled.lines},
                "actual": settled.actual,
            },
        )


def write_audit(audit: AuditWriter | None, record: EffectRecord, event: str, **extra: Any) -> None:
    """An ``effect`` record in the tenant's chain (durable before this returns when the
    writer waits for its records)."""
    if audit is None:
        return
    body: dict[str, Any] = {
        "event": event,
        "effect_id": record.id,
        "idempotency_key": record.idempotency_key,
        "adapter": f"{record.adapter_id}@{record.adapter_version}",
        "attempt": record.attempt,
        "status": record.status.value,
        "reason": record.reason,
        "intent_hash": record.intent_hash,
        "binding": record.binding,
        "grant_id": record.grant_id,
        "decision_id": record.decision_id,
        "reservation_id": record.reservation_id,
        "result_digest": record.result_digest,
    }
    body.update(extra)
    audit.write_record(record.tenant, "effect", body)


def record_outcome(
    store: SqlStore,
    audit: AuditWriter | None,
    record: EffectRecord,
    result: ProviderResult,
    observed: dict[str, Any] | None,
    *,
    status: EffectStatus | None = None,
    event: str = "outcome",
) -> EffectRecord:
    """Settle the budget, move the record, audit it; the record as it now stands (a
    concurrent settlement may have got there first: then that one)."""
    status = status or status_for(result)
    reason = result.reason or status.value
    settle_reservation(store, audit, record.reservation_id, status)
    digest = digest_of(observed) if observed is not None else digest_of(result.data)
    moved = finish_attempt(
        store,
        record.id,
        record.attempt,
        status,
        reason=reason,
        result=observed,
        result_digest=digest,
    )
    current = get_effect(store, record.id)
    if current is None:  # pragma: no cover - rows are never deleted
        raise LookupError(f"effect {record.id} vanished")
    if moved:
        try:
            write_audit(
                audit,
                current,
                event,
                provider_status=result.status,
                receipt=result.receipt is not None,
            )
        except Exception as exc:  # the outcome stands and is in the store
            log.error("interlock: effect %s: audit failed: %s", record.id, describe(exc))
    return current
