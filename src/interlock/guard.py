"""The ``Guard``: the one object users hold.

Example::

    from interlock import Action, Guard

    guard = Guard.from_file("interlock.yaml")

    decision = guard.check(Action.tool("shell", {"command": "rm -rf /"}))
    assert decision.verdict == "deny"

    @guard.protect
    def transfer(amount: float, to: str) -> str:
        ...                                   # runs only on allow

Every failure on the way to a verdict (an evaluation error, a timeout, a cancellation,
a mapper that throws or returns something malformed) is an ``undetermined`` decision
and nothing runs. ``fail_mode="open"`` turns undetermined into allow, only when asked
for, and logs a warning every time it does.
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
import inspect
import logging
import os
import threading
import time
from collections.abc import Callable, Coroutine, Generator, Iterable, Mapping, Sequence
from enum import Enum
from typing import TYPE_CHECKING, Any, Final, Generic, Literal, ParamSpec, TypeVar, cast, overload

from interlock.core.action import Action, Context
from interlock.core.deadline import current_deadline, deadline_scope
from interlock.core.decision import Decision, ShadowVerdict, Verdict
from interlock.core.events import Event, EventSink, new_event
from interlock.core.redaction import Redactor
from interlock.core.refusal import raise_for
from interlock.core.starting import STARTING, Starting
from interlock.deciders.base import CancelToken, Decider
from interlock.deciders.joined import JOINED, JoinedRecord
from interlock.deciders.local import LocalDecider
from interlock.errors import (
    AuditFailure,
    DecisionTimeout,
    GrantError,
    InternalFailure,
    MappingError,
    ReservationNotOwned,
    SessionUnavailable,
    StoreError,
    describe,
)
from interlock.hooks import Hook, HookCaller
from interlock.policy.compiled import CompiledPolicy
from interlock.policy.engine import evaluate
from interlock.session.current import CURRENT as SESSION_CHECK

if TYPE_CHECKING:
    from interlock.approvals.grants import Grant, GrantableDecisions
    from interlock.core.decision import ReservationRef
    from interlock.core.registry import Coverage
    from interlock.guard_sessions import JoinedStep, SessionRecorder
    from interlock.ledger.llm_call import LLMCall
    from interlock.ledger.memory import MemoryLedger
    from interlock.ledger.usage import Usage
    from interlock.otel import Telemetry
    from interlock.policy.sessionrules import SessionFacts
    from interlock.policy.specs import Durability
    from interlock.remote import RemoteDecider
    from interlock.session.history import SessionHistory, Step
    from interlock.store.audit import AuditWriter
    from interlock.store.reaper import Reaper
    from interlock.store.records import ApprovalRecord, Reservation, Settler
    from interlock.store.sql import SqlStore
    from interlock.store.sql_base import AuditEntry
    from interlock.verify.tokens import GrantClaims

__all__ = ["DEFAULT_TIMEOUT", "Guard", "Mapper", "raise_for"]

#: Allowed decisions whose caller (tenant, agent) a guard remembers for their outcome
#: records (Guard.outcome_owner), at most; those whose body has started are held apart
#: until it ends (up to _RUNNING_KEPT: a body that never ends must not hold memory).
_OWNERS_KEPT: Final = 4096
_RUNNING_KEPT: Final = 1_000_000
_STARTS: Final = frozenset({"tool_invoke", "llm_input"})
#: Refusal reasons remembered redacted, per guard (see Guard._shown).
_SHOWN_MAX_CHARS = 1024
_SHOWN_MAX_ENTRIES = 1024
# Enum members read as module globals: a class attribute of an Enum costs about ten
# times as much to read on Python 3.11, and these are read on every check.
_ALLOW: Final = Verdict.ALLOW
_UNDETERMINED: Final = Verdict.UNDETERMINED
#: What a remote guard tells the server of a call its mapper could not read.
_UNMAPPED: Final = Action(kind="tool", name="(unreadable call)")
_new_tuple: Final = tuple.__new__

log = logging.getLogger("interlock")

P = ParamSpec("P")
R = TypeVar("R")
T = TypeVar("T")

#: What a mapper may return: one action, an ordered list of actions, or ``None`` /
#: ``[]`` for "not ours to judge".
MapperResult = Action | Sequence[Action] | None
Mapper = Callable[..., MapperResult]

_DEFAULT_CONTEXT = Context()
#: Set while a session check runs (a check inside it is that check, not a new step):
#: the check's session facts, which the session rules read from the same variable
#: (one object, one set and reset a check; see interlock/session/current.py).
_RECORDING: Final[contextvars.ContextVar[SessionFacts | None]] = SESSION_CHECK


#: The bound (seconds) of a check given no timeout, when it can wait on anything — a
#: store, a server, a custom decider: an outage makes it undetermined after this long,
#: never an agent stalled for ever. A pure in-process check has nothing to wait on and
#: no bound.
DEFAULT_TIMEOUT = 10.0
#: How long, past a check's deadline, giving back what its late verdict held (a
#: reservation, a claimed approval) may take before it is left to the reaper.
_GIVE_BACK_GRACE = 0.5


class _Unset(Enum):
    UNSET = "unset"


# ``commit``/``release`` settle as the agent the decision names (see ``_settler``).
_AS_DECIDED: Final = _Unset.UNSET


#: What a check reads of its session (_SessionReads): nothing, its labels, its view.
_READS_NOTHING: Final = 0
_READS_LABELS: Final = 1
_READS_VIEW: Final = 2
_READS_KEPT: Final = 4096


class _SessionReads:
    """What the rules that read sessions read of a call's session, by the call's kind
    and name, for a guard whose history is a ``MemoryHistory``: nothing (no such rule
    names the call: its view is not read, its step is recorded all the same), its
    labels alone (every such rule reads labels only: ``MemoryHistory.labels_view``, no
    snapshot of the steps), or its view. A filter, like ``SessionRecorder.reads``: it
    never says less than a rule may read (whatever the call's scope, tenant or agent).
    A rule that reads more than it was given is unevaluable, never a miss (the facts
    of a call not read, or a labels view, fail closed)."""

    __slots__ = ("_found", "_new_facts", "_not_read", "_readers", "history", "recorder")

    def __init__(
        self,
        recorder: SessionRecorder,
        readers: tuple[tuple[frozenset[str] | None, Any, int], ...],
    ) -> None:
        from interlock.policy.sessionrules import NOT_READ, new_facts

        self.recorder = recorder
        self.history: Any = recorder.history
        self._readers = readers
        self._found: dict[tuple[str, str], int] = {}
        # (the session engine's: not imported with the guard)
        self._new_facts = new_facts
        self._not_read = NOT_READ

    @classmethod
    def of(cls, recorder: SessionRecorder, policy: CompiledPolicy) -> _SessionReads | None:
        """The reads of ``policy``'s rules and label rules; None unless the recorder's
        history is exactly a ``MemoryHistory`` (another may fail or be read otherwise:
        the recorder's own ``facts_of`` reads it)."""
        from interlock.policy.sessionrules import reads_labels_only, reads_session
        from interlock.session.history import MemoryHistory

        spec = policy.sessions
        if spec is None or type(recorder.history) is not MemoryHistory:
            return None
        readers = tuple(
            (rule.kinds, rule.names, _READS_LABELS if reads_labels_only(rule) else _READS_VIEW)
            for rule in (*policy.rules, *spec.label_rules)
            if reads_session(rule)
        )
        return cls(recorder, readers)

    def needs(self, kind: object, name: object) -> int:
        """What a call of this kind and name reads of its session (any scope)."""
        if type(kind) is not str or type(name) is not str:
            return _READS_VIEW
        key = (kind, name)
        found = self._found.get(key)
        if found is None:
            found = max(
                (
                    reads
                    for kinds, names, reads in self._readers
                    if (kinds is None or kind in kinds) and (names is None or names.matches(name))
                ),
                default=_READS_NOTHING,
            )
            if len(self._found) >= _READS_KEPT:
                self._found.clear()
            self._found[key] = found
        return found

    def facts(self, action: Action) -> SessionFacts:
        """The session facts of a check of ``action``, read as :meth:`needs` says."""
        context = action.context
        session_id = context.session_id
        if session_id is None:
            return self.recorder.facts(context)
        kind = action.kind
        name = action.name
        needs = self._found.get((kind, name)) if type(kind) is str and type(name) is str else None
        if needs is None:
            needs = self.needs(kind, name)
        if needs == _READS_NOTHING:  # SessionFacts.unread, without its call
            return self._new_facts(None, 0.0, self._not_read, None, None, None, None, False, None)
        try:
            if needs == _READS_LABELS:
                view = self.history.labels_view(context.tenant, session_id)
            else:
                view = self.history.view(context.tenant, session_id)
        except Exception as exc:
            from interlock.policy.sessionrules import SessionFacts

            return SessionFacts.unavailable(session_id, describe(exc))
        return self._new_facts(view, time.time(), None, None, None, None, None, True, None)


class Guard:
    """The decision point.

    ``Guard(policy)`` takes a compiled policy, a path to a policy file, or the policy as
    a mapping (validated like a file: a PolicyError names the field); ``decider=`` replaces
    the local engine (a remote server, a test double). ``context`` fills the trusted
    fields (tenant, agent, session) of actions that leave them unset. ``sink``
    receives an event per decision. ``on_decision`` sees every decision and
    ``on_blocked`` every non-allow one; neither can change it. ``timeout`` (seconds)
    is the default for every check; left ``None``, a check that can wait on anything
    (a store, a server, a custom decider) is bounded by :data:`DEFAULT_TIMEOUT`.

    ``store`` (a :class:`~interlock.store.SqlStore` or a database URL such as
    ``"sqlite:///.interlock/interlock.db"``) makes the guard stateful: every decision
    is written to the hash-chained audit log before it is returned (the policy's
    ``audit.durability``, or ``durability=``), ``require_approval`` opens an approval
    bound to the exact call, and the policy's rate limits and budgets apply, shared
    by every guard on the store. A reservation an allowed call holds and nobody
    settles within ``reservation_ttl`` seconds is charged in full (the call may have
    run): a reaper thread looks every ``reap_interval`` seconds (``None``: no reaper
    in this guard).

    Without a store, a policy's budgets and rate limits are kept in this process's
    memory (``guard.ledger``, a :class:`~interlock.ledger.memory.MemoryLedger`), with
    the same semantics, for this one process only; a warning says so.

    ``telemetry=True`` reports a span per decision and per guarded execution, and
    metrics, through the OpenTelemetry API (``interlock[otel]``; docs/otel.md); a
    :class:`~interlock.otel.Telemetry` names the providers. Off by default: the guard
    then never imports OpenTelemetry.
    """

    def __init__(
        self,
        policy: CompiledPolicy | Mapping[str, Any] | str | os.PathLike[str] | None = None,
        *,
        decider: Decider | None = None,
        context: Context | None = None,
        sink: EventSink | None = None,
        on_decision: Hook | None = None,
        on_blocked: Hook | None = None,
        hook_logger: logging.Logger | None = None,
        fail_mode: Literal["closed", "open"] = "closed",
        timeout: float | None = None,
        store: SqlStore | str | None = None,
        durability: Durability | None = None,
        reservation_ttl: float = 300.0,
        reap_interval: float | None = 10.0,
        telemetry: bool | Telemetry = False,
        sessions: SessionHistory | None = None,
    ) -> None:
        if fail_mode not in ("closed", "open"):
            raise ValueError(f"fail_mode must be 'closed' or 'open', not {fail_mode!r}")
        if timeout is not None and timeout <= 0:
            raise ValueError(f"timeout must be positive, not {timeout!r}")
        if isinstance(policy, (str, os.PathLike)):
            from interlock.policy.loader import load_policy

            policy = load_policy(policy)
        elif isinstance(policy, Mapping):
            from interlock.policy.loader import compile_policy

            policy = compile_policy(policy)
        elif policy is not None and not isinstance(policy, CompiledPolicy):
            raise TypeError(
                "Guard's policy is a file path, a mapping of policy data or a compiled "
                f"policy (load_policy_text), not {type(policy).__name__}"
            )
        if decider is None and policy is None:
            raise ValueError("Guard needs a policy or a decider")
        self.redactor = Redactor(extra_patterns=policy.redaction_patterns if policy else ())
        self._shown_memo: tuple[Redactor, dict[str, str]] = (self.redactor, {})
        self.store: SqlStore | None = None
        self._ledger: SqlStore | MemoryLedger | None = None
        self._in_memory = False  # budgets in a MemoryLedger, made when first needed
        self._ledger_lock = threading.Lock()
        self.audit: AuditWriter | None = None
        self._owns_store = False
        self._reaper: Reaper | None = None
        self._grantable: GrantableDecisions | None = None
        #: whose call each recent allowed decision was, where not the guard's own
        #: (outcome_owner): a gateway's outcome records belong to the caller's tenant
        self._owners: dict[str, tuple[str, str | None]] = {}
        #: those of them whose body started, until its end is recorded: a body that runs
        #: while thousands of other calls are decided still finds its owner
        self._running_owners: dict[str, tuple[str, str | None]] = {}
        self._owners_lock = threading.Lock()
        if store is not None:
            self._open_store(store, policy, durability, reap_interval)
        self._reservation_ttl = reservation_ttl
        self._policy_decides = decider is None
        # Whether a check can wait on anything (then it always has a deadline).
        self._waits = store is not None or decider is not None
        if decider is None:
            assert policy is not None  # checked above
            decider = self._decider_for(policy, self.redactor)
        self.policy = policy
        self.decider = decider
        self._intents = policy.tool_intents if policy is not None else {}
        #: where session history lives (``sessions=``, else the store's, else memory),
        #: made when a policy first reads sessions
        self._session_history = sessions
        self._sessions: SessionRecorder | None = self._recorder_for(policy)
        self.context = context or _DEFAULT_CONTEXT
        #: OpenTelemetry spans and metrics (``interlock.otel``), when asked for.
        self.telemetry: Telemetry | None = None
        if telemetry is not False:
            sink = self._telemetry(telemetry, sink)
        self.sink = sink
        self.on_decision = on_decision
        self.on_blocked = on_blocked
        self.fail_mode = fail_mode
        self.timeout = timeout
        self._hooks = HookCaller(hook_logger)
        if fail_mode == "open":
            log.warning(
                "interlock: fail_mode='open' — checks that cannot reach a verdict will ALLOW "
                "the action instead of failing closed"
            )

    def _telemetry(self, telemetry: bool | Telemetry, sink: EventSink | None) -> EventSink | None:
        """The sink that reports to ``telemetry`` and then to ``sink``. Imported only
        here: a guard without telemetry never loads OpenTelemetry."""
        from interlock.otel import Telemetry, TelemetrySink

        if telemetry is True:
            telemetry = Telemetry()
        if not isinstance(telemetry, Telemetry):
            raise TypeError(
                f"telemetry is True, False or an interlock.otel.Telemetry, not {telemetry!r}"
            )
        self.telemetry = telemetry
        return TelemetrySink(telemetry, sink)

    @classmethod
    def remote(
        cls,
        url: str,
        api_key: str,
        *,
        request_timeout: float = 5.0,
        transport: Any = None,
        async_transport: Any = None,
        **options: Any,
    ) -> Guard:
        """A guard whose decisions are made by the Interlock server at ``url``
        (``http(s)://host:port`` or ``unix:/path/to.sock``), with the local
        semantics: an unreachable server, a timeout, a 5xx or a garbled answer is
        undetermined and fails closed. ``commit``, ``release``, ``llm_call`` and
        ``wait_for_approval`` go to the server too. ``options`` are the guard's own
        (``context``, ``sink``, ``on_decision``, ``timeout``, ``fail_mode`` ...);
        ``request_timeout`` bounds each HTTP request. Needs ``interlock[remote]``."""
        from interlock.remote import RemoteDecider

        if "store" in options or "decider" in options:
            raise TypeError("a remote guard keeps its state on the server: no store or decider")
        decider = RemoteDecider(
            url,
            api_key,
            timeout=request_timeout,
            transport=transport,
            async_transport=async_transport,
        )
        guard = cls(decider=decider, **options)
        from interlock.remote_sessions import RemoteSessions

        # the server keeps sessions; this guard reports each call's outcome to it
        guard._sessions = RemoteSessions(decider)  # type: ignore[assignment]
        return guard

    @classmethod
    def from_file(cls, path: str | os.PathLike[str], **options: Any) -> Guard:
        """A guard on the policy in ``path`` (raises PolicyError if it is invalid)."""
        from interlock.policy.loader import load_policy

        return cls(load_policy(path), **options)

    def _open_store(
        self,
        store: SqlStore | str,
        policy: CompiledPolicy | None,
        durability: Durability | None,
        reap_interval: float | None,
    ) -> None:
        from interlock.approvals.grants import GrantableDecisions
        from interlock.store.audit import AuditWriter
        from interlock.store.reaper import Reaper
        from interlock.store.url import open_store

        if isinstance(store, str):
            store = open_store(store)
            self._owns_store = True
        self.store = store
        self._ledger = store
        if durability is None:
            durability = policy.audit.durability if policy is not None else "process"
        self.audit = AuditWriter(store, durability=durability, redactor=self.redactor)
        self._grantable = GrantableDecisions()
        if reap_interval is not None:
            self._reaper = Reaper(store, interval=reap_interval, audited=True)
            self._reaper.start()

    def _decider_for(self, policy: CompiledPolicy, redactor: Redactor) -> Decider:
        from interlock.deciders.stateful import StatefulDecider

        if self.store is not None:
            return StatefulDecider(
                policy, self.store, reservation_ttl=self._reservation_ttl, redactor=redactor
            )
        if not (policy.budgets or policy.rate_limits):
            return LocalDecider(policy)
        if not self._in_memory:
            log.warning(
                "interlock: this guard has no store, so the policy's budgets and rate "
                "limits are kept in this process's memory: one process only (another "
                "process does not share them, and a restart forgets them); give the "
                "guard a store to share them"
            )
            self._in_memory = True
        return StatefulDecider(
            policy,
            ledger=self._memory_ledger,
            reservation_ttl=self._reservation_ttl,
            redactor=redactor,
        )

    def _recorder_for(self, policy: CompiledPolicy | None) -> SessionRecorder | None:
        """The session recorder of a policy that reads or labels sessions; None for
        any other (a guard that pays nothing for sessions)."""
        spec = policy.sessions if policy is not None else None
        self._session_reads: _SessionReads | None = None
        if spec is None or policy is None:
            return None
        from interlock.guard_sessions import SessionRecorder

        history = self._session_history
        if history is None:
            made = getattr(self.store, "session_history", None)
            if made is not None:
                history = made(max_steps=spec.max_steps, expire_after=spec.expire_after)
            else:
                from interlock.session.history import MemoryHistory

                history = MemoryHistory(max_steps=spec.max_steps, expire_after=spec.expire_after)
            self._session_history = history
        recorder = SessionRecorder(spec, history, policy)
        self._session_reads = _SessionReads.of(recorder, policy)
        return recorder

    @property
    def sessions(self) -> SessionHistory | None:
        """The session history this guard reads and records (None until a policy
        reads sessions)."""
        return self._session_history

    def record_input(
        self,
        text: object,
        *,
        trusted: bool,
        context: Context | None = None,
        labels: Iterable[str] = (),
    ) -> Step | None:
        """Record outside data entering the session of ``context`` (merged over the
        guard's): the user's request or the system prompt (``trusted=True``), an inbound
        message (``trusted=False, labels=("untrusted",)``). A trusted input holding a
        value makes that value trusted (``provenance``), so ``trusted`` has no default:
        the caller says which it is. Labels are lower-case names, as in the policy.
        Returns the step, or None when the policy reads no sessions or the context has no
        session. Raises ``SessionUnavailable`` when the history cannot be written, and
        ``ValueError`` for a label that is not a label name.

        Example::

            guard.record_input(
                "mail bob@corp.com the report", trusted=True, context=Context(session_id="s-1")
            )
        """
        from interlock.session.history import check_labels

        labels = check_labels(labels)
        recorder = self._sessions
        if recorder is None:
            return None
        merged = (context or Context()).merged_over(self.context)
        try:
            return recorder.record_input(text, merged, trusted=trusted, labels=tuple(labels))
        except SessionUnavailable:
            raise
        except Exception as exc:
            raise SessionUnavailable(
                f"session {merged.session_id!r}: the input could not be recorded: {describe(exc)}"
            ) from exc

    async def arecord_input(
        self,
        text: object,
        *,
        trusted: bool,
        context: Context | None = None,
        labels: Iterable[str] = (),
    ) -> Step | None:
        """The async twin of :meth:`record_input` (the history is written on a thread)."""
        import asyncio

        return await asyncio.to_thread(
            functools.partial(
                self.record_input, text, context=context, trusted=trusted, labels=labels
            )
        )

    def _in_session_check(self) -> bool:
        """Whether this guard's own session check is running (a check inside it is that
        check). Another guard's — an agent's, around an in-process server — is not."""
        running = _RECORDING.get()
        return running is not None and running.guard is self

    def _joined_step(
        self, action: Action, decision: Decision, audit: AuditWriter
    ) -> JoinedStep | None:
        """The step of this guard's session check in progress, to ride ``decision``'s
        record (None: no such check, or its history cannot join ``audit``'s commit)."""
        running = _RECORDING.get()
        if running is None or running.guard is not self or running.join is not None:
            return None
        recorder = running.recorder
        session_id = action.context.session_id
        policy = self.policy
        if session_id is None or policy is None or not recorder.joinable(audit):
            return None
        from interlock.guard_sessions import JoinedStep
        from interlock.policy.sessionrules import new_step

        step = new_step(action, decision, running, policy)
        event_of = functools.partial(self._step_failed, action, decision)
        join = JoinedStep(
            recorder,
            audit,
            self._tenant(action),
            session_id,
            step,
            decision.verdict is _ALLOW,
            event_of,
        )
        running.join = join
        return join

    def _step_failed(self, action: Action, decision: Decision, exc: BaseException) -> Event:
        """The record of ``decision`` (an allow) whose session step could not be
        written: undetermined, as the caller is told (same ``decision_id``)."""
        told = self._told(_failed(exc))._replace(decision_id=decision.decision_id)
        return self._event(action, told, time.perf_counter_ns())

    def _session_check(
        self,
        recorder: SessionRecorder,
        action: Action,
        timeout: float | None,
        cancel: CancelToken | None,
    ) -> Decision:
        """:meth:`check` with the session's facts: read before, the step recorded after."""
        usual = (
            type(action) is Action
            and type(action.context) is Context
            and self.context is _DEFAULT_CONTEXT
            and not self._intents
        )
        if usual:
            contextual = action  # the usual action: _contextualise would return it as is
        else:
            try:
                contextual = self._contextualise(action)
            except Exception as exc:  # refused as the check refuses it
                return self._finish(action, _failed(exc), time.perf_counter_ns())
        reads = self._session_reads
        if reads is not None and reads.recorder is recorder:  # an in-memory history
            facts = reads.facts(contextual)
        else:
            facts_of = getattr(recorder, "facts_of", None)  # (a remote guard's has none)
            facts = recorder.facts(contextual.context) if facts_of is None else facts_of(contextual)
        if facts.view is None and facts.read:  # _history_down's own test, inlined
            refusal = self._history_down(contextual, facts)
            if refusal is not None:
                return self._finish(contextual, refusal, time.perf_counter_ns())
        # the facts are the check in progress too (SessionCheck, inlined): one object,
        # one context variable the session rules and this guard both read
        facts.guard = self
        facts.recorder = recorder
        decider = self.decider
        token = _RECORDING.set(facts)
        try:
            if (  # check's hot path would take it: taken here, not through check again
                usual
                and timeout is None
                and cancel is None
                and self.timeout is None
                and not self._waits
                and type(decider) is LocalDecider
                and self.audit is None
                and self.on_decision is None
                and self.on_blocked is None
            ):
                decision = self._decided_here(contextual, decider.policy)
            else:
                decision = self.check(contextual, timeout=timeout, cancel=cancel)
        finally:
            _RECORDING.reset(token)
        if contextual is None or self.policy is None:
            return decision
        join = facts.join
        if join is not None and join.committed and join.written is not None:
            # in the chain with its record: settled when the body returns
            recorder.landed(join, decision, facts)
            return decision
        if join is not None:
            return decision  # the record says undetermined (or a refusal stands)
        try:
            return recorder.record(contextual, decision, facts, self.policy)
        except Exception as exc:
            self._give_back(decision)
            return self._told(_failed(exc))

    def _decided_here(self, action: Action, policy: CompiledPolicy) -> Decision:
        """:meth:`check`'s hot path, for a session check whose caller found it would
        take it (the usual action, a local policy, nothing to wait on, no audit log and
        no hooks): the policy's verdict, told, and its event given to the sink — as
        ``check`` decides it, without entering ``check`` a second time."""
        start = time.perf_counter_ns()
        try:
            decision = evaluate(action, policy)
            if type(decision) is not Decision:
                decision = _validated(decision)
        except Exception as exc:
            decision = _failed(exc)
        return self._finished_plainly(action, decision, start)

    def _finished_plainly(self, action: Action, decision: Decision, start: int) -> Decision:
        """:meth:`_finish` for the usual action in a guard with no audit log and no
        hooks (``check``'s hot path and :meth:`_decided_here`): the decision told, and
        its event given to the sink."""
        verdict = decision.verdict
        if verdict is not _ALLOW:
            memo = self._shown_memo
            # _told's own first case, inlined: a reason with nothing to redact, seen
            # before, is told as it is
            if not (
                decision.shadow is None and memo[0] is self.redactor and decision.reason in memo[1]
            ):
                decision = self._told(decision)
            if verdict is _UNDETERMINED and self.fail_mode == "open":
                decision = self._failed_open(action, decision)
        sink = self.sink
        if sink is not None:
            event = _new_tuple(
                Event,
                (
                    "decision",
                    time.time(),
                    action,
                    decision,
                    time.perf_counter_ns() - start,
                    None,
                    self.redactor,
                ),
            )
            try:
                sink.emit(event)
            except Exception:
                log.exception("interlock: the event sink failed; the decision stands")
        return decision

    def _history_down(self, action: Action | None, facts: SessionFacts) -> Decision | None:
        """When the session's history cannot be read: the undetermined decision of a
        call the policy alone would allow (its step could not be kept, and the rules
        that read the session cannot be judged); None to judge the call as usual (a
        stricter verdict stands, and is recorded as it is)."""
        if facts.view is not None or not facts.read or action is None or self.policy is None:
            return None
        from interlock.policy.sessionrules import session_scope

        with session_scope(facts):
            alone = evaluate(action, self.policy)
        if alone.verdict is not _ALLOW:
            return None
        error = SessionUnavailable(str(facts.problem))
        return _failed(
            error, f"cannot judge this call: the session history is unavailable: {error}"
        )

    async def _asession_check(
        self,
        recorder: SessionRecorder,
        action: Action,
        timeout: float | None,
        cancel: CancelToken | None,
    ) -> Decision:
        """The async twin of :meth:`_session_check` (the history is read and written
        on a thread unless it lives in memory)."""
        import asyncio

        from interlock.guard_sessions import SessionCheck
        from interlock.session.history import MemoryHistory

        in_memory = type(recorder.history) is MemoryHistory
        try:
            contextual = self._contextualise(action)
        except Exception as exc:  # refused as the check refuses it
            return await self._afinish(action, _failed(exc), time.perf_counter_ns())
        facts_of = getattr(recorder, "facts_of", None)  # (a remote guard's has none)
        if facts_of is None:
            facts = recorder.facts(contextual.context)
        elif in_memory:
            facts = facts_of(contextual)
        else:
            facts = await asyncio.to_thread(facts_of, contextual)
        refusal = self._history_down(contextual, facts)
        if refusal is not None:
            return await self._afinish(contextual, refusal, time.perf_counter_ns())
        running = SessionCheck(self, recorder, facts)
        token = _RECORDING.set(running)
        try:
            decision = await self.acheck(contextual, timeout=timeout, cancel=cancel)
        finally:
            _RECORDING.reset(token)
        if contextual is None or self.policy is None:
            return decision
        join = running.join
        if join is not None and join.committed and join.written is not None:
            recorder.landed(join, decision, running)
            return decision
        if join is not None:
            return decision
        try:
            if in_memory:
                return recorder.record(contextual, decision, facts, self.policy)
            return await asyncio.to_thread(
                recorder.record, contextual, decision, facts, self.policy
            )
        except Exception as exc:
            self._give_back(decision)
            return self._told(_failed(exc))

    @property
    def ledger(self) -> SqlStore | MemoryLedger | None:
        """Where budgets and rate limits are kept: the store, this process's memory (no
        store, a policy with budgets or rate limits), or nowhere (None)."""
        if self._ledger is None and self._in_memory:
            return self._memory_ledger()
        return self._ledger

    def _memory_ledger(self) -> MemoryLedger:
        """The one memory ledger of this guard (and of every policy it is given), made by
        the first call that needs it: the store's records, which it imports, cost more
        than a one-call ``interlock check`` (ADR 0014)."""
        with self._ledger_lock:
            if self._ledger is None:
                from interlock.ledger.memory import MemoryLedger

                self._ledger = MemoryLedger()
            return cast("MemoryLedger", self._ledger)

    def replace_policy(self, policy: CompiledPolicy) -> None:
        """Decide by ``policy`` from the next check on; checks already running finish
        on the old one. Budgets, rate limits and approvals keep their state (it lives
        in the store, keyed by ids, not by policy). ``audit.durability`` is fixed when
        the guard opens its store: a change to it takes effect on restart.
        See :class:`interlock.policy.reload.PolicyWatcher` for reloading a file."""
        if not self._policy_decides:
            raise TypeError("this guard decides with a custom decider: it has no policy to replace")
        redactor = Redactor(extra_patterns=policy.redaction_patterns)
        decider = self._decider_for(policy, redactor)
        if (
            self.audit is not None
            and self.policy is not None
            and policy.audit.durability != self.policy.audit.durability
        ):
            log.warning(
                "interlock: audit.durability changed to %r; it takes effect on restart",
                policy.audit.durability,
            )
        # Each assignment is atomic; the redactor goes first so that no decision of
        # the new policy is recorded with the old redaction patterns.
        self.redactor = redactor
        if self.audit is not None:
            self.audit.redactor = redactor
        self.decider = decider
        self._intents = policy.tool_intents
        old, self._sessions = self._sessions, self._recorder_for(policy)
        if old is not None and self._sessions is not None:  # calls still running settle
            self._sessions.adopt(old)
        self.policy = policy

    def close(self) -> None:
        """Write every pending audit record, stop the reaper and close the store the
        guard opened."""
        if self._reaper is not None:
            self._reaper.stop()
        if self.audit is not None:
            self.audit.close()
        if self.store is not None and self._owns_store:
            self.store.close()
        remote = self._remote()
        if remote is not None:
            remote.close()

    def __enter__(self) -> Guard:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- single checks ---------------------------------------------------------------

    def check(
        self,
        action: Action,
        *,
        timeout: float | None = None,
        cancel: CancelToken | None = None,
    ) -> Decision:
        """The verdict on ``action``. Never raises for a failure: that is undetermined."""
        sessions = self._sessions
        if sessions is not None:
            # _in_session_check, inlined: a check of this guard inside its own session
            # check is that check; any other starts one
            running = _RECORDING.get()
            if running is None or running.guard is not self:
                return self._session_check(sessions, action, timeout, cancel)
        start = time.perf_counter_ns()
        timeout = timeout if timeout is not None else self.timeout
        if timeout is None and self._waits:
            timeout = DEFAULT_TIMEOUT
        if timeout is None and cancel is None:  # the hot path: nothing to watch
            # The usual action has nothing to merge and nothing to refuse: it skips
            # the _contextualise call.
            usual = (
                type(action) is Action
                and type(action.context) is Context
                and self.context is _DEFAULT_CONTEXT
                and not self._intents
            )
            try:
                if not usual:
                    action = self._contextualise(action)
                decider = self.decider
                if type(decider) is LocalDecider:  # its decide() is just evaluate()
                    decision = evaluate(action, decider.policy)
                else:
                    decision = decider.decide(action, deadline=None, cancel=None)
                if type(decision) is not Decision:
                    decision = _validated(decision)
            except Exception as exc:
                decision = _failed(exc)
            if not (
                usual
                and self.audit is None
                and self.on_decision is None
                and self.on_blocked is None
            ):
                return self._finish(action, decision, start)
            return self._finished_plainly(action, decision, start)
        deadline = time.monotonic() + timeout if timeout is not None else None
        if cancel is not None and cancel.cancelled:
            with deadline_scope(deadline):
                return self._finish(action, _cancelled(cancel), start)
        # Every wait below — the store's connections, locks and statements, the audit
        # commit — reads this deadline and waits no longer.
        with deadline_scope(deadline):
            joined = None
            try:
                action = self._contextualise(action)
                joined = self._joined(action, start)
                if joined is None:
                    decided = self.decider.decide(action, deadline=deadline, cancel=cancel)
                else:  # the record may commit with the call's reservation
                    token = JOINED.set(joined)
                    try:
                        decided = self.decider.decide(action, deadline=deadline, cancel=cancel)
                    finally:
                        JOINED.reset(token)
                decision = _validated(decided)
                if self._asks_grant(decision):
                    decision = self._granted(action, decision)
                if cancel is not None and cancel.cancelled:
                    self._give_back(decision)
                    decision = _cancelled(cancel)
                elif deadline is not None and time.monotonic() > deadline:
                    self._give_back(decision)
                    decision = _timed_out(cast(float, timeout))
            except Exception as exc:
                decision = _failed(exc)
            return self._finish(action, decision, start, joined)

    async def acheck(
        self,
        action: Action,
        *,
        timeout: float | None = None,
        cancel: CancelToken | None = None,
    ) -> Decision:
        """The async twin of :meth:`check`. An asyncio cancellation is recorded as an
        undetermined decision and then re-raised, so structured concurrency keeps
        working; the action never runs."""
        sessions = self._sessions
        if sessions is not None:
            running = _RECORDING.get()  # _in_session_check, inlined (as in check)
            if running is None or running.guard is not self:
                return await self._asession_check(sessions, action, timeout, cancel)
        start = time.perf_counter_ns()
        timeout = timeout if timeout is not None else self.timeout
        if timeout is None and self._waits:
            timeout = DEFAULT_TIMEOUT
        import asyncio  # running: already loaded by the loop; never at import (ADR 0014)

        deadline = time.monotonic() + timeout if timeout is not None else None
        with deadline_scope(deadline):  # the store's waits, in this task and its threads
            if cancel is not None and cancel.cancelled:
                return await self._afinish(action, _cancelled(cancel), start)
            joined = None
            token = None
            try:
                action = self._contextualise(action)
                joined = self._joined(action, start)
                if joined is not None:  # copied into the thread the store is asked on
                    token = JOINED.set(joined)
                if timeout is None:
                    decision = _validated(
                        await self.decider.adecide(action, deadline=None, cancel=cancel)
                    )
                else:  # (deadline is set with timeout)
                    decided = self.decider.adecide(action, deadline=deadline, cancel=cancel)
                    decision = _validated(await _bounded(decided, cast(float, deadline)))
                if self._asks_grant(decision):  # the store is asked on a thread
                    decision = await self._agranted(action, decision)
                if cancel is not None and cancel.cancelled:
                    self._give_back(decision)
                    decision = _cancelled(cancel)
            except TimeoutError:
                decision = _timed_out(cast(float, timeout))
            except asyncio.CancelledError as exc:
                # Recorded without awaiting: this task is being cancelled.
                self._finish_detached(
                    action, _failed(exc, "the check was cancelled"), start, joined
                )
                raise
            except Exception as exc:
                decision = _failed(exc)
            finally:
                if token is not None:
                    JOINED.reset(token)
            return await self._afinish(action, decision, start, joined)

    def _finish_detached(
        self,
        action: Action | None,
        decision: Decision,
        start: int,
        joined: JoinedRecord | None = None,
    ) -> None:
        """Record a decision from a task that is being cancelled: the audit record is
        queued, not awaited (the verdict is undetermined either way)."""
        decision = self._told(decision)
        audit = self.audit
        if audit is None:
            self._finish(action, decision, start)
            return
        event = _superseding(self._event(action, decision, start), joined)
        try:
            audit.write_event_nowait(self._tenant(action), event)
        except Exception:
            log.exception("interlock: a cancelled check could not be recorded")
        self._publish(action, decision, event)

    # -- batches and mappers ---------------------------------------------------------

    def check_batch(
        self,
        actions: Iterable[Action],
        *,
        timeout: float | None = None,
        cancel: CancelToken | None = None,
    ) -> Decision | None:
        """Check an ordered list of actions that together make one call. The first
        non-allow decision halts the batch and is returned; if all allow, the last
        allow is returned; an empty list is ``None`` (not ours to judge)."""
        last: Decision | None = None
        held: list[Decision] = []
        deadline = time.monotonic() + timeout if timeout is not None else None
        for action in actions:
            remaining = None if deadline is None else max(deadline - time.monotonic(), 1e-9)
            last = self.check(action, timeout=remaining, cancel=cancel)
            if not last.allowed:
                self._abandon(held)
                return last
            held.append(last)
        self._charge_earlier(held)
        if self._sessions is not None and len(held) > 1:
            self._sessions.batched(held)  # one body: its outcome settles every step
        return last

    async def acheck_batch(
        self,
        actions: Iterable[Action],
        *,
        timeout: float | None = None,
        cancel: CancelToken | None = None,
    ) -> Decision | None:
        """The async twin of :meth:`check_batch`."""
        import asyncio

        last: Decision | None = None
        held: list[Decision] = []
        deadline = time.monotonic() + timeout if timeout is not None else None
        for action in actions:
            remaining = None if deadline is None else max(deadline - time.monotonic(), 1e-9)
            try:
                last = await self.acheck(action, timeout=remaining, cancel=cancel)
            except asyncio.CancelledError:
                self._abandon(held)
                raise
            if not last.allowed:
                self._abandon(held)
                return last
            held.append(last)
        self._charge_earlier(held)
        if self._sessions is not None and len(held) > 1:
            self._sessions.batched(held)  # one body: its outcome settles every step
        return last

    def _abandon(self, held: list[Decision]) -> None:
        """A batch halted: the actions allowed before the halt will not run either."""
        for decision in held:
            self._give_back(decision)

    def _charge_earlier(self, held: list[Decision]) -> None:
        """A batch is allowed whole: the caller settles the last decision's reservation;
        the earlier actions are charged what they declared, now."""
        for decision in held[:-1]:
            if decision.reservation is not None:
                self.commit(decision, by=decision.reservation.owner)

    def check_mapped(
        self,
        mapper: Mapper,
        *args: Any,
        timeout: float | None = None,
        cancel: CancelToken | None = None,
        **kwargs: Any,
    ) -> Decision | None:
        """Run ``mapper(*args, **kwargs)`` to turn a framework call into actions, then
        check them. ``None`` means the call is not ours to judge (recorded as a
        pass-through); a mapper that raises or returns a malformed value is
        undetermined."""
        start = time.perf_counter_ns()
        actions = self._map(mapper, args, kwargs, start)
        if isinstance(actions, MappingError):
            return self._unmapped(actions, start)
        if actions is None:
            return None
        return self.check_batch(actions, timeout=timeout, cancel=cancel)

    async def acheck_mapped(
        self,
        mapper: Mapper,
        *args: Any,
        timeout: float | None = None,
        cancel: CancelToken | None = None,
        **kwargs: Any,
    ) -> Decision | None:
        """The async twin of :meth:`check_mapped` (the mapper itself is sync)."""
        start = time.perf_counter_ns()
        actions = self._map(mapper, args, kwargs, start)
        if isinstance(actions, MappingError):
            return await self._aunmapped(actions, start)
        if actions is None:
            return None
        return await self.acheck_batch(actions, timeout=timeout, cancel=cancel)

    def _map(
        self, mapper: Mapper, args: tuple[Any, ...], kwargs: dict[str, Any], start: int
    ) -> MappingError | list[Action] | None:
        try:
            result = mapper(*args, **kwargs)
            actions = _as_actions(result)
        except Exception as exc:
            error = (
                exc
                if isinstance(exc, MappingError)
                else MappingError(f"the mapper raised {describe(exc)}")
            )
            if error is not exc:
                error.__cause__ = exc
            return error
        if actions is None:
            self._emit_pass_through(start)
        return actions

    def _unmapped(self, error: MappingError, start: int) -> Decision:
        """The undetermined decision of a call its mapper could not read, recorded —
        by the server, for a remote guard (it keeps no record of its own)."""
        told = self._server_records(_UNMAPPED, str(error))
        if told is not None:
            return told
        return self._finish(None, _failed(error, f"could not map the call: {error}"), start)

    async def _aunmapped(self, error: MappingError, start: int) -> Decision:
        told = await self._aserver_records(_UNMAPPED, str(error))
        if told is not None:
            return told
        return self._finish(None, _failed(error, f"could not map the call: {error}"), start)

    def _server_records(self, action: Action, problem: str) -> Decision | None:
        """A remote guard's unreadable call, recorded by the server (undetermined);
        ``None`` for a local guard, or when the server could not be reached (the
        caller then decides undetermined itself)."""
        remote = self._remote()
        if remote is None:
            return None
        try:
            return remote.unreadable(self._contextualise(action), problem)
        except Exception as exc:
            log.error("interlock: the server did not record an unreadable call: %s", exc)
            return None

    async def _aserver_records(self, action: Action, problem: str) -> Decision | None:
        """The async twin of :meth:`_server_records`."""
        remote = self._remote()
        if remote is None:
            return None
        try:
            return await remote.aunreadable(self._contextualise(action), problem)
        except Exception as exc:
            log.error("interlock: the server did not record an unreadable call: %s", exc)
            return None

    def unreadable(self, action: Action, problem: str) -> Decision:
        """Record, without judging it, a call that cannot be read: an undetermined
        decision ("could not map the call: ``problem``"), recorded and told as any
        other. ``action`` says what is known of the call — above all who asked, its
        context — so that the record is that caller's (its tenant and agent); the
        decider never sees it. A mapper that raises is the same thing with no
        action at all (the guard's own context is the record's). A remote guard has
        the server record it (it keeps no record of its own); when the server cannot
        be reached the call is undetermined all the same."""
        start = time.perf_counter_ns()
        told = self._server_records(action, problem)
        if told is not None:
            return told
        return self._finish(*self._unreadable(action, problem), start)

    async def aunreadable(self, action: Action, problem: str) -> Decision:
        """The async twin of :meth:`unreadable`."""
        start = time.perf_counter_ns()
        told = await self._aserver_records(action, problem)
        if told is not None:
            return told
        return await self._afinish(*self._unreadable(action, problem), start)

    def _unreadable(self, action: Action, problem: str) -> tuple[Action | None, Decision]:
        error = MappingError(problem)
        try:
            known: Action | None = self._contextualise(action)
        except MappingError:  # not an Action the record can describe
            known = None
        return known, _failed(error, f"could not map the call: {error}")

    # -- raising forms -----------------------------------------------------------------

    def enforce(self, action: Action, *, timeout: float | None = None) -> Decision:
        """Check and raise unless allowed. Returns the allow decision."""
        decision = self.check(action, timeout=timeout)
        raise_for(decision, action)
        return decision

    async def aenforce(self, action: Action, *, timeout: float | None = None) -> Decision:
        """The async twin of :meth:`enforce`."""
        decision = await self.acheck(action, timeout=timeout)
        raise_for(decision, action)
        return decision

    @overload
    def protect(self, fn: Callable[P, R], /) -> Callable[P, R]: ...

    @overload
    def protect(
        self,
        fn: None = None,
        /,
        *,
        name: str | None = None,
        kind: str = "tool",
        scope: str | None = None,
        description: str | None = None,
        mapper: Mapper | None = None,
        timeout: float | None = None,
    ) -> Callable[[Callable[P, R]], Callable[P, R]]: ...

    def protect(
        self,
        fn: Callable[..., Any] | None = None,
        /,
        *,
        name: str | None = None,
        kind: str = "tool",
        scope: str | None = None,
        description: str | None = None,
        mapper: Mapper | None = None,
        timeout: float | None = None,
    ) -> Any:
        """Decorate a sync or async function so that it runs only on allow.

        Without a ``mapper`` the action is ``kind`` / ``name`` (default: the function's
        name) with the bound arguments, defaults included. A mapper receives the
        call's ``*args, **kwargs`` and returns an Action, a list of them, or ``None``
        to pass the call through unjudged. On anything but allow it raises
        ``ActionDenied``, ``ApprovalRequired`` or ``ActionUndetermined``.

        Example::

            @guard.protect(scope="shell")
            def run(command: str) -> str: ...
        """

        def decorate(func: Callable[..., Any]) -> Callable[..., Any]:
            to_actions = mapper or _signature_mapper(
                func, name=name, kind=kind, scope=scope, description=description
            )
            tool_name = name or getattr(func, "__name__", None) or "tool"
            if inspect.iscoroutinefunction(func):

                @functools.wraps(func)
                async def guarded_async(*args: Any, **kwargs: Any) -> Any:
                    import asyncio

                    audit = self.audit
                    joined = False
                    if audit is None:
                        decision = await self.acheck_mapped(
                            to_actions, *args, timeout=timeout, **kwargs
                        )
                    else:  # an allowed decision's commit carries the body's tool_invoke
                        starting = Starting("tool_invoke", tool_name)
                        token = STARTING.set(starting)
                        try:
                            decision = await self.acheck_mapped(
                                to_actions, *args, timeout=timeout, **kwargs
                            )
                        finally:
                            STARTING.reset(token)
                        joined = _start_joined(self, decision, starting)
                    if decision is None:
                        return await func(*args, **kwargs)
                    raise_for(decision, None)
                    run = func
                    if self._sessions is not None:  # settles the session's step
                        run = self._sessions.asettling(decision, func)
                    if self.telemetry is None and decision.reservation is None and audit is None:
                        return await run(*args, **kwargs)
                    with self._executing(decision, tool_name):
                        started = 0
                        try:
                            if joined:  # durable with the decision, before the body runs
                                started = time.perf_counter_ns()
                            elif audit is not None:  # durable before the body: off the loop
                                started = await asyncio.to_thread(
                                    _outcome_started, self, decision, tool_name
                                )
                            result = await run(*args, **kwargs)
                        except BaseException as exc:
                            if decision.reservation is not None:
                                await asyncio.to_thread(self._settle_quietly, decision, spent=False)
                            if audit is not None:
                                _outcome_finished(self, decision, tool_name, started, error=exc)
                            raise
                        if decision.reservation is not None:
                            await asyncio.to_thread(self._settle_quietly, decision, spent=True)
                        if audit is not None:
                            _outcome_finished(self, decision, tool_name, started, result=result)
                    return result

                guarded_async.__interlock_guard__ = self  # type: ignore[attr-defined]
                return guarded_async

            @functools.wraps(func)
            def guarded(*args: Any, **kwargs: Any) -> Any:
                audit = self.audit
                if audit is None:
                    decision = self.check_mapped(to_actions, *args, timeout=timeout, **kwargs)
                    joined = None
                else:  # an allowed decision's commit carries the body's tool_invoke
                    starting = Starting("tool_invoke", tool_name)
                    token = STARTING.set(starting)
                    try:
                        decision = self.check_mapped(to_actions, *args, timeout=timeout, **kwargs)
                    finally:
                        STARTING.reset(token)
                    joined = _start_joined(self, decision, starting)
                if decision is None:
                    return func(*args, **kwargs)
                raise_for(decision, None)
                run = func
                if self._sessions is not None:  # settles the session's step
                    run = self._sessions.settling(decision, func)
                if self.telemetry is None and decision.reservation is None and audit is None:
                    return run(*args, **kwargs)
                with self._executing(decision, tool_name):
                    started = 0
                    try:
                        if joined:  # durable with the decision, before the body runs
                            started = time.perf_counter_ns()
                        elif audit is not None:  # durable before the body runs
                            started = _outcome_started(self, decision, tool_name)
                        result = run(*args, **kwargs)
                    except BaseException as exc:
                        if decision.reservation is not None:
                            self._settle_quietly(decision, spent=False)
                        if audit is not None:
                            _outcome_finished(self, decision, tool_name, started, error=exc)
                        raise
                    if decision.reservation is not None:
                        self._settle_quietly(decision, spent=True)
                    if audit is not None:
                        _outcome_finished(self, decision, tool_name, started, result=result)
                return result

            guarded.__interlock_guard__ = self  # type: ignore[attr-defined]
            return guarded

        return decorate(fn) if fn is not None else decorate

    # -- framework adapters --------------------------------------------------------------

    def attach(self, obj: T, /) -> T:
        """Guard a framework object in place (e.g. a LangChain ``BaseTool``: every entry
        point is judged) and return it. Idempotent; :meth:`detach` undoes it. The
        framework's adapter is imported only here."""
        from interlock.core.registry import adapter_for

        adapter_for(obj).attach(obj, self)
        return obj

    def detach(self, obj: T, /) -> T:
        """Restore exactly what :meth:`attach` replaced on ``obj``."""
        from interlock.core.registry import adapter_for

        adapter_for(obj).detach(obj)
        return obj

    def coverage(self, obj: object, /) -> Coverage:
        """What this guard holds of a framework object — an agent, a graph, a tool, an
        MCP server: its tools (and, where the adapter looks, models), each marked
        ``guarded`` when its calls pass this guard, however it was guarded (``attach``,
        a guarded copy, middleware). ``coverage(agent).unguarded`` lists the rest."""
        from interlock.core.registry import adapter_for

        return adapter_for(obj).coverage(obj, self)

    # -- state: reservations, approvals, model calls ----------------------------------

    def commit(
        self,
        decision: Decision,
        usage: object | None = None,
        *,
        model: str | None = None,
        by: Settler | _Unset = _AS_DECIDED,
    ) -> Reservation | None:
        """Spend the budget reservation an allowed decision holds: what was reserved,
        or what ``usage`` (a :class:`~interlock.ledger.usage.Usage`, a provider's usage
        object or a mapping of token counts) says a call to ``model`` used — charged
        in full, whatever was reserved. Committing twice changes nothing. ``None``
        when the decision holds no reservation.

        Only the agent the reservation was made for settles it: by default the agent
        the decision names, which must be this guard's context agent when it names
        one (:class:`~interlock.errors.ReservationNotOwned` otherwise). ``by`` settles
        as another identity (the server passes its key's; ``ANY_AGENT`` an admin's)."""
        ref = decision.reservation
        if ref is None:
            return None
        remote = self._remote()
        if remote is not None:
            told = remote.commit(decision, usage, model=model)
            if told is not None and self.telemetry is not None:
                self._report_settled(told)
            return told
        ledger = self._require_ledger()
        settler = self._settler(ref, by)
        actual = None
        if usage is not None:
            from interlock.ledger.budgets import actual_units
            from interlock.store.settle import check_owner

            # Its lines and owner, which never change: pricing needs no fresh read.
            reservation = ledger.reservation_terms(ref.id)
            check_owner(reservation, settler)  # before pricing: a stranger learns nothing
            policy = self.policy
            if policy is None:
                raise StoreError("committing actual usage needs the guard's policy (pricing)")
            actual = actual_units(reservation.lines, policy, model, usage)
        record = self._settlement_record(ledger)
        if record is None:
            settled = ledger.commit(ref.id, actual, by=settler)
        else:  # the record commits with the settlement where the store can join them
            settled = record.store.commit(ref.id, actual, by=settler, record=record)
        if record is None or not record.landed:
            self._record_settled(settled)
        if self.telemetry is not None:
            self._report_settled(settled)
        return settled

    def release(
        self, decision: Decision, *, by: Settler | _Unset = _AS_DECIDED
    ) -> Reservation | None:
        """Give back the reservation an allowed decision holds (the action did not
        run, or failed before it spent anything). Releasing twice changes nothing.
        Who may: as for :meth:`commit`."""
        ref = decision.reservation
        if ref is None:
            return None
        remote = self._remote()
        if remote is not None:
            told = remote.release(decision)
            if told is not None and self.telemetry is not None:
                self._report_settled(told)
            return told
        ledger = self._require_ledger()
        settled = ledger.release(ref.id, by=self._settler(ref, by))
        self._record_settled(settled)
        if self.telemetry is not None:
            self._report_settled(settled)
        return settled

    async def acommit(
        self,
        decision: Decision,
        usage: object | None = None,
        *,
        model: str | None = None,
        by: Settler | _Unset = _AS_DECIDED,
    ) -> Reservation | None:
        """The async twin of :meth:`commit`: a remote guard's over the running loop's
        connection, a store's in a worker thread (the loop never waits on either)."""
        if decision.reservation is None:
            return None
        remote = self._remote()
        if remote is not None:
            return await remote.acommit(decision, usage, model=model)
        import asyncio  # running: already loaded by the loop (ADR 0014)

        return await asyncio.to_thread(self.commit, decision, usage, model=model, by=by)

    async def arelease(
        self, decision: Decision, *, by: Settler | _Unset = _AS_DECIDED
    ) -> Reservation | None:
        """The async twin of :meth:`release`."""
        if decision.reservation is None:
            return None
        remote = self._remote()
        if remote is not None:
            return await remote.arelease(decision)
        import asyncio

        return await asyncio.to_thread(self.release, decision, by=by)

    def _settler(self, ref: ReservationRef, by: Settler | _Unset) -> Settler:
        """Who settles ``ref``: ``by`` when given; else the agent the decision names,
        which must be this guard's own agent when its context names one (so a
        decision of another agent's — or one made up around its reservation id —
        cannot settle it here)."""
        if not isinstance(by, _Unset):
            return by
        agent = self.context.agent
        if agent is not None and ref.owner != agent:
            raise ReservationNotOwned(
                f"reservation {ref.id} was made for another agent than this guard's "
                f"({agent!r}): only that agent or an admin may settle it",
                reservation_id=ref.id,
            )
        return ref.owner

    def _settle_quietly(self, decision: Decision, *, spent: bool) -> None:
        """Commit or release after the body ran; a failure is logged, never raised
        over the body's own result or error (the reaper releases after the TTL)."""
        owner = decision.reservation.owner if decision.reservation else None
        try:  # the guard's own decision: settled as the agent it was made for
            if spent:
                self.commit(decision, by=owner)
            else:
                self.release(decision, by=owner)
        except Exception as exc:
            log.error(
                "interlock: could not %s reservation %s: %s",
                "commit" if spent else "release",
                decision.reservation.id if decision.reservation else "?",
                describe(exc),
            )

    def _executing(
        self, decision: Decision, name: str | None = None
    ) -> contextlib.AbstractContextManager[object]:
        """The span of an allowed body, current while it runs (``interlock.otel``);
        nothing without telemetry. A telemetry failure never stops the body."""
        telemetry = self.telemetry
        if telemetry is None:
            return contextlib.nullcontext()
        try:
            return telemetry.executing(decision, name)
        except Exception:
            log.exception("interlock: telemetry failed before a call; the call runs")
            return contextlib.nullcontext()

    def _report_settled(self, reservation: Reservation) -> None:
        telemetry = self.telemetry
        if telemetry is None:
            return
        try:
            telemetry.settled(reservation)
        except Exception:
            log.exception("interlock: telemetry failed on a settlement")

    def _record_settled(self, reservation: Reservation) -> None:
        if self.audit is None or reservation.replayed:
            return
        self.audit.write_record(reservation.tenant, "budget", _settlement(reservation))

    def _settlement_record(self, ledger: SqlStore | MemoryLedger) -> _SettlementRecord | None:
        """The settlement's record, on offer to the commit's transaction: on an
        embedded store that is the audit log's too, when its records are waited for
        (durability ``process`` or ``power``)."""
        audit = self.audit
        if (
            audit is None
            or not audit.waits
            or audit.store is not ledger
            or getattr(ledger, "dialect", None) != "sqlite"
        ):
            return None
        return _SettlementRecord(audit, ledger)

    def wait_for_approval(self, approval_id: str, timeout: float = 300.0) -> ApprovalRecord:
        """Block until a human decides the approval (or ``timeout`` seconds pass) and
        return it; then retry the identical call, which claims the approval once.
        Wakes within milliseconds of the decision (PostgreSQL LISTEN/NOTIFY; on
        SQLite, polling with backoff, and at once for decisions made in-process)."""
        remote = self._remote()
        if remote is not None:
            return remote.wait_for_approval(approval_id, timeout)
        return self._require_store().wait_for_approval(approval_id, timeout)

    async def await_approval(self, approval_id: str, timeout: float = 300.0) -> ApprovalRecord:
        """The async twin of :meth:`wait_for_approval`."""
        remote = self._remote()
        if remote is not None:
            return await remote.await_approval(approval_id, timeout)
        return await self._require_store().await_approval(approval_id, timeout)

    # -- grants ------------------------------------------------------------------------

    def issue_grant(
        self,
        decision: Decision,
        *,
        audience: str | None = None,
        binding: str | None = None,
        ttl: float | None = None,
    ) -> Grant:
        """A signed, single-use grant for the call ``decision`` allowed (an allow this
        guard decided, or one from a claimed approval), stored and audited; one per
        decision. ``audience`` defaults to the action's downstream system (none at all
        is a ConfigError); ``binding`` is the digest of the exact request
        (:func:`interlock.verify.binding.http_binding`); ``ttl`` seconds (default 60,
        at most 3600). Anything else is a :class:`~interlock.errors.GrantError` saying
        why (see :mod:`interlock.approvals.grants`). Needs a store."""
        from interlock.approvals.grants import issue_grant

        remote = self._remote()
        if remote is not None:  # the server decided: it grants
            from interlock import remote_grants

            return remote_grants.issue(
                remote, decision, audience=audience, binding=binding, ttl=ttl
            )
        store = self._grant_store()
        assert self._grantable is not None  # made with the store
        carried = decision.grant if isinstance(decision, Decision) else None
        if carried is not None:  # the policy asked for it with the allow
            if binding is None and ttl is None and audience in (None, carried.claims.audience):
                return cast("Grant", carried)  # a decision's grant is always a Grant
            raise GrantError(
                f"decision {decision.decision_id} carries its grant already (decision.grant, "
                "asked for by the policy): one grant per decision"
            )
        action = self._grantable.find(decision)
        grant = issue_grant(store, action, decision, audience=audience, binding=binding, ttl=ttl)
        self._grantable.forget(decision)
        return grant

    async def aissue_grant(
        self,
        decision: Decision,
        *,
        audience: str | None = None,
        binding: str | None = None,
        ttl: float | None = None,
    ) -> Grant:
        """The async twin of :meth:`issue_grant` (the store is asked on a thread)."""
        import asyncio

        remote = self._remote()
        if remote is not None:
            from interlock import remote_grants

            return await remote_grants.aissue(
                remote, decision, audience=audience, binding=binding, ttl=ttl
            )
        return await asyncio.to_thread(
            self.issue_grant, decision, audience=audience, binding=binding, ttl=ttl
        )

    def claim_grant(self, grant: Grant | str) -> GrantClaims:
        """Claim a grant (or its token) exactly once, atomically, in the store: its
        claims. :class:`~interlock.errors.GrantReplayed` when it was claimed before,
        :class:`~interlock.errors.GrantExpired` past its expiry,
        :class:`~interlock.errors.GrantInvalid` otherwise."""
        from interlock.approvals.grants import claim_grant

        remote = self._remote()
        if remote is not None:
            from interlock import remote_grants

            return remote_grants.claim(remote, _token_of(grant))
        return claim_grant(self._grant_store(), grant)

    async def aclaim_grant(self, grant: Grant | str) -> GrantClaims:
        """The async twin of :meth:`claim_grant`."""
        import asyncio

        remote = self._remote()
        if remote is not None:
            from interlock import remote_grants

            return await remote_grants.aclaim(remote, _token_of(grant))
        return await asyncio.to_thread(self.claim_grant, grant)

    def grant_jwks(self) -> dict[str, Any]:
        """The public JWK set a downstream verifier needs: the active signing key and
        the retired ones whose grants may not have expired yet (a remote guard's: the
        server's)."""
        remote = self._remote()
        if remote is not None:
            from interlock import remote_grants

            return remote_grants.jwks(remote)
        return self._grant_store().grant_keys.ring().jwks()

    def _grant_store(self) -> SqlStore:
        if self.store is None:
            from interlock.errors import ConfigError

            raise ConfigError(
                "grants are issued and claimed in a store: create the guard with one, "
                "e.g. Guard(policy, store='sqlite:///.interlock/interlock.db')"
            )
        return self.store

    def llm_call(
        self,
        model: str,
        *,
        estimate: Usage | object | None = None,
        context: Context | None = None,
        arguments: Mapping[str, Any] | None = None,
        timeout: float | None = None,
    ) -> LLMCall:
        """A sync and async context manager around one model call: checked and
        reserved (on the policy's budgets) on entry, committed from real usage on
        exit, released on an exception or a cancellation.

        Example::

            with guard.llm_call("gpt-5", estimate=Usage(1_200, 800)) as call:
                response = client.chat.completions.create(...)
                call.record(response.usage)
        """
        from interlock.ledger.llm_call import LLMCall

        return LLMCall(
            self,
            model,
            estimate=estimate,
            context=context,
            arguments=arguments,
            timeout=timeout,
        )

    def _remote(self) -> RemoteDecider | None:
        """The server this guard asks, when it is a remote guard."""
        decider = self.decider
        return decider if getattr(decider, "serves_state", False) else None  # type: ignore[return-value]

    def _require_store(self) -> SqlStore:
        if self.store is None:
            raise StoreError(
                "this guard has no store: create it with Guard(policy, store='sqlite:///...')"
            )
        return self.store

    def _require_ledger(self) -> SqlStore | MemoryLedger:
        ledger = self.ledger
        if ledger is None:
            raise StoreError(
                "this guard keeps no budgets: its policy has none, and it has no store "
                "(Guard(policy, store='sqlite:///...'))"
            )
        return ledger

    # -- internals -------------------------------------------------------------------

    def _contextualise(self, action: Action) -> Action:
        if not (type(action) is Action and type(action.context) is Context):
            if not isinstance(action, Action):
                raise MappingError(f"check() needs an Action, not a {type(action).__name__}")
            if not isinstance(action.context, Context):
                raise MappingError(
                    f"the action's context is a {type(action.context).__name__}, not a Context"
                )
        if self._sessions is not None and self._in_session_check():
            return action  # the session check it is inside made it so already
        base = self.context
        if base is not _DEFAULT_CONTEXT:
            action = action.with_context(action.context.merged_over(base))
        intents = self._intents
        if intents and action.kind != "llm":
            intent = intents.get(action.name)
            if intent is not None:  # the policy states what the call acts on
                action = intent.declare(action)
        return action

    def _granted(self, action: Action, decision: Decision) -> Decision:
        """An allow with the grant the policy asks for (a rule's or the tool's
        ``grant:``, or a claimed approval's when an audience is known). No grant can be
        issued: undetermined, and what the allow held is given back."""
        store, policy = self.store, self.policy
        if store is None or policy is None:
            return decision
        shadow = decision.shadow
        if shadow is not None and shadow.verdict is not _ALLOW:
            return decision  # runs only because of shadow mode: nothing to vouch for
        from interlock.approvals.grants import DEFAULT_GRANT_TTL, issue_grant

        try:
            spec = policy.grants.for_decision(action, decision, DEFAULT_GRANT_TTL)
            if spec is None:
                return decision
            grant = issue_grant(store, action, decision, audience=spec.audience, ttl=spec.ttl)
        except Exception as exc:
            self._give_back(decision)
            return _failed(
                exc, f"the policy asks for a grant, and none was issued: {describe(exc)}"
            )
        return decision._replace(grant=grant)

    async def _agranted(self, action: Action, decision: Decision) -> Decision:
        """:meth:`_granted` on a thread. Cancelled meanwhile: what the thread's allow
        holds (a reservation, a claimed approval) is given back once it is done."""
        import asyncio

        work = asyncio.ensure_future(asyncio.to_thread(self._granted, action, decision))
        try:
            return await asyncio.shield(work)
        except asyncio.CancelledError:
            work.add_done_callback(self._give_back_when_done)
            raise

    def _give_back_when_done(self, work: Any) -> None:
        if work.cancelled() or work.exception() is not None:
            return
        decision: Decision = work.result()
        if decision.reservation is None and decision.approval is None:
            return
        # Not on the event loop (this callback runs there), nor under the check's
        # deadline, which has passed: a thread of its own, on the store's bounds.
        threading.Thread(
            target=self._give_back_unbounded,
            args=(decision,),
            name="interlock-give-back",
            daemon=True,
        ).start()

    def _give_back_unbounded(self, decision: Decision) -> None:
        with deadline_scope(None):
            self._give_back(decision)

    def _asks_grant(self, decision: Decision) -> bool:
        """Whether an allow may carry a grant (cheap: the policy says so at all)."""
        if decision.verdict is not _ALLOW or self.store is None or self.policy is None:
            return False
        return bool(self.policy.grants) or decision.approval is not None

    def _joined(self, action: Action, start: int) -> JoinedRecord | None:
        """The check's record on offer to its reservation's transaction: when the
        audit log waits for its records and the policy has budgets (a check nothing
        budgets never reserves, and the record then goes the usual way)."""
        audit, policy = self.audit, self.policy
        if (
            audit is None
            or not audit.waits
            or policy is None
            or not policy.budgets
            or not self._policy_decides
        ):
            return None
        return JoinedRecord(audit, action, start, self.redactor, STARTING.get())

    def _finish(
        self,
        action: Action | None,
        decision: Decision,
        start: int,
        joined: JoinedRecord | None = None,
    ) -> Decision:
        verdict = decision.verdict
        if verdict is not _ALLOW:  # (an allow is told as it is: no call on the hot path)
            decision = self._told(decision)
        if action is not None and not (
            (type(action) is Action and type(action.context) is Context)
            or (isinstance(action, Action) and isinstance(action.context, Context))
        ):
            action = None  # not an action we can describe in a record
        if verdict is _UNDETERMINED and self.fail_mode == "open":
            decision = self._failed_open(action, decision)
        event: Event | None = None
        audit, sink = self.audit, self.sink
        if audit is not None or sink is not None:  # the usual guard has neither
            # _event, inlined (positional, the named tuple's own __new__ skipped): this
            # runs on every check with a sink or an audit log.
            event = _new_tuple(
                Event,
                (
                    "decision",
                    time.time(),
                    action,
                    decision,
                    time.perf_counter_ns() - start,
                    None,
                    self.redactor,
                ),
            )
            if joined is not None:
                recorded = joined.close()
                if recorded is not None and joined.landed and decision is recorded:
                    audit = None  # committed with its reservation: in the chain already
                    event = joined.event or event
                else:
                    event = _superseding(event, joined)
            if audit is not None:
                late = _LateRecord(self, action, event)
                then = None
                starting = STARTING.get() if verdict is _ALLOW else None
                if starting is not None and starting.decision_id is None:
                    # a body runs next: its start record shares this commit
                    then = _start_record(self, action, decision, starting)
                join = None
                if self._sessions is not None and action is not None and audit.waits:
                    join = self._joined_step(action, decision, audit)
                try:
                    audit.write_event(self._tenant(action), event, late=late, then=then, join=join)
                except Exception as exc:
                    decision = late.told(exc)
                    event = event._replace(decision=decision)
                else:
                    if join is not None:
                        join.committed = True
                        if join.told is not None:
                            self._give_back(decision)
                            event = join.told
                            decision = cast(Decision, event.decision)
        if self._grantable is not None and decision.verdict is _ALLOW and action is not None:
            self._grantable.remember(decision, action)
            if self.audit is not None and action.context is not self.context:
                self._remember_owner(decision.decision_id, action.context)
        if self.on_decision is None and self.on_blocked is None:
            # _publish, inlined for the usual guard: a sink at most, no hooks
            if sink is not None and event is not None:
                try:
                    sink.emit(event)
                except Exception:
                    log.exception("interlock: the event sink failed; the decision stands")
            return decision
        self._publish(action, decision, event)
        return decision

    async def _afinish(
        self,
        action: Action | None,
        decision: Decision,
        start: int,
        joined: JoinedRecord | None = None,
    ) -> Decision:
        """:meth:`_finish`, awaiting the audit commit without blocking the loop."""
        if self.audit is None:
            return self._finish(action, decision, start)
        if joined is not None:
            recorded = joined.close()
            if recorded is not None and joined.landed and decision is recorded:
                # committed with its reservation: in the chain already (an allow: it
                # is told as it is, and never fails open)
                if self._grantable is not None and action is not None:
                    self._grantable.remember(decision, action)
                self._publish(action, decision, joined.event)
                return decision
        decision = self._told(decision)
        if action is not None and not (
            isinstance(action, Action) and isinstance(action.context, Context)
        ):
            action = None
        if decision.verdict is _UNDETERMINED and self.fail_mode == "open":
            decision = self._failed_open(action, decision)
        event = _superseding(self._event(action, decision, start), joined)
        late = _LateRecord(self, action, event)
        then = None
        starting = STARTING.get() if decision.verdict is _ALLOW else None
        if starting is not None and starting.decision_id is None:
            # a body runs next: its start record shares this commit
            then = _start_record(self, action, decision, starting)
        join = None
        if self._sessions is not None and action is not None and self.audit.waits:
            join = self._joined_step(action, decision, self.audit)
        try:
            await self.audit.awrite_event(
                self._tenant(action), event, late=late, then=then, join=join
            )
        except Exception as exc:
            decision = late.told(exc)
            event = event._replace(decision=decision)
        else:
            if join is not None:
                join.committed = True
                if join.told is not None:
                    self._give_back(decision)
                    event = join.told
                    decision = cast(Decision, event.decision)
        if self._grantable is not None and decision.verdict is _ALLOW and action is not None:
            self._grantable.remember(decision, action)
            if self.audit is not None and action.context is not self.context:
                self._remember_owner(decision.decision_id, action.context)
        self._publish(action, decision, event)
        return decision

    def _event(self, action: Action | None, decision: Decision, start: int) -> Event:
        latency = time.perf_counter_ns() - start
        return Event("decision", time.time(), action, decision, latency, None, self.redactor)

    def _told(self, decision: Decision) -> Decision:
        """A refusal as the agent is told it: its reason redacted with the policy's
        patterns too (the reason often quotes the call: an error, a value). An allow
        is returned as it is: nothing is said to anyone, and it is the hot path."""
        if decision.verdict is _ALLOW:
            return decision
        shadow = decision.shadow
        memo = self._shown_memo
        if shadow is None and memo[0] is self.redactor and decision.reason in memo[1]:
            return decision  # a reason with nothing to redact, seen before: as it is
        reason = self._shown(decision.reason)
        if shadow is not None:
            shown = self._shown(shadow.reason)
            if shown != shadow.reason:
                shadow = ShadowVerdict(shadow.verdict, shown, shadow.rule_ids)
        if reason == decision.reason and shadow is decision.shadow:
            return decision
        return decision._replace(reason=reason, shadow=shadow)

    def _shown(self, reason: str) -> str:
        """``reason`` redacted, remembered: most reasons are a rule's own text, said
        again on every refusal. The memo belongs to the redactor it was made with (a
        reload brings a new one) and holds a bounded number of short texts, only those
        with nothing to redact."""
        memo = self._shown_memo
        if memo[0] is not self.redactor:
            memo = self._shown_memo = (self.redactor, {})
        shown = memo[1].get(reason)
        if shown is None:
            shown = memo[0].redact(reason)
            # a text with something to hide is not kept: no secret outlives its call
            if shown == reason and len(reason) <= _SHOWN_MAX_CHARS:
                if len(memo[1]) >= _SHOWN_MAX_ENTRIES:
                    memo[1].clear()
                memo[1][reason] = shown
        return shown

    def _remember_owner(self, decision_id: str, context: Context) -> None:
        """Keep whose call ``decision_id`` allowed when it is not the guard's own
        tenant and agent (a gateway deciding for many): its outcome records go to that
        tenant's chain. Bounded: the oldest are forgotten (their outcomes long written);
        a call whose start record its decision's commit carried is held until its end."""
        owner = (context.tenant, context.agent)
        if owner == (self.context.tenant, self.context.agent):
            return
        starting = STARTING.get()
        with self._owners_lock:
            if starting is not None and starting.decision_id == decision_id:
                self._hold_owner(decision_id, owner)  # its body starts now
                return
            owners = self._owners
            owners[decision_id] = owner
            if len(owners) > _OWNERS_KEPT:
                del owners[next(iter(owners))]

    def outcome_owner(self, decision_id: str, phase: str = "") -> tuple[str, str | None]:
        """The tenant and agent whose chain the outcome records of ``decision_id`` go to:
        those of the call it allowed (the guard's own unless the call named others).
        ``phase``: the record's kind — a start (``tool_invoke``, ``llm_input``) holds
        the owner apart until the end record (any other kind) takes it back."""
        with self._owners_lock:
            if phase in _STARTS:
                owner = self._owners.get(decision_id)
                if owner is not None:
                    self._hold_owner(decision_id, owner)
            else:
                owner = self._running_owners.pop(decision_id, None)
                if owner is None:
                    owner = self._owners.get(decision_id)
        return owner if owner is not None else (self.context.tenant, self.context.agent)

    def _hold_owner(self, decision_id: str, owner: tuple[str, str | None]) -> None:
        """Keep ``owner`` of a body that started until its end (under the lock)."""
        running = self._running_owners
        running[decision_id] = owner
        if len(running) > _RUNNING_KEPT:
            del running[next(iter(running))]

    def _tenant(self, action: Action | None) -> str:
        return action.context.tenant if action is not None else self.context.tenant

    def _failed_open(self, action: Action | None, decision: Decision) -> Decision:
        log.warning(
            "interlock: fail-open — allowing %s despite: %s",
            getattr(action, "name", "<unmapped call>"),
            self.redactor.redact(decision.reason),
        )
        return Decision(
            verdict=Verdict.ALLOW,
            reason=f"fail-open: {decision.reason}",
            rule_ids=decision.rule_ids,
            cause=decision.cause,
            decision_id=decision.decision_id,
            shadow=decision.shadow,
            fail_open=True,
        )

    def _unrecorded(
        self, action: Action | None, decision: Decision, exc: BaseException
    ) -> Decision:
        """A decision whose record could not be made durable does not stand: what the
        caller is told instead (same ``decision_id``, so a late record of the original
        and its correction can be matched). Pure: giving back is the caller's job."""
        failure = exc if isinstance(exc, AuditFailure) else AuditFailure(describe(exc))
        if failure is not exc:
            failure.__cause__ = exc
        if decision.verdict is Verdict.UNDETERMINED and not decision.fail_open:
            return decision  # already what it would become: keep its own cause
        unrecorded = Decision.undetermined(
            failure, f"the decision could not be recorded, so it does not stand: {failure}"
        )._replace(decision_id=decision.decision_id)
        if self.fail_mode == "open":
            return self._failed_open(action, unrecorded)
        return unrecorded

    def _give_back(self, decision: Decision) -> None:
        """Return what a decision that will not run holds (reservation, claimed grant).
        Past the check's deadline this gets a short grace of its own; what it cannot
        return in time the reaper releases (a reservation) or a human re-approves."""
        if decision.reservation is None and decision.approval is None:
            return
        compensate = getattr(self.decider, "compensate", None)
        if compensate is None:
            return
        deadline = current_deadline()
        if deadline is None:
            compensate(decision)
            return
        with deadline_scope(max(deadline, time.monotonic() + _GIVE_BACK_GRACE)):
            compensate(decision)

    def _publish(self, action: Action | None, decision: Decision, event: Event | None) -> None:
        if self.sink is not None and event is not None:
            try:
                self.sink.emit(event)
            except Exception:
                log.exception("interlock: the event sink failed; the decision stands")
        if self.on_decision is not None:
            self._hooks.call(self.on_decision, decision, action)
        if self.on_blocked is not None and decision.verdict is not _ALLOW:
            self._hooks.call(self.on_blocked, decision, action)

    def _emit_pass_through(self, start: int) -> None:
        event = new_event("pass_through", None, None, time.perf_counter_ns() - start, self.redactor)
        if self.audit is not None:
            try:
                self.audit.write_event(self.context.tenant, event)
            except Exception:
                log.exception("interlock: a pass-through could not be recorded")
        if self.sink is not None:
            try:
                self.sink.emit(event)
            except Exception:
                log.exception("interlock: the event sink failed")


class _LateRecord:
    """What a decision's audit record says when it is not durable by the deadline: the
    decision the caller is told instead (undetermined). Built at most once — by the
    audit writer (which must not wait on anything while it holds its lock: building it
    is pure) or by the guard, whichever needs it first — so the record and the caller
    agree."""

    __slots__ = ("_told", "action", "event", "guard")

    def __init__(self, guard: Guard, action: Action | None, event: Event) -> None:
        self.guard = guard
        self.action = action
        self.event = event
        self._told: Decision | None = None

    def __call__(self, failure: AuditFailure) -> Event | None:
        told = self._decision(failure)
        if told is self.event.decision:
            return None  # already undetermined: the record says what the caller is told
        return self.event._replace(decision=told)

    def _decision(self, exc: BaseException) -> Decision:
        if self._told is None:
            original = self.event.decision
            assert original is not None
            self._told = self.guard._unrecorded(self.action, original, exc)
        return self._told

    def told(self, exc: BaseException) -> Decision:
        """The decision the caller gets; what the original held is given back."""
        told = self._decision(exc)
        original = self.event.decision
        assert original is not None
        self.guard._give_back(original)
        return told


def _superseding(event: Event, joined: JoinedRecord | None) -> Event:
    """``event``, saying which record it supersedes when its check's allowed decision
    was recorded with its reservation but is not what the check returns (a deadline
    passed, the check was cancelled or stopped waiting: the reservation is given
    back). That record may be in the chain (or may still land there)."""
    if joined is None:
        return event
    recorded = joined.close()
    if recorded is None or recorded is event.decision:
        return event
    detail = {
        **(event.detail or {}),
        "supersedes": recorded.verdict.value,
        "supersedes_decision_id": recorded.decision_id,
    }
    return event._replace(detail=detail)


def _token_of(grant: object) -> str:
    """The token of a Grant, or the token itself."""
    token = getattr(grant, "token", grant)
    if not isinstance(token, str):
        from interlock.errors import GrantInvalid

        raise GrantInvalid(f"a grant is a Grant or its token, not a {type(grant).__name__}")
    return token


def _validated(decision: object) -> Decision:
    if not isinstance(decision, Decision) or not isinstance(decision.verdict, Verdict):
        raise InternalFailure(f"the decider returned {type(decision).__name__}, not a Decision")
    return decision


async def _bounded(work: Coroutine[Any, Any, T], deadline: float) -> T:
    """``await work`` within ``deadline`` (``time.monotonic()``), TimeoutError past it
    as under ``asyncio.timeout`` — but no timer when ``work`` finishes without
    suspending (a policy decided in memory: most checks), where none could fire; arming
    and cancelling one costs ≈ 11 µs a check."""
    try:
        suspended = work.send(None)
    except StopIteration as done:
        return cast(T, done.value)
    import asyncio  # running: already loaded by the loop; never at import (ADR 0014)

    async with asyncio.timeout(deadline - time.monotonic()):
        return await _Resumed(work, suspended)


class _Resumed(Generic[T]):
    """The rest of a coroutine run up to its first suspension (``suspended``: what it
    yielded there): awaiting this goes on as awaiting the coroutine would have — what
    the task sends or throws in (a cancellation) goes to the coroutine."""

    __slots__ = ("_suspended", "_work")

    def __init__(self, work: Coroutine[Any, Any, T], suspended: object) -> None:
        self._work = work
        self._suspended = suspended

    def __await__(self) -> Generator[object, None, T]:
        work, out = self._work, self._suspended
        while True:
            try:
                yield out
            except GeneratorExit:
                work.close()
                raise
            except BaseException as exc:  # thrown in by the task
                try:
                    out = work.throw(exc)
                except StopIteration as done:
                    return cast(T, done.value)
            else:
                try:
                    out = work.send(None)
                except StopIteration as done:
                    return cast(T, done.value)


def _failed(exc: BaseException, reason: str | None = None) -> Decision:
    return Decision.undetermined(exc, reason or f"no verdict: {describe(exc)}")


def _timed_out(timeout: float) -> Decision:
    error = DecisionTimeout(f"no verdict within the {timeout * 1000:.0f} ms timeout")
    return Decision.undetermined(error, reason=str(error))


def _cancelled(cancel: CancelToken) -> Decision:
    error = InternalFailure(f"the check was cancelled: {cancel.reason}")
    return Decision.undetermined(error, reason=str(error))


def _as_actions(result: object) -> list[Action] | None:
    if result is None:
        return None
    if isinstance(result, Action):
        return [_checked(result)]
    if isinstance(result, (list, tuple)):
        if not result:
            return None
        for item in result:
            if not isinstance(item, Action):
                raise MappingError(
                    f"the mapper returned a list holding a {type(item).__name__}; "
                    "expected only Action objects"
                )
        return [_checked(item) for item in result]
    raise MappingError(
        f"the mapper returned a {type(result).__name__}; expected an Action, a list of "
        "Actions, or None"
    )


def _checked(action: Action) -> Action:
    if not isinstance(action.kind, str) or not action.kind:
        raise MappingError(f"the mapper returned an Action with kind {action.kind!r}")
    if not isinstance(action.name, str) or not action.name:
        raise MappingError(f"the mapper returned an Action with name {action.name!r}")
    if not isinstance(action.arguments, Mapping):
        raise MappingError(
            f"the mapper returned arguments of type {type(action.arguments).__name__}, "
            "not a mapping"
        )
    return action


def _signature_mapper(
    func: Callable[..., Any],
    *,
    name: str | None,
    kind: str,
    scope: str | None,
    description: str | None,
) -> Mapper:
    signature = inspect.signature(func)
    tool_name: str = name or getattr(func, "__name__", None) or "tool"
    doc = description if description is not None else inspect.getdoc(func)

    def bound_arguments(*args: Any, **kwargs: Any) -> dict[str, Any]:
        """The reference: ``inspect.Signature.bind``, defaults applied, ``**kwargs``
        spread into the arguments."""
        try:
            bound = signature.bind(*args, **kwargs)
        except TypeError as exc:
            raise MappingError(f"{tool_name}() called with the wrong arguments: {exc}") from exc
        bound.apply_defaults()
        arguments: dict[str, Any] = {}
        for param_name, value in bound.arguments.items():
            param = signature.parameters[param_name]
            if param.kind is inspect.Parameter.VAR_KEYWORD:
                arguments.update(value)
            else:
                arguments[param_name] = value
        return arguments

    bind = _binder(signature, bound_arguments)

    def to_action(*args: Any, **kwargs: Any) -> Action:
        return Action(
            kind=kind, name=tool_name, arguments=bind(args, kwargs), scope=scope, description=doc
        )

    return to_action


def _binder(
    signature: inspect.Signature, reference: Callable[..., dict[str, Any]]
) -> Callable[[tuple[Any, ...], dict[str, Any]], dict[str, Any]]:
    """A binder of a call's arguments, ``(args, kwargs) -> arguments``. For a signature
    of named parameters only (no ``*args`` / ``**kwargs``, none positional-only) it
    places them in the signature's order without ``inspect``'s machinery (≈ 5 µs a
    call); any call it cannot place at once — a missing, unknown or doubled argument,
    too many positional ones — goes to ``reference``, which raises the same error as
    before. Any other signature is bound by ``reference`` alone. Held equal to the
    reference by a property test (tests/guard/test_protect_binding.py)."""
    positional = inspect.Parameter.POSITIONAL_OR_KEYWORD
    keyword = inspect.Parameter.KEYWORD_ONLY
    params = tuple(signature.parameters.values())
    if not all(p.kind is positional or p.kind is keyword for p in params):
        return lambda args, kwargs: reference(*args, **kwargs)
    names = tuple(p.name for p in params)
    by_position = sum(1 for p in params if p.kind is positional)
    empty = inspect.Parameter.empty
    defaults = tuple(p.default for p in params)

    def bind(args: tuple[Any, ...], kwargs: dict[str, Any]) -> dict[str, Any]:
        given = len(args)
        if given > by_position:
            return reference(*args, **kwargs)
        arguments: dict[str, Any] = {}
        taken = 0
        for i, param_name in enumerate(names):
            if i < given:
                arguments[param_name] = args[i]
            elif param_name in kwargs:
                arguments[param_name] = kwargs[param_name]
                taken += 1
            else:
                default = defaults[i]
                if default is empty:
                    return reference(*args, **kwargs)  # missing: its error
                arguments[param_name] = default
        if taken != len(kwargs):
            return reference(*args, **kwargs)  # an unknown or doubled keyword: its error
        return arguments

    return bind


def _start_joined(guard: Guard, decision: Decision | None, starting: Starting) -> bool:
    """:func:`interlock.core.phases.start_joined`, its usual answers without the import."""
    joined = starting.decision_id
    if joined is None:
        return False
    if decision is not None and joined == decision.decision_id and decision.verdict is _ALLOW:
        return True
    from interlock.core.phases import start_joined

    return start_joined(guard, decision, starting)


def _start_record(
    guard: Guard, action: Action | None, decision: Decision, starting: Starting
) -> tuple[str, dict[str, Any]]:
    """The start record that follows ``decision`` in its commit (the writer's ``then``),
    ``starting`` marked as carried by it."""
    starting.decision_id = decision.decision_id
    agent = guard.context.agent if action is None else action.context.agent
    return starting.kind, starting.record(decision.decision_id, agent)


def _outcome_started(guard: Guard, decision: Decision, name: str) -> int:
    """The ``tool_invoke`` audit record of a protected body, durable before it runs."""
    from interlock.core.phases import ToolInvoke, record_phase

    record_phase(guard, ToolInvoke(name, "", decision.decision_id))
    return time.perf_counter_ns()


def _outcome_finished(
    guard: Guard,
    decision: Decision,
    name: str,
    started: int,
    *,
    result: object = None,
    error: BaseException | None = None,
) -> None:
    """The ``tool_result`` audit record of a protected body (queued, not waited for);
    a failure to queue it is logged, never raised over the body's own outcome."""
    from interlock.core.phases import ToolResult, failure, preview, record_phase

    try:
        duration = time.perf_counter_ns() - started if started else 0
        if error is not None:
            error_type, message = failure(error, guard.redactor)
            phase = ToolResult(name, decision.decision_id, False, None, message, duration)
            record_phase(guard, phase, error_type=error_type)
        else:
            output = preview(result, guard.redactor)
            phase = ToolResult(name, decision.decision_id, True, output, None, duration)
            record_phase(guard, phase, result=result)
    except Exception:
        log.exception("interlock: could not record the outcome of %s", decision.decision_id)


def _settlement(reservation: Reservation) -> dict[str, Any]:
    """The audit record of a settled reservation (kind ``budget``)."""
    return {
        "reservation_id": reservation.id,
        "status": reservation.status.value,
        "owner": reservation.owner,
        "reserved": {line.budget_id: line.amount for line in reservation.lines},
        "actual": reservation.actual,
    }


class _SettlementRecord:
    """A settlement's audit record, appended in its commit's transaction by the store
    (:class:`~interlock.store.sql_budgets.JoinedRecord`): one commit for both.
    ``landed`` once that transaction committed; else the guard records as usual."""

    __slots__ = ("durable", "landed", "store", "writer")

    def __init__(self, writer: AuditWriter, store: SqlStore) -> None:
        self.writer = writer
        self.store = store
        self.durable = writer.durability == "power"
        self.landed = False

    def entries(self, reservation: Reservation) -> list[AuditEntry]:
        return [self.writer.encode_record(reservation.tenant, "budget", _settlement(reservation))]

    def claim(self) -> None:
        pass  # a commit is not abandoned half-way: nothing can refuse it here

    def committed(self) -> None:
        self.landed = True
