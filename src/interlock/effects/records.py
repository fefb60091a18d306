"""The durable record of an effect attempt, and how it is read and written.

One row per (tenant, idempotency key) in the ``effects`` table (schema 12). Every
change is one conditional statement on the row's status and attempt number — never a
read followed by a write — so two processes cannot both start, or both settle, one
attempt. The row is written ``executing`` *before* the effect is attempted, in the
same transaction that holds the budget reservation past the reaper (an attempt whose
fate is unknown must not be charged or released by a timer).

Example::

    from interlock.effects.records import EffectStatus

    assert EffectStatus("never_executed").retryable
"""

from __future__ import annotations

import json
import os
import socket
from dataclasses import dataclass
from enum import StrEnum
from typing import TYPE_CHECKING, Any, Final

if TYPE_CHECKING:
    from interlock.store.sql import Cursor, SqlStore

__all__ = [
    "HELD_UNTIL_US",
    "EffectRecord",
    "EffectStatus",
    "NewAttempt",
    "begin_attempt",
    "find_effect",
    "finish_attempt",
    "get_effect",
    "list_effects",
    "machine_id",
    "runner_id",
    "unsettled_effects",
]

#: The expiry a held reservation is given: the reaper never reaches it; the outcome
#: (or the reconciler) settles it.
HELD_UNTIL_US: Final = 2**62

_COLUMNS: Final = (
    "id, tenant, idempotency_key, adapter_id, adapter_version, intent_hash, binding, "
    "grant_id, decision_id, reservation_id, agent, runner, status, attempt, request, "
    "result, result_digest, reason, deadline_us, created_us, updated_us"
)


class EffectStatus(StrEnum):
    EXECUTING = "executing"
    COMMITTED = "committed"
    FAILED = "failed"
    INDETERMINATE = "indeterminate"
    NEVER_EXECUTED = "never_executed"

    @property
    def retryable(self) -> bool:
        """Whether a new attempt may run (the provider never executed the last one)."""
        return self is EffectStatus.NEVER_EXECUTED

    @property
    def open(self) -> bool:
        """Whether the attempt's fate is unknown (the reconciler's work)."""
        return self in (EffectStatus.EXECUTING, EffectStatus.INDETERMINATE)


@dataclass(frozen=True, slots=True)
class EffectRecord:
    """One row of ``effects``. ``request`` is the prepared request's description and
    ``result`` the observed effect (JSON); times are microseconds since the epoch."""

    id: str
    tenant: str
    idempotency_key: str
    adapter_id: str
    adapter_version: str
    intent_hash: str
    binding: str | None
    grant_id: str | None
    decision_id: str
    reservation_id: str | None
    agent: str | None
    runner: str
    status: EffectStatus
    attempt: int
    request: dict[str, Any]
    result: dict[str, Any] | None
    result_digest: str | None
    reason: str
    deadline_us: int
    created_us: int
    updated_us: int

    def as_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "tenant": self.tenant,
            "idempotency_key": self.idempotency_key,
            "adapter": f"{self.adapter_id}@{self.adapter_version}",
            "status": self.status.value,
            "attempt": self.attempt,
            "intent_hash": self.intent_hash,
            "binding": self.binding,
            "grant_id": self.grant_id,
            "decision_id": self.decision_id,
            "reservation_id": self.reservation_id,
            "agent": self.agent,
            "runner": self.runner,
            "request": self.request,
            "result": self.result,
            "result_digest": self.result_digest,
            "reason": self.reason,
            "deadline_us": self.deadline_us,
            "created_us": self.created_us,
            "updated_us": self.updated_us,
        }


@dataclass(frozen=True, slots=True)
class NewAttempt:
    """What :func:`begin_attempt` writes."""

    id: str
    tenant: str
    idempotency_key: str
    adapter_id: str
    adapter_version: str
    intent_hash: str
    binding: str | None
    grant_id: str | None
    decision_id: str
    reservation_id: str | None
    agent: str | None
    request: dict[str, Any]
    deadline_us: int


