"""Group commit for the rows a budget lease writes (PostgreSQL; ADR 0012 §7).

A reservation served from a lease writes its own row, and its commit updates that
row: two durable transactions per budgeted call, on no shared row. Under load the
threads of one replica write many such rows at once, each in a transaction of its
own — a round trip, a pool checkout and a disk flush each. Here they share: every
row waiting when a commit starts goes into ONE statement (one round trip, one
transaction, one flush), and each caller waits until the transaction holding its
row has committed — so nothing a caller was told is written is lost, and each row
keeps its own conditions (the lease still there and unexpired, the budget open, the
key unused; the reservation still in flight on the lease): the statement reports
which rows it wrote, and a caller whose row it did not write hears ``False``, as
from its own statement.

At most ``in_flight`` commits (default 2) run at a time; a caller that finds room
for one makes it, on its own thread, with whatever has gathered (the leader: no
hand-off to another thread), and callers arriving meanwhile gather for the next one.
Two in flight, not one: while one batch waits for the disk the next gathers and
is sent, so the flushes of a replica's batches overlap (with one, measured, the
batches are bigger but a replica waits for each flush in turn). A caller waits no longer than its
check's deadline; the batch is bounded by the latest deadline among its callers, so
a caller with a short one cannot cut the others' rows short. A caller that stops
waiting (or a batch that fails) does not know whether its row was written: the same
answer as a statement whose connection was cut (:class:`~interlock.errors.StoreError`).

Example::

    writer = LeaseWriter(store._lease_batch)
    written = writer.insert(row)    # True once committed; False: not written
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from typing import Any, Final

from interlock.core.deadline import current_deadline, deadline_scope, time_left
from interlock.errors import StoreError, StoreTimeout

__all__ = ["LeaseWriter", "Row"]

#: One row's parameters; its first is the reservation's id.
Row = tuple[Any, ...]
#: Writes the inserts and the settlements in one transaction; the ids it wrote.
WriteBatch = Callable[[Sequence[Row], Sequence[Row]], set[str]]

#: A caller with no deadline waits for its batch at most this long (seconds).
_WAIT_CAP: Final = 60.0
#: Rows in one statement, at most (PostgreSQL takes 65,535 parameters).
MAX_ROWS: Final = 256


class _Batch:
    __slots__ = (
        "deadline",
        "done",
        "error",
        "inserts",
        "settles",
        "taken",
        "unbounded",
        "written",
    )

    def __init__(self) -> None:
        self.inserts: list[Row] = []
        self.settles: list[Row] = []
        self.done = False
        self.taken = False  # a caller is writing it: exactly one ever does
        self.written: set[str] = set()
        self.error: BaseException | None = None
        self.deadline = 0.0  # the latest of its callers' deadlines
        self.unbounded = False  # a caller without a deadline is in it

    def size(self) -> int:
        return len(self.inserts) + len(self.settles)


class LeaseWriter:
    """The group commit of one store instance's lease rows; thread-safe."""

    def __init__(self, write: WriteBatch, *, in_flight: int = 2) -> None:
        self._write = write
        self._in_flight = in_flight
        self._cond = threading.Condition()
        self._open = _Batch()
        self._busy = 0  # batches being written
        self.batches = 0  # commits made (for benchmarks and tests)
        self.rows = 0  # rows those commits carried

    def insert(self, row: Row) -> bool:
        """Write a leased reservation's row; False: not written (the key was used,
        the lease is gone, the budget is closed)."""
        return self._submit(row, settle=False)

    def settle(self, row: Row) -> bool:
        """Settle a leased reservation's row; False: it was no longer in flight on
        its lease (settled or detached elsewhere)."""
        return self._submit(row, settle=True)

    def _submit(self, row: Row, *, settle: bool) -> bool:
        deadline = current_deadline()
        wait_until = time.monotonic() + max(0.0, time_left(_WAIT_CAP))
        with self._cond:
            batch = self._open
            (batch.settles if settle else batch.inserts).append(row)
            if deadline is None:
                batch.unbounded = True
            else:
                batch.deadline = max(batch.deadline, deadline)
            if batch.size() >= MAX_ROWS:  # full: later callers gather in the next one
                self._open = _Batch()
            while not batch.done:
                if not batch.taken and self._busy < self._in_flight:
                    batch.taken = True  # a commit can start: this caller makes it
                    self._busy += 1
                    if self._open is batch:
                        self._open = _Batch()
                    break
                left = wait_until - time.monotonic()
                if left <= 0:
                    raise StoreTimeout(
                        "the deadline passed before the lease row's transaction committed; "
                        "it may still commit"
                    )
                self._cond.wait(left)
        if not batch.done:  # taken by this caller (the loop above left it only so)
            self._lead(batch)
        error = batch.error
        if error is not None:  # each caller its own exception (raised on many threads)
            kind = type(error) if isinstance(error, StoreError) else StoreError
            raise kind(f"the lease rows' transaction failed: {error}") from error
        return row[0] in batch.written

    def _lead(self, batch: _Batch) -> None:
        """Write ``batch`` on this thread, then let the next batch's callers go."""
        try:
            with deadline_scope(None if batch.unbounded else batch.deadline):
                batch.written = self._write(batch.inserts, batch.settles)
            self.batches += 1
            self.rows += batch.size()
        except Exception as exc:  # every caller of the batch hears it
            batch.error = exc
        except BaseException:  # KeyboardInterrupt ...: this thread stops; the others fail
            batch.error = StoreError("the lease rows' transaction was interrupted")
            raise
        finally:
            with self._cond:
                batch.done = True
                self._busy -= 1
                self._cond.notify_all()
