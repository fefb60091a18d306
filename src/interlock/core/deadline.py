"""The deadline of the check in progress, for every wait below the guard.

A check's deadline (a ``time.monotonic()`` instant) is set here by the guard for the
length of the check; the store reads it wherever it would wait — for a connection, a
lock, the server's answer, the audit commit — and waits no longer. It lives in a
``contextvars`` variable, so it follows the check into ``asyncio.to_thread`` workers and
never leaks into another thread's or task's check.

Example::

    from interlock.core.deadline import deadline_scope, time_left

    with deadline_scope(time.monotonic() + 2.0):
        time_left(10.0)   # ≈ 2.0: the nearer of the deadline and the cap
"""

from __future__ import annotations

import contextvars
import time

__all__ = ["current_deadline", "deadline_scope", "time_left"]

_DEADLINE: contextvars.ContextVar[float | None] = contextvars.ContextVar(
    "interlock_deadline", default=None
)


def current_deadline() -> float | None:
    """The deadline of the check in progress, or ``None`` outside any check."""
    return _DEADLINE.get()


class deadline_scope:  # noqa: N801 - used as a function: ``with deadline_scope(t):``
    """Make ``deadline`` the current one for the enclosed block (``None``: no
    deadline, e.g. for work that outlives the check that started it). A class, not a
    generator: it is entered on every check that can wait."""

    __slots__ = ("_deadline", "_token")

    def __init__(self, deadline: float | None) -> None:
        self._deadline = deadline

    def __enter__(self) -> None:
        self._token = _DEADLINE.set(self._deadline)

    def __exit__(self, *exc: object) -> None:
        _DEADLINE.reset(self._token)


def time_left(cap: float) -> float:
    """Seconds until the current deadline, at most ``cap``; ``cap`` outside a check.
    Zero or less means the deadline has passed."""
    deadline = _DEADLINE.get()
    if deadline is None:
        return cap
    return min(cap, deadline - time.monotonic())
