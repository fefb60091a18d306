"""Reconciliation: what became of attempts whose outcome was lost.

An attempt is *open* when its record is ``indeterminate`` (the provider neither
committed nor refused, as far as the caller could tell) or still ``executing`` after
its process died — after a restart, a ``kill -9``, a lost machine. The reconciler asks
the attempt's adapter, read-only, by idempotency key (``adapter.reconcile``):

- **done** → the provider's result is reported as if it had arrived: COMMITTED
  commits the reservation (once: settling is idempotent), FAILED releases it;
- **never executed** → released; the record becomes ``never_executed`` and the next
  ``run_effect`` with the key runs it once (a fresh reservation, a fresh grant);
- **unknowable** → it stays open (``indeterminate``, the reservation held) and is
  reported; it is asked again next round.

An ``executing`` record is orphaned — the reconciler's to settle — once its deadline
has passed (plus ``grace``), or at once when the process that wrote it ran on this
machine (host, boot, pid namespace) and no longer exists. A live attempt is never touched.

Example::

    from interlock.effects.reconcile import reconcile_pending

    report = reconcile_pending(store, [refunds])      # one round, e.g. at start-up
    for record in report.unresolved:
        print("still unknown:", record.id, record.reason)
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from interlock.effects.outcomes import record_outcome
from interlock.effects.protocol import (
    EffectAdapter,
    Outcome,
    ProviderResult,
    ReconcileContext,
    Reconciled,
    Resolution,
)
from interlock.effects.records import (
    EffectRecord,
    EffectStatus,
    get_effect,
    machine_id,
    unsettled_effects,
)
from interlock.errors import EffectError, EffectInFlight, describe

if TYPE_CHECKING:
    from interlock.store.audit import AuditWriter
    from interlock.store.sql import SqlStore

__all__ = [
    "ReconcileReport",
    "Reconciler",
    "is_orphaned",
    "reconcile_effect",
    "reconcile_pending",
    "reconcile_record",
]

log = logging.getLogger("interlock.effects")

Adapters = Mapping[str, EffectAdapter] | Iterable[EffectAdapter]


@dataclass(frozen=True, slots=True)
class ReconcileReport:
    """One round: the records it settled, those still unknown, and those it left
    (executing in a live process, or with no adapter given for them)."""

    settled: tuple[EffectRecord, ...] = ()
    unresolved: tuple[EffectRecord, ...] = ()
    skipped: tuple[EffectRecord, ...] = ()


def is_orphaned(record: EffectRecord, now_us: int, *, grace: float = 5.0) -> bool:
    """Whether an ``executing`` record's process can no longer report it."""
    if record.status is not EffectStatus.EXECUTING:
        return record.status.open
    if now_us > record.deadline_us + int(grace * 1_000_000):
        return True
    machine, _, pid = record.runner.rpartition(":")
    if machine != machine_id() or "/-" in machine or not pid.isdigit():
        return False  # another machine's, or one where a pid proves nothing
    return not _alive(int(pid))


def _alive(pid: int) -> bool:
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # exists, another user's
        return True
    return True


def reconcile_record(
    store: SqlStore,
    adapters: Adapters,
    record: EffectRecord,
    *,
    audit: AuditWriter | None = None,
    grace: float = 5.0,
) -> EffectRecord:
    """Reconcile one record (see the module); the record as it now stands. Raises
    :class:`EffectInFlight` for an attempt still executing in a live process, and
    :class:`EffectError` when no adapter of the record's id is given."""
    if not record.status.open:
        return record
    if not is_orphaned(record, store.clock(), grace=grace):
        raise EffectInFlight(
            f"effect {record.id} is executing in {record.runner} until its deadline",
            effect_id=record.id,
        )
    adapter = _by_id(adapters).get(record.adapter_id)
    if adapter is None:
        raise EffectError(
            f"effect {record.id} was attempted by adapter {record.adapter_id!r}, which was "
            "not given to the reconciler",
            effect_id=record.id,
        )
    context = ReconcileContext(
        effect_id=record.id,
        tenant=record.tenant,
        idempotency_key=record.idempotency_key,
        request=record.request,
        binding=record.binding,
        attempt=record.attempt,
        grant_id=record.grant_id,
        intent_hash=record.intent_hash,
    )
    try:
        answer = adapter.reconcile(context)
        if not isinstance(answer, Reconciled):
            raise TypeError(f"reconcile returned a {type(answer).__name__}, not Reconciled")
    except Exception as exc:
        answer = Reconciled(Resolution.UNKNOWABLE, reason=f"reconcile failed: {describe(exc)}")
    if answer.resolution is Resolution.DONE:
        assert answer.result is not None  # Reconciled checks it
        result = answer.result
        if answer.reason and not result.reason:
            result = replace(result, reason=answer.reason)
        # a refusal the provider remembers is FAILED, whatever ``sent`` says: it was sent
        status = (
            EffectStatus.COMMITTED if result.outcome is Outcome.COMMITTED else EffectStatus.FAILED
        )
        observed = _observe(adapter, result, record)
        return record_outcome(
            store, audit, record, result, observed, status=status, event="reconciled"
        )
    if answer.resolution is Resolution.NEVER_EXECUTED:
        never = ProviderResult(
            Outcome.FAILED,
            reason=answer.reason or "reconciled: the provider never executed it",
            sent=False,
        )
        return record_outcome(
            store,
            audit,
            record,
            never,
            None,
            status=EffectStatus.NEVER_EXECUTED,
            event="reconciled",
        )
    unknown = ProviderResult(
        Outcome.INDETERMINATE,
        reason=answer.reason or "reconciled: the provider cannot say (yet)",
    )
    # Audited when an orphaned attempt becomes indeterminate, not on every round that
    # finds it still unknown (a worker asks every few seconds).
    return record_outcome(
        store,
        audit if record.status is EffectStatus.EXECUTING else None,
        record,
        unknown,
        record.result,
        status=EffectStatus.INDETERMINATE,
        event="unresolved",
    )


