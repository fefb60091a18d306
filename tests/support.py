"""Test doubles shared by the guard and adapter tests (deciders, not frameworks)."""

from __future__ import annotations

import asyncio
import threading

from interlock import Action, CancelToken, Decision, Verdict

__all__ = ["SlowDecider"]


class SlowDecider:
    """A decider that waits (a stand-in for a slow remote) before allowing."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds

    def decide(
        self, action: Action, *, deadline: float | None, cancel: CancelToken | None
    ) -> Decision:
        threading.Event().wait(self.seconds)
        return Decision(verdict=Verdict.ALLOW, reason="slow allow")

    async def adecide(
        self, action: Action, *, deadline: float | None, cancel: CancelToken | None
    ) -> Decision:
        await asyncio.sleep(self.seconds)
        return Decision(verdict=Verdict.ALLOW, reason="slow allow")
