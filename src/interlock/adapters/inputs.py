"""The user's input and the system prompt, recorded as *trusted* inputs of the session.

A provenance rule (``session: {provenance: ...}``) refuses a call whose recipient, URL
or command came from untrusted content — unless a trusted input of the session holds
the same value: the user typed it. So each adapter that sees what the model is sent
hands the system prompt (instructions) and the user's messages to
:class:`TrustedInputs`, which records each as ``guard.record_input(text,
trusted=True)`` once per session. Never the model's own words, tool results (those
settle through the tool step) or a summary the framework wrote: the adapter picks.

Only a guard whose policy reads sessions records anything (:func:`records_inputs`, a
cheap attribute test); any other guard pays nothing. A failure to record is logged and
the stricter reading kept: the user's own values then read as untrusted.

Example::

    inputs = TrustedInputs()
    if records_inputs(guard):
        inputs.record(guard, [Input("system", prompt), Input("user", text, id=msg_id)])
"""

from __future__ import annotations

import logging
import threading
import weakref
from collections import OrderedDict
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final

if TYPE_CHECKING:
    from interlock.guard import Guard

__all__ = ["KEPT", "Input", "TrustedInputs", "inputs_of", "records_inputs"]

log = logging.getLogger("interlock")

#: How many recorded inputs an adapter remembers, not to record one twice.
KEPT: Final = 4096


@dataclass(frozen=True, slots=True)
class Input:
    """One trusted input: its role (``system``, ``user``), its text and, when the
    framework gives one, the message's id (else it is known by its role and text)."""

    role: str
    text: str
    id: str | None = None

    def key(self) -> str:
        return self.id or f"{self.role}:{self.text}"


def records_inputs(guard: Guard) -> bool:
    """Whether ``guard``'s policy reads sessions (else recording is a no-op: skip the
    work of finding the inputs)."""
    return guard._sessions is not None


class TrustedInputs:
    """Records trusted inputs once per session, remembering the last :data:`KEPT`
    (thread-safe: an adapter's model calls may run on several threads)."""

    __slots__ = ("_kept", "_lock", "_seen")

    def __init__(self, kept: int = KEPT) -> None:
        self._seen: OrderedDict[tuple[str, str | None, str], None] = OrderedDict()
        self._lock = threading.Lock()
        self._kept = kept

    def fresh(self, guard: Guard, found: Iterable[Input]) -> list[Input]:
        """Those of ``found`` not yet recorded in the guard's session (an async adapter
        hops to a thread to record only when there are some)."""
        tenant, session = guard.context.tenant, guard.context.session_id
        with self._lock:
            return [
                i for i in found if i.text.strip() and (tenant, session, i.key()) not in self._seen
            ]

    def record(self, guard: Guard, found: Iterable[Input]) -> int:
        """Record each of ``found`` not yet recorded in the guard's session; returns how
        many were recorded. Blank texts hold no value and are skipped. A failure is
        logged and forgotten (the next model call tries that input again)."""
        tenant, session = guard.context.tenant, guard.context.session_id
        recorded = 0
        for item in found:
            if not item.text.strip():
                continue
            key = (tenant, session, item.key())
            with self._lock:
                if key in self._seen:
                    continue
                self._seen[key] = None
                while len(self._seen) > self._kept:
                    self._seen.popitem(last=False)
            try:
                guard.record_input(item.text, trusted=True)
            except Exception as exc:
                with self._lock:
                    self._seen.pop(key, None)
                log.error("interlock: the user's message could not be recorded: %s", exc)
            else:
                recorded += 1
        return recorded


_BY_GUARD: weakref.WeakKeyDictionary[Guard, TrustedInputs] = weakref.WeakKeyDictionary()
_BY_GUARD_LOCK = threading.Lock()


def inputs_of(guard: Guard) -> TrustedInputs:
    """The trusted inputs ``guard``'s adapters recorded: one per guard, so that two
    adapters on one guard (a plugin and an agent's callbacks, the agents of a team)
    record the same message once."""
    with _BY_GUARD_LOCK:
        found = _BY_GUARD.get(guard)
        if found is None:
            found = _BY_GUARD[guard] = TrustedInputs()
        return found