def reconcile_effect(
    store: SqlStore,
    adapters: Adapters,
    effect_id: str,
    *,
    audit: AuditWriter | None = None,
    grace: float = 5.0,
) -> EffectRecord:
    """:func:`reconcile_record` of the record ``effect_id`` (``LookupError`` if none)."""
    record = get_effect(store, effect_id)
    if record is None:
        raise LookupError(f"no effect {effect_id!r}")
    return reconcile_record(store, adapters, record, audit=audit, grace=grace)


def reconcile_pending(
    store: SqlStore,
    adapters: Adapters,
    *,
    audit: AuditWriter | None = None,
    grace: float = 5.0,
    limit: int = 100,
) -> ReconcileReport:
    """One round over every open record (oldest deadline first, at most ``limit``)."""
    known = _by_id(adapters)
    settled: list[EffectRecord] = []
    unresolved: list[EffectRecord] = []
    skipped: list[EffectRecord] = []
    now = store.clock()
    for record in unsettled_effects(store, limit=limit):
        if record.adapter_id not in known or not is_orphaned(record, now, grace=grace):
            skipped.append(record)
            continue
        try:
            after = reconcile_record(store, known, record, audit=audit, grace=grace)
        except EffectInFlight:
            skipped.append(record)
            continue
        (unresolved if after.status.open else settled).append(after)
    return ReconcileReport(tuple(settled), tuple(unresolved), tuple(skipped))


class Reconciler(threading.Thread):
    """Runs :func:`reconcile_pending` at start and every ``interval`` seconds until
    stopped (a daemon thread; one per process is plenty — rounds of several
    processes settle each record once)."""

    def __init__(
        self,
        store: SqlStore,
        adapters: Adapters,
        *,
        interval: float = 10.0,
        audit: AuditWriter | None = None,
        grace: float = 5.0,
    ) -> None:
        if interval <= 0:
            raise ValueError(f"the reconcile interval must be positive, not {interval!r}")
        super().__init__(name="interlock-effects-reconciler", daemon=True)
        self.store = store
        self.adapters = _by_id(adapters)
        self.interval = interval
        self.audit = audit
        self.grace = grace
        self.rounds = 0
        self.last: ReconcileReport = ReconcileReport()
        self._stopping = threading.Event()

    def run(self) -> None:
        while True:
            try:
                self.last = reconcile_pending(
                    self.store, self.adapters, audit=self.audit, grace=self.grace
                )
                for record in self.last.unresolved:
                    log.warning(
                        "interlock: effect %s is still indeterminate: %s", record.id, record.reason
                    )
            except Exception as exc:  # the store is away: try again next round
                log.warning("interlock: the effects reconciler could not run: %s", describe(exc))
            self.rounds += 1
            if self._stopping.wait(self.interval):
                return

    def stop(self, timeout: float = 5.0) -> None:
        self._stopping.set()
        if self.is_alive():
            self.join(timeout)


def _by_id(adapters: Adapters) -> dict[str, EffectAdapter]:
    if isinstance(adapters, Mapping):
        return dict(adapters)
    return {adapter.id: adapter for adapter in adapters}


def _observe(
    adapter: EffectAdapter, result: ProviderResult, record: EffectRecord
) -> dict[str, object] | None:
    """The adapter's projection, given the prepared request as recorded (reconcile has
    no action to prepare again)."""
    from interlock.effects.protocol import PreparedEffect

    prepared = PreparedEffect(request=record.request, binding=record.binding or "", audience="")
    try:
        return adapter.observe_effect(result, prepared)
    except Exception as exc:
        return {"observe_error": describe(exc)}
