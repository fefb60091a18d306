"""The guard's side of session-aware rules: read the session before a check, record
the decided step after, settle it when the body returns, record outside inputs.

Only a guard whose policy reads or labels sessions (``CompiledPolicy.sessions``) has
a :class:`SessionRecorder`; any other guard pays nothing for sessions.

- Before a check: the session's view (:meth:`SessionRecorder.facts`); a history that
  cannot be read gives facts with no view, and a rule reading them is unevaluable
  (the check undetermined, never allowed).
- After: the decided step, every verdict; an allow attaches (and clears) the labels
  its label rules and tool declare. An allow whose step cannot be recorded becomes
  undetermined: a later rule would not see it. Where the history lives in the audit
  log's store (and the audit writer waits for its records), the step is written in
  the decision record's transaction (:class:`JoinedStep`): one commit for both, and
  they land together or not at all — an allow whose step fails is recorded, and told,
  undetermined.
- When the body returns: the step is settled executed, with the fingerprints of its
  result; when it raises, executed=False, with the fingerprints of its error (an
  agent framework hands the error text to the model, and it quotes what the body
  read: a failed read of a secret must still count as a flow).
"""

from __future__ import annotations

import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING, Any, Final, TypeVar

from interlock.core.action import Action, Context
from interlock.core.decision import Decision, Verdict
from interlock.errors import SessionUnavailable, describe
from interlock.policy.compiled import CompiledPolicy
from interlock.policy.matchers import GlobSet
from interlock.policy.sessionrules import (
    NOT_READ,
    STEP_KINDS,
    VERDICT_TEXT,
    SessionFacts,
    SessionSpec,
    error_data,
    joined_to_tails,
    new_facts,
    new_step,
    reads_session,
    step_labels,
)
from interlock.session.fingerprints import of_data
from interlock.session.history import (
    MemoryHistory,
    NewStep,
    SessionHistory,
    SessionView,
    Step,
)
from interlock.session.tails import tails_of

if TYPE_CHECKING:
    from interlock.core.events import Event
    from interlock.store.audit import AuditWriter
    from interlock.store.sql_base import AuditEntry, Cursor
    from interlock.store.sql_sessions import Written

__all__ = ["JoinedStep", "SessionCheck", "SessionRecorder"]

log = logging.getLogger("interlock")
T = TypeVar("T")

_PENDING_KEPT: Final = 10_000
_ALLOW: Final = Verdict.ALLOW
_NO_LABELS: Final[frozenset[str]] = frozenset()
_READS_KEPT: Final = 4096
#: ``SessionFacts(...)`` with every field given (in one C call where built)
_new_facts: Final = new_facts


def _writes_in_memory(history: SessionHistory) -> bool:
    """Whether ``history`` writes steps as :class:`MemoryHistory` does (in this
    process's memory, under a lock: a write that cannot fail)."""
    if not isinstance(history, MemoryHistory):
        return False
    kind = type(history)
    return kind.append is MemoryHistory.append and kind.append_call is MemoryHistory.append_call


