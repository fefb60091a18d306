"""Events: one record per decision, and the sinks that keep them.

An :class:`Event` is built on the hot path from references only; redaction and JSON
encoding happen when a sink writes it, off the hot path (the JSONL sink writes from a
background thread). Nothing unredacted is ever written. An event carries the redactor
of the guard that made it — the built-in secret shapes and the policy's
``redaction.patterns`` — so every sink, a sink of the user's own included, redacts
with the policy's patterns through :meth:`Event.to_record`.

Example::

    from interlock import Guard
    from interlock.core.events import JsonlSink

    guard = Guard.from_file("interlock.yaml", sink=JsonlSink("events.jsonl"))
"""

from __future__ import annotations

import functools
import json
import logging
import os
import queue
import threading
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple, Protocol, runtime_checkable

from interlock.core.redaction import Redactor
from interlock.errors import describe

if TYPE_CHECKING:
    from interlock.core.action import Action
    from interlock.core.decision import Decision

__all__ = ["Event", "EventSink", "JsonlSink", "MemorySink", "read_jsonl"]

log = logging.getLogger("interlock.events")

_DEFAULT_REDACTOR = Redactor()


class Event(NamedTuple):
    """One thing that happened at the decision point.

    ``kind`` is ``decision`` for a verdict and ``pass_through`` for a call a mapper
    declared not ours to judge (no verdict is invented for it). The phases around an
    allowed call — ``tool_invoke``, ``tool_result``, ``llm_input``, ``llm_output`` —
    carry their fields in ``detail`` (see :mod:`interlock.core.phases`).
    """

    kind: str
    ts: float
    action: Action | None
    decision: Decision | None
    latency_ns: int
    detail: Mapping[str, Any] | None = None  # a phase event's fields (see core.phases)
    redactor: Redactor | None = None  # the guard's: built-in shapes + the policy's patterns

    def to_record(self, redactor: Redactor | None = None) -> dict[str, Any]:
        """The redacted, JSON-ready form of this event: redacted by the event's own
        redactor (the guard's) and, when given, ``redactor`` too."""
        redactor = _both(self.redactor, redactor)
        record: dict[str, Any] = {
            "kind": self.kind,
            "ts": self.ts,
            "latency_us": round(self.latency_ns / 1000, 3),
        }
        action = self.action
        if action is not None:
            context = action.context
            record["tenant"] = context.tenant
            record["agent"] = context.agent
            record["session_id"] = context.session_id
            if context.call_id is not None:  # the framework's id, for correlation
                record["call_id"] = context.call_id
            record["action"] = redactor.redact_value(action.summary())
        decision = self.decision
        if decision is not None:
            record["decision_id"] = decision.decision_id
            record["decision"] = decision.verdict.value
            record["reason"] = redactor.redact(decision.reason)
            record["rule_ids"] = list(decision.rule_ids)
            if decision.cause is not None:
                record["cause"] = redactor.redact(describe(decision.cause))
            if decision.approval is not None:
                record["approval"] = {"id": decision.approval.id, "url": decision.approval.url}
            if decision.reservation is not None:  # its settlement's record names it too
                record["reservation_id"] = decision.reservation.id
            if decision.grant is not None:  # its issue's own record is in the chain too
                record["grant_id"] = decision.grant.claims.grant_id
            if decision.shadow is not None:
                record["shadow"] = {
                    "decision": decision.shadow.verdict.value,
                    "reason": redactor.redact(decision.shadow.reason),
                    "rule_ids": list(decision.shadow.rule_ids),
                }
            if decision.fail_open:
                record["fail_open"] = True
        if self.detail is not None:
            detail = redactor.redact_value(dict(self.detail))
            if isinstance(detail, dict):
                record.update(detail)
        return record


def new_event(
    kind: str,
    action: Action | None,
    decision: Decision | None,
    latency_ns: int,
    redactor: Redactor | None = None,
) -> Event:
    return Event(kind, time.time(), action, decision, latency_ns, None, redactor)


def _both(own: Redactor | None, given: Redactor | None) -> Redactor:
    """One redactor with the patterns of both (either may be missing)."""
    if given is None or given is own:
        return own or _DEFAULT_REDACTOR
    if own is None or not own.extra_patterns or own.extra_patterns == given.extra_patterns:
        return given
    if not given.extra_patterns:
        return own
    return _union(own, given)


@functools.lru_cache(maxsize=64)
def _union(own: Redactor, given: Redactor) -> Redactor:
    patterns = dict.fromkeys((*own.extra_patterns, *given.extra_patterns))
    return Redactor(extra_patterns=tuple(patterns))


@runtime_checkable
class EventSink(Protocol):
    """Where events go. ``emit`` must be cheap and must not raise."""

    def emit(self, event: Event) -> None: ...


class MemorySink:
    """Keeps events in a list (tests, demos, the CLI)."""

    def __init__(self) -> None:
        self.events: list[Event] = []
        self._lock = threading.Lock()

    def emit(self, event: Event) -> None:
        with self._lock:
            self.events.append(event)

    def records(self, redactor: Redactor | None = None) -> list[dict[str, Any]]:
        with self._lock:
            events = list(self.events)
        return [event.to_record(redactor) for event in events]


_STOP = object()


class JsonlSink:
    """Appends redacted events to a JSON Lines file from a background thread.

    Each event is redacted by the redactor it carries (its guard's: the policy's
    patterns included) and by ``redactor`` when one is given. ``flush()`` blocks until
    everything emitted so far is written; ``close()`` flushes and stops the writer.
    Durable, hash-chained storage is the store's job; this sink is for local runs and
    the CLI.
    """

    def __init__(self, path: str | os.PathLike[str], *, redactor: Redactor | None = None) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._redactor = redactor
        self._queue: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._closed = False
        self._thread = threading.Thread(target=self._run, name="interlock-jsonl-sink", daemon=True)
        self._thread.start()

    def emit(self, event: Event) -> None:
        if not self._closed:
            self._queue.put(event)

    def flush(self, timeout: float | None = 10.0) -> None:
        done = threading.Event()
        self._queue.put(done)
        done.wait(timeout)

    def close(self) -> None:
        if self._closed:
            return
        self.flush()
        self._closed = True
        self._queue.put(_STOP)
        self._thread.join(timeout=10)

    def __enter__(self) -> JsonlSink:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _run(self) -> None:
        with self.path.open("a", encoding="utf-8") as out:
            while True:
                item = self._queue.get()
                batch = [item]
                while True:  # drain what is waiting: one write per burst
                    try:
                        batch.append(self._queue.get_nowait())
                    except queue.Empty:
                        break
                stop = False
                for entry in batch:
                    if entry is _STOP:
                        stop = True
                    elif isinstance(entry, threading.Event):
                        out.flush()
                        entry.set()
                    else:
                        self._write(out, entry)
                out.flush()
                if stop:
                    return

    def _write(self, out: Any, event: Event) -> None:
        try:
            line = json.dumps(event.to_record(self._redactor), default=_json_default)
        except Exception:  # an event must never kill the writer
            log.exception("interlock: could not encode an event; it was not written")
            return
        out.write(line + "\n")


def _json_default(value: Any) -> Any:
    if isinstance(value, (set, frozenset, tuple)):
        return list(value)
    return _DEFAULT_REDACTOR.cut(repr(value), 200)  # redacted before it is cut


def read_jsonl(path: str | os.PathLike[str]) -> Iterator[dict[str, Any]]:
    """The records of a JSONL event file, oldest first."""
    with Path(path).open(encoding="utf-8") as lines:
        for raw in lines:
            text = raw.strip()
            if text:
                yield json.loads(text)
