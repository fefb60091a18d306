"""The audit log in SQL: appending to each tenant's hash chain, reading it back,
verifying it (see :mod:`.chain` for the link encoding, :mod:`.audit_keys` for the key,
and :mod:`.audit` for the group-commit writer that calls :meth:`AuditStore.append_audit`)."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager
from hashlib import sha256
from typing import TYPE_CHECKING, Any, Final

from interlock.errors import AuditKeyError, StoreError
from interlock.store.chain import GENESIS, encode_body, fast_link_material, verify_chain
from interlock.store.records import AuditRow, ChainBreak, ChainHead, VerifyReport
from interlock.store.sql_base import AuditEntry, Cursor, StoreBase

if TYPE_CHECKING:
    from interlock.store.audit_keys import AuditKey
    from interlock.store.checkpoints import CheckpointLog

__all__ = ["AppendListener", "AuditJoin", "AuditStore"]

log = logging.getLogger("interlock.audit")

_AUDIT_COLUMNS = (
    "tenant, seq, ts_us, kind, decision_id, agent, decision, body, prev_hash, hash, key_id"
)

#: Told, after a commit, the newest record it wrote to each tenant's chain.
AppendListener = Callable[[Mapping[str, ChainHead]], object]
_NO_LISTENERS: tuple[AppendListener, ...] = ()

#: A write that rides an audit record's transaction (a session step: the guard's
#: :class:`~interlock.guard_sessions.JoinedStep`), keyed by its record's index in the
#: batch. Called inside the transaction before the records are appended: ``None`` when
#: it wrote (or has nothing to write), else the entry to append in its record's place
#: (its write failed and was rolled back to a savepoint: the record says so instead).
AuditJoin = Callable[[Cursor], "AuditEntry | None"]

#: Chains whose heads a store remembers (past that it forgets them all at once).
_KNOWN_HEADS: Final = 10_000

#: The kind of the keyed record that seals an unkeyed chain.
SEALED_KIND = "audit.sealed"


class AuditStore(StoreBase):
    """Appends to and reads the per-tenant audit chains."""

    _audit_listeners = _NO_LISTENERS
    _listeners_lock = threading.Lock()  # adding and removing are rare: one lock for all

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        #: Each chain's head as this process last committed it (the next append links
        #: to it unread; a stale one is found by the head's conditional UPDATE).
        self._known_heads: dict[str, ChainHead] = {}
        self._linker_made: _Linker | None = None

    def try_append_audit(
        self, entries: Sequence[AuditEntry], joins: Mapping[int, AuditJoin] | None = None
    ) -> list[int] | None:
        """Append as :meth:`append_audit` does (durability ``process``) only if that
        cannot wait — no lock held by another writer, no network round trip, no
        checkpoint — else write nothing and return ``None``. The audit writer uses it to
        commit on an event loop's own thread; a back end that cannot promise it (the
        default) always answers ``None``."""
        return None

    def append_audit(
        self,
        entries: Sequence[AuditEntry],
        *,
        durable: bool = False,
        joins: Mapping[int, AuditJoin] | None = None,
    ) -> list[int]:
        """Append records to their tenants' chains in one transaction; return their
        sequence numbers. ``durable`` asks the back end to sync to disk on commit.
        ``joins``: writes that ride the same transaction (:data:`AuditJoin`).
        Once committed, the listeners (:meth:`add_audit_listener`) hear the new heads."""
        with self.audit_transaction(durable) as cur:
            if joins:
                entries = _joined(cur, entries, joins)
            seqs, heads = self._append_chain(cur, entries)
        self._appended(heads)
        return seqs

    def add_audit_listener(self, listener: AppendListener) -> None:
        """Tell ``listener`` each chain's new head after every commit of
        :meth:`append_audit` or :meth:`try_append_audit` (the audit writer's
        checkpointer listens). Called on the committing thread: it must be quick."""
        with self._listeners_lock:
            self._audit_listeners = (*self._audit_listeners, listener)

    def remove_audit_listener(self, listener: AppendListener) -> None:
        with self._listeners_lock:
            self._audit_listeners = tuple(x for x in self._audit_listeners if x != listener)

    def _appended(self, heads: Mapping[str, ChainHead]) -> None:
        """After the commit: remember the heads, tell the listeners."""
        known = self._known_heads
        if len(known) >= _KNOWN_HEADS:  # many tenants: forget them all, re-read as needed
            known.clear()
        known.update(heads)
        for listener in self._audit_listeners:  # a tuple, replaced whole: no lock needed
            try:
                listener(heads)
            except Exception:  # the records are committed: never report them as failed
                log.exception("interlock: an audit listener failed")

    def _append(self, cur: Cursor, entries: Sequence[AuditEntry]) -> list[int]:
        """Append inside the caller's transaction (so a state change and its record
        commit together)."""
        return self._append_chain(cur, entries)[0]

    def _append_chain(
        self, cur: Cursor, entries: Sequence[AuditEntry]
    ) -> tuple[list[int], dict[str, ChainHead]]:
        """Append inside the caller's (write) transaction; the sequence numbers, and
        each chain's new head.

        Each chain links to the head this process last committed to it, without
        reading it first: its head is moved by a conditional ``UPDATE`` (``WHERE seq
        = ? AND hash = ?``) that matches nothing if another writer — another process,
        a replica, a transaction of this process not yet heard of — has moved it
        since. Then, and for a chain not yet known here, the head is read under the
        transaction's lock and the links are made again from it. The rows go in last,
        in one multi-row ``INSERT``: one step for the whole batch (each SQLite call
        gives up the GIL and must win it back from the callers the last commit woke,
        so a batch's commit makes as few as it can)."""
        link = self._linker()
        rows: list[tuple[Any, ...]] = []
        heads: dict[str, ChainHead] = {}
        groups = _by_tenant(entries)
        # Heads are moved in one order (sorted), whatever the entries' order: two
        # replicas appending to the same tenants must not deadlock.
        for tenant in sorted(groups) if len(groups) > 1 else groups:
            mine = groups[tenant]
            head = self._known_heads.get(tenant)
            while True:
                fresh = head is None
                if head is None:
                    head = self._lock_head(cur, tenant)
                if link.key_id is None:
                    self._refuse_downgrade({tenant: head})
                links, new = link(head, mine)
                if self._move_head(cur, head, new):
                    break
                if fresh:  # read under this transaction's lock, and moved since?
                    raise StoreError(f"tenant {tenant!r}'s audit head moved under the lock")
                head = None  # another writer moved it: read it, link again
            rows += links
            heads[tenant] = new
        self._insert_links(cur, rows)
        return _seqs(entries, groups, heads), heads

    def _linker(self) -> _Linker:
        """What links the batch: the current key's (made again only when the key
        changes)."""
        keyring = self.audit_keys.for_writing()
        key = keyring.current if keyring is not None else None
        linker = self._linker_made
        if linker is None or linker.key is not key:
            linker = self._linker_made = _Linker(key)
        return linker

    def _move_head(self, cur: Cursor, old: ChainHead, new: ChainHead) -> bool:
        """Move a chain's head from ``old`` to ``new``; False (nothing moved) if it is
        not ``old`` any more."""
        cur.execute(
            self.q(
                "UPDATE audit_heads SET seq = ?, hash = ?, key_id = ? "
                "WHERE tenant = ? AND seq = ? AND hash = ?"
            ),
            (new.seq, new.hash, new.key_id, new.tenant, old.seq, old.hash),
        )
        return cur.rowcount == 1

    def _insert_links(self, cur: Cursor, rows: list[tuple[Any, ...]]) -> None:
        """Insert the new links: one multi-row ``INSERT`` per ``_INSERT_ROWS`` rows
        (a statement per row count, memoised)."""
        if len(rows) == 1:
            cur.execute(self.q(_insert_sql(1)), rows[0])
            return
        for start in range(0, len(rows), _INSERT_ROWS):
            chunk = rows[start : start + _INSERT_ROWS] if len(rows) > _INSERT_ROWS else rows
            cur.execute(self.q(_insert_sql(len(chunk))), [v for row in chunk for v in row])

    def _write_links(
        self, cur: Cursor, rows: list[tuple[Any, ...]], heads: Mapping[str, ChainHead]
    ) -> None:
        """Insert the links and move each tenant's head to its last one, heads read
        under the transaction's lock (PostgreSQL's locked path; it overrides this with
        one statement)."""
        self._insert_links(cur, rows)
        cur.executemany(
            self.q("UPDATE audit_heads SET seq = ?, hash = ?, key_id = ? WHERE tenant = ?"),
            [(head.seq, head.hash, head.key_id, tenant) for tenant, head in heads.items()],
        )

    def _refuse_downgrade(self, heads: Mapping[str, ChainHead]) -> None:
        """A process without the key must not append to a keyed chain: its records
        would break the chain for every verifier (and look like a downgrade)."""
        for tenant, head in heads.items():
            if head.key_id is not None:
                raise AuditKeyError(
                    f"tenant {tenant!r}'s audit chain is keyed (key id {head.key_id}) and "
                    f"this process has no audit key ({self.audit_keys.source}): give it "
                    "the key the other writers use"
                )

    def seal_unkeyed_chains(self) -> list[str]:
        """Append a keyed record to every chain whose newest record is unkeyed (written
        before the key, or by a process without it), so that its unkeyed records are
        linked from a record nobody can forge: this vouches for them, so do it only
        for records known to predate the key (``interlock audit seal``; the writer
        that creates a SQLite store's key does it then). Returns the tenants sealed;
        nothing without a key."""
        keyring = self.audit_keys.for_writing()
        if keyring is None:
            return []
        with self.transaction(write=False) as cur:
            cur.execute(self.q("SELECT tenant FROM audit_heads WHERE key_id IS NULL AND seq > 0"))
            tenants = sorted(str(row[0]) for row in cur.fetchall())
        sealed: list[str] = []
        for tenant in tenants:
            with self.audit_transaction(False) as cur:
                head = self._lock_head(cur, tenant)
                if head.key_id is not None or head.seq == 0:  # another writer sealed it
                    continue
                body = encode_body(
                    {
                        "kind": SEALED_KIND,
                        "key_id": keyring.current.key_id,
                        "unkeyed_records": head.seq,
                    }
                )
                self._append_chain(
                    cur, [(tenant, self.clock(), SEALED_KIND, None, None, None, body)]
                )
            sealed.append(tenant)
        return sealed

    def audit_landed(self, entries: Sequence[AuditEntry]) -> list[int] | None:
        """The sequence numbers ``entries`` were appended at, if a transaction that
        appended exactly them committed — an earlier :meth:`append_audit` whose outcome
        is unknown (its connection was cut during ``COMMIT``) — else ``None``. A
        transaction appends all its entries or none, each tenant's consecutively: so
        each tenant's first and last entry, found where they belong, decide it."""
        by_tenant: dict[str, list[int]] = {}
        for index, entry in enumerate(entries):
            by_tenant.setdefault(entry[0], []).append(index)
        firsts: dict[str, int] = {}
        with self.transaction(write=False) as cur:
            for tenant, indexes in by_tenant.items():
                first, last = entries[indexes[0]], entries[indexes[-1]]
                cur.execute(
                    self.q(
                        "SELECT seq FROM audit_events WHERE ts_us = ? AND tenant = ? "
                        "AND kind = ? AND body = ? ORDER BY seq DESC"
                    ),
                    (first[1], tenant, first[2], first[6]),
                )
                for (seq,) in cur.fetchall():
                    end = int(seq) + len(indexes) - 1
                    cur.execute(
                        self.q(
                            "SELECT 1 FROM audit_events WHERE tenant = ? AND seq = ? "
                            "AND ts_us = ? AND kind = ? AND body = ?"
                        ),
                        (tenant, end, last[1], last[2], last[6]),
                    )
                    if cur.fetchone() is not None:
                        firsts[tenant] = int(seq)
                        break
                else:
                    return None
        seqs: list[int] = []
        for entry in entries:
            seqs.append(firsts[entry[0]])
            firsts[entry[0]] += 1
        return seqs

    def audit_transaction(self, durable: bool) -> AbstractContextManager[Cursor]:
        """The write transaction audit appends run in; ``durable`` makes its commit
        wait for the disk (SQLite: synchronous=FULL; PostgreSQL: synchronous_commit on
        for this transaction, whatever the server's default)."""
        return self.transaction(write=True)

    def _lock_head(self, cur: Cursor, tenant: str) -> ChainHead:
        """The tenant's head, locked until the transaction ends (SQLite: the write
        transaction holds the database's lock; PostgreSQL: ``FOR UPDATE``). One
        statement once the head exists; a new tenant's is made first (``DO NOTHING``:
        two writers making it at once both go on to lock the one row)."""
        select = self.q(
            f"SELECT seq, hash, key_id FROM audit_heads WHERE tenant = ?{self.for_update}"
        )
        cur.execute(select, (tenant,))
        row = cur.fetchone()
        if row is None:
            cur.execute(
                self.q(
                    "INSERT INTO audit_heads (tenant, seq, hash) VALUES (?, 0, ?) "
                    "ON CONFLICT (tenant) DO NOTHING"
                ),
                (tenant, GENESIS),
            )
            cur.execute(select, (tenant,))
            row = cur.fetchone()
        seq, digest, key_id = row
        return ChainHead(tenant, int(seq), str(digest), key_id, 0)

    def audit_tenants(self) -> list[str]:
        with self.transaction(write=False) as cur:
            cur.execute(self.q("SELECT tenant FROM audit_heads ORDER BY tenant"))
            return [str(row[0]) for row in cur.fetchall()]

    def audit_rows(
        self,
        *,
        tenant: str | None = None,
        since_us: int | None = None,
        until_us: int | None = None,
        agent: str | None = None,
        decision: str | None = None,
        kind: str | None = None,
        kinds: Sequence[str] | None = None,
        decision_id: str | None = None,
        mentions: str | None = None,
        newest_first: bool = False,
        limit: int | None = None,
        page: int = 1000,
    ) -> Iterator[AuditRow]:
        """Audit records matching every filter given, oldest first (or newest first),
        read in pages so a large log streams. ``kinds``: any of these kinds;
        ``mentions``: the body contains this text (a JSON fragment such as
        ``"reservation_id":"r1"``)."""
        where: list[str] = []
        params: list[Any] = []
        for column, value in (
            ("tenant", tenant),
            ("agent", agent),
            ("decision", decision),
            ("kind", kind),
            ("decision_id", decision_id),
        ):
            if value is not None:
                where.append(f"{column} = ?")
                params.append(value)
        if kinds is not None:
            where.append(f"kind IN ({', '.join('?' for _ in kinds)})" if kinds else "1 = 0")
            params.extend(kinds)
        if mentions is not None:
            escaped = mentions.replace("!", "!!").replace("%", "!%").replace("_", "!_")
            where.append("body LIKE ? ESCAPE '!'")
            params.append(f"%{escaped}%")
        if since_us is not None:
            where.append("ts_us >= ?")
            params.append(since_us)
        if until_us is not None:
            where.append("ts_us < ?")
            params.append(until_us)
        order = "DESC" if newest_first else "ASC"
        cursor_at: tuple[int, str, int] | None = None  # (ts_us, tenant, seq) of the last row
        remaining = limit
        while remaining is None or remaining > 0:
            size = page if remaining is None else min(page, remaining)
            clauses = list(where)
            args = list(params)
            if cursor_at is not None:
                op = "<" if newest_first else ">"
                clauses.append(f"(ts_us, tenant, seq) {op} (?, ?, ?)")
                args.extend(cursor_at)
            sql = f"SELECT {_AUDIT_COLUMNS} FROM audit_events"
            if clauses:
                sql += " WHERE " + " AND ".join(clauses)
            sql += f" ORDER BY ts_us {order}, tenant {order}, seq {order} LIMIT {int(size)}"
            with self.transaction(write=False) as cur:
                cur.execute(self.q(sql), args)
                batch = [_audit_row(row) for row in cur.fetchall()]
            yield from batch
            if len(batch) < size:
                return
            last = batch[-1]
            cursor_at = (last.ts_us, last.tenant, last.seq)
            if remaining is not None:
                remaining -= len(batch)

    def audit_chain(
        self, tenant: str, *, page: int = 5000, after: int = 0, upto: int | None = None
    ) -> Iterator[AuditRow]:
        """One tenant's chain in ``seq`` order (the records after ``after``, up to
        ``upto`` when given)."""
        bound = "" if upto is None else f" AND seq <= {int(upto)}"
        while True:
            with self.transaction(write=False) as cur:
                cur.execute(
                    self.q(
                        f"SELECT {_AUDIT_COLUMNS} FROM audit_events WHERE tenant = ? AND seq > ?"
                        f"{bound} ORDER BY seq LIMIT {int(page)}"
                    ),
                    (tenant, after),
                )
                batch = [_audit_row(row) for row in cur.fetchall()]
            yield from batch
            if len(batch) < page:
                return
            after = batch[-1].seq

    def _chain_to_head(self, tenant: str, head: list[tuple[int, str] | None]) -> Iterator[AuditRow]:
        """The chain, then the head read once it is walked (into ``head``), then the
        records appended meanwhile up to that head. A record and its head move in one
        transaction, so a head read after the walk covers every record walked; read
        before it (as it was), a record landing during the walk read as a chain that
        ran past its head — a break on a live store where there was none."""
        last = 0
        for row in self.audit_chain(tenant):
            last = row.seq
            yield row
        found = self.audit_head(tenant)
        head.append(found)
        if found is not None and found[0] > last:
            yield from self.audit_chain(tenant, after=last, upto=found[0])

    def audit_head(self, tenant: str) -> tuple[int, str] | None:
        with self.transaction(write=False) as cur:
            cur.execute(self.q("SELECT seq, hash FROM audit_heads WHERE tenant = ?"), (tenant,))
            row = cur.fetchone()
        return None if row is None else (int(row[0]), str(row[1]))

    def verify_audit(
        self,
        tenant: str | None = None,
        *,
        checkpoints: CheckpointLog | None = None,
        require_keyed: bool = False,
    ) -> VerifyReport:
        """Walk every tenant's chain (or one) and name the first broken link of each.

        With ``checkpoints`` (:func:`~interlock.store.checkpoints.read_checkpoints`)
        every record a signed checkpoint saw must still be there with the hash it saw
        — a cut tail, a moved head, a deleted tenant or a rewrite before it breaks —
        and the checkpoint file's own problems are reported too. ``require_keyed``
        makes any unkeyed record a break."""
        keys = self.audit_keys.for_verifying()
        anchors = checkpoints.anchors if checkpoints is not None else {}
        if tenant is not None:
            tenants = [tenant]
        else:
            tenants = sorted(set(self._chain_tenants()) | set(anchors))
        checked: dict[str, int] = {}
        unkeyed: dict[str, int] = {}
        breaks: list[ChainBreak] = []
        for name in tenants:
            head: list[tuple[int, str] | None] = []  # read once the chain is walked
            rows = self._chain_to_head(name, head)

            def read_head(found: list[tuple[int, str] | None] = head) -> tuple[int, str] | None:
                return found[0]

            outcome = verify_chain(name, rows, read_head, keys, anchors.get(name))
            broken = outcome.broken
            if broken is None and require_keyed and outcome.first_unkeyed is not None:
                broken = ChainBreak(
                    name,
                    outcome.first_unkeyed,
                    f"{outcome.unkeyed} record(s) are unkeyed (plain SHA-256), the first "
                    "here, and every record must be keyed",
                )
            if broken is not None:
                breaks.append(broken)
                continue
            checked[name] = outcome.checked
            if outcome.unkeyed:
                unkeyed[name] = outcome.unkeyed
        return VerifyReport(
            checked=checked,
            breaks=tuple(breaks),
            unkeyed=unkeyed,
            checkpoint_problems=tuple(checkpoints.problems) if checkpoints else (),
            notes=tuple(checkpoints.notes) if checkpoints else (),
        )

    def _chain_tenants(self) -> list[str]:
        with self.transaction(write=False) as cur:
            cur.execute(
                self.q(
                    "SELECT tenant FROM audit_heads UNION SELECT DISTINCT tenant FROM audit_events "
                    "ORDER BY 1"
                )
            )
            return [str(row[0]) for row in cur.fetchall()]


def _sha256_hex(material: bytes) -> str:
    return sha256(material).hexdigest()


class _Linker:
    """Makes a chain's new links from its head, under the batch's key (looked up once
    a batch)."""

    __slots__ = ("digest", "key", "key_id")

    def __init__(self, key: AuditKey | None) -> None:
        self.key = key
        self.key_id = key.key_id if key is not None else None
        self.digest: Callable[[bytes], str] = key.digest if key is not None else _sha256_hex

    def __call__(
        self, head: ChainHead, entries: Sequence[AuditEntry]
    ) -> tuple[list[tuple[Any, ...]], ChainHead]:
        """The rows of ``entries`` (all of ``head``'s tenant) linked after ``head``,
        and the chain's new head."""
        key_id, digest_of = self.key_id, self.digest
        seq, prev, ts_us = head.seq, head.hash, head.ts_us
        rows: list[tuple[Any, ...]] = []
        for tenant, ts_us, kind, decision_id, agent, decision, body in entries:
            seq += 1
            digest = digest_of(
                fast_link_material(
                    prev, tenant, seq, ts_us, kind, decision_id, agent, decision, body, key_id
                )
            )
            rows.append(
                (tenant, seq, ts_us, kind, decision_id, agent, decision, body, prev, digest, key_id)
            )
            prev = digest
        return rows, ChainHead(head.tenant, seq, prev, key_id, ts_us)


def _joined(
    cur: Cursor, entries: Sequence[AuditEntry], joins: Mapping[int, AuditJoin]
) -> Sequence[AuditEntry]:
    """Run ``joins`` in the transaction of ``cur``; ``entries`` with the records of the
    joins that failed replaced by what they say instead."""
    replaced: list[AuditEntry] | None = None
    for index, join in joins.items():
        instead = join(cur)
        if instead is not None:
            if replaced is None:
                replaced = list(entries)
            replaced[index] = instead
    return entries if replaced is None else replaced


def _by_tenant(entries: Sequence[AuditEntry]) -> dict[str, Sequence[AuditEntry]]:
    """The entries of each tenant, in their order (one group, as they are, for the
    usual batch of one tenant)."""
    first = entries[0][0]
    if len(entries) == 1 or all(entry[0] == first for entry in entries):
        return {first: entries}
    groups: dict[str, list[AuditEntry]] = {}
    for entry in entries:
        groups.setdefault(entry[0], []).append(entry)
    return dict(groups)


def _seqs(
    entries: Sequence[AuditEntry],
    groups: Mapping[str, Sequence[AuditEntry]],
    heads: Mapping[str, ChainHead],
) -> list[int]:
    """Each entry's sequence number, in the entries' order, from each chain's new
    head."""
    if len(groups) == 1:
        (head,) = heads.values()
        return list(range(head.seq - len(entries) + 1, head.seq + 1))
    at = {tenant: head.seq - len(groups[tenant]) for tenant, head in heads.items()}
    seqs: list[int] = []
    for entry in entries:
        at[entry[0]] += 1
        seqs.append(at[entry[0]])
    return seqs


#: Rows in one multi-row INSERT (11 parameters each; SQLite allows 32,766 a statement).
_INSERT_ROWS: Final = 64


def _insert_sql(rows: int) -> str:
    """The multi-row INSERT of ``rows`` links (memoised: a steady load repeats a few
    batch sizes)."""
    sql = _INSERT_SQL.get(rows)
    if sql is None:
        values = ",".join(["(?,?,?,?,?,?,?,?,?,?,?)"] * rows)
        sql = _INSERT_SQL[rows] = f"INSERT INTO audit_events ({_AUDIT_COLUMNS}) VALUES {values}"
    return sql


_INSERT_SQL: dict[int, str] = {}


def _audit_row(row: Any) -> AuditRow:
    return AuditRow(
        tenant=str(row[0]),
        seq=int(row[1]),
        ts_us=int(row[2]),
        kind=str(row[3]),
        decision_id=row[4],
        agent=row[5],
        decision=row[6],
        body=str(row[7]),
        prev_hash=str(row[8]),
        hash=str(row[9]),
        key_id=row[10],
    )
