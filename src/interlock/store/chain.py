"""The audit hash chain: how a record is encoded, linked and checked. Pure.

Each tenant has its own chain. Record ``seq`` (1, 2, 3, ...) stores ``prev_hash`` (the
hash of record ``seq - 1``; :data:`GENESIS` for the first) and ``hash`` over the UTF-8
of the fields ``prev_hash, tenant, seq, ts_us, kind, decision_id, agent, decision,
body`` — and, for a keyed record, ``key_id`` — each written as ``<length>:<text>``
(length in characters; numbers in decimal; a missing field as ``~``): an unambiguous
encoding, so any field edited, a record deleted, inserted or moved breaks a link that
:func:`verify_chain` names.

A keyed record (``key_id`` set) is HMAC-SHA256 under the audit key of that id (see
:mod:`.audit_keys`): without the key nobody can forge one. An unkeyed record is plain
SHA-256 (``key_id`` empty); so were records written before key ids existed, unless
written under ``INTERLOCK_AUDIT_KEY`` — those verify under the key with no id in their
material. Because anyone can compute SHA-256, a verifier that holds a key trusts an
unkeyed record only where a keyed record follows it (it links to it); a chain that
turns unkeyed after a keyed record, or ends unkeyed, is broken: a downgrade.

Signed checkpoints (:mod:`.checkpoints`) give :func:`verify_chain` anchors — a record
seen with a given hash at a given time — so a chain cut short with its head moved
back, or rewritten before the anchor, or deleted, is broken too.

Example::

    from interlock.store.chain import GENESIS, link_material

    material = link_material(GENESIS, "acme", 1, 1_700_000_000_000_000, "decision",
                             "dec_1", "bot", "allow", '{"kind":"decision"}')
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Final

from orjson import (
    OPT_PASSTHROUGH_DATACLASS,
    OPT_PASSTHROUGH_DATETIME,
    OPT_PASSTHROUGH_SUBCLASS,
    OPT_SORT_KEYS,
)
from orjson import dumps as _dumps

from interlock._extension import switched_off
from interlock.store.audit_keys import AuditKeyring
from interlock.store.records import AuditRow, ChainBreak

__all__ = [
    "GENESIS",
    "Anchor",
    "ChainOutcome",
    "encode_body",
    "fast_link_material",
    "link_hash",
    "link_material",
    "row_hash",
    "verify_chain",
]

GENESIS: Final = "0" * 64
#: Sorted keys; a subclass, dataclass or datetime goes to ``default`` (the standard
#: library's form, not orjson's own).
_SORT_KEYS: Final = (
    OPT_SORT_KEYS | OPT_PASSTHROUGH_SUBCLASS | OPT_PASSTHROUGH_DATACLASS | OPT_PASSTHROUGH_DATETIME
)


def encode_body(record: dict[str, Any]) -> str:
    """The stored form of a (redacted) record: sorted-key, compact, ASCII JSON.

    One C pass (``orjson``, ≈ 10× the standard library's speed on our records; see
    ``docs/adr/0011-records-encoded-once.md``). Its output is the standard library's
    byte for byte for plain JSON values in the usual ranges (tested); anything it
    cannot write in that form — a non-ASCII or DEL character, a surrogate, an integer
    wider than 64 bits, a key that is not a string, an object — goes to the standard
    library, so the body is the same ASCII JSON either way. Differences remain only
    where the value is the same or was not JSON: a float below 1e-4 is written without
    an exponent (``0.00001``), NaN or an infinity as ``null`` where orjson writes the
    record (the standard library writes ``NaN``), and a plain enum or a UUID by its
    value (the standard library wrote its ``repr``; a redacted record holds neither).
    A stored body is never re-encoded: what is hashed is the text stored."""
    try:
        body = _dumps(record, option=_SORT_KEYS, default=_fast_default).decode("ascii")
    except (TypeError, UnicodeDecodeError):  # orjson.JSONEncodeError is a TypeError
        return _encode_stdlib(record)
    if "\x7f" in body:  # ASCII, but the standard library escapes DEL
        return _encode_stdlib(record)
    return body


def _encode_stdlib(record: dict[str, Any]) -> str:
    return json.dumps(
        record, sort_keys=True, separators=(",", ":"), ensure_ascii=True, default=_default
    )


class _Unusual(TypeError):
    """A value orjson would write differently from the standard library."""


def _fast_default(value: Any) -> Any:
    raise _Unusual  # every non-plain value: the standard library decides its form


def _default(value: Any) -> Any:
    if isinstance(value, (set, frozenset, tuple)):
        return list(value)
    return repr(value)[:200]


def link_material(
    prev_hash: str,
    tenant: str,
    seq: int,
    ts_us: int,
    kind: str,
    decision_id: str | None,
    agent: str | None,
    decision: str | None,
    body: str,
    key_id: str | None = None,
) -> bytes:
    """The bytes one link's hash covers. ``key_id`` is part of a keyed record's
    material, so that the key a record names is itself authenticated. (One f-string:
    this runs once per record on the commit's path.)"""
    n, t = str(seq), str(ts_us)
    text = (
        f"{len(prev_hash)}:{prev_hash}{len(tenant)}:{tenant}{len(n)}:{n}{len(t)}:{t}"
        f"{len(kind)}:{kind}"
        f"{'~' if decision_id is None else f'{len(decision_id)}:{decision_id}'}"
        f"{'~' if agent is None else f'{len(agent)}:{agent}'}"
        f"{'~' if decision is None else f'{len(decision)}:{decision}'}"
        f"{len(body)}:{body}"
    )
    if key_id is not None:
        text += f"{len(key_id)}:{key_id}"
    return text.encode("utf-8", "surrogatepass")


try:
    from interlock.store import _chain
except ImportError:  # not built (no compiler where installed): the Python reference
    _chain = None  # type: ignore[assignment]

#: :func:`link_material`, written in C where the extension is built (``_chain.c``: the
#: same bytes, tested; what it does not write itself it hands to link_material) and
#: ``INTERLOCK_NO_SPEEDUPS`` is not set at import. The commit's path links each record
#: with it.
fast_link_material: Callable[
    [str, str, int, int, str, str | None, str | None, str | None, str, str | None], bytes
] = link_material if _chain is None or switched_off() else _chain.material_or(link_material)
#: Whether records are linked with the C extension's material.
ACCELERATED: Final = fast_link_material is not link_material


def link_hash(
    prev_hash: str,
    tenant: str,
    seq: int,
    ts_us: int,
    kind: str,
    decision_id: str | None,
    agent: str | None,
    decision: str | None,
    body: str,
    key: bytes | None = None,
) -> str:
    """The hash of one link as records without a key id have it (hex): SHA-256, or
    HMAC-SHA256 under ``key``."""
    material = fast_link_material(
        prev_hash, tenant, seq, ts_us, kind, decision_id, agent, decision, body, None
    )
    if key is not None:
        from interlock.store.audit_keys import AuditKey

        return AuditKey(key).digest(material)
    return hashlib.sha256(material).hexdigest()


def row_hash(row: AuditRow, key: bytes | None = None) -> str:
    """What ``row.hash`` should be: under ``key`` (with ``row.key_id`` in the material
    when it has one), or plain SHA-256 without a key."""
    material = _material(row)
    if key is not None:
        from interlock.store.audit_keys import AuditKey

        return AuditKey(key).digest(material)
    return hashlib.sha256(material).hexdigest()


def _material(row: AuditRow) -> bytes:
    return fast_link_material(
        row.prev_hash,
        row.tenant,
        row.seq,
        row.ts_us,
        row.kind,
        row.decision_id,
        row.agent,
        row.decision,
        row.body,
        row.key_id,
    )


@dataclass(frozen=True, slots=True)
class Anchor:
    """A signed checkpoint's word on one record: it had ``head`` as its hash at
    ``ts_us`` (when the checkpoint was signed)."""

    seq: int
    head: str
    ts_us: int


@dataclass(frozen=True, slots=True)
class ChainOutcome:
    """What walking one chain found: records checked, how many of them are unkeyed,
    and the first break (``None``: intact)."""

    checked: int
    unkeyed: int
    broken: ChainBreak | None
    first_unkeyed: int | None = None


def verify_chain(
    tenant: str,
    rows: Iterable[AuditRow],
    head: tuple[int, str] | Callable[[], tuple[int, str] | None] | None,
    keys: AuditKeyring | None,
    anchors: Mapping[int, Anchor] | None = None,
) -> ChainOutcome:
    """Walk one tenant's rows in ``seq`` order, up to the first break. ``head`` is the
    store's ``(seq, hash)`` of the newest record (a chain cut short at the end breaks
    there), or a callable that gives it once the rows are walked (a live store's head
    is read after its records); ``keys`` verify keyed records (``None``: no key — a
    keyed record cannot be verified); ``anchors`` (by seq) are what signed checkpoints
    saw."""
    walk = _Walk(tenant, keys, anchors or {})
    for row in rows:
        broken = walk.step(row)
        if broken is not None:
            return walk.outcome(broken)
    return walk.outcome(walk.finish(head() if callable(head) else head))


class _Walk:
    """The state of one chain's walk."""

    def __init__(self, tenant: str, keys: AuditKeyring | None, anchors: Mapping[int, Anchor]):
        self.tenant = tenant
        self.keys = keys
        self.anchors = anchors
        self.expected_prev = GENESIS
        self.expected_seq = 1
        self.checked = 0
        self.unkeyed = 0
        self.seen_keyed = False
        self.unsealed_from: int | None = None  # first unkeyed record no keyed one follows
        self.first_unkeyed: int | None = None

    def outcome(self, broken: ChainBreak | None) -> ChainOutcome:
        return ChainOutcome(self.checked, self.unkeyed, broken, self.first_unkeyed)

    def _break(self, seq: int, problem: str) -> ChainBreak:
        return ChainBreak(self.tenant, seq, problem)

    def step(self, row: AuditRow) -> ChainBreak | None:
        seq = self.expected_seq
        if row.seq != seq:
            what = "missing" if row.seq > seq else "duplicated or out of order"
            return self._break(seq, f"record {seq} is {what}")
        if row.prev_hash != self.expected_prev:
            return self._break(
                seq,
                "prev_hash does not match the previous record's hash "
                "(a record was removed, inserted or replaced before it)",
            )
        keyed = self._keyed(row)
        if isinstance(keyed, ChainBreak):
            return keyed
        anchor = self.anchors.get(seq)
        if anchor is not None and anchor.head != row.hash:
            return self._break(
                seq,
                f"record {seq} does not match the signed checkpoint of {_iso(anchor.ts_us)}: "
                f"records up to {seq} were rewritten after it",
            )
        if keyed:
            self.seen_keyed = True
            self.unsealed_from = None
        elif self.seen_keyed:  # only a verifier with keys has seen a keyed record
            return self._break(
                seq,
                f"record {seq} is unkeyed (plain SHA-256) after keyed records: a keyed "
                "record was rewritten without the key (a downgrade), or appended by a "
                "process without it",
            )
        else:
            self.unkeyed += 1
            if self.first_unkeyed is None:
                self.first_unkeyed = seq
            if self.unsealed_from is None:
                self.unsealed_from = seq
        self.expected_prev = row.hash
        self.expected_seq += 1
        self.checked += 1
        return None

    def _keyed(self, row: AuditRow) -> bool | ChainBreak:
        """Whether the row verifies as keyed (True) or unkeyed (False), or the break."""
        if row.key_id is not None:
            key = self.keys.get(row.key_id) if self.keys is not None else None
            if key is None:
                return self._break(
                    row.seq,
                    f"record {row.seq} is keyed with key id {row.key_id}, which this "
                    "verifier does not have: give it the audit key it was written with",
                )
            if key.digest(_material(row)) != row.hash:
                return self._break(row.seq, "hash mismatch: the record was modified")
            return True
        material = _material(row)
        if hashlib.sha256(material).hexdigest() == row.hash:
            return False
        # Written before key ids, under INTERLOCK_AUDIT_KEY: HMAC without an id.
        if self.keys is not None and any(k.digest(material) == row.hash for k in self.keys):
            return True
        return self._break(row.seq, "hash mismatch: the record was modified")

    def finish(self, head: tuple[int, str] | None) -> ChainBreak | None:
        last_seq = self.expected_seq - 1
        if head is None:
            if self.checked:
                return self._break(last_seq, "the chain has no head record (it was removed)")
        else:
            head_seq, head_hash = head
            if head_seq > last_seq:
                return self._break(
                    last_seq + 1,
                    f"records {last_seq + 1}..{head_seq} are missing "
                    f"(the chain head is at {head_seq})",
                )
            if head_seq < last_seq or head_hash != self.expected_prev:
                return self._break(last_seq, "the chain head does not match the last record")
        newest = max(self.anchors.values(), key=lambda a: a.seq, default=None)
        if newest is not None and newest.seq > last_seq:
            if last_seq == 0:
                return self._break(
                    1,
                    f"the tenant has no records, but the signed checkpoint of "
                    f"{_iso(newest.ts_us)} saw {newest.seq}: its chain was deleted",
                )
            return self._break(
                last_seq + 1,
                f"records {last_seq + 1}..{newest.seq} are missing: the signed checkpoint "
                f"of {_iso(newest.ts_us)} saw record {newest.seq} (the tail was cut and "
                "the head moved back)",
            )
        if self.keys is not None and self.unsealed_from is not None:
            return self._break(
                self.unsealed_from,
                f"records {self.unsealed_from}..{last_seq} are unkeyed (plain SHA-256) and no "
                "keyed record follows them: anyone could have written them (rewritten "
                "without the key, or by a process without it). If they predate the key, "
                "vouch for them once with `interlock audit seal`",
            )
        return None


def _iso(ts_us: int) -> str:
    try:
        moment = datetime.fromtimestamp(ts_us / 1e6, tz=UTC)
    except (OverflowError, OSError, ValueError):
        return str(ts_us)
    return moment.isoformat(timespec="seconds").replace("+00:00", "Z")
