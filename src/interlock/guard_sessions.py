"""The guard's side of session-aware rules: read the session before a check, record
the decided step after, settle it when the body returns, record outside inputs.

Only a guard whose policy reads or labels sessions (``CompiledPolicy.sessions``) has
a :class:`SessionRecorder`; any other guard pays nothing for sessions.

- Before a check: the session's view (:meth:`SessionRecorder.facts`); a history that
  cannot be read gives facts with no view, and a rule reading them is unevaluable
  (the check undetermined, never allowed).
- After: the decided step, every verdict; an allow attaches (and clears) the labels
  its label rules and tool declare. An allow whose step cannot be recorded becomes
  undetermined: a later rule would not see it.
- When the body returns: the step is settled executed, with the fingerprints of its
  result; when it raises, executed=False, with the fingerprints of its error (an
  agent framework hands the error text to the model, and it quotes what the body
  read: a failed read of a secret must still count as a flow).
"""

from __future__ import annotations

import logging
import threading
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from typing import Any, Final, TypeVar

from interlock.core.action import Action, Context
from interlock.core.decision import Decision, Verdict
from interlock.errors import SessionUnavailable, describe
from interlock.policy.compiled import CompiledPolicy
from interlock.policy.sessionrules import SessionFacts, SessionSpec, error_data, new_step
from interlock.session.fingerprints import of_data
from interlock.session.history import (
    NewStep,
    SessionHistory,
    SessionView,
    Step,
)

__all__ = ["SessionRecorder"]

log = logging.getLogger("interlock")
T = TypeVar("T")

_PENDING_KEPT: Final = 10_000


class SessionRecorder:
    """Session facts in, steps out, for one guard."""

    def __init__(self, spec: SessionSpec, history: SessionHistory) -> None:
        self.spec = spec
        self.history = history
        self._pending: OrderedDict[str, tuple[str, str]] = OrderedDict()
        #: the last decision of an allowed batch -> the earlier ones (one body runs)
        self._batches: OrderedDict[str, tuple[str, ...]] = OrderedDict()
        self._lock = threading.Lock()

    def adopt(self, old: SessionRecorder) -> None:
        """Take over the steps ``old`` (the recorder of a replaced policy) still waits
        to settle: a body allowed before a reload settles after it."""
        if isinstance(old, SessionRecorder) and old.history is self.history:
            with old._lock:
                self._pending.update(old._pending)
                self._batches.update(old._batches)

    # -- before the check ------------------------------------------------------------

    def facts(self, context: Context) -> SessionFacts:
        """The session facts of a check in ``context``."""
        session_id = context.session_id
        if session_id is None:
            return SessionFacts.of(SessionView(context.tenant, ""))
        try:
            return SessionFacts.of(self.history.view(context.tenant, session_id))
        except Exception as exc:
            return SessionFacts.unavailable(session_id, describe(exc))

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
        allowed = decision.verdict is Verdict.ALLOW
        step = new_step(action, decision, facts, policy)
        try:
            self.history.append(context.tenant, session_id, step)
        except Exception as exc:
            if not allowed:
                return decision
            log.error("interlock: session %r: the step could not be recorded: %s", session_id, exc)
            raise SessionUnavailable(
                f"session {session_id!r}: the allowed step could not be recorded ({describe(exc)})"
            ) from exc
        if allowed and decision.decision_id is not None:
            with self._lock:
                self._pending[decision.decision_id] = (context.tenant, session_id)
                while len(self._pending) > _PENDING_KEPT:
                    self._pending.popitem(last=False)
        return decision

    # -- when the body has run -------------------------------------------------------

    def settle(self, decision: Decision, *, executed: bool, result: object = None) -> None:
        """Mark the step of ``decision`` executed (with its result's fingerprints) or
        not (``result``: the error it raised, see :func:`error_data`). A step that is
        not a session step is ignored."""
        decision_id = decision.decision_id
        if decision_id is None:
            return
        with self._lock:
            ids = (decision_id, *self._batches.pop(decision_id, ()))
            keys = [(i, self._pending.pop(i, None)) for i in ids]
        fingerprints: frozenset[int] | None = None
        for step_id, key in keys:
            if key is None:
                continue
            if fingerprints is None:
                fingerprints = of_data(result if executed else error_data(result))
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
                self.settle(decision, executed=False, result=exc)
                raise
            self.settle(decision, executed=True, result=result)
            return result

        return settled

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
        return self.history.append(context.tenant, session_id, step)
