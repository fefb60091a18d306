"""Durable state: the hash-chained audit log, approvals, budgets and rate limits.

One schema, two back ends: SQLite (the embedded default) and PostgreSQL (for fleets),
chosen by one URL. Migrations are applied when a store opens. The audit log is keyed
(:mod:`.audit_keys`) and its heads are checkpointed, signed, outside the database
(:mod:`.checkpoints`).

Example::

    from interlock.store import open_store

    with open_store("sqlite:///.interlock/interlock.db") as store:
        print(store.verify_audit().ok)
"""

from __future__ import annotations

from interlock.store.audit import AuditWriter
from interlock.store.audit_keys import AuditKeyProvider
from interlock.store.checkpoints import CheckpointSettings, read_checkpoints
from interlock.store.records import (
    ANY_AGENT,
    ApprovalRecord,
    ApprovalStatus,
    AuditRow,
    BudgetClosure,
    BudgetLine,
    BudgetRow,
    ChainBreak,
    ClaimOutcome,
    RateOutcome,
    ReapResult,
    Refusal,
    Reservation,
    ReservationStatus,
    ReserveOutcome,
    VerifyReport,
)
from interlock.store.sql import SqlStore
from interlock.store.url import default_database_url, open_store

Store = SqlStore

__all__ = [
    "ANY_AGENT",
    "ApprovalRecord",
    "ApprovalStatus",
    "AuditKeyProvider",
    "AuditRow",
    "AuditWriter",
    "BudgetClosure",
    "BudgetLine",
    "BudgetRow",
    "ChainBreak",
    "CheckpointSettings",
    "ClaimOutcome",
    "RateOutcome",
    "ReapResult",
    "Refusal",
    "Reservation",
    "ReservationStatus",
    "ReserveOutcome",
    "SqlStore",
    "Store",
    "VerifyReport",
    "default_database_url",
    "open_store",
    "read_checkpoints",
]
