"""The background thread that signs checkpoints of the chain heads an audit writer
wrote (see :mod:`.checkpoints` for what they are).

A commit tells the checkpointer the new heads (:meth:`Checkpointer.note`: a dict
update under a lock — all a check pays); the thread signs a round once ``every``
records were written, or ``interval`` seconds after the previous round when something
was written, and :meth:`Checkpointer.close` signs the last round and the stream's
``end`` line at a clean shutdown. A checkpoint attests a head this process committed
itself — never one read back from the database, which a writer there could have cut
or rewritten meanwhile.

Example::

    checkpointer = Checkpointer(settings, clock=store.clock)
    store.add_audit_listener(checkpointer.note)
    store.append_audit(entries)
    checkpointer.close()
"""

from __future__ import annotations

import logging
import secrets
import threading
import time
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, Final

from interlock.store.checkpoint_sinks import CheckpointSink, open_sink
from interlock.store.checkpoints import LINE_TYPE, CheckpointSettings, iso, line_digest, sign_line
from interlock.store.records import ChainHead

if TYPE_CHECKING:
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

__all__ = ["Checkpointer"]

log = logging.getLogger("interlock.audit")

#: lines a failing destination keeps to send again (the oldest are dropped beyond)
MAX_BACKLOG: Final = 10_000


class Checkpointer:
    """Signs and writes checkpoints of the heads it is told about, in one stream."""

    def __init__(
        self,
        settings: CheckpointSettings,
        *,
        clock: Callable[[], int],
        signing_key: Ed25519PrivateKey | None = None,
    ) -> None:
        self.settings = settings
        self.clock = clock
        self._key = signing_key if signing_key is not None else settings.signing_key()
        self._sinks: list[CheckpointSink] = [open_sink(d) for d in settings.destinations]
        self._backlog: dict[str, list[str]] = {sink.name: [] for sink in self._sinks}
        self.stream = secrets.token_hex(8)
        self._n = 0
        self._prev: str | None = None
        # note() takes the lock itself: a Condition's own `with` is two Python calls
        # more on every commit's path.
        self._lock = threading.Lock()
        self._cond = threading.Condition(self._lock)
        self._pending: dict[str, ChainHead] = {}
        self._noted: dict[str, int] = {}  # newest seq noted per tenant
        self._records = 0  # chain records since the last round
        self._closing = False
        self._round_lock = threading.Lock()  # one round at a time, in stream order
        self.rounds = 0
        self._thread = threading.Thread(target=self._run, name="interlock-checkpoints", daemon=True)
        self._thread.start()

    # -- on the commit's path -----------------------------------------------------------

    def note(self, heads: Mapping[str, ChainHead]) -> None:
        """A commit wrote these heads. Cheap: the signing happens elsewhere."""
        with self._lock:
            for tenant, head in heads.items():
                noted = self._noted.get(tenant, 0)
                if head.seq <= noted:
                    continue
                self._records += head.seq - noted
                self._noted[tenant] = head.seq
                self._pending[tenant] = head
            if self._records >= self.settings.every:
                self._cond.notify()

    # -- rounds ------------------------------------------------------------------------

    def _run(self) -> None:
        while True:
            with self._cond:
                deadline = time.monotonic() + self.settings.interval
                while not self._closing and self._records < self.settings.every:
                    remaining = deadline - time.monotonic()
                    if remaining <= 0:
                        break
                    self._cond.wait(remaining)
                if self._closing:
                    return
            try:
                self.checkpoint()
            except Exception:  # never let the thread die: the next round tries again
                log.exception("interlock: an audit checkpoint round failed")

    def checkpoint(self, *, final: bool = False) -> int:
        """Sign and write a checkpoint of every head noted since the last round (and,
        if ``final``, the stream's end); the number of lines written."""
        with self._round_lock:
            with self._cond:
                heads = sorted(self._pending.values(), key=lambda head: head.tenant)
                self._pending = {}
                self._records = 0
            lines = [self._signed(self._head_fields(head)) for head in heads]
            if final:
                lines.append(self._signed({"kind": "end"}))
            if lines:
                self._deliver(lines)
                self.rounds += 1
            return len(lines)

    def _head_fields(self, head: ChainHead) -> dict[str, Any]:
        return {
            "kind": "head",
            "tenant": head.tenant,
            "seq": head.seq,
            "count": head.seq,  # records in the chain up to and including seq
            "head": head.hash,
            "key_id": head.key_id,
            "head_ts_us": head.ts_us,
        }

    def _signed(self, fields: dict[str, Any]) -> str:
        self._n += 1
        now = self.clock()
        line = sign_line(
            {
                "type": LINE_TYPE,
                "v": 1,
                "stream": self.stream,
                "n": self._n,
                "prev": self._prev,
                "ts_us": now,
                "ts": iso(now),
                **fields,
            },
            self._key,
        )
        self._prev = line_digest(line)
        return _dumps(line)

    def _deliver(self, lines: list[str]) -> None:
        for sink in self._sinks:
            waiting = self._backlog[sink.name] + lines
            try:
                sink.write(waiting)
            except Exception as exc:
                kept = waiting[-MAX_BACKLOG:]
                self._backlog[sink.name] = kept
                log.warning(
                    "interlock: could not write %d audit checkpoint line(s) to %s (%s); "
                    "kept %d to send with the next round",
                    len(waiting),
                    sink.name,
                    exc,
                    len(kept),
                )
            else:
                self._backlog[sink.name] = []

    def close(self, timeout: float = 30.0) -> None:
        """Stop the thread, sign the last round and the stream's end, close the sinks."""
        with self._cond:
            if self._closing:
                return
            self._closing = True
            self._cond.notify()
        self._thread.join(timeout)
        try:
            self.checkpoint(final=True)
        finally:
            for sink in self._sinks:
                sink.close()


def _dumps(line: dict[str, Any]) -> str:
    import json

    return json.dumps(line, separators=(",", ":"), ensure_ascii=True)
