"""The decision's audit record in its reservation's transaction (ADR 0012 §5).

An allowed call a budget covers makes two writes before it runs: its reservation and
its decision's audit record. Where the store can, both commit in one transaction:
the guard hands the stateful decider a :class:`JoinedRecord` for the check in
progress (a ``contextvars`` variable: it follows the check into the thread an async
check settles on, and no other check sees it), the decider hands it to the store's
``reserve``, and the store has it encode the record — the allowed decision, holding
the reservation, whose id is made before the transaction — then claims it inside
the transaction once the reservation is written, appends it there, and tells it
when that transaction has committed. A refusal, a replay, a reservation served from
a lease, or a back end that cannot join claims nothing: the guard then records the
decision as usual.

Nothing can be lost or said twice: the record is encoded before the transaction
commits and is in the chain exactly when the reservation is; the guard writes the
decision's record itself unless the decision it is about to return is the very one
recorded (:attr:`JoinedRecord.decision`, once :attr:`JoinedRecord.landed`). A
decision the guard changes afterwards (a deadline passed, the check was cancelled: the
reservation is given back) is recorded again, marked ``supersedes: allow``; an async
check that stopped waiting closes its record first, so that a reservation still being
made cannot commit it any more (:class:`JoinClosed`).
"""

from __future__ import annotations

import contextvars
import threading
import time
from typing import TYPE_CHECKING, Final

if TYPE_CHECKING:
    from interlock.core.action import Action
    from interlock.core.decision import Decision
    from interlock.core.events import Event
    from interlock.core.redaction import Redactor
    from interlock.core.starting import Starting
    from interlock.store.audit import AuditWriter
    from interlock.store.records import Reservation
    from interlock.store.sql_base import AuditEntry

__all__ = ["JOINED", "DecisionRecord", "JoinClosed", "JoinedRecord"]

#: The check in progress's record, while its decider runs (``None``: record as usual).
JOINED: Final[contextvars.ContextVar[JoinedRecord | None]] = contextvars.ContextVar(
    "interlock_joined_record", default=None
)


class JoinedRecord:
    """One check's decision record, on offer to its reservation's transaction. Made by
    the guard; :meth:`entry` is called (at most once) by the store, inside that
    transaction, with the decision the decider is about to return."""

    __slots__ = (
        "_encoded",
        "_lock",
        "_start",
        "action",
        "closed",
        "decision",
        "durable",
        "event",
        "landed",
        "redactor",
        "start",
        "starting",
        "writer",
    )

    def __init__(
        self,
        writer: AuditWriter,
        action: Action,
        start: int,
        redactor: Redactor,
        starting: Starting | None = None,
    ) -> None:
        self.writer = writer
        self.starting = starting  # a start record that follows an allow, in the same commit
        self.action = action
        self.start = start  # perf_counter_ns at the check's start: the record's latency
        self.redactor = redactor
        self.durable = writer.durability == "power"
        self.event: Event | None = None  # the recorded event, once claimed
        self.decision: Decision | None = None  # the decision it records, once claimed
        self.landed = False  # its transaction committed: it is in the chain
        self.closed = False  # the guard records on its own: no claim any more
        self._lock = threading.Lock()
        self._encoded: tuple[Event, Decision] | None = None
        self._start: Starting | None = None  # the start record encoded with it

    def encode(self, decision: Decision) -> list[AuditEntry]:
        """The record of ``decision``, encoded as the audit writer encodes it — before
        the reservation's transaction, so that its write lock is not held for it —
        followed, for an allow whose body runs next, by that body's start record
        (``tool_invoke`` / ``llm_input``: the same chain, the same decision id; see
        :class:`~interlock.core.phases.Starting`). Nothing is promised yet:
        :meth:`claim` does that."""
        from interlock.core.decision import Verdict
        from interlock.core.events import Event

        event = Event(
            "decision",
            time.time(),
            self.action,
            decision,
            time.perf_counter_ns() - self.start,
            None,
            self.redactor,
        )
        tenant = self.action.context.tenant
        encoded = [self.writer.encode(tenant, event)]
        starting = self.starting
        if starting is not None and (
            starting.decision_id is not None or decision.verdict is not Verdict.ALLOW
        ):
            starting = None  # another decision's commit carried it; or nothing runs
        if starting is not None:
            record = starting.record(decision.decision_id, self.action.context.agent)
            encoded.append(self.writer.encode_record(tenant, starting.kind, record))
        self._encoded = (event, decision)
        self._start = starting
        return encoded

    def claim(self) -> None:
        """Inside the reservation's transaction, just before the record is appended:
        from now on it may land. Raises :class:`JoinClosed` once the guard has closed
        it (an async check that stopped waiting): the transaction then rolls back, and
        nothing of it stays."""
        with self._lock:
            if self.closed:
                raise JoinClosed("the check stopped waiting for its reservation")
            encoded = self._encoded
            assert encoded is not None, "claim() before encode()"
            self.event, self.decision = encoded

    def committed(self) -> None:
        """The reservation's transaction committed: the record is in the chain (and
        the start record after it)."""
        self.landed = True
        self._started()

    def close(self) -> Decision | None:
        """No claim from now on; the decision claimed, if one was (its transaction
        may have committed, or may yet: a record the guard writes instead says it
        supersedes it — and a start record claimed with it is taken as written, so
        that the body's runner closes it rather than leave it dangling)."""
        with self._lock:
            self.closed = True
            if self.decision is not None:
                self._started()
            return self.decision

    def _started(self) -> None:
        start, decision = self._start, self.decision
        if start is not None and decision is not None and start.decision_id is None:
            start.decision_id = decision.decision_id


class JoinClosed(Exception):
    """Raised inside a reservation's transaction whose check stopped waiting."""


class DecisionRecord:
    """What the stateful decider gives the store's ``reserve`` (as
    :class:`~interlock.store.sql_budgets.JoinedRecord` asks): the joined record of
    ``decision`` once it holds the reservation."""

    __slots__ = ("decision", "durable", "joined", "made")

    def __init__(self, joined: JoinedRecord, decision: Decision, made: MakeDecision) -> None:
        self.joined = joined
        self.decision = decision
        self.made = made
        self.durable = joined.durable

    def entries(self, reservation: Reservation) -> list[AuditEntry]:
        return self.joined.encode(self.made(self.decision, reservation))

    def claim(self) -> None:
        self.joined.claim()

    def committed(self) -> None:
        self.joined.committed()


if TYPE_CHECKING:
    from collections.abc import Callable

    #: The allowed decision holding the reservation (the decider's ``_replace``).
    MakeDecision = Callable[[Decision, Reservation], Decision]
