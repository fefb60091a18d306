"""The store's foundation: the back-end hooks every SQL module of the store builds on.

:class:`StoreBase` declares what a back end (:mod:`.sqlite`, :mod:`.postgres`) supplies
— connections, transactions, placeholder style, migrations, waiting for a decision —
and holds what every part shares: the clock, the audit key, the approval waiters.
The parts (:mod:`.sql_audit`, :mod:`.sql_approvals`, :mod:`.sql_budgets`,
:mod:`.sql_rates`) add the operations; :class:`~interlock.store.sql.SqlStore` is
all of them together.
"""

from __future__ import annotations

import contextlib
import json
import threading
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any, Protocol, Self

from interlock.store.audit_keys import AuditKeys
from interlock.store.records import ApprovalRecord, now_us

if TYPE_CHECKING:
    from pathlib import Path

    from interlock.store.checkpoints import CheckpointOption

__all__ = ["AuditEntry", "Cursor", "StoreBase", "compact_json"]

#: One audit record to append: tenant, ts_us, kind, decision_id, agent, decision, body.
AuditEntry = tuple[str, int, str, str | None, str | None, str | None, str]


class Cursor(Protocol):
    """The part of a DB-API cursor the store uses (sqlite3 and psycopg both fit)."""

    @property
    def rowcount(self) -> int: ...

    def execute(self, sql: Any, params: Any = ..., /) -> Any: ...

    def executemany(self, sql: Any, params: Any, /) -> Any: ...

    def fetchone(self) -> Any: ...

    def fetchall(self) -> list[Any]: ...


class StoreBase(ABC):
    """What every part of the store needs from a back end, and shares.

    ``clock`` returns microseconds since the epoch (tests pass a fake one);
    ``audit_keys`` is where the audit key comes from (:mod:`.audit_keys`; none if not
    given); ``checkpoints`` the signed checkpoints' settings for the audit writers on
    this store (:mod:`.checkpoints`: ``None`` finds them, ``False`` turns them off).
    """

    #: Which back end: ``sqlite`` or ``postgres``.
    dialect = ""
    #: The SQL function for the larger of two values.
    greatest = "MAX"
    #: Whether :meth:`usual` and :meth:`usual_in` run schema 9's one-statement usual
    #: reservation and commit (SQLite's views; PostgreSQL has its functions instead).
    usual_statements = False
    #: Appended to a SELECT that must lock the rows it reads.
    for_update = ""
    #: Appended to the reaper's SELECT so that replicas share the work.
    skip_locked = ""

    def __init__(
        self,
        *,
        clock: Callable[[], int] | None = None,
        audit_keys: AuditKeys | None = None,
        checkpoints: CheckpointOption = None,
    ) -> None:
        self.clock: Callable[[], int] = clock or now_us
        self.audit_keys = audit_keys or AuditKeys(source="none given")
        self.checkpoints: CheckpointOption = checkpoints
        self._approval_waiters = _Waiters()
        self._closed = False

    # -- back-end hooks ----------------------------------------------------------------

    @property
    @abstractmethod
    def url(self) -> str:
        """The database URL, with any password hidden."""

    @abstractmethod
    def transaction(self, *, write: bool = True) -> AbstractContextManager[Cursor]:
        """A transaction; a write transaction holds the write lock from its start on
        back ends that lock the whole database."""

    @abstractmethod
    def q(self, sql: str) -> str:
        """``sql`` written with ``?`` placeholders, in this back end's style."""

    @abstractmethod
    def migrate(self) -> list[str]:
        """Apply pending migrations; return the names applied."""

    @abstractmethod
    def migration_status(self) -> list[tuple[int, str, bool]]:
        """(version, name, applied) for every migration this Interlock knows."""

    @abstractmethod
    def wait_for_approval(self, approval_id: str, timeout: float) -> ApprovalRecord:
        """Block until the approval leaves ``pending`` or ``timeout`` passes; return it."""

    @abstractmethod
    async def await_approval(self, approval_id: str, timeout: float) -> ApprovalRecord:
        """The async twin of :meth:`wait_for_approval`."""

    def single_statement(self) -> AbstractContextManager[Cursor]:
        """One statement that is a transaction of its own (a back end may send it in
        one round trip: see :meth:`PostgresStore.single_statement`)."""
        return self.transaction(write=True)

    def usual(self, sql: str, params: Sequence[Any]) -> bool:
        """Run ``sql``, one statement, as a transaction of its own (no ``BEGIN`` or
        ``COMMIT`` sent); False when it aborted — nothing of it stays, and the
        caller's general path decides. A back end without such statements (the
        default) always answers False."""
        return False

    def usual_in(self, cur: Cursor, sql: str, params: Sequence[Any]) -> bool:
        """:meth:`usual` inside the caller's transaction: an abort undoes this
        statement only, and the transaction goes on."""
        return False

    def file_path(self) -> Path | None:
        """The database file, for a back end that keeps one (the default place of
        its key files and checkpoints); ``None`` otherwise."""
        return None

    def notify_decided(self, cur: Cursor, approval_id: str) -> None:  # noqa: B027
        """Called inside the transaction that decides an approval (PostgreSQL NOTIFYs)."""

    def _migrate_on_open(self) -> None:
        """Migrate while opening; a refused open leaves no connection behind."""
        try:
            self.migrate()
        except BaseException:
            self.close()
            raise

    def close(self) -> None:
        self._closed = True

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class _Waiters:
    """Callbacks of threads and tasks waiting for an approval to be decided; a
    decision made in this process (or announced by the database) calls them."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._callbacks: dict[str, set[Callable[[], object]]] = {}

    def register(self, approval_id: str, callback: Callable[[], object]) -> None:
        with self._lock:
            self._callbacks.setdefault(approval_id, set()).add(callback)

    def unregister(self, approval_id: str, callback: Callable[[], object]) -> None:
        with self._lock:
            callbacks = self._callbacks.get(approval_id)
            if callbacks is not None:
                callbacks.discard(callback)
                if not callbacks:
                    del self._callbacks[approval_id]

    def wake(self, approval_id: str) -> None:
        with self._lock:
            callbacks = list(self._callbacks.get(approval_id, ()))
        for callback in callbacks:
            with contextlib.suppress(RuntimeError):  # a waiter's event loop has closed
                callback()

    def wake_all(self) -> None:
        """Every waiter re-reads (announcements may have been missed)."""
        with self._lock:
            callbacks = [callback for group in self._callbacks.values() for callback in group]
        for callback in callbacks:
            with contextlib.suppress(RuntimeError):
                callback()

    def wait(self, approval_id: str) -> _Waiting:
        return _Waiting(self, approval_id)


class _Waiting:
    """One thread's registration: ``with waiters.wait(id) as event: ...``."""

    def __init__(self, waiters: _Waiters, approval_id: str) -> None:
        self.waiters = waiters
        self.approval_id = approval_id
        self.event = threading.Event()

    def __enter__(self) -> threading.Event:
        self.waiters.register(self.approval_id, self.event.set)
        return self.event

    def __exit__(self, *exc: object) -> None:
        self.waiters.unregister(self.approval_id, self.event.set)


def compact_json(value: Any) -> str:
    """``value`` as the store keeps JSON: sorted keys, no spaces."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), default=repr)