class SessionRecorder:
    """Session facts in, steps out, for one guard."""

    def __init__(
        self, spec: SessionSpec, history: SessionHistory, policy: CompiledPolicy | None = None
    ) -> None:
        self.spec = spec
        self.history = history
        #: the kinds and names of the rules (and label rules) that read the session's
        #: view; None: every call reads it (no policy given, or a history whose writes
        #: can fail — a store's: a call judged without the view whose step then could
        #: not be written would have its allow recorded before it is told undetermined;
        #: read first, the refusal comes before the check, as one record)
        self._readers: tuple[tuple[frozenset[str] | None, GlobSet | None], ...] | None = (
            None
            if policy is None or not _writes_in_memory(history)
            else tuple(
                (rule.kinds, rule.names)
                for rule in (*policy.rules, *spec.label_rules)
                if reads_session(rule)
            )
        )
        self._reads: dict[tuple[str, str], bool] = {}
        self._pending: OrderedDict[str, tuple[str, str]] = OrderedDict()
        #: the last decision of an allowed batch -> the earlier ones (one body runs)
        self._batches: OrderedDict[str, tuple[str, ...]] = OrderedDict()
        self._lock = threading.Lock()
        #: the history's store, when it can write a step in another's transaction
        self.joins_store: object | None = (
            getattr(history, "store", None) if hasattr(history, "append_joined") else None
        )
        #: the history lives in this process's memory: read and written on the loop
        self.in_memory = type(history).__name__ == "MemoryHistory"
        #: the history is this module's MemoryHistory: a step is appended field by
        #: field (``append_call``: no NewStep made)
        self._by_fields = type(history) is MemoryHistory
        #: what each session's arguments last sent, joined to its next call's
        #: (``flows_from``: a secret cut into pieces over several calls)
        self.tails = tails_of(history) if spec.join_calls else None

    def joinable(self, writer: AuditWriter) -> bool:
        """Whether a step can ride a record of ``writer``: the same store, and a writer
        that waits for its records (the next check must see the step)."""
        return self.joins_store is not None and writer.store is self.joins_store and writer.waits

    def adopt(self, old: SessionRecorder) -> None:
        """Take over the steps ``old`` (the recorder of a replaced policy) still waits
        to settle: a body allowed before a reload settles after it."""
        if isinstance(old, SessionRecorder) and old.history is self.history:
            with old._lock:
                self._pending.update(old._pending)
                self._batches.update(old._batches)

    # -- before the check ------------------------------------------------------------

    def reads(self, kind: object, name: object) -> bool:
        """Whether a rule that reads the session may concern a call of this kind and
        name (any scope, agent or tenant: a filter, never an answer). One that none
        can is judged without reading the session's view (:meth:`facts_of`); its step
        is recorded all the same."""
        readers = self._readers
        if readers is None or type(kind) is not str or type(name) is not str:
            return True
        key = (kind, name)
        found = self._reads.get(key)
        if found is None:
            found = any(
                (kinds is None or kind in kinds) and (names is None or names.matches(name))
                for kinds, names in readers
            )
            if len(self._reads) >= _READS_KEPT:
                self._reads.clear()
            self._reads[key] = found
        return found

    def facts_of(self, action: Action) -> SessionFacts:
        """The session facts of a check of ``action``: :meth:`facts`, or none read
        (:meth:`SessionFacts.unread`) when no rule that reads sessions can concern it
        — a rule that read them anyway would be unevaluable, never a miss."""
        context = action.context
        session_id = context.session_id
        if session_id is None:
            return self.facts(context)
        kind = action.kind
        name = action.name
        # reads, its cache's hit inlined (a call fewer on every check): the cache
        # holds exact strings only
        reads = self._reads.get((kind, name)) if type(kind) is str and type(name) is str else None
        if reads is None:
            reads = self.reads(kind, name)
        if not reads:
            # SessionFacts.unread, without its call
            return _new_facts(None, 0.0, NOT_READ, None, None, None, None, False, None)
        # facts, inlined
        try:
            view = self.history.view(context.tenant, session_id)
        except Exception as exc:
            return SessionFacts.unavailable(session_id, describe(exc))
        return _new_facts(view, time.time(), None, None, None, None, None, True, None)

    def facts(self, context: Context) -> SessionFacts:
        """The session facts of a check in ``context``."""
        session_id = context.session_id
        if session_id is None:
            return SessionFacts(SessionView(context.tenant, ""), time.time())
        try:
            view = self.history.view(context.tenant, session_id)
        except Exception as exc:
            return SessionFacts.unavailable(session_id, describe(exc))
        # SessionFacts.of, without its call
        return _new_facts(view, time.time(), None, None, None, None, None, True, None)

    # -- after the check -------------------------------------------------------------

    def record(
        self, action: Action, decision: Decision, facts: SessionFacts, policy: CompiledPolicy
    ) -> Decision:
        """Append the decided step of ``action``; the decision, or an undetermined one
        when an allow cannot be recorded."""
        context = action.context
        session_id = context.session_id
        if session_id is None or not isinstance(context, Context):
            return decision
        # append's work, inlined (a Python call fewer on every session check)
        verdict = decision.verdict
        allowed = verdict is _ALLOW
        tenant = context.tenant
        try:
            if self._by_fields:  # the step's fields, no NewStep made of them
                given = action.name
                name = given if type(given) is str else str(given)
                kind = action.kind
                spec = policy.sessions
                if not allowed:
                    attach = clear = _NO_LABELS  # step_labels' own answer
                elif spec is None:
                    attach, clear = step_labels(action, decision, facts, policy)
                else:
                    # spec.may_label, its cache's hit inlined (none without label rules)
                    labelled = spec._named.get((kind, name)) if spec.label_rules else False
                    if labelled is None:
                        labelled = spec.may_label(kind, name)
                    if labelled:
                        attach, clear = step_labels(action, decision, facts, policy)
                    else:
                        attach, clear = spec.tool_labels.get(given, _NO_LABELS), _NO_LABELS
                self.history.append_call(  # type: ignore[attr-defined]
                    tenant,
                    session_id,
                    kind if kind in STEP_KINDS else "tool",  # step_kind, inlined
                    name,
                    VERDICT_TEXT[verdict],
                    decision.decision_id,
                    attach,
                    clear,
                )
            else:
                step = new_step(action, decision, facts, policy)
                self.history.append(tenant, session_id, step)
        except Exception as exc:
            if not allowed:
                return decision
            raise self._unrecorded(session_id, exc) from exc
        if allowed:
            if self.tails is not None:
                self.sent(facts, tenant, session_id)
            # self.pending, inlined (a call fewer on every allowed session check)
            decision_id = decision.decision_id
            if decision_id is not None:
                pending = self._pending
                lock = self._lock
                lock.acquire()
                try:
                    pending[decision_id] = (tenant, session_id)
                    while len(pending) > _PENDING_KEPT:
                        pending.popitem(last=False)
                finally:
                    lock.release()
        return decision

    def append(
        self, tenant: str, session_id: str, step: NewStep, decision: Decision, allowed: bool
    ) -> None:
        """Append ``step`` on its own (not joined to its record)."""
        try:
            self.history.append(tenant, session_id, step)
        except Exception as exc:
            if not allowed:
                return
            raise self._unrecorded(session_id, exc) from exc
        if allowed:
            self.pending(decision, tenant, session_id)

    @staticmethod
    def _unrecorded(session_id: str, exc: Exception) -> SessionUnavailable:
        """The error of an allowed step that could not be recorded (logged)."""
        log.error("interlock: session %r: the step could not be recorded: %s", session_id, exc)
        return SessionUnavailable(
            f"session {session_id!r}: the allowed step could not be recorded ({describe(exc)})"
        )

    def landed(self, join: JoinedStep, decision: Decision, facts: SessionFacts) -> None:
        """``join``'s step committed with ``decision``'s record: the history's kept
        view moves on by it; an allow's step waits to be settled."""
        if join.written is None or not join.committed:
            return
        self.history.joined(join.tenant, join.session_id, join.written)  # type: ignore[attr-defined]
        if decision.verdict is Verdict.ALLOW:
            if self.tails is not None:
                self.sent(facts, join.tenant, join.session_id)
            self.pending(decision, join.tenant, join.session_id)

    def sent(self, facts: SessionFacts, tenant: str, session_id: str) -> None:
        """The allowed check of ``facts`` read its pieces (its flow tests advanced the
        tails): they left, and join the session's chains (a refused call's never do)."""
        if self.tails is not None and joined_to_tails(facts):
            self.tails.pieces.sent(tenant, session_id)

    def pending(self, decision: Decision, tenant: str, session_id: str) -> None:
        """Remember the allowed step of ``decision``, to settle when its body returns."""
        decision_id = decision.decision_id
        if decision_id is not None:
            pending = self._pending
            lock = self._lock
            lock.acquire()  # not ``with``: a call fewer on every allowed session check
            try:
                pending[decision_id] = (tenant, session_id)
                while len(pending) > _PENDING_KEPT:
                    pending.popitem(last=False)
            finally:
                lock.release()

    # -- when the body has run -------------------------------------------------------

    def settle(
        self,
        decision: Decision,
        *,
        executed: bool,
        result: object = None,
        claimed: Sequence[tuple[str, tuple[str, str]]] = (),
    ) -> None:
        """Mark the step of ``decision`` executed (with its result's fingerprints) or
        not (``result``: the error it raised, see :func:`error_data`). A step that is
        not a session step is ignored. ``claimed``: what :meth:`claim` took for it
        when the call was allowed."""
        self._settle(decision, executed, result, claimed)

    def claim(self, decision: Decision) -> list[tuple[str, tuple[str, str]]]:
        """Take the steps ``decision``'s outcome settles (its own and its batch's) out
        of the pending table: (step id, (tenant, session id)) each. The table is
        bounded — the oldest forgotten past ``_PENDING_KEPT`` — so a wrapper claims its
        steps when it is made: a body that runs for minutes while thousands of other
        calls are checked still settles its own step (its result's data recorded). An
        adapter that settles later by itself passes the result to :meth:`settle` as
        ``claimed``."""
        decision_id = decision.decision_id
        if decision_id is None:
            return []
        with self._lock:
            ids = (decision_id, *self._batches.pop(decision_id, ()))
            pending = self._pending
            keys = [(i, pending.pop(i, None)) for i in ids]
        return [(i, key) for i, key in keys if key is not None]

    def _settle(
        self,
        decision: Decision,
        executed: bool,
        result: object,
        claimed: Sequence[tuple[str, tuple[str, str]]],
    ) -> None:
        """Settle the steps ``claimed`` before and those pending now."""
        # what the wrapper claimed, else what is pending now (a step is pending before
        # its check returns: a wrapper that claimed something has claimed it all)
        keys = claimed or self.claim(decision)
        fingerprints: frozenset[int] | None = None
        learnt: tuple[str, str] | None = None
        for step_id, key in keys:
            if fingerprints is None:
                fingerprints = of_data(result if executed else error_data(result))
            if executed and self.tails is not None and key != learnt:
                learnt = key  # its tokens, for pieces sent in any order (tails.pieces)
                self.tails.pieces.learn(key[0], key[1], result)
            try:
                self.history.settle(
                    key[0], key[1], step_id, executed=executed, fingerprints=fingerprints
                )
            except Exception as exc:
                log.error(
                    "interlock: session %r: the outcome of %s could not be recorded: %s",
                    key[1],
                    step_id,
                    exc,
                )

    def batched(self, decisions: list[Decision]) -> None:
        """An allowed batch (one call mapped to several actions): the body that runs
        for the last decision ran for all, so settling it settles every step — the
        secret read a mapper put first gets the result's fingerprints too."""
        ids = tuple(d.decision_id for d in decisions[:-1] if d.decision_id is not None)
        last = decisions[-1].decision_id if decisions else None
        if last is None or not ids:
            return
        with self._lock:
            self._batches[last] = ids
            while len(self._batches) > _PENDING_KEPT:
                self._batches.popitem(last=False)

    def settling(self, decision: Decision, body: Callable[..., T]) -> Callable[..., T]:
        """``body``, settling the step of ``decision`` with what it returns or raises."""

        claimed = self.claim(decision)  # now: the pending table forgets the oldest

        def settled(*args: Any, **kwargs: Any) -> T:
            try:
                result = body(*args, **kwargs)
            except BaseException as exc:
                self._settle(decision, False, exc, claimed)
                raise
            self._settle(decision, True, result, claimed)
            return result

        return settled

    def asettling(
        self, decision: Decision, body: Callable[..., Awaitable[T]]
    ) -> Callable[..., Awaitable[T]]:
        """The async twin of :meth:`settling`."""

        import asyncio

        # fingerprints and SQL: off the event loop, unless the history is in memory
        settle = self.asettle_here if self.in_memory else self.asettle_off
        claimed = self.claim(decision)  # now: the pending table forgets the oldest

        async def settled(*args: Any, **kwargs: Any) -> T:
            try:
                result = await body(*args, **kwargs)
            except asyncio.CancelledError as exc:
                self._settle(decision, False, exc, claimed)  # no await while cancelled
                raise
            except BaseException as exc:
                await settle(decision, False, exc, claimed)
                raise
            await settle(decision, True, result, claimed)
            return result

        return settled

    async def asettle_here(
        self,
        decision: Decision,
        executed: bool,
        result: object,
        claimed: Sequence[tuple[str, tuple[str, str]]] = (),
    ) -> None:
        self._settle(decision, executed, result, claimed)

    async def asettle_off(
        self,
        decision: Decision,
        executed: bool,
        result: object,
        claimed: Sequence[tuple[str, tuple[str, str]]] = (),
    ) -> None:
        import asyncio

        await asyncio.to_thread(self._settle, decision, executed, result, claimed)

    # -- outside data ----------------------------------------------------------------

    def record_input(
        self, text: object, context: Context, *, trusted: bool, labels: tuple[str, ...]
    ) -> Step | None:
        """Record outside data entering the session (None: the context has no session)."""
        session_id = context.session_id
        if session_id is None:
            return None
        step = NewStep(
            kind="input",
            name="input" if trusted else "input:untrusted",
            verdict="input",
            labels=frozenset(labels),
            fingerprints=of_data(text),
            trusted=trusted,
            executed=True,
        )
        if self.tails is not None:
            self.tails.pieces.learn(context.tenant, session_id, text)
        return self.history.append(context.tenant, session_id, step)


