"""Group commit for the audit log.

Records are appended in batches, one transaction each: everything waiting (up to
``max_batch``) is redacted, encoded and committed together. With durability
``process`` (the default) or ``power`` a caller gets its verdict only once the
transaction holding its record has committed, so a decision the caller saw is never
missing after a crash; many concurrent callers share one commit. With ``none``
callers do not wait (a crash may lose the newest records).

One commit runs at a time. A waiting caller that finds no commit running makes it
itself, on its own thread (the leader: no hand-off to another thread and back, the
common case for one agent); callers arriving meanwhile join the next batch, which the
writer thread commits as soon as the running one ends (group commit). An async caller
leads on its event loop's thread only where the store can commit without waiting
(SQLite with its write lock free, durability ``process``: tens of microseconds, no
lock wait, no checkpoint, no disk sync); anywhere else its commit runs on another
thread, so the event loop never waits on the database.

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
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Final

from interlock.core.redaction import Redactor
from interlock.errors import AuditFailure, StoreError, describe
from interlock.store.chain import encode_body
from interlock.store.sql import AuditEntry, SqlStore

if TYPE_CHECKING:
    from interlock.core.events import Event
    from interlock.policy.specs import Durability
    from interlock.store.checkpointer import Checkpointer
    from interlock.store.checkpoints import CheckpointOption, CheckpointSettings

__all__ = ["AuditWriter"]

log = logging.getLogger("interlock.audit")

_RETRIES: Final = (0.01, 0.05, 0.2)
_NO_CHECKPOINTS: Final = (
    "no audit checkpoints are written: a cut tail or a deleted tenant cannot be "
    "detected. Set INTERLOCK_CHECKPOINTS (a file, stdout, log or an https:// URL) and "
    "INTERLOCK_CHECKPOINT_KEY_FILE (see docs/operations.md)"
)

# One record on its way: (tenant, kind, payload); payload is an Event or a plain dict.
_Item = tuple[str, str, Any]


class _Batch:
    """The records that will share one commit. Callers append to the open batch; the
    writer takes it whole and opens the next, so one wake-up serves every caller of a
    commit (no per-record event)."""

    __slots__ = ("callbacks", "done", "error", "items", "seqs")

    def __init__(self) -> None:
        self.items: list[_Item] = []
        self.done = threading.Event()
        self.seqs: list[int] = []
        self.error: BaseException | None = None
        self.callbacks: list[Callable[[], object]] = []

    def result(self, index: int) -> int:
        if self.error is not None:
            raise self.error
        return self.seqs[index]

    def settle(self, seqs: list[int], error: BaseException | None) -> None:
        self.seqs = seqs
        self.error = error
        self.done.set()
        for callback in self.callbacks:
            with contextlib.suppress(RuntimeError):  # the waiting loop has closed
                callback()


class AuditWriter:
    """The group-commit writer over one store. ``durability``: ``process`` (wait for
    the commit), ``power`` (wait for the commit and the disk) or ``none`` (do not
    wait — until ``max_pending`` records wait to be written: then callers wait too, so
    the backlog, and what a crash can lose, stays bounded). ``timeout`` bounds each
    wait (seconds); a record not durable by then is an
    :class:`~interlock.errors.AuditFailure`.

    Starting, it reads (or creates) the store's audit key — refusing one that others
    can read, warning when there is none — and, if it created the key, seals the
    unkeyed chains there (see :mod:`.audit_keys`); it signs checkpoints of the heads
    it writes, in the background and at :meth:`close` (``checkpoints``: settings,
    ``False`` for none, ``None`` for the store's — see :mod:`.checkpoints`)."""

    def __init__(
        self,
        store: SqlStore,
        *,
        durability: Durability = "process",
        redactor: Redactor | None = None,
        max_batch: int = 2048,
        max_pending: int = 20_000,
        timeout: float = 30.0,
        checkpoints: CheckpointOption = None,
    ) -> None:
        if durability not in ("none", "process", "power"):
            raise ValueError(f"durability must be none, process or power, not {durability!r}")
        self.store = store
        self._checkpointer = self._start_integrity(store, checkpoints)
        if self._checkpointer is not None:
            store.add_audit_listener(self._checkpointer.note)
        self.durability = durability
        self.redactor = redactor or Redactor()
        self.max_batch = max_batch
        self.max_pending = max_pending
        self.timeout = timeout
        self._lock = threading.Lock()
        self._work = threading.Condition(self._lock)
        self._open = _Batch()  # the batch callers append to
        self._writing: _Batch | None = None  # the batch being committed (by anyone)
        self._closed = False
        self._thread = threading.Thread(target=self._run, name="interlock-audit", daemon=True)
        self._thread.start()
        self.batches = 0  # commits made (for benchmarks and tests)

    @property
    def waits(self) -> bool:
        return self.durability != "none"

    # -- integrity: the key and the checkpoints --------------------------------------------

    def _start_integrity(self, store: SqlStore, option: CheckpointOption) -> Checkpointer | None:
        """Read or create the audit key (refusing a bad one now, not at the first
        check), seal unkeyed chains, and start the checkpointer."""
        from interlock.store.checkpointer import Checkpointer
        from interlock.store.checkpoints import settings_for

        store.audit_keys.for_writing()
        # Only where this writer just made the key: the log's unkeyed records are all
        # from before it. Sealing at every start would launder a chain rewritten as
        # SHA-256 records since (a downgrade) into one that verifies.
        if store.audit_keys.created_here:
            try:
                sealed = store.seal_unkeyed_chains()
            except StoreError as exc:  # unreachable now; `interlock audit seal` later
                log.warning("interlock: could not seal the unkeyed audit chains: %s", exc)
            else:
                if sealed:
                    log.info(
                        "interlock: sealed %d unkeyed audit chain(s) with the new key", len(sealed)
                    )
        settings = settings_for(store, option)
        self.checkpoint_settings: CheckpointSettings | None = settings
        if settings is None:
            # Not asked for, and not a SQLite store (an in-memory one, for tests, is fine
            # without): a shared database whose operator did not set checkpoints up.
            unasked = option is not False and store.checkpoints is not False
            if unasked and not str(store.url).startswith("sqlite:"):
                log.warning("interlock: %s", _NO_CHECKPOINTS)
            return None
        return Checkpointer(settings, clock=store.clock)

    def checkpoint(self) -> int:
        """Sign and write a checkpoint of every chain head written since the last one,
        now; the number of lines written (0 without checkpoints)."""
        return self._checkpointer.checkpoint() if self._checkpointer is not None else 0

    def integrity_report(self) -> list[str]:
        """What protects this writer's log, one line each, for a startup log; a line
        about a missing protection starts with ``WARNING:``."""
        keys = self.store.audit_keys.describe()
        warn = "WARNING: " if keys.startswith("NOT keyed") else ""
        lines = [f"{warn}audit log: {keys}"]
        settings = self.checkpoint_settings
        if settings is None:
            lines.append(f"WARNING: audit checkpoints: NONE — {_NO_CHECKPOINTS}")
        else:
            public = settings.public_key()
            lines.append(
                f"audit checkpoints: signed by {public.text} (key id {public.key_id}), every "
                f"{settings.every} records or {settings.interval:g} s, to "
                f"{', '.join(settings.destinations)}"
            )
        return lines

    # -- submitting ----------------------------------------------------------------------

    def write_event(self, tenant: str, event: Event) -> int | None:
        """Record a guard event; returns its chain position once durable (``None``
        when durability is ``none``). Raises AuditFailure when it cannot be made
        durable."""
        return self._write((tenant, event.kind, event))

    def write_record(self, tenant: str, kind: str, record: dict[str, Any]) -> int | None:
        """Record any other event (an approval decided, a budget settled)."""
        return self._write((tenant, kind, record))

    def write_event_nowait(self, tenant: str, event: Event) -> None:
        """Queue a guard event without waiting for it to be durable."""
        self._submit((tenant, event.kind, event))

    async def awrite_event(self, tenant: str, event: Event) -> int | None:
        """The async twin of :meth:`write_event`: awaits the commit without
        blocking the event loop."""
        if not self.waits:
            batch, index = self._submit((tenant, event.kind, event))
            if index >= self.max_pending:  # back-pressure, as in the sync path
                await asyncio.to_thread(batch.done.wait, self.timeout)
            return None
        loop = asyncio.get_running_loop()
        done = asyncio.Event()
        batch, index, lead = self._enqueue(
            (tenant, event.kind, event),
            lambda: loop.call_soon_threadsafe(done.set),
            lead=self.durability == "process",  # power syncs the disk: never on the loop
        )
        if lead:  # no commit was running
            if self._lead_inline(batch):
                return batch.result(index)
            await asyncio.to_thread(self._lead, batch)  # it would wait: a worker commits
        try:
            await asyncio.wait_for(done.wait(), self.timeout)
        except TimeoutError:
            raise AuditFailure(
                f"the decision's record was not durable within {self.timeout:.1f} s"
            ) from None
        return batch.result(index)

    def _write(self, item: _Item) -> int | None:
        if not self.waits:
            batch, index = self._submit(item)
            if index >= self.max_pending:  # back-pressure: the backlog stays bounded
                batch.done.wait(self.timeout)
            return None
        batch, index, lead = self._enqueue(item, None, lead=True)
        if lead:  # no commit was running: this thread makes it
            self._lead(batch)
        if not batch.done.wait(self.timeout):
            raise AuditFailure(f"the record was not durable within {self.timeout:.1f} s")
        return batch.result(index)

    def _submit(
        self, item: _Item, callback: Callable[[], object] | None = None
    ) -> tuple[_Batch, int]:
        """Add the record to the open batch, for the writer thread to commit."""
        batch, index, _ = self._enqueue(item, callback, lead=False)
        return batch, index

    def _enqueue(
        self, item: _Item, callback: Callable[[], object] | None, *, lead: bool
    ) -> tuple[_Batch, int, bool]:
        """Add the record to the open batch. With ``lead``, when no commit is running,
        the batch is taken for the caller to commit (the third value says so)."""
        with self._lock:  # nothing is added once the writer is told to stop
            if self._closed:
                raise AuditFailure("the audit writer is closed")
            batch = self._open
            batch.items.append(item)
            if callback is not None:
                batch.callbacks.append(callback)
            index = len(batch.items) - 1
            if lead and self._writing is None:
                self._open = _Batch()
                self._writing = batch
                return batch, index, True
            if index == 0:
                self._work.notify()
            return batch, index, False

    def _lead(self, batch: _Batch) -> None:
        """Commit the batch this thread took, then hand over to the writer thread."""
        try:
            self._commit(batch)
        finally:
            self._led(batch)

    def _lead_inline(self, batch: _Batch) -> bool:
        """Commit the batch on this thread only if the store can without waiting
        (:meth:`SqlStore.try_append_audit`); False leaves the batch taken and unsettled,
        for :meth:`_lead` to commit elsewhere."""
        if len(batch.items) > self.max_batch:
            return False
        try:
            try:
                seqs = self.store.try_append_audit([self._entry(*item) for item in batch.items])
            except Exception as exc:  # the worker's commit retries, and reports, as usual
                log.debug("interlock: inline audit commit failed, handing it over: %s", exc)
                return False
            if seqs is None:
                return False
            self.batches += 1
            batch.settle(seqs, None)
        except BaseException:
            self._led(batch)
            raise
        self._led(batch)
        return True

    def _led(self, batch: _Batch) -> None:
        """After a caller's commit: a batch left unsettled (the commit was interrupted:
        KeyboardInterrupt, ...) fails closed; the writer thread takes what arrived."""
        if not batch.done.is_set():
            batch.settle([], AuditFailure("the audit commit was interrupted"))
        with self._lock:
            self._writing = None
            if self._open.items or self._closed:
                self._work.notify()

    def flush(self, timeout: float = 30.0) -> bool:
        """Wait until everything submitted so far is written; False on timeout."""
        with self._lock:
            batch = self._open if self._open.items else self._writing
        return True if batch is None else batch.done.wait(timeout)

    def close(self, timeout: float = 30.0) -> None:
        """Write what is queued, then stop the writer; sign the last checkpoints."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            self._work.notify()
        self._thread.join(timeout)
        if self._checkpointer is not None:
            self.store.remove_audit_listener(self._checkpointer.note)
            self._checkpointer.close(timeout)

    # -- the writer thread -------------------------------------------------------------

    def _run(self) -> None:
        while True:
            with self._lock:
                # one commit at a time: a leading caller's runs to its end first
                while self._writing is not None or (not self._open.items and not self._closed):
                    self._work.wait()
                batch = self._open
                if not batch.items:  # closed, and everything is written
                    return
                self._open = _Batch()
                self._writing = batch
            self._commit(batch)
            with self._lock:
                self._writing = None

    def _commit(self, batch: _Batch) -> None:
        for start in range(0, len(batch.items), self.max_batch):
            chunk = batch.items[start : start + self.max_batch]
            seqs, error = self._append([self._entry(*item) for item in chunk])
            if error is not None:
                failure = AuditFailure(
                    f"could not write {len(batch.items)} audit record(s): {describe(error)}"
                )
                failure.__cause__ = error
                log.error("interlock: %s", failure)
                batch.settle([], failure)
                return
            batch.seqs.extend(seqs)
        batch.settle(batch.seqs, None)

    def _append(self, entries: list[AuditEntry]) -> tuple[list[int], BaseException | None]:
        error: BaseException | None = None
        for delay in (*_RETRIES, None):
            try:
                seqs = self.store.append_audit(entries, durable=self.durability == "power")
            except Exception as exc:  # a locked or unreachable database: retry, then fail
                error = exc
                if delay is not None:
                    time.sleep(delay)
                continue
            self.batches += 1
            return seqs, None
        return [], error

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
