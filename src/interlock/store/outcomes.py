"""Outcomes in the audit chain: what happened after a decision let a call run.

A decision record says whether a call may run; outcome records, in the same
per-tenant chain and carrying the same ``decision_id``, say what happened:

- ``tool_invoke`` / ``llm_input`` — the body starts. Written *durable before the body
  runs* (when the log's durability waits), so a process killed mid-body leaves it;
- ``tool_result`` / ``llm_output`` — it returned (a SHA-256 ``digest`` of the result's
  text form and a bounded, redacted ``preview``) or raised (``error_type`` and a
  redacted ``error``). Group-committed after the body: never waited for;
- ``budget`` — a reservation committed, released or, by the reaper, ``expired``
  (charged in full): already recorded by the guard and the reaper;
- ``outcome_unknown`` — appended by :func:`recover_outcomes` for a start with no end.

**The outcome-unknown rule.** A ``tool_invoke`` or ``llm_input`` record older than
``older_than`` seconds with no ``tool_result`` / ``llm_output`` / ``outcome_unknown`` of
the same decision id after it in its tenant's chain gets one ``outcome_unknown``
record, naming the start it closes. The reaper runs the pass every round (bound: the
guard's ``outcome_bound``, one hour by default: longer than a body may run) and
``interlock audit recover --older-than SECONDS`` runs it by hand after a crash. A
body that outlives the bound and reports after all still appends its result: the
story then reads "outcome unknown", then the late result.

Example::

    from interlock.store import open_store
    from interlock.store.outcomes import recover_outcomes

    store = open_store("sqlite:///.interlock/interlock.db")
    recover_outcomes(store, older_than=0.0)  # after a crash: close every open start
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Final, NamedTuple

from interlock.core.phases import digest
from interlock.store.chain import encode_body

if TYPE_CHECKING:
    from interlock.store.sql import SqlStore
    from interlock.store.sql_base import AuditEntry

__all__ = [
    "ENDS",
    "OUTCOME_KINDS",
    "STARTS",
    "Recovery",
    "digest",
    "recover_outcomes",
]

#: Records that open an execution, and those that close one.
STARTS: Final = ("tool_invoke", "llm_input")
ENDS: Final = ("tool_result", "llm_output", "outcome_unknown")
OUTCOME_KINDS: Final = (*STARTS, *ENDS)


class Recovery(NamedTuple):
    """What a recovery pass did: ``appended`` outcome_unknown records; every start
    before ``checked_us`` is now closed (the next pass may begin there)."""

    appended: int
    checked_us: int


def recover_outcomes(
    store: SqlStore,
    *,
    older_than: float = 3600.0,
    now_us: int | None = None,
    since_us: int | None = None,
) -> Recovery:
    """Append ``outcome_unknown`` for every start older than ``older_than`` seconds
    that has no end (the module's rule). Idempotent: a start closed once is never
    closed again. ``since_us``: a previous pass's ``checked_us`` (only the records
    from then on are read: their ends always follow their starts)."""
    now = store.clock() if now_us is None else now_us
    cutoff = now - int(older_than * 1_000_000)
    entries: list[AuditEntry] = []
    for tenant in store.audit_tenants():
        open_starts: dict[str, tuple[int, str, int]] = {}
        rows = store.audit_rows(tenant=tenant, kinds=OUTCOME_KINDS, since_us=since_us, page=5000)
        for row in rows:
            if row.decision_id is None:
                continue
            if row.kind in STARTS:
                open_starts[row.decision_id] = (row.seq, row.kind, row.ts_us)
            else:
                open_starts.pop(row.decision_id, None)
        for decision_id, (seq, kind, ts_us) in open_starts.items():
            if ts_us > cutoff:
                continue  # may still be running
            record: dict[str, Any] = {
                "kind": "outcome_unknown",
                "decision_id": decision_id,
                "start": kind,
                "start_seq": seq,
                "started_us": ts_us,
                "reason": "the call started and never reported: its process stopped "
                f"(no result within {older_than:g} s)",
            }
            body = encode_body(record)
            entries.append((tenant, now, "outcome_unknown", decision_id, None, None, body))
    if entries:
        store.append_audit(entries)
    return Recovery(len(entries), cutoff)
