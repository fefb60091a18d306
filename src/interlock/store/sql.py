"""The store's logic, written once in SQL both back ends run.

Every state change is one transaction, and every contended change is one atomic
conditional statement — a reservation is ``INSERT ... ON CONFLICT DO UPDATE ...
WHERE spent + reserved + amount <= cap``, never a read followed by a write — so no
interleaving of threads, processes or replicas can overspend, double-claim or
double-commit. The back ends (:mod:`.sqlite`, :mod:`.postgres`) supply connections,
transactions and the few words in which their SQL differs.
"""

from __future__ import annotations

from interlock.store.sql_approvals import ApprovalStore
from interlock.store.sql_base import AuditEntry, Cursor
from interlock.store.sql_budgets import BudgetStore
from interlock.store.sql_grants import GrantStore
from interlock.store.sql_rates import RateStore
from interlock.store.sql_sessions import SessionStore

__all__ = ["AuditEntry", "Cursor", "SqlStore"]


class SqlStore(ApprovalStore, BudgetStore, RateStore, GrantStore, SessionStore):
    """The Interlock store over one SQL database. Thread-safe; one per process.

    ``clock`` returns microseconds since the epoch (tests pass a fake one). The
    operations live in one module per concern: :mod:`.sql_audit`,
    :mod:`.sql_approvals`, :mod:`.sql_budgets`, :mod:`.sql_rates`, :mod:`.sql_grants`,
    :mod:`.sql_sessions`, on the back-end hooks of :mod:`.sql_base`.
    """
