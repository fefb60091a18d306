"""The ``Decider`` protocol and the explicit cancel token every check accepts."""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol, runtime_checkable

if TYPE_CHECKING:
    from interlock.core.action import Action
    from interlock.core.decision import Decision

__all__ = ["CancelToken", "Decider"]


class CancelToken:
    """Cancels a pending check from another thread or task.

    Example::

        token = CancelToken()
        threading.Timer(0.5, token.cancel).start()
        decision = guard.check(action, cancel=token)  # undetermined if cancelled
    """

    __slots__ = ("_reason", "cancelled")

    def __init__(self) -> None:
        self.cancelled = False
        self._reason = "cancelled"

    def cancel(self, reason: str = "cancelled") -> None:
        self._reason = reason
        self.cancelled = True

    @property
    def reason(self) -> str:
        return self._reason


@runtime_checkable
class Decider(Protocol):
    """Turns an action into a decision. ``deadline`` is a ``time.monotonic()`` instant
    the decider should respect where it waits on anything (network, locks); the guard
    treats a verdict that arrives after it, or a raised exception, as undetermined."""

    def decide(
        self, action: Action, *, deadline: float | None, cancel: CancelToken | None
    ) -> Decision: ...

    async def adecide(
        self, action: Action, *, deadline: float | None, cancel: CancelToken | None
    ) -> Decision: ...
