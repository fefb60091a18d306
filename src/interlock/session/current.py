"""The session check in progress: one context variable for the guard and the engine.

A guard whose policy reads sessions sets it, once per check, to the check's
:class:`~interlock.policy.sessionrules.SessionFacts` — what the session rules read
(the view, the time, the probes of the arguments) and what the guard needs while the
check runs (the guard that runs it, its recorder, its step once it rides the decision's
record). One object and one ``set``/``reset`` a check, where there were two of each.
``interlock policy test`` and ``session_scope`` set facts with no guard.

This module is light on purpose: ``interlock.guard`` imports it at import time, and a
guard with no session rules must not import the session engine.
"""

from __future__ import annotations

from contextvars import ContextVar
from typing import Any, Final

__all__ = ["CURRENT"]

#: The session facts of the check being evaluated (None: no session check runs): a
#: :class:`~interlock.policy.sessionrules.SessionFacts`, which sits a layer above this
#: module; ``sessionrules.CURRENT`` is this variable with that type.
CURRENT: Final[ContextVar[Any]] = ContextVar("interlock_session", default=None)
