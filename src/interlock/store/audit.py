"""Group commit for the audit log.

Records are appended in batches, one transaction each: everything waiting (up to
``max_batch``) is redacted, encoded and committed together, by the thread that
commits — not by each caller before it queues its record: under many threads that
costs the commit more (its every database call must win the GIL back from callers
encoding meanwhile) than it saves (ADR 0011). With durability
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
thread, so the event loop never waits on the database. An async leader first lets its
loop run the tasks it holds once, so that the records of the other requests read in
the same turn (a server under load) join its commit rather than each making its own; a
commit made on the loop's thread resolves their waits there and then, and only one
made on another thread wakes the loop through its self-pipe.

A caller waits no longer than its check's deadline (:mod:`interlock.core.deadline`). A
record whose caller stopped waiting is *not* withdrawn: it is committed when the store
answers, exactly once — a commit cut off with its outcome unknown is looked up before
it is tried again (:meth:`~interlock.store.sql_audit.AuditStore.audit_landed`), and a
leader whose deadline passed hands its batch to the writer thread. What the record
says is what its caller was told: the caller gives a *late* form of it (its decision,
undetermined), which replaces the record if it has not been sent yet, or else follows
it as a second record of the same decision, marked ``supersedes``.

Example::

    from interlock.store import AuditWriter, open_store

    writer = AuditWriter(open_store("sqlite:///.interlock/interlock.db"))
    writer.write_record("acme", "note", {"text": "deploy started"})
    writer.close()
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import logging
import threading
import time
from _thread import allocate_lock as _allocate_lock
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Final

from interlock.core.deadline import deadline_scope, time_left
from interlock.core.redaction import Redactor
from interlock.errors import AuditFailure, StoreError, describe
from interlock.store.chain import encode_body
from interlock.store.sql import AuditEntry, SqlStore
from interlock.store.sql_audit import AuditJoin

if TYPE_CHECKING:
    from interlock.core.events import Event
    from interlock.policy.specs import Durability
    from interlock.store.checkpointer import Checkpointer
    from interlock.store.checkpoints import CheckpointOption, CheckpointSettings

__all__ = ["AuditWriter"]

log = logging.getLogger("interlock.audit")

_RETRIES: Final = (0.01, 0.05, 0.2)
#: Records of a turn (durability ``none``) at most which the writer thread commits
#: rather than the loop: one request's (its decision, and the record that may follow
#: it). A loop that served one request in its turn is not loaded; committed there, after
#: the answer was sent, the commit held up the client's next request (measured: the
#: sequential p50 at ``none`` was that at ``process``); the writer thread commits it on
#: another core meanwhile, the GIL given up in each SQLite call.
_LONE: Final = 2
_NO_CHECKPOINTS: Final = (
    "no audit checkpoints are written: a cut tail or a deleted tenant cannot be "
    "detected. Set INTERLOCK_CHECKPOINTS (a file, stdout, log or an https:// URL) and "
    "INTERLOCK_CHECKPOINT_KEY_FILE (see docs/operations.md)"
)

# One record on its way: (tenant, kind, payload); payload is an Event or a plain dict.
_Item = tuple[str, str, Any]

#: What a record should say instead when its caller stops waiting for it: given the
#: failure the caller will see, the event the caller is told (its decision, undetermined);
#: ``None`` when the record already says that.
Late = Callable[[AuditFailure], "Event | None"]


class _Batch:
    """The records that will share one commit. Callers append to the open batch; the
    writer takes it whole and opens the next, so one commit's end serves every caller
    of it.

    A caller that waits parks on a lock of its own, which the batch's settlement
    releases (what ``threading.Condition`` does inside, without building a condition
    and an event per batch — ≈ 22k instructions each, more than the batch's SQL on
    the lone caller's path, who commits its own batch and never waits). ``settled``
    and the parked locks are guarded by the writer's lock, so a caller parks before
    the settlement or sees it."""

    __slots__ = (
        "callbacks",
        "chunks",
        "committed",
        "error",
        "items",
        "joins",
        "last_error",
        "lock",
        "parked",
        "seqs",
        "settled",
        "unsure",
    )

    def __init__(self, lock: threading.Lock) -> None:
        self.items: list[_Item] = []
        #: item index -> a write riding the batch's transaction (a session step)
        self.joins: dict[int, AuditJoin] | None = None
        self.lock = lock  # the writer's
        self.settled = False
        self.parked: list[threading.Lock] = []  # held; released at the settlement
        self.seqs: list[int] = []
        self.error: BaseException | None = None
        self.callbacks: list[Callable[[], object]] = []
        # Built once, on the first attempt, so a retry appends (or looks up) exactly the
        # entries the failed attempt tried: same timestamps, same bodies.
        self.chunks: list[list[AuditEntry]] | None = None
        self.committed = 0  # chunks durable so far
        self.unsure = False  # the last attempt failed: it may have committed anyway
        self.last_error: BaseException | None = None

    def result(self, index: int) -> int:
        if self.error is not None:
            raise self.error
        return self.seqs[index]

    def park(self) -> threading.Lock | None:
        """A held lock the settlement will release — ``None`` if settled already.
        The caller holds the writer's lock."""
        if self.settled:
            return None
        parked = _allocate_lock()
        parked.acquire()
        self.parked.append(parked)
        return parked

    def wait(self, timeout: float) -> bool:
        """Wait until the batch is settled, ``timeout`` seconds at most; True once it
        is."""
        if self.settled:
            return True
        with self.lock:
            parked = self.park()
        return parked is None or _waited(parked, timeout)

    def settle(self, seqs: list[int], error: BaseException | None) -> None:
        self.seqs = seqs
        self.error = error
        with self.lock:
            self.settled = True
            parked, self.parked = self.parked, []
        for waiter in parked:
            waiter.release()
        for callback in self.callbacks:
            with contextlib.suppress(RuntimeError):  # the waiting loop has closed
                callback()


def _resolve(done: asyncio.Future[bool]) -> None:
    if not done.done():  # (cancelled: its waiter gave up)
        done.set_result(True)


def _expire(done: asyncio.Future[bool]) -> None:
    if not done.done():  # (settled just now: the settlement wins)
        done.set_result(False)


def _waited(parked: threading.Lock, timeout: float) -> bool:
    return parked.acquire(True, max(0.0, timeout))


def _add_join(batch: _Batch, index: int, join: AuditJoin) -> None:
    if batch.joins is None:
        batch.joins = {}
    batch.joins[index] = join


def _joins_of(
    joins: dict[int, AuditJoin] | None, start: int, size: int
) -> dict[int, AuditJoin] | None:
    """The joins of the chunk of items ``start`` .. ``start + size``, by index in it."""
    if not joins:
        return None
    mine = {i - start: j for i, j in joins.items() if start <= i < start + size}
    return mine or None


def _replaced(chunk: list[AuditEntry], start: int, joins: dict[int, AuditJoin] | None) -> None:
    """After an attempt: the entries of joins that failed (and are failed for good:
    :class:`~interlock.guard_sessions.JoinedStep`) replaced in ``chunk`` — so that a
    later attempt, or the look-up of one whose outcome is unknown, sees what was
    tried."""
    if not joins:
        return
    for index, join in joins.items():
        instead = getattr(join, "instead", None)
        if instead is not None and start <= index < start + len(chunk):
            chunk[index - start] = instead


class AuditWriter:
    """The group-commit writer over one store. ``durability``: ``process`` (wait for
    the commit), ``power`` (wait for the commit and the disk) or ``none`` (do not
    wait — until ``max_pending`` records wait to be written: then callers wait too, so
    the backlog, and what a crash can lose, stays bounded). ``timeout`` bounds each
    wait (seconds; a check's deadline, when nearer, bounds it instead); a record not
    durable by then is an :class:`~interlock.errors.AuditFailure` for its caller, and
    stays queued.

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
        self._open = _Batch(self._lock)  # the batch callers append to
        self._writing: _Batch | None = None  # the batch being committed (by anyone)
        self._handed: _Batch | None = None  # a leader's batch, left for the writer thread
        self._closed = False
        self._thread = threading.Thread(target=self._run, name="interlock-audit", daemon=True)
        self._thread.start()
        self.batches = 0  # commits made (for benchmarks and tests)
        self.records = 0  # records those commits appended

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

    def write_event(
        self,
        tenant: str,
        event: Event,
        *,
        late: Late | None = None,
        then: tuple[str, dict[str, Any]] | None = None,
        join: AuditJoin | None = None,
    ) -> int | None:
        """Record a guard event; returns its chain position once durable (``None``
        when durability is ``none``). Raises AuditFailure when it cannot be made
        durable in time; ``late`` then gives what the record says instead (see the
        module's docstring). ``then``: a record (kind, record) that follows it in the
        same batch — the same commit (an allowed call's ``tool_invoke``). ``join``: a
        write in the same transaction (a session's step, :data:`AuditJoin`); only
        where the writer waits (a writer that does not would let the caller on before
        it is written)."""
        extra = None if then is None else (tenant, then[0], then[1])
        return self._write((tenant, event.kind, event), late, extra, join)

    def write_record(self, tenant: str, kind: str, record: dict[str, Any]) -> int | None:
        """Record any other event (an approval decided, a budget settled)."""
        return self._write((tenant, kind, record), None)

    def write_record_nowait(self, tenant: str, kind: str, record: dict[str, Any]) -> None:
        """Queue any other record without waiting for it to be durable (an outcome:
        group-committed after the call, off its path)."""
        self._submit((tenant, kind, record))

    def encode(self, tenant: str, event: Event) -> AuditEntry:
        """``event``'s record as this writer appends it (redacted, encoded), for a
        caller that appends it in a transaction of its own — a budgeted decision's, in
        its reservation's (:mod:`interlock.deciders.joined`)."""
        return self._entry(tenant, event.kind, event)

    def encode_record(self, tenant: str, kind: str, record: dict[str, Any]) -> AuditEntry:
        """:meth:`write_record`'s record as this writer appends it, for a caller that
        appends it in a transaction of its own — a settlement's, in its commit's."""
        return self._entry(tenant, kind, record)

    def write_event_nowait(self, tenant: str, event: Event) -> None:
        """Queue a guard event without waiting for it to be durable."""
        self._submit((tenant, event.kind, event))

    async def awrite_event(
        self,
        tenant: str,
        event: Event,
        *,
        late: Late | None = None,
        then: tuple[str, dict[str, Any]] | None = None,
        join: AuditJoin | None = None,
    ) -> int | None:
        """The async twin of :meth:`write_event`: awaits the commit without
        blocking the event loop."""
        item = (tenant, event.kind, event)
        extra = None if then is None else (tenant, then[0], then[1])
        if join is not None and not self.waits:
            raise ValueError("a joined write needs a writer that waits for its records")
        if not self.waits:
            batch, index = self._queue_on_loop(item, extra)
            if index >= self.max_pending:  # back-pressure, as in the sync path
                await asyncio.to_thread(batch.wait, self._wait_bound())
            return None
        batch, index, lead = self._enqueue(
            item,
            lead=self.durability == "process",  # power syncs the disk: never on the loop
            gather=True,
            extra=extra,
            join=join,
        )
        if lead:  # no commit was running
            await self._gather(batch)
            if self._lead_inline(batch):
                return batch.result(index)
            # A worker commits, bounded by this caller's deadline like a sync leader (a
            # failed attempt goes to the writer thread); this task waits no longer.
            try:
                asyncio.get_running_loop().run_in_executor(
                    None, contextvars.copy_context().run, self._lead, batch
                )
            except RuntimeError:  # the loop's executor is shutting down: the writer commits
                self._hand_over(batch)
        if not batch.settled:
            await self._await_settled(batch, index, late)
        return batch.result(index)

    async def _await_settled(self, batch: _Batch, index: int, late: Late | None) -> None:
        """Wait, without blocking the loop, until ``batch`` is settled (or this caller's
        wait is over: :meth:`_late`). Its settlement wakes the loop through its
        self-pipe only when it happens on another thread: a batch led inline by another
        task of this loop (the usual case under load) resolves the wait directly, no
        system call; and a task whose own inline commit settled it never waits. The
        bound is one timer on the future, not ``asyncio.wait_for`` (which wraps it in a
        second future and a callback: measured ≈ 14 against ≈ 7 µs a wait)."""
        loop = asyncio.get_running_loop()
        done: asyncio.Future[bool] = loop.create_future()
        here = threading.get_ident()

        def wake() -> None:
            if threading.get_ident() == here:  # settled by a task of this loop
                _resolve(done)
            else:
                loop.call_soon_threadsafe(_resolve, done)

        with self._lock:  # registered before the settlement, or the settlement seen
            if batch.settled:
                return
            batch.callbacks.append(wake)
        waited = self._wait_bound()
        timer = loop.call_later(max(0.0, waited), _expire, done)
        try:
            settled = await done  # a cancellation of this task cancels ``done``
        finally:
            timer.cancel()
        if not settled:
            self._late(batch, index, late, waited)

    def _write(
        self,
        item: _Item,
        late: Late | None,
        extra: _Item | None = None,
        join: AuditJoin | None = None,
    ) -> int | None:
        if join is not None and not self.waits:
            raise ValueError("a joined write needs a writer that waits for its records")
        if not self.waits:
            batch, index = self._submit(item)
            if extra is not None:
                self._submit(extra)
            if index >= self.max_pending:  # back-pressure: the backlog stays bounded
                batch.wait(self._wait_bound())
            return None
        batch, index, parked = self._join_or_lead(item, extra, join)
        if parked is None:  # no commit was running: this thread makes it
            self._lead(batch)
            # (unsettled: its attempt failed, and the writer thread retries it)
            if not batch.settled and not batch.wait(waited := self._wait_bound()):
                self._late(batch, index, late, waited)
        elif not _waited(parked, waited := self._wait_bound()):
            self._late(batch, index, late, waited)
        return batch.result(index)

    def _wait_bound(self) -> float:
        """How long a caller waits for its record: ``timeout``, or less when its check's
        deadline is nearer."""
        return time_left(self.timeout)

    def _late(self, batch: _Batch, index: int, late: Late | None, waited: float) -> None:
        """The caller stops waiting: raise its AuditFailure. Its record stays queued;
        with ``late``, what it says becomes what the caller is told — replaced in place
        while the batch waits to be taken, else followed by a record that supersedes
        it (batches commit in order, so the follow-up lands after it)."""
        failure = AuditFailure(f"the record was not durable within {max(waited, 0):.2f} s")
        with self._lock:
            if batch.settled:
                return  # committed (or failed) just now: the caller reads that
            if late is None:
                raise failure
            tenant, kind, original = batch.items[index]
            replacement = late(failure)
            if replacement is None:
                raise failure
            if batch is self._open:  # nobody has taken it: nothing was sent yet
                batch.items[index] = (tenant, kind, replacement)
                raise failure
        verdict = getattr(getattr(original, "decision", None), "verdict", None)
        detail = {**(replacement.detail or {}), "supersedes": getattr(verdict, "value", None)}
        try:
            self._submit((tenant, kind, replacement._replace(detail=detail)))
        except AuditFailure:
            log.error("interlock: the writer closed before a late record could be corrected")
        raise failure

    def _submit(self, item: _Item) -> tuple[_Batch, int]:
        """Add the record to the open batch, for the writer thread to commit."""
        batch, index, _ = self._enqueue(item, lead=False)
        return batch, index

    def _queue_on_loop(self, item: _Item, extra: _Item | None) -> tuple[_Batch, int]:
        """Queue a record that nobody waits for (durability ``none``) from a task of an
        event loop (``extra`` right after it). The first record of a batch asks the
        loop to commit the batch (:meth:`_commit_on_loop`) once the tasks it runs now
        have queued theirs, rather than waking the writer thread: a writer thread
        woken for every batch contends with the loop for the GIL, and every request
        the loop serves meanwhile waits for it (measured: the loop's decision took
        about twice as long) — a loaded loop's batches, that is: one request's is the
        writer thread's all the same (:data:`_LONE`)."""
        with self._lock:
            batch, index = self._add(item, extra, None)
            if index != 0:  # its first record asked for its commit already
                return batch, index
        try:  # in a context of its own: the batch is not this caller's (its deadline)
            loop = asyncio.get_running_loop()
            loop.call_soon(self._commit_on_loop, batch, context=contextvars.Context())
        except RuntimeError:  # no running loop (or it is closing): the writer commits
            self._wake()
        return batch, index

    def _commit_on_loop(self, batch: _Batch) -> None:
        """The loop's callback for an open batch of records nobody waits for: commit it
        here, if no commit is running and the store can without waiting
        (:meth:`_lead_inline`); otherwise — or when the batch is one request's
        (``_LONE``: the loop is not loaded, and a commit here would hold up its next
        request) — the writer thread commits it, as before."""
        with self._lock:
            if self._open is not batch:  # taken already (the writer thread, a flush)
                return
            if (
                self._writing is not None
                or self._handed is not None
                or len(batch.items) > self.max_batch
                or len(batch.items) <= _LONE
            ):
                self._work.notify()  # the writer takes it once it is free
                return
            self._open = _Batch(self._lock)
            self._writing = batch
        if not self._lead_inline(batch):
            self._hand_over(batch)

    def _wake(self) -> None:
        """Tell the writer thread that the open batch has records."""
        with self._lock:
            self._work.notify()

    def _add(self, item: _Item, extra: _Item | None, join: AuditJoin | None) -> tuple[_Batch, int]:
        """Under the lock: the record added to the open batch (``extra`` right after
        it), and its index there; nothing is added once the writer is told to stop."""
        if self._closed:
            raise AuditFailure("the audit writer is closed")
        batch = self._open
        batch.items.append(item)
        index = len(batch.items) - 1
        if join is not None:
            _add_join(batch, index, join)
        if extra is not None:
            batch.items.append(extra)
        return batch, index

    def _enqueue(
        self,
        item: _Item,
        *,
        lead: bool,
        gather: bool = False,
        extra: _Item | None = None,
        join: AuditJoin | None = None,
    ) -> tuple[_Batch, int, bool]:
        """Add the record to the open batch (``extra`` right after it). With ``lead``,
        when no commit is running, the batch is taken for the caller to commit (the
        third value says so) — with ``gather``, left open for others to join until the
        caller takes it whole (:meth:`_gather`)."""
        with self._lock:
            batch, index = self._add(item, extra, join)
            if lead and self._writing is None:
                if not gather:
                    self._open = _Batch(self._lock)
                self._writing = batch
                return batch, index, True
            if index == 0 and self._writing is None:  # else the running commit's end
                self._work.notify()  # wakes it (:meth:`_led`, :meth:`_run`)
            return batch, index, False

    def _join_or_lead(
        self, item: _Item, extra: _Item | None = None, join: AuditJoin | None = None
    ) -> tuple[_Batch, int, threading.Lock | None]:
        """:meth:`_enqueue` for a caller that waits on its thread: the batch taken for
        it to commit when no commit is running (no lock), else the record queued and a
        lock parked on its batch, which the batch's settlement releases. ``extra``
        follows the record in the same batch."""
        with self._lock:
            batch, index = self._add(item, extra, join)
            if self._writing is None:
                self._open = _Batch(self._lock)
                self._writing = batch
                return batch, index, None
            # a commit is running: its end takes the open batch (:meth:`_led`, :meth:`_run`)
            parked = batch.park()  # the open batch is never settled: always a lock
            return batch, index, parked

    async def _gather(self, batch: _Batch) -> None:
        """Group commit on the event loop: a leading task lets the loop run the tasks
        it already holds once — under load, the other requests read in the same turn,
        each reaching its own record — so their records join this batch and share its
        commit; then it takes the batch whole. (Marked as being written meanwhile, the
        batch is left alone by the writer thread and by other leaders.) A task cancelled
        in that turn hands the batch to the writer thread: it is committed all the
        same, and the others' waits end as usual."""
        try:
            await asyncio.sleep(0)
        except BaseException:
            self._take(batch)
            self._hand_over(batch)
            raise
        self._take(batch)

    def _take(self, batch: _Batch) -> None:
        with self._lock:
            if self._open is batch:
                self._open = _Batch(self._lock)

    def _lead(self, batch: _Batch) -> None:
        """Commit the batch this thread took (one attempt, bounded by this caller's
        deadline), then hand over to the writer thread: the next batch, or this one to
        try again if the attempt failed."""
        try:
            committed = self._attempt(batch)
        except BaseException:
            self._led(batch)  # interrupted (KeyboardInterrupt, ...): fails closed
            raise
        if committed:
            self._led(batch)
            return
        self._hand_over(batch)

    def _hand_over(self, batch: _Batch) -> None:
        """Leave a taken batch to the writer thread, which commits it (retrying) before
        any other: batches still commit in order."""
        with self._lock:
            self._handed = batch
            self._work.notify()

    def _lead_inline(self, batch: _Batch) -> bool:
        """Commit the batch on this thread only if the store can without waiting
        (:meth:`SqlStore.try_append_audit`); False leaves the batch taken and unsettled,
        for :meth:`_lead` to commit elsewhere."""
        if len(batch.items) > self.max_batch:
            return False
        try:
            entries = [self._entry(*item) for item in batch.items]
            batch.chunks = [entries]  # a later attempt appends exactly these
            try:
                seqs = (
                    self.store.try_append_audit(entries)
                    if batch.joins is None
                    else self.store.try_append_audit(entries, batch.joins)
                )
            except Exception as exc:  # the worker's commit retries, and reports, as usual
                log.debug("interlock: inline audit commit failed, handing it over: %s", exc)
                batch.unsure = True
                _replaced(entries, 0, batch.joins)
                return False
            _replaced(entries, 0, batch.joins)
            if seqs is None:
                return False
            self.batches += 1
            self.records += len(entries)
            batch.committed = 1
            batch.settle(seqs, None)
        except BaseException:
            self._led(batch)
            raise
        self._led(batch)
        return True

    def _led(self, batch: _Batch) -> None:
        """After a caller's commit: a batch left unsettled (the commit was interrupted:
        KeyboardInterrupt, ...) fails closed; the writer thread takes what arrived."""
        if not batch.settled:
            batch.settle([], AuditFailure("the audit commit was interrupted"))
        with self._lock:
            self._writing = None
            if self._open.items or self._closed:
                self._work.notify()

    def flush(self, timeout: float = 30.0) -> bool:
        """Wait until everything submitted so far is written; False on timeout."""
        with self._lock:
            batch = self._open if self._open.items else self._writing
            if batch is self._open:  # the writer takes it, should its loop not run (this
                self._work.notify()  # thread may be that loop's: :meth:`_queue_on_loop`)
        return True if batch is None else batch.wait(timeout)

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
                # one commit at a time: a leading caller's runs to its end (or is handed
                # over) first
                while self._handed is None and (
                    self._writing is not None or (not self._open.items and not self._closed)
                ):
                    self._work.wait()
                if self._handed is not None:
                    batch, self._handed = self._handed, None
                else:
                    batch = self._open
                    if not batch.items:  # closed, and everything is written
                        return
                    self._open = _Batch(self._lock)
                    self._writing = batch
            self._commit(batch)
            with self._lock:
                self._writing = None

    def _commit(self, batch: _Batch) -> None:
        """Commit a whole batch on the writer thread, retrying a failed attempt after a
        pause; each attempt is bounded by ``timeout``, never by a caller's deadline."""
        for delay in (*_RETRIES, None):
            with deadline_scope(time.monotonic() + self.timeout):
                if self._attempt(batch):
                    return
            if delay is not None:
                time.sleep(delay)
        error = batch.last_error
        failure = AuditFailure(
            f"could not write {len(batch.items)} audit record(s): "
            f"{describe(error) if error else 'unknown error'}"
        )
        failure.__cause__ = error
        log.error("interlock: %s", failure)
        batch.settle([], failure)

    def _attempt(self, batch: _Batch) -> bool:
        """One attempt at the chunks of ``batch`` not yet durable; True once all are
        (the batch is settled). A chunk whose earlier attempt failed may have committed
        all the same (the connection was cut during COMMIT): it is looked up before it
        is appended again, so no record is ever written twice."""
        if batch.chunks is None:
            items = batch.items
            if len(items) <= self.max_batch:  # the usual batch: one chunk
                batch.chunks = [[self._entry(*item) for item in items]]
            else:
                batch.chunks = [
                    [self._entry(*item) for item in items[start : start + self.max_batch]]
                    for start in range(0, len(items), self.max_batch)
                ]
        while batch.committed < len(batch.chunks):
            chunk = batch.chunks[batch.committed]
            start = batch.committed * self.max_batch
            joins = _joins_of(batch.joins, start, len(chunk))
            try:
                seqs = self.store.audit_landed(chunk) if batch.unsure else None
                if seqs is None:
                    durable = self.durability == "power"
                    seqs = (
                        self.store.append_audit(chunk, durable=durable)
                        if joins is None
                        else self.store.append_audit(chunk, durable=durable, joins=joins)
                    )
                    self.batches += 1
                    self.records += len(chunk)
            except Exception as exc:  # a locked, unreachable or cut-off database
                _replaced(chunk, start, joins and batch.joins)
                batch.last_error = exc
                batch.unsure = True
                return False
            _replaced(chunk, start, joins and batch.joins)
            batch.unsure = False
            batch.seqs.extend(seqs)
            batch.committed += 1
        batch.settle(batch.seqs, None)
        return True

    def _entry(self, tenant: str, kind: str, payload: Any) -> AuditEntry:
        ts_us: int | None = None  # an event's own time; else now (the clock read once)
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
        if ts_us is None:
            ts_us = self.store.clock()
        return (
            tenant,
            ts_us,
            kind,
            decision_id if isinstance(decision_id, str) else None,
            agent if isinstance(agent, str) else None,
            decision if isinstance(decision, str) else None,
            body,
        )
