"""Sessions at a shared-server proxy (``--server``): the server keeps each session's
history and judges it; the proxy tells it what each request brings in (docs/llm-proxy.md,
"Sessions").

The proxy answers every request with a new decider on the client's own key, so what
it reports names its session and decision outright: a conversation's trusted inputs
(``POST /v1/sessions/input``), the result of a call this process let through (``POST
/v1/sessions/outcome``: that call's step settled *executed*, with the result's
fingerprints; the result itself never leaves the proxy), and any other tool result as
an untrusted input with the call it answers, so that the server adds the labels its
own policy gives such a call.

Whether the server's policy reads sessions is learned from its answers, per key: an
input it did not keep (``recorded: false``) means it reads none, and the proxy then
reports nothing more for that key for :data:`RECHECK_AFTER` seconds (a policy reloaded
with session rules is seen within that time); a server that does read them is told
everything.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final

from interlock.core.action import Context
from interlock.session.fingerprints import of_data

from .sessions import _INLINE_BYTES, _size

if TYPE_CHECKING:
    from interlock.core.decision import Decision
    from interlock.remote import RemoteDecider

__all__ = ["RECHECK_AFTER", "Learned", "ServerSessions"]

#: Seconds the proxy reports nothing for a key after the server kept none of its inputs.
RECHECK_AFTER: Final = 30.0


@dataclass(slots=True)
class Learned:
    """What the server's answers said of one key: that its policy reads no sessions,
    until ``quiet_until`` (a monotonic time)."""

    quiet_until: float = 0.0

    def active(self) -> bool:
        return time.monotonic() >= self.quiet_until

    def heard(self, kept: bool) -> None:
        self.quiet_until = 0.0 if kept else time.monotonic() + RECHECK_AFTER


class ServerSessions:
    """One request's session reports, on the client's own key."""

    __slots__ = ("decider", "learned")

    def __init__(self, decider: RemoteDecider, learned: Learned) -> None:
        self.decider = decider
        self.learned = learned

    def active(self) -> bool:
        """Whether to name this request's session and report what it brings in."""
        return self.learned.active()

    async def record_input(
        self,
        text: object,
        context: Context,
        *,
        trusted: bool,
        labels: tuple[str, ...] = (),
        tool: tuple[str, object] | None = None,
    ) -> None:
        """Report outside data entering the session (raises RemoteError when the
        server cannot be told: the request is then refused)."""
        assert context.session_id is not None
        seq = await self.decider.areport_input(
            context.session_id, await _fingerprints(text), trusted=trusted, labels=labels, tool=tool
        )
        self.learned.heard(seq is not None)

    async def settle(self, context: Context, decision: Decision, content: object) -> bool:
        """Settle the step of a call this proxy let through: it ran, and returned
        ``content`` (its fingerprints sent). False when the server holds no such step
        (its history dropped it): the caller records the result as untrusted then."""
        assert context.session_id is not None and decision.decision_id is not None
        return await self.decider.asettle_step(
            context.session_id,
            decision.decision_id,
            executed=True,
            fingerprints=await _fingerprints(content),
        )


async def _fingerprints(content: object) -> frozenset[int]:
    """``of_data(content)``; on a worker thread past what the standalone proxy
    fingerprints on the loop."""
    if _size(content) <= _INLINE_BYTES:
        return of_data(content)
    return await asyncio.to_thread(of_data, content)
