"""What the two streamed tool-call gates share: the judge (the non-streamed path's
own :func:`~.tools.refusal_for_call`), the bound on what one stream may hold, the
text of a call refused before it could be judged, and SSE frames written anew."""

from __future__ import annotations

from typing import Any, Final, final

import anyio
import orjson

from interlock.core.action import Context
from interlock.guard import Guard

from .tools import refusal_for_call

__all__ = ["CALL_OVERHEAD", "HeldBytes", "Judge", "broken_note", "data_frame", "rewritten_frame"]

#: bytes counted against the cap for each call held, whatever its size (its state)
CALL_OVERHEAD: Final = 64


@final
class Judge:
    """Judges one complete tool call with the key's context."""

    __slots__ = ("context", "guard")

    def __init__(self, guard: Guard, context: Context) -> None:
        self.guard = guard
        self.context = context

    async def refusal(self, name: object, arguments: object, call_id: object) -> str | None:
        """``None``: release the call; else the text that replaces it. Shielded: a
        client that leaves mid-judgement does not cut the decision (and its budget
        commit) in half."""
        with anyio.CancelScope(shield=True):
            note = await refusal_for_call(self.guard, name, arguments, call_id, self.context)
        return note


@final
class HeldBytes:
    """The bytes one stream holds back (names and arguments of the calls not yet
    judged), against a cap: a call that would pass it is refused, not released."""

    __slots__ = ("cap", "held")

    def __init__(self, cap: int) -> None:
        self.cap = cap
        self.held = 0

    def take(self, size: int) -> bool:
        if self.held + size > self.cap:
            return False
        self.held += size
        return True

    def give(self, size: int) -> None:
        self.held -= size

    def too_large(self) -> str:
        return f"it is larger than the {self.cap} bytes the proxy holds for a stream"


def broken_note(name: object, reason: str, call_id: object) -> str:
    """The text of a call refused before it could be judged (malformed, cut, too
    large): it never reaches the agent as a call."""
    label = f"the tool call {name!r}" if isinstance(name, str) and name else "a tool call"
    return f"Interlock refused {label}: {reason} [tool call {call_id}]"


def data_frame(data: dict[str, Any], event: str | None = None) -> bytes:
    """One SSE frame written by the proxy."""
    head = b"event: " + event.encode() + b"\n" if event else b""
    return head + b"data: " + orjson.dumps(data) + b"\n\n"


def rewritten_frame(event: list[str], data: dict[str, Any]) -> bytes:
    """``event`` with its data replaced by ``data`` (its other fields kept)."""
    kept = "".join(line + "\n" for line in event if not line.startswith("data"))
    return kept.encode() + b"data: " + orjson.dumps(data) + b"\n\n"