def runner_id() -> str:
    """``machine:pid`` of this process: the reconciler treats an ``executing`` row of
    a process that no longer exists on this machine as orphaned before its deadline.
    The machine is the host name, the kernel's boot id and the pid namespace, so that
    a pid is only ever looked up where it means the same process (not in another
    container sharing the host name, nor after a reboot)."""
    return f"{machine_id()}:{os.getpid()}"


def machine_id() -> str:
    """Where a pid names one process: host name, boot id, pid namespace."""
    parts = [socket.gethostname()]
    for path in ("/proc/sys/kernel/random/boot_id", "/proc/self/ns/pid"):
        try:
            if path.endswith("boot_id"):
                with open(path, encoding="ascii") as file:
                    parts.append(file.read().strip()[:8])
            else:
                parts.append(str(os.stat(path).st_ino))
        except OSError:  # not Linux: the host name alone, the deadline does the rest
            parts.append("-")
    return "/".join(parts)


def begin_attempt(store: SqlStore, new: NewAttempt, *, after: int = 0) -> EffectRecord | None:
    """Record an attempt as ``executing``, and hold its reservation past the reaper,
    in one transaction. ``after`` is the attempt it follows (0: the first): a retry
    takes over a ``never_executed`` row still at that attempt. ``None`` when the row is
    not ours to take (another attempt holds it, or it is settled)."""
    now = store.clock()
    runner = runner_id()
    request = json.dumps(new.request, sort_keys=True, separators=(",", ":"))
    with store.transaction(write=True) as cur:
        if after == 0:
            cur.execute(
                store.q(
                    f"INSERT INTO effects ({_COLUMNS}) VALUES "
                    "(?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, 'executing', 1, ?, NULL, NULL, "
                    "'attempt started', ?, ?, ?) ON CONFLICT (tenant, idempotency_key) DO NOTHING"
                ),
                (
                    new.id,
                    new.tenant,
                    new.idempotency_key,
                    new.adapter_id,
                    new.adapter_version,
                    new.intent_hash,
                    new.binding,
                    new.grant_id,
                    new.decision_id,
                    new.reservation_id,
                    new.agent,
                    runner,
                    request,
                    new.deadline_us,
                    now,
                    now,
                ),
            )
        else:
            cur.execute(
                store.q(
                    "UPDATE effects SET status = 'executing', attempt = attempt + 1, "
                    "adapter_version = ?, binding = ?, grant_id = ?, decision_id = ?, "
                    "reservation_id = ?, agent = ?, runner = ?, request = ?, result = NULL, "
                    "result_digest = NULL, reason = 'attempt started', deadline_us = ?, "
                    "updated_us = ? WHERE tenant = ? AND idempotency_key = ? "
                    "AND status = 'never_executed' AND attempt = ? AND intent_hash = ?"
                ),
                (
                    new.adapter_version,
                    new.binding,
                    new.grant_id,
                    new.decision_id,
                    new.reservation_id,
                    new.agent,
                    runner,
                    request,
                    new.deadline_us,
                    now,
                    new.tenant,
                    new.idempotency_key,
                    after,
                    new.intent_hash,
                ),
            )
        if cur.rowcount != 1:
            return None
        if new.reservation_id is not None:
            _hold(store, cur, new.reservation_id)
        return _read(
            store, cur, "tenant = ? AND idempotency_key = ?", (new.tenant, new.idempotency_key)
        )


def _hold(store: SqlStore, cur: Cursor, reservation_id: str) -> None:
    """Keep the reservation from the reaper while the attempt's fate is unknown."""
    cur.execute(
        store.q("UPDATE reservations SET expires_us = ? WHERE id = ? AND status = 'reserved'"),
        (HELD_UNTIL_US, reservation_id),
    )


