"""The local decider: the pure engine over an in-memory compiled policy."""

from __future__ import annotations

from typing import TYPE_CHECKING

from interlock.policy.engine import evaluate

if TYPE_CHECKING:
    from interlock.core.action import Action
    from interlock.core.decision import Decision
    from interlock.deciders.base import CancelToken
    from interlock.policy.compiled import CompiledPolicy

__all__ = ["LocalDecider"]


class LocalDecider:
    """Evaluates in-process. ``policy`` can be swapped atomically (hot reload)."""

    __slots__ = ("policy",)

    def __init__(self, policy: CompiledPolicy) -> None:
        self.policy = policy

    def decide(
        self, action: Action, *, deadline: float | None, cancel: CancelToken | None
    ) -> Decision:
        return evaluate(action, self.policy)

    async def adecide(
        self, action: Action, *, deadline: float | None, cancel: CancelToken | None
    ) -> Decision:
        return evaluate(action, self.policy)
