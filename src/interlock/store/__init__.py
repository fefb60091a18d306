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

from typing import TYPE_CHECKING

from interlock._lazy import lazy_attributes

if TYPE_CHECKING:
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

# Imported on first use (PEP 562): `from interlock.store.records import ...` (what the
# in-memory ledger and the approvals need) must not load the SQL back ends, the audit
# writer and the key files with it (ADR 0014).
_LAZY: dict[str, tuple[str, str]] = {
    "ANY_AGENT": ("interlock.store.records", "ANY_AGENT"),
    "ApprovalRecord": ("interlock.store.records", "ApprovalRecord"),
    "ApprovalStatus": ("interlock.store.records", "ApprovalStatus"),
    "AuditKeyProvider": ("interlock.store.audit_keys", "AuditKeyProvider"),
    "AuditRow": ("interlock.store.records", "AuditRow"),
    "AuditWriter": ("interlock.store.audit", "AuditWriter"),
    "BudgetClosure": ("interlock.store.records", "BudgetClosure"),
    "BudgetLine": ("interlock.store.records", "BudgetLine"),
    "BudgetRow": ("interlock.store.records", "BudgetRow"),
    "ChainBreak": ("interlock.store.records", "ChainBreak"),
    "CheckpointSettings": ("interlock.store.checkpoints", "CheckpointSettings"),
    "ClaimOutcome": ("interlock.store.records", "ClaimOutcome"),
    "RateOutcome": ("interlock.store.records", "RateOutcome"),
    "ReapResult": ("interlock.store.records", "ReapResult"),
    "Refusal": ("interlock.store.records", "Refusal"),
    "Reservation": ("interlock.store.records", "Reservation"),
    "ReservationStatus": ("interlock.store.records", "ReservationStatus"),
    "ReserveOutcome": ("interlock.store.records", "ReserveOutcome"),
    "SqlStore": ("interlock.store.sql", "SqlStore"),
    "VerifyReport": ("interlock.store.records", "VerifyReport"),
    "default_database_url": ("interlock.store.url", "default_database_url"),
    "open_store": ("interlock.store.url", "open_store"),
    "read_checkpoints": ("interlock.store.checkpoints", "read_checkpoints"),
    "Store": ("interlock.store.sql", "SqlStore"),
}


__getattr__, __dir__ = lazy_attributes(__name__, globals(), _LAZY)