def finish_attempt(
    store: SqlStore,
    effect_id: str,
    attempt: int,
    status: EffectStatus,
    *,
    reason: str,
    result: dict[str, Any] | None = None,
    result_digest: str | None = None,
) -> bool:
    """Move an open attempt (``executing`` or ``indeterminate``) to ``status``. False
    when it is no longer open at that attempt (another process settled it first)."""
    encoded = None if result is None else json.dumps(result, sort_keys=True, default=str)
    with store.transaction(write=True) as cur:
        cur.execute(
            store.q(
                "UPDATE effects SET status = ?, reason = ?, result = ?, result_digest = ?, "
                "updated_us = ? WHERE id = ? AND attempt = ? "
                "AND status IN ('executing', 'indeterminate')"
            ),
            (status.value, reason, encoded, result_digest, store.clock(), effect_id, attempt),
        )
        return cur.rowcount == 1


def get_effect(store: SqlStore, effect_id: str) -> EffectRecord | None:
    with store.transaction(write=False) as cur:
        return _read(store, cur, "id = ?", (effect_id,))


def find_effect(store: SqlStore, tenant: str, idempotency_key: str) -> EffectRecord | None:
    with store.transaction(write=False) as cur:
        return _read(store, cur, "tenant = ? AND idempotency_key = ?", (tenant, idempotency_key))


def list_effects(
    store: SqlStore,
    *,
    tenant: str | None = None,
    statuses: tuple[EffectStatus, ...] = (),
    limit: int = 100,
) -> list[EffectRecord]:
    """The newest ``limit`` attempts, newest first."""
    where, params = ["1 = 1"], []
    if tenant is not None:
        where.append("tenant = ?")
        params.append(tenant)
    if statuses:
        where.append(f"status IN ({', '.join('?' for _ in statuses)})")
        params.extend(s.value for s in statuses)
    with store.transaction(write=False) as cur:
        cur.execute(
            store.q(
                f"SELECT {_COLUMNS} FROM effects WHERE {' AND '.join(where)} "
                f"ORDER BY created_us DESC, id LIMIT {int(limit)}"
            ),
            tuple(params),
        )
        return [_record(row) for row in cur.fetchall()]


def unsettled_effects(store: SqlStore, *, limit: int = 100) -> list[EffectRecord]:
    """Attempts whose fate is unknown: ``indeterminate``, and ``executing`` ones (the
    reconciler decides which of those are orphaned)."""
    with store.transaction(write=False) as cur:
        cur.execute(
            store.q(
                f"SELECT {_COLUMNS} FROM effects "
                "WHERE status IN ('executing', 'indeterminate') "
                f"ORDER BY deadline_us, id LIMIT {int(limit)}"
            ),
        )
        return [_record(row) for row in cur.fetchall()]


def _read(store: SqlStore, cur: Cursor, where: str, params: tuple[Any, ...]) -> EffectRecord | None:
    cur.execute(store.q(f"SELECT {_COLUMNS} FROM effects WHERE {where}"), params)
    row = cur.fetchone()
    return None if row is None else _record(row)


def _record(row: Any) -> EffectRecord:
    return EffectRecord(
        id=str(row[0]),
        tenant=str(row[1]),
        idempotency_key=str(row[2]),
        adapter_id=str(row[3]),
        adapter_version=str(row[4]),
        intent_hash=str(row[5]),
        binding=row[6],
        grant_id=row[7],
        decision_id=str(row[8]),
        reservation_id=row[9],
        agent=row[10],
        runner=str(row[11]),
        status=EffectStatus(row[12]),
        attempt=int(row[13]),
        request=json.loads(row[14]),
        result=None if row[15] is None else json.loads(row[15]),
        result_digest=row[16],
        reason=str(row[17]),
        deadline_us=int(row[18]),
        created_us=int(row[19]),
        updated_us=int(row[20]),
    )
