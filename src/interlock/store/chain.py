"""The audit hash chain: how a record is encoded, linked and checked. Pure.

Each tenant has its own chain. Record ``seq`` (1, 2, 3, ...) stores ``prev_hash`` (the
hash of record ``seq - 1``; :data:`GENESIS` for the first) and ``hash``: SHA-256 (or
HMAC-SHA256 with a key, see below) over the UTF-8 of the fields
``prev_hash, tenant, seq, ts_us, kind, decision_id, agent, decision, body``, each
written as ``<length>:<text>`` (length in characters; numbers in decimal; a missing
field as ``~``) — an unambiguous encoding, so any field edited, a record deleted,
inserted or moved breaks a link that :func:`verify_rows` names.

With ``INTERLOCK_AUDIT_KEY`` set (any secret string), links are HMAC-SHA256 under that
key: then even someone who can rewrite the whole table cannot forge a chain that
verifies without the key.

Example::

    from interlock.store.chain import GENESIS, link_hash

    h1 = link_hash(GENESIS, "acme", 1, 1_700_000_000_000_000, "decision", "dec_1",
                   "bot", "allow", '{"kind":"decision"}')
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
from collections.abc import Iterable, Iterator
from typing import Any, Final

from interlock.store.records import AuditRow, ChainBreak

__all__ = ["GENESIS", "audit_key", "encode_body", "link_hash", "row_hash", "verify_rows"]

GENESIS: Final = "0" * 64


def audit_key() -> bytes | None:
    """The HMAC key from ``INTERLOCK_AUDIT_KEY``, if set."""
    key = os.environ.get("INTERLOCK_AUDIT_KEY")
    return key.encode() if key else None


def encode_body(record: dict[str, Any]) -> str:
    """The stored form of a (redacted) record: sorted-key, compact, ASCII JSON."""
    return json.dumps(
        record, sort_keys=True, separators=(",", ":"), ensure_ascii=True, default=_default
    )


def _default(value: Any) -> Any:
    if isinstance(value, (set, frozenset, tuple)):
        return list(value)
    return repr(value)[:200]


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
    """The hash of one link (hex)."""
    material = "".join(
        [
            _field(prev_hash),
            _field(tenant),
            _field(str(seq)),
            _field(str(ts_us)),
            _field(kind),
            _field(decision_id),
            _field(agent),
            _field(decision),
            _field(body),
        ]
    ).encode("utf-8", "surrogatepass")
    if key is not None:
        return hmac.new(key, material, hashlib.sha256).hexdigest()
    return hashlib.sha256(material).hexdigest()


def _field(text: str | None) -> str:
    return "~" if text is None else f"{len(text)}:{text}"


def row_hash(row: AuditRow, key: bytes | None = None) -> str:
    return link_hash(
        row.prev_hash,
        row.tenant,
        row.seq,
        row.ts_us,
        row.kind,
        row.decision_id,
        row.agent,
        row.decision,
        row.body,
        key,
    )


def verify_rows(
    tenant: str,
    rows: Iterable[AuditRow],
    head: tuple[int, str] | None,
    key: bytes | None = None,
) -> Iterator[ChainBreak | int]:
    """Walk one tenant's rows in ``seq`` order. Yields the first :class:`ChainBreak`
    (and stops), else the number of records checked. ``head`` is the store's
    ``(seq, hash)`` of the newest record: a chain cut short at the end breaks there."""
    expected_prev = GENESIS
    expected_seq = 1
    count = 0
    for row in rows:
        if row.seq != expected_seq:
            what = "missing" if row.seq > expected_seq else "duplicated or out of order"
            yield ChainBreak(tenant, expected_seq, f"record {expected_seq} is {what}")
            return
        if row.prev_hash != expected_prev:
            yield ChainBreak(
                tenant,
                row.seq,
                "prev_hash does not match the previous record's hash "
                "(a record was removed, inserted or replaced before it)",
            )
            return
        if row_hash(row, key) != row.hash:
            yield ChainBreak(tenant, row.seq, "hash mismatch: the record was modified")
            return
        expected_prev = row.hash
        expected_seq += 1
        count += 1
    last_seq = expected_seq - 1
    if head is None:
        if count:
            yield ChainBreak(tenant, last_seq, "the chain has no head record (it was removed)")
            return
    else:
        head_seq, head_hash = head
        if head_seq > last_seq:
            yield ChainBreak(
                tenant,
                last_seq + 1,
                f"records {last_seq + 1}..{head_seq} are missing (the chain head is at {head_seq})",
            )
            return
        if head_seq < last_seq or head_hash != expected_prev:
            yield ChainBreak(tenant, last_seq, "the chain head does not match the last record")
            return
    yield count
