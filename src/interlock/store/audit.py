"""Group commit for the audit log.

Callers hand records to one writer thread per store; it takes everything waiting
(up to ``max_batch``), redacts and encodes it, and appends it in one transaction. With
durability ``process`` (the default) or ``power`` a caller gets its verdict only once
the transaction holding its record has committed, so a decision the caller saw is
never missing after a crash; many concurrent callers share one commit. With ``none``
callers do not wait (a crash may lose the newest records).

Example::

    from interlock.store import AuditWriter, open_store

    writer = AuditWriter(open_store("sqlite:///.interlock/interlock.db"))
    writer.write_record("acme", "note", {"text": "deploy started"})
    writer.close()
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import queue
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Final

from interlock.core.redaction import Redactor
from interlock.errors import AuditFailure, describe
from interlock.store.chain import encode_body
from interlock.store.sql import AuditEntry, SqlStore

if TYPE_CHECKING:
    from interlock.core.events import Event
    from interlock.policy.specs import Durability

__all__ = ["AuditWriter"]

log = logging.getLogger("interlock.audit")

_STOP: Final = object()
_RETRIES: Final = (0.01, 0.05, 0.2)


class _Ticket:
    """One record on its way to disk; ``wait`` blocks until it is durable."""

    __slots__ = ("callback", "error", "event", "seq")

    def __init__(self, callback: Callable[[], object] | None = None) -> None:
        self.event = threading.Event()
        self.callback = callback
        self.error: BaseException | None = None
        self.seq: int | None = None

    def settle(self, seq: int | None, error: BaseException | None) -> None:
        self.seq = seq
        self.error = error
        self.event.set()
        if self.callback is not None:
            with contextlib.suppress(RuntimeError):  # the waiting loop has closed
                self.callback()


# What travels to the writer: (tenant, kind, payload, ticket); payload is an Event or
# a plain record dict.
_Item = tuple[str, str, Any, _Ticket | None]


class AuditWriter:
    """The group-commit writer over one store. ``durability``: ``process`` (wait for
    the commit), ``power`` (wait for the commit and the disk) or ``none`` (do not
    wait). ``timeout`` bounds each wait (seconds); a record not durable by then is an
    :class:`~interlock.errors.AuditFailure`."""

    def __init__(
        self,
        store: SqlStore,
        *,
        durability: Durability = "process",
        redactor: Redactor | None = None,
        max_batch: int = 2048,
        timeout: float = 30.0,
    ) -> None:
        if durability not in ("none", "process", "power"):
            raise ValueError(f"durability must be none, process or power, not {durability!r}")
        self.store = store
        self.durability = durability
        self.redactor = redactor or Redactor()
        self.max_batch = max_batch
        self.timeout = timeout
        self._queue: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._closed = False
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._run, name="interlock-audit", daemon=True)
        self._thread.start()
        self.batches = 0  # commits made (for benchmarks and tests)

    @property
    def waits(self) -> bool:
        return self.durability != "none"

    # -- submitting ----------------------------------------------------------------------

    def write_event(self, tenant: str, event: Event) -> int | None:
        """Record a guard event; returns its chain position once durable (``None``
        when durability is ``none``). Raises AuditFailure when it cannot be made
        durable."""
        return self._write(tenant, event.kind, event)

    def write_record(self, tenant: str, kind: str, record: dict[str, Any]) -> int | None:
        """Record any other event (an approval decided, a budget settled)."""
        return self._write(tenant, kind, record)

    def write_event_nowait(self, tenant: str, event: Event) -> None:
        """Queue a guard event without waiting for it to be durable."""
        self._submit((tenant, event.kind, event, None))

    async def awrite_event(self, tenant: str, event: Event) -> int | None:
        """The async twin of :meth:`write_event`: awaits the commit without
        blocking the event loop."""
        if not self.waits:
            self._submit((tenant, event.kind, event, None))
            return None
        loop = asyncio.get_running_loop()
        done = asyncio.Event()
        ticket = _Ticket(lambda: loop.call_soon_threadsafe(done.set))
        self._submit((tenant, event.kind, event, ticket))
        try:
            await asyncio.wait_for(done.wait(), self.timeout)
        except TimeoutError:
            raise AuditFailure(
                f"the decision's record was not durable within {self.timeout:.1f} s"
            ) from None
        return _result(ticket)

    def _write(self, tenant: str, kind: str, payload: Any) -> int | None:
        if not self.waits:
            self._submit((tenant, kind, payload, None))
            return None
        ticket = _Ticket()
        self._submit((tenant, kind, payload, ticket))
        if not ticket.event.wait(self.timeout):
            raise AuditFailure(f"the record was not durable within {self.timeout:.1f} s")
        return _result(ticket)

    def _submit(self, item: _Item) -> None:
        with self._lock:  # nothing is queued behind the writer's stop
            if self._closed:
                raise AuditFailure("the audit writer is closed")
            self._queue.put(item)

    def flush(self, timeout: float = 30.0) -> bool:
        """Wait until everything submitted so far is written; False on timeout."""
        if not self._thread.is_alive():
            return True  # closed: everything was written before it stopped
        marker = threading.Event()
        self._queue.put(marker)
        return marker.wait(timeout)

    def close(self, timeout: float = 30.0) -> None:
        """Write what is queued, then stop the writer."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            self._queue.put(_STOP)  # after everything submitted before close
        self._thread.join(timeout)

    # -- the writer thread -------------------------------------------------------------

    def _run(self) -> None:
        while True:
            batch = [self._queue.get()]
            while len(batch) < self.max_batch:
                try:
                    batch.append(self._queue.get_nowait())
                except queue.Empty:
                    break
            items: list[_Item] = []
            markers: list[threading.Event] = []
            stop = False
            for entry in batch:
                if entry is _STOP:
                    stop = True
                elif isinstance(entry, threading.Event):
                    markers.append(entry)
                else:
                    items.append(entry)
            if items:
                self._commit(items)
            for marker in markers:
                marker.set()
            if stop:
                return

    def _commit(self, items: list[_Item]) -> None:
        entries = [self._entry(tenant, kind, payload) for tenant, kind, payload, _ in items]
        error: BaseException | None = None
        seqs: list[int] = []
        for delay in (*_RETRIES, None):
            try:
                seqs = self.store.append_audit(entries, durable=self.durability == "power")
                error = None
                break
            except Exception as exc:  # a locked or unreachable database: retry, then fail
                error = exc
                if delay is None:
                    break
                time.sleep(delay)
        self.batches += 1
        if error is not None:
            failure = AuditFailure(
                f"could not write {len(items)} audit record(s): {describe(error)}"
            )
            failure.__cause__ = error
            log.error("interlock: %s", failure)
            for *_, ticket in items:
                if ticket is not None:
                    ticket.settle(None, failure)
            return
        for (*_, ticket), seq in zip(items, seqs, strict=True):
            if ticket is not None:
                ticket.settle(seq, None)

    def _entry(self, tenant: str, kind: str, payload: Any) -> AuditEntry:
        ts_us = self.store.clock()
        try:
            if isinstance(payload, dict):
                record = self.redactor.redact_value(payload)
                assert isinstance(record, dict)
                record.setdefault("kind", kind)
            else:
                record = payload.to_record(self.redactor)
                ts_us = int(payload.ts * 1_000_000)
            agent = record.get("agent")
            decision = record.get("decision")
            decision_id = record.get("decision_id")
            body = encode_body(record)
        except Exception as exc:  # never lose the fact that something happened
            log.exception("interlock: an audit record could not be encoded")
            record = {"kind": kind, "error": f"unencodable record: {describe(exc)}"}
            agent = decision = decision_id = None
            body = encode_body(record)
        return (
            tenant,
            ts_us,
            kind,
            decision_id if isinstance(decision_id, str) else None,
            agent if isinstance(agent, str) else None,
            decision if isinstance(decision, str) else None,
            body,
        )


def _result(ticket: _Ticket) -> int | None:
    if ticket.error is not None:
        raise ticket.error
    return ticket.seq
