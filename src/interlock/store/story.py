"""One action's whole story, read from the audit chain: decided → approval requested,
decided, claimed → ran → result or error (or outcome unknown) → charged.

The records are joined by ids the chain already holds: the decision's own
``decision_id`` (its outcome records carry it), the approval id its record names (the
``approval`` record of the human's decision, and the later decision that claimed it),
and the reservation id (the ``budget`` records of its commit, release or reaping).

Example::

    from interlock.store import open_store
    from interlock.store.story import action_story

    story = action_story(open_store(), "d-0123")
    for step in story["steps"]:
        print(step["step"], step["summary"])
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from interlock.store.records import AuditRow
    from interlock.store.sql import SqlStore

__all__ = ["action_story", "describe_step"]


def _body(row: AuditRow) -> dict[str, Any]:
    try:
        record = json.loads(row.body)
    except ValueError:
        return {"kind": row.kind, "unreadable": row.body[:200]}
    return record if isinstance(record, dict) else {"kind": row.kind}


def action_story(store: SqlStore, decision_id: str, *, tenant: str | None = None) -> dict[str, Any]:
    """The records of one action, oldest first, each with its ``step`` and a one-line
    ``summary``; ``found`` is False when no record names ``decision_id``."""
    rows: dict[tuple[str, int], AuditRow] = {}
    own = list(store.audit_rows(decision_id=decision_id, tenant=tenant))
    for row in own:
        rows[(row.tenant, row.seq)] = row
    decisions = [row for row in own if row.kind == "decision"]
    tenants = {row.tenant for row in own}
    approvals: set[str] = set()
    reservations: set[str] = set()
    for row in decisions:
        record = _body(row)
        approval = record.get("approval")
        if isinstance(approval, dict) and isinstance(approval.get("id"), str):
            approvals.add(approval["id"])
        if isinstance(record.get("reservation_id"), str):
            reservations.add(record["reservation_id"])
    for scope in sorted(tenants):
        for approval_id in sorted(approvals):
            needle = json.dumps(approval_id)
            for row in store.audit_rows(tenant=scope, mentions=needle):
                record = _body(row)
                linked = record.get("approval_id") == approval_id or (
                    isinstance(record.get("approval"), dict)
                    and record["approval"].get("id") == approval_id
                )
                if linked and row.kind in ("approval", "decision"):
                    rows[(row.tenant, row.seq)] = row
                    if row.kind == "decision" and row.decision_id is not None:
                        # the claim's decision: what it ran and charged is this story too
                        for linked_row in store.audit_rows(
                            tenant=scope, decision_id=row.decision_id
                        ):
                            rows[(linked_row.tenant, linked_row.seq)] = linked_row
                            linked_record = _body(linked_row)
                            if isinstance(linked_record.get("reservation_id"), str):
                                reservations.add(linked_record["reservation_id"])
        for reservation_id in sorted(reservations):
            needle = f'"reservation_id":{json.dumps(reservation_id)}'
            for row in store.audit_rows(tenant=scope, kind="budget", mentions=needle):
                rows[(row.tenant, row.seq)] = row
    ordered = sorted(rows.values(), key=lambda row: (row.tenant, row.seq))
    steps = []
    for row in ordered:
        record = _body(row)
        step, summary = describe_step(row.kind, record, decision_id)
        steps.append(
            {
                "step": step,
                "summary": summary,
                "tenant": row.tenant,
                "seq": row.seq,
                "ts_us": row.ts_us,
                "kind": row.kind,
                "decision_id": row.decision_id,
                "record": record,
            }
        )
    return {
        "decision_id": decision_id,
        "found": bool(own),
        "outcome": _outcome(steps),
        "steps": steps,
    }


def _outcome(steps: list[dict[str, Any]]) -> str:
    """The story's end in a word: ``ran``, ``raised``, ``unknown``, ``running`` (a
    start, no end yet), ``not run`` (no start: denied, pending, or never executed)."""
    outcome = "not run"
    for step in steps:
        kind = step["kind"]
        if kind in ("tool_invoke", "llm_input") and outcome == "not run":
            outcome = "running"
        elif kind in ("tool_result", "llm_output"):
            outcome = "ran" if step["record"].get("ok") else "raised"
        elif kind == "outcome_unknown" and outcome in ("running", "not run"):
            outcome = "unknown"
    return outcome


def describe_step(
    kind: str, record: dict[str, Any], decision_id: str | None = None
) -> tuple[str, str]:
    """A record as a step of a story: its name and a one-line summary."""
    if kind == "decision":
        verdict = record.get("decision", "?")
        action = record.get("action")
        what = ""
        if isinstance(action, dict):
            what = f"{action.get('kind', '')} {action.get('name', '')}".strip()
        rules = ", ".join(str(r) for r in record.get("rule_ids") or [])
        approval = record.get("approval")
        mine = decision_id is None or record.get("decision_id") == decision_id
        if isinstance(approval, dict) and verdict == "require_approval":
            step = "approval requested"
        elif isinstance(approval, dict) and verdict == "allow":
            step = "approval claimed"
        else:
            step = "decided" if mine else "decided (related)"
        text = f"{what}: {verdict}"
        if rules:
            text += f" by {rules}"
        if record.get("reason"):
            text += f" — {record['reason']}"
        if isinstance(approval, dict):
            text += f" (approval {approval.get('id')})"
        return step, text
    if kind == "approval":
        status = record.get("status", "?")
        text = f"approval {record.get('approval_id')} {status} by {record.get('decided_by')}"
        if record.get("reason"):
            text += f": {record['reason']}"
        return f"approval {status}", text
    if kind in ("tool_invoke", "llm_input"):
        what = record.get("tool") or record.get("model") or ""
        return "started", f"{kind.replace('_', ' ')} {what}".strip()
    if kind in ("tool_result", "llm_output"):
        what = record.get("tool") or record.get("model") or ""
        took = f" in {record['duration_us'] / 1000:.1f} ms" if "duration_us" in record else ""
        if record.get("ok"):
            detail = record.get("digest") or ""
            if record.get("preview") is not None:
                detail += f" {record['preview']!r}"
            if isinstance(record.get("usage"), dict):
                usage = record["usage"]
                detail += f" {usage.get('input_tokens')} in / {usage.get('output_tokens')} out"
            return "result", f"{what} returned{took}: {detail.strip()}"
        raised = record.get("error_type", "an error")
        return "error", f"{what} raised {raised}{took}: {record.get('error', '')}"
    if kind == "outcome_unknown":
        return "outcome unknown", str(record.get("reason", "the call never reported"))
    if kind == "budget":
        status = record.get("status", "?")
        verb = {
            "committed": "charged",
            "released": "released",
            "expired": "reaped (charged in full)",
        }
        amounts = record.get("actual") if status != "released" else record.get("reserved")
        by = f" by {record['by']}" if record.get("by") else ""
        return f"budget {status}", f"{verb.get(status, status)}{by}: {amounts}"
    return kind, json.dumps(record, sort_keys=True)[:200]