def SessionCheck(  # noqa: N802 - the name of the class it replaces
    guard: object, recorder: SessionRecorder, facts: SessionFacts
) -> SessionFacts:
    """``facts`` as the session check in progress of ``guard`` (what the guard sets in
    its ``_RECORDING`` variable): :class:`SessionFacts` carries the guard, its recorder
    and the step that rides the decision's record, so a check makes one object and
    sets one context variable."""
    facts.guard = guard
    facts.recorder = recorder
    facts.join = None
    return facts


class JoinedStep:
    """A check's session step, written in its decision record's transaction
    (:data:`~interlock.store.sql_audit.AuditJoin`); the history's append is all or
    nothing there (SQLite: one statement, or a savepoint). When the step cannot be
    written, an allow's record is replaced by the undetermined decision the caller is
    told (:attr:`told`): record and step land together, or the record says the call
    does not stand. A refusal's record
    stands without its step (as when appended on its own). Failed once, failed for
    good: a retried transaction appends the same replacement."""

    __slots__ = (
        "_finish",
        "allowed",
        "committed",
        "goes_on",
        "history",
        "instead",
        "session_id",
        "skip",
        "step",
        "tenant",
        "told",
        "undetermined",
        "writer",
        "written",
    )

    def __init__(
        self,
        recorder: SessionRecorder,
        writer: AuditWriter,
        tenant: str,
        session_id: str,
        step: NewStep,
        allowed: bool,
        undetermined: Callable[[BaseException], Event],
    ) -> None:
        self.history: Any = recorder.history
        self.writer = writer
        self.tenant = tenant
        self.session_id = session_id
        self.step = step
        self.allowed = allowed
        self.undetermined = undetermined
        self.written: Written | None = None  # in the transaction (landed once it commits)
        self.instead: AuditEntry | None = None  # the record in its record's place
        self.told: Event | None = None  # the event that record holds
        self.skip = False
        self.committed = False  # its transaction committed (the guard's writer said so)
        self._finish: Callable[[Sequence[Any]], Written] | None = None
        # SQLite: a failed step leaves the transaction going on; PostgreSQL: it aborts
        # it, and the writer's retry appends the replacement
        self.goes_on = getattr(recorder.joins_store, "dialect", "") != "postgres"

    def __call__(self, cur: Cursor) -> AuditEntry | None:
        if self.instead is not None:
            return self.instead
        if self.skip:
            return None
        try:
            self.written = self.history.append_joined(cur, self.tenant, self.session_id, self.step)
        except Exception as exc:
            self.written = None
            self._failed(exc)
            if not self.goes_on or not _in_transaction(cur):
                # PostgreSQL (or a SQLite transaction the failure rolled back): the
                # transaction is lost; the writer tries the batch again, and this join
                # then gives its replacement (or nothing) at once
                raise
            return self.instead
        return None

    def in_statement(self) -> tuple[str, list[Any]] | None:
        """PostgreSQL: this step as CTEs for its record's own statement (one round
        trip for both: :meth:`PostgresStore.append_audit`), naming the session row it
        leaves ``s0``; None when it cannot ride one (SQLite, or it failed before: its
        replacement or nothing is appended as usual)."""
        if self.goes_on or self.instead is not None or self.skip:
            return None
        try:
            sql, params, self._finish = self.history.step_statement(
                self.tenant, self.session_id, self.step
            )
        except Exception:  # (a bad value) the usual path tells it
            return None
        return sql, params

    def landed_in_statement(self, session: Sequence[Any]) -> None:
        """The statement :meth:`in_statement` rode has run, leaving ``session``."""
        assert self._finish is not None
        self.written = self._finish(session)

    def _failed(self, exc: BaseException) -> None:
        log.error("interlock: session %r: the step could not be recorded: %s", self.session_id, exc)
        if not self.allowed:
            self.skip = True
            return
        told = self.undetermined(
            SessionUnavailable(
                f"session {self.session_id!r}: the allowed step could not be recorded "
                f"({describe(exc)})"
            )
        )
        self.instead = self.writer.encode(self.tenant, told)
        self.told = told


def _in_transaction(cur: Cursor) -> bool:
    """Whether the SQLite transaction of ``cur`` is still open (some failures — a full
    disk, an I/O error — roll the whole transaction back, not just the statement)."""
    return bool(getattr(getattr(cur, "connection", None), "in_transaction", False))
