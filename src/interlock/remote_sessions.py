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
import time
from collections.abc import Awaitable, Callable
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

    def facts(self, context: Context) -> SessionFacts:
        """No facts here: the server reads the session when it decides."""
        return SessionFacts.of(SessionView(context.tenant, ""))

    def record(
        self, action: Action, decision: Decision, facts: SessionFacts, policy: CompiledPolicy
    ) -> Decision:
        """The server recorded the step when it decided."""
        return decision

    def settle(self, decision: Decision, *, executed: bool, result: object = None) -> None:
        """Report the outcome of ``decision`` when it is a call of a session."""
        if not self.decider.awaits_outcome(decision):
            return
        fingerprints = of_data(result if executed else error_data(result))
        try:
            self.decider.report_outcome(decision, executed=executed, fingerprints=fingerprints)
        except Exception as exc:
            log.error(
                "interlock: the outcome of %s could not be reported: %s",
                decision.decision_id,
                describe(exc),
            )

    async def asettle(self, decision: Decision, *, executed: bool, result: object = None) -> None:
        """The async twin of :meth:`settle` (the fingerprints are computed on a worker
        thread: ~0.5 ms per KiB of result would hold the event loop)."""
        if not self.decider.awaits_outcome(decision):
            return
        fingerprints = await asyncio.to_thread(of_data, result if executed else error_data(result))
        try:
            await self.decider.areport_outcome(
                decision, executed=executed, fingerprints=fingerprints
            )
        except Exception as exc:
            log.error(
                "interlock: the outcome of %s could not be reported: %s",
                decision.decision_id,
                describe(exc),
            )

    def settling(self, decision: Decision, body: Callable[..., T]) -> Callable[..., T]:
        """``body``, reporting what it returns or that it raised."""

        def settled(*args: Any, **kwargs: Any) -> T:
            try:
                result = body(*args, **kwargs)
            except BaseException as exc:
                self.settle(decision, executed=False, result=exc)
                raise
            self.settle(decision, executed=True, result=result)
            return result

        return settled

    def asettling(
        self, decision: Decision, body: Callable[..., Awaitable[T]]
    ) -> Callable[..., Awaitable[T]]:
        """The async twin of :meth:`settling`."""

        async def settled(*args: Any, **kwargs: Any) -> T:
            try:
                result = await body(*args, **kwargs)
            except BaseException as exc:
                await self.asettle(decision, executed=False, result=exc)
                raise
            await self.asettle(decision, executed=True, result=result)
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
