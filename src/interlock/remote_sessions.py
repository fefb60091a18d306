"""The remote guard's side of session history: the server keeps the session and
judges it; this process tells it what each allowed call of a session did.

A :class:`RemoteSessions` stands where an in-process guard has its
:class:`~interlock.guard_sessions.SessionRecorder` (``Guard.remote`` sets it): the
adapters' settle path (``run_settled`` / ``arun_settled``, ``Guard.protect``) hands it
each allowed call's result, and it sends ``POST /v1/sessions/outcome`` — executed or
not, and the result's fingerprints computed here with
:func:`~interlock.session.fingerprints.of_data` (the result itself never leaves this
process). ``Guard.record_input`` sends ``POST /v1/sessions/input``.

Only calls with a ``session_id`` in their context are reported (one more request per
such call). A report that fails is logged, never raised over the body's result: the
step stays unsettled on the server (not ``executed``), so a rule counting executed
steps sees less — while the labels it attached at allow stay.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

from interlock.core.action import Action, Context
from interlock.core.decision import Decision
from interlock.errors import describe
from interlock.policy.sessionrules import SessionFacts, error_data
from interlock.session.fingerprints import of_data
from interlock.session.history import MemoryHistory, SessionView, Step

if TYPE_CHECKING:
    from interlock.policy.compiled import CompiledPolicy
    from interlock.remote import RemoteDecider

__all__ = ["RemoteSessions"]

log = logging.getLogger("interlock")
T = TypeVar("T")


class RemoteSessions:
    """Session outcomes and inputs of a remote guard, reported to its server."""

    def __init__(self, decider: RemoteDecider) -> None:
        self.decider = decider
        #: never written: the server keeps the sessions (the guard reads this one's
        #: type to know that facts are made here, without a thread)
        self.history = MemoryHistory(max_steps=1, max_sessions=1)
        self._batches: OrderedDict[str, tuple[Decision, ...]] = OrderedDict()
        self._lock = threading.Lock()

    def facts(self, context: Context) -> SessionFacts:
        """No facts here: the server reads the session when it decides."""
        return SessionFacts.of(SessionView(context.tenant, ""))

    def record(
        self, action: Action, decision: Decision, facts: SessionFacts, policy: CompiledPolicy
    ) -> Decision:
        """The server recorded the step when it decided."""
        return decision

    def batched(self, decisions: list[Decision]) -> None:
        """An allowed batch (one call mapped to several actions): the outcome of its
        last decision is reported for every one (one body ran for all)."""
        last = decisions[-1].decision_id if decisions else None
        if last is not None and len(decisions) > 1:
            with self._lock:
                self._batches[last] = tuple(decisions[:-1])
                while len(self._batches) > 10_000:
                    self._batches.popitem(last=False)

    def claim(self, decision: Decision) -> list[tuple[str, str]]:
        """Take the outcome reports ``decision`` owes (its own and its batch's) from
        the decider's pending table: (session id, decision id) each. The table keeps
        the newest 10,000, so a wrapper claims them when it is made: a tool that runs
        while thousands of other calls are checked still reports its own outcome."""
        with self._lock:
            earlier = self._batches.pop(decision.decision_id or "", ())
        taken = (self.decider.take_pending(d) for d in (decision, *earlier))
        return [each for each in taken if each is not None]

    def settle(
        self,
        decision: Decision,
        *,
        executed: bool,
        result: object = None,
        claimed: Sequence[tuple[str, str]] = (),
    ) -> None:
        """Report the outcome of ``decision`` when it is a call of a session
        (``claimed``: what :meth:`claim` took for it when it was allowed)."""
        reported = claimed or self.claim(decision)
        if not reported:
            return
        fingerprints = of_data(result if executed else error_data(result))
        for session_id, decision_id in reported:
            try:
                self.decider.settle_step(
                    session_id, decision_id, executed=executed, fingerprints=fingerprints
                )
            except Exception as exc:
                log.error(
                    "interlock: the outcome of %s could not be reported: %s",
                    decision_id,
                    describe(exc),
                )

    async def asettle(
        self,
        decision: Decision,
        *,
        executed: bool,
        result: object = None,
        claimed: Sequence[tuple[str, str]] = (),
    ) -> None:
        """The async twin of :meth:`settle` (the fingerprints are computed on a worker
        thread: ~0.5 ms per KiB of result would hold the event loop)."""
        reported = claimed or self.claim(decision)
        if not reported:
            return
        fingerprints = await asyncio.to_thread(of_data, result if executed else error_data(result))
        for session_id, decision_id in reported:
            try:
                await self.decider.asettle_step(
                    session_id, decision_id, executed=executed, fingerprints=fingerprints
                )
            except Exception as exc:
                log.error(
                    "interlock: the outcome of %s could not be reported: %s",
                    decision_id,
                    describe(exc),
                )

    def settling(self, decision: Decision, body: Callable[..., T]) -> Callable[..., T]:
        """``body``, reporting what it returns or that it raised."""
        claimed = self.claim(decision)  # now: the decider's pending table forgets the oldest

        def settled(*args: Any, **kwargs: Any) -> T:
            try:
                result = body(*args, **kwargs)
            except BaseException as exc:
                self.settle(decision, executed=False, result=exc, claimed=claimed)
                raise
            self.settle(decision, executed=True, result=result, claimed=claimed)
            return result

        return settled

    def asettling(
        self, decision: Decision, body: Callable[..., Awaitable[T]]
    ) -> Callable[..., Awaitable[T]]:
        """The async twin of :meth:`settling`."""
        claimed = self.claim(decision)

        async def settled(*args: Any, **kwargs: Any) -> T:
            try:
                result = await body(*args, **kwargs)
            except BaseException as exc:
                await self.asettle(decision, executed=False, result=exc, claimed=claimed)
                raise
            await self.asettle(decision, executed=True, result=result, claimed=claimed)
            return result

        return settled

    def record_input(
        self, text: object, context: Context, *, trusted: bool, labels: tuple[str, ...]
    ) -> Step | None:
        """Send outside data entering the session (its fingerprints) to the server."""
        session_id = context.session_id
        if session_id is None:
            return None
        fingerprints = of_data(text)
        seq = self.decider.report_input(session_id, fingerprints, trusted=trusted, labels=labels)
        if seq is None:
            return None
        return Step(
            seq,
            time.time(),
            "input",
            "input" if trusted else "input:untrusted",
            "input",
            None,
            frozenset(labels),
            fingerprints,
            trusted,
            True,
        )
