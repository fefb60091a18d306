"""The ``interlock`` commands over the durable store.

    interlock db migrate                       # apply pending migrations
    interlock db status                        # exit 1 while one is pending
    interlock audit verify                     # exit 1 naming each broken link (cli_audit)
    interlock audit tail -n 20                 # newest records, newest last
    interlock audit export --since 2024-05-01 --output audit.jsonl
    interlock approvals list                   # pending requests
    interlock approvals approve apr_... --as alice --reason "order checked"
    interlock budgets status
    interlock budgets reap
    interlock budgets reopen BUDGET_ID --tenant T [--scope KEY] --as ADMIN

Every command takes ``--database/-d URL`` (default: ``$INTERLOCK_DATABASE_URL``, else
``sqlite:///$INTERLOCK_DATA_DIR/interlock.db``, i.e. ``./.interlock/interlock.db``).
Exit codes: 0 done; 1 a finding (a broken chain, a pending migration, an approval
that does not exist or cannot be decided); 2 a usage error or a store that cannot be
used. Times print as ISO-8601 UTC, amounts in their unit (``1.5`` USD, not micro-units).
"""

from __future__ import annotations

import json
import os
import sys
from collections import deque
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import IO, Annotated, Any

import typer
from rich.table import Table
from rich.text import Text

from interlock.cli_console import EXIT_FAILED, err, fail, out
from interlock.core.decision import Verdict
from interlock.core.events import read_jsonl
from interlock.core.redaction import Redactor
from interlock.errors import ApprovalError, StoreError, message_of
from interlock.policy.specs import units_to_amount
from interlock.store import (
    ApprovalRecord,
    ApprovalStatus,
    AuditRow,
    BudgetRow,
    SqlStore,
    default_database_url,
    open_store,
)
from interlock.store.sql_approvals import has_words
from interlock.store.sqlite import SQLiteStore

__all__ = ["approvals_app", "audit_app", "budgets_app", "db_app"]

db_app = typer.Typer(help="Create and upgrade the store's schema.", no_args_is_help=True)
audit_app = typer.Typer(help="Verify, read and export the audit log.", no_args_is_help=True)
approvals_app = typer.Typer(help="List, inspect and decide approvals.", no_args_is_help=True)
budgets_app = typer.Typer(help="Budget counters and the reaper.", no_args_is_help=True)

DatabaseOption = Annotated[
    str | None,
    typer.Option(
        "--database",
        "-d",
        help="sqlite:///path or postgresql://... (default: $INTERLOCK_DATABASE_URL, "
        "else sqlite:///.interlock/interlock.db).",
        show_default=False,
    ),
]
TenantOption = Annotated[str | None, typer.Option(help="Only this tenant.", show_default=False)]
JsonOption = Annotated[bool, typer.Option("--json", help="JSON, one object per line.")]

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_VERDICTS = tuple(verdict.value for verdict in Verdict)
_STATUSES = (*(status.value for status in ApprovalStatus), "all")
_ACTION_WIDTH = 60
_REDACTOR = Redactor()


# -- shared ------------------------------------------------------------------------


@contextmanager
def _opened(
    database: str | None, *, migrate: bool = True, create: bool = False
) -> Iterator[SqlStore]:
    """The store the URL names, closed afterwards; a store error is ``error: ...``
    and exit 2 (approval refusals are caught, with exit 1, by their commands).

    Only ``create`` makes a new SQLite file: reading a mistyped path must not report
    an empty, intact log."""
    try:
        store = open_store(database or default_database_url(), migrate=False)
    except (StoreError, ImportError) as exc:  # ImportError: the postgres extra is missing
        raise fail(message_of(exc)) from None
    try:
        missing = _missing_file(store)
        if missing is not None and not create:
            raise fail(f"no database at {missing}: create it with `interlock db migrate`")
        if migrate:
            store.migrate()
        yield store
    except StoreError as exc:
        raise fail(message_of(exc)) from None
    finally:
        store.close()


def _missing_file(store: SqlStore) -> Path | None:
    """The SQLite file the store would create, if it does not exist yet."""
    if isinstance(store, SQLiteStore) and not store.path.exists():
        return store.path
    return None


def _iso(us: int, *, precise: bool = False) -> str:
    """``2024-05-01T12:00:00Z`` (``precise``: with microseconds)."""
    try:
        moment = _EPOCH + timedelta(microseconds=us)
    except OverflowError:  # not a time any clock wrote: show the number
        return str(us)
    spec = "microseconds" if precise else "seconds"
    return moment.isoformat(timespec=spec).replace("+00:00", "Z")


def _instant(option: str, text: str | None) -> int | None:
    """Microseconds since the epoch from an ISO-8601 date or date-time; naive is UTC."""
    if text is None:
        return None
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        raise fail(
            f"{option} {text!r} is not an ISO-8601 date or date-time "
            "(e.g. 2024-05-01, 2024-05-01T12:30:00 or 2024-05-01T12:30:00+02:00)"
        ) from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return (moment - _EPOCH) // timedelta(microseconds=1)


def _amount(units: int, unit: str) -> str:
    """``1.5`` for 1 500 000 micro-units of a currency; tokens as they are."""
    text = format(units_to_amount(units, unit), "f")
    return text.rstrip("0").rstrip(".") if "." in text else text


def _write_lines(objects: Iterable[dict[str, Any]], stream: IO[str]) -> int:
    count = 0
    for obj in objects:
        stream.write(json.dumps(obj, default=str) + "\n")
        count += 1
    return count


def _table(*columns: str, no_wrap: tuple[str, ...] = ()) -> Table:
    table = Table()
    for column in columns:
        table.add_column(column, overflow="fold", no_wrap=column in no_wrap)
    return table


def _count(number: int, noun: str) -> str:
    return f"{number} {noun}{'' if number == 1 else 's'}"


def _row(table: Table, *cells: object) -> None:
    """Cells as plain text: stored values are never read as rich markup."""
    table.add_row(*(Text("" if cell is None else str(cell)) for cell in cells))


# -- db ----------------------------------------------------------------------------


@db_app.command("migrate")
def db_migrate(database: DatabaseOption = None) -> None:
    """Apply the pending schema migrations."""
    with _opened(database, migrate=False, create=True) as store:
        applied = store.migrate()
        url = store.url
    for name in applied:
        out.print(Text(f"applied {name}"))
    if not applied:
        out.print(Text(f"{url}: up to date"))


@db_app.command("status")
def db_status(database: DatabaseOption = None) -> None:
    """List every migration and whether it is applied; exit 1 while one is pending."""
    with _opened(database, migrate=False, create=True) as store:
        missing = _missing_file(store)
        status = [] if missing is not None else store.migration_status()
        url = store.url
    if missing is not None:
        out.print(Text(f"no database at {missing} yet; run: interlock db migrate"))
        raise typer.Exit(EXIT_FAILED)
    table = _table("version", "name", "applied")
    for version, name, applied in status:
        _row(table, f"{version:04d}", name, "yes" if applied else "no")
    out.print(table)
    pending = sum(not applied for _, _, applied in status)
    if pending:
        out.print(Text(f"{url}: {pending} pending; run: interlock db migrate"))
        raise typer.Exit(EXIT_FAILED)
    out.print(Text(f"{url}: up to date"))


# -- audit -------------------------------------------------------------------------


def _audit_json(row: AuditRow) -> dict[str, Any]:
    """One exported record: the row's columns, its time in ISO and its parsed body."""
    try:
        record: Any = json.loads(row.body)
    except ValueError:  # a body edited into something that is not JSON: as it is
        record = row.body
    return {
        "tenant": row.tenant,
        "seq": row.seq,
        "ts": _iso(row.ts_us, precise=True),
        "ts_us": row.ts_us,
        "kind": row.kind,
        "decision_id": row.decision_id,
        "agent": row.agent,
        "decision": row.decision,
        "record": record,
        "prev_hash": row.prev_hash,
        "hash": row.hash,
    }


def _what(record: dict[str, Any]) -> str:
    """What a record is about: ``tool shell`` for a decision, the approval id for one."""
    action = record.get("action")
    if isinstance(action, dict):
        return f"{action.get('kind', '')} {action.get('name', '')}"
    if "approval_id" in record:
        return f"approval {record['approval_id']}"
    if "effect_id" in record:
        return f"effect {record['effect_id']} ({record.get('event', '')})"
    if "reservation_id" in record:
        return f"reservation {record['reservation_id']}"
    for key in ("tool", "model"):
        if isinstance(record.get(key), str):
            return f"{key} {record[key]}"
    return ""


def _outcome(record: dict[str, Any]) -> str:
    kind = record.get("kind")
    if kind == "approval":
        return f"{record.get('status', '')} by {record.get('decided_by', '')}"
    if kind in (
        "tool_invoke",
        "tool_result",
        "llm_input",
        "llm_output",
        "outcome_unknown",
        "budget",
    ):
        from interlock.store.story import describe_step

        step, _ = describe_step(str(kind), record)
        return f"{step} ({record.get('decision_id') or ''})" if record.get("decision_id") else step
    if "effect_id" in record:
        return str(record.get("status", ""))
    verdict = str(record.get("decision", record.get("kind", "")))
    shadow = record.get("shadow")
    if isinstance(shadow, dict):
        verdict += f" (shadow: would {shadow.get('decision')})"
    return verdict


def _rules(record: dict[str, Any]) -> str:
    rule_ids = record.get("rule_ids")
    return ", ".join(str(rule) for rule in rule_ids) if isinstance(rule_ids, list) else ""


@audit_app.command("tail")
def audit_tail(
    database: DatabaseOption = None,
    events: Annotated[
        Path | None,
        typer.Option(help="Read this JSONL event file (from --events) instead of the store."),
    ] = None,
    lines: Annotated[int, typer.Option("-n", "--lines", min=1, help="How many records.")] = 20,
    tenant: TenantOption = None,
    kind: Annotated[
        str | None,
        typer.Option(help="Only this record kind (decision, approval, tool_result, budget, ...)."),
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON lines.")] = False,
) -> None:
    """Show the newest records, newest last: from the store, or from an event file."""
    if events is not None:
        _tail_events(events, lines, tenant, as_json)
        return
    with _opened(database) as store:
        rows = list(store.audit_rows(tenant=tenant, kind=kind, newest_first=True, limit=lines))
    rows.reverse()
    if as_json:
        _write_lines((_audit_json(row) for row in rows), sys.stdout)
        return
    if not rows:
        out.print(Text("no audit records" + (f" for tenant {tenant!r}" if tenant else "")))
        return
    table = _table("time", "tenant", "seq", "agent", "action", "decision", "rules")
    for row in rows:
        record = _audit_json(row)["record"]
        record = record if isinstance(record, dict) else {"kind": row.kind}
        _row(
            table,
            _iso(row.ts_us),
            row.tenant,
            row.seq,
            row.agent or "",
            _what(record),
            _outcome(record),
            _rules(record),
        )
    out.print(table)


def _tail_events(events: Path, lines: int, tenant: str | None, as_json: bool) -> None:
    if not events.exists():
        raise fail(f"{events}: no such event file")
    try:
        records = deque(
            (r for r in read_jsonl(events) if tenant is None or r.get("tenant") == tenant),
            maxlen=lines,
        )
    except ValueError as exc:
        raise fail(f"{events}: not a JSONL event file: {exc}") from None
    if as_json:
        _write_lines(records, sys.stdout)
        return
    table = _table("decision id", "agent", "action", "decision", "rules", "µs")
    for record in records:
        _row(
            table,
            record.get("decision_id", ""),
            record.get("agent", ""),
            _what(record),
            _outcome(record),
            _rules(record),
            record.get("latency_us", ""),
        )
    out.print(table)


@audit_app.command("export")
def audit_export(
    database: DatabaseOption = None,
    fmt: Annotated[str, typer.Option("--format", help="Output format: jsonl.")] = "jsonl",
    since: Annotated[
        str | None, typer.Option(help="From this ISO date or time (inclusive; naive = UTC).")
    ] = None,
    until: Annotated[
        str | None, typer.Option(help="Before this ISO date or time (exclusive; naive = UTC).")
    ] = None,
    tenant: TenantOption = None,
    agent: Annotated[str | None, typer.Option(help="Only this agent.")] = None,
    decision: Annotated[
        str | None, typer.Option(help=f"Only this verdict: {', '.join(_VERDICTS)}.")
    ] = None,
    kind: Annotated[
        str | None, typer.Option(help="Only this record kind (decision, approval, ...).")
    ] = None,
    output: Annotated[
        Path | None, typer.Option("--output", "-o", help="Write here (default: stdout).")
    ] = None,
) -> None:
    """Export audit records as JSON lines, oldest first, streaming."""
    if fmt != "jsonl":
        raise fail(f"unknown export format {fmt!r}: the only format is jsonl")
    if decision is not None and decision not in _VERDICTS:
        raise fail(f"--decision must be one of {', '.join(_VERDICTS)}, not {decision!r}")
    since_us = _instant("--since", since)
    until_us = _instant("--until", until)
    if since_us is not None and until_us is not None and since_us >= until_us:
        raise fail(f"--since {since} is not before --until {until}")
    with _opened(database) as store:
        rows = store.audit_rows(
            tenant=tenant,
            since_us=since_us,
            until_us=until_us,
            agent=agent,
            decision=decision,
            kind=kind,
        )
        records = (_audit_json(row) for row in rows)
        if output is None:
            _write_lines(records, sys.stdout)
            return
        count = _export_to(output, records)
    err.print(Text(f"exported {_count(count, 'record')} to {output}"))


def _export_to(output: Path, records: Iterable[dict[str, Any]]) -> int:
    """Write to ``output`` through a ``.partial`` file, so a failed export leaves no
    file that looks complete."""
    partial = output.with_name(output.name + ".partial")
    try:
        with partial.open("w", encoding="utf-8") as stream:
            count = _write_lines(records, stream)
        partial.replace(output)
    except OSError as exc:
        partial.unlink(missing_ok=True)
        raise fail(f"{output}: {exc.strerror or exc}") from None
    except BaseException:
        partial.unlink(missing_ok=True)
        raise
    return count


# -- approvals ---------------------------------------------------------------------


ApprovalIdArgument = Annotated[str, typer.Argument(help="The approval id (apr_...).")]


def _approval_json(record: ApprovalRecord) -> dict[str, Any]:
    data = record.as_dict()
    data["action"] = _REDACTOR.redact_value(record.action)
    data["context"] = _REDACTOR.redact_value(record.context)
    data["created"] = _iso(record.created_us)
    data["expires"] = _iso(record.expires_us)
    data["decided"] = None if record.decided_us is None else _iso(record.decided_us)
    data["claimed"] = None if record.claimed_us is None else _iso(record.claimed_us)
    return data


def _action_text(action: dict[str, Any], width: int | None = _ACTION_WIDTH) -> str:
    """``tool refund_order({"amount":250})``, cut to ``width`` characters."""
    arguments = action.get("arguments")
    compact = json.dumps(arguments, separators=(",", ":"), default=str) if arguments else ""
    text = f"{action.get('kind', '')} {action.get('name', '')}({compact})".strip()
    if width is not None and len(text) > width:
        return text[: width - 1] + "…"
    return text


@approvals_app.command("list")
def approvals_list(
    database: DatabaseOption = None,
    status: Annotated[str, typer.Option(help=f"One of {', '.join(_STATUSES)}.")] = "pending",
    tenant: TenantOption = None,
    limit: Annotated[int, typer.Option(min=1, help="At most this many, newest first.")] = 100,
    as_json: JsonOption = False,
) -> None:
    """List approvals, newest first (default: the pending ones)."""
    if status not in _STATUSES:
        raise fail(f"--status must be one of {', '.join(_STATUSES)}, not {status!r}")
    wanted = None if status == "all" else ApprovalStatus(status)
    with _opened(database) as store:
        records = store.list_approvals(tenant=tenant, status=wanted, limit=limit)
    if as_json:
        _write_lines((_approval_json(record) for record in records), sys.stdout)
        return
    if not records:
        out.print(Text(f"no {'' if status == 'all' else status + ' '}approvals"))
        return
    table = _table(
        "id",
        "tenant",
        "status",
        "agent",
        "action",
        "rules",
        "reason",
        "created",
        "expires",
        no_wrap=("id", "status", "created", "expires"),
    )
    for record in records:
        action = _REDACTOR.redact_value(record.action)
        _row(
            table,
            record.id,
            record.tenant,
            record.status.value,
            record.requested_by or "",
            _action_text(action if isinstance(action, dict) else {}),
            ", ".join(record.rule_ids),
            record.reason,
            _iso(record.created_us),
            _iso(record.expires_us),
        )
    out.print(table)


@approvals_app.command("show")
def approvals_show(
    approval_id: ApprovalIdArgument,
    database: DatabaseOption = None,
    tenant: TenantOption = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print it as JSON.")] = False,
) -> None:
    """Everything about one approval: the action, its context and the decision."""
    with _opened(database) as store:
        try:
            record = store.get_approval(approval_id, tenant=tenant)
        except ApprovalError as exc:
            raise fail(message_of(exc), code=EXIT_FAILED) from None
    data = _approval_json(record)
    if as_json:
        sys.stdout.write(json.dumps(data, indent=2, default=str) + "\n")
        return
    decided = "—"
    if record.decided_by is not None:
        decided = f"by {record.decided_by} at {data['decided']}"
        if record.decision_reason:
            decided += f": {record.decision_reason}"
    fields = Table.grid(padding=(0, 2))
    for name, value in (
        ("approval", record.id),
        ("tenant", record.tenant),
        ("status", record.status.value),
        ("requested", f"by {record.requested_by or '?'} at {data['created']}"),
        ("expires", data["expires"]),
        ("decided", decided),
        ("claimed", data["claimed"] or "—"),
        ("rules", ", ".join(record.rule_ids)),
        ("reason", record.reason),
        ("intent hash", record.intent_hash),
    ):
        fields.add_row(Text(name, style="bold"), Text(str(value)))
    out.print(fields)
    for name in ("action", "context"):
        out.print(Text(name, style="bold"))
        out.print(Text(json.dumps(data[name], indent=2, sort_keys=True, default=str)))


ApproverOption = Annotated[
    str | None,
    typer.Option(
        "--as",
        help="Who decides (default: $INTERLOCK_APPROVER). Required: a decision names its "
        "approver, and the requester cannot decide its own request.",
        show_default=False,
    ),
]
ReasonOption = Annotated[
    str, typer.Option(help="Why (required): kept with the approval, audited and shown.")
]
ReasonOptionalOption = Annotated[
    bool,
    typer.Option(
        "--reason-optional",
        help="Decide without a reason (as `interlock serve --approval-reason-optional`).",
    ),
]


@approvals_app.command("approve")
def approvals_approve(
    approval_id: ApprovalIdArgument,
    approver: ApproverOption = None,
    reason: ReasonOption = "",
    reason_optional: ReasonOptionalOption = False,
    tenant: TenantOption = None,
    database: DatabaseOption = None,
) -> None:
    """Approve a pending request: the identical call, retried, may then run once."""
    _decide(
        approval_id, ApprovalStatus.APPROVED, approver, reason, tenant, database, reason_optional
    )


@approvals_app.command("deny")
def approvals_deny(
    approval_id: ApprovalIdArgument,
    approver: ApproverOption = None,
    reason: ReasonOption = "",
    reason_optional: ReasonOptionalOption = False,
    tenant: TenantOption = None,
    database: DatabaseOption = None,
) -> None:
    """Deny a pending request: the identical call is denied until the denial lapses."""
    _decide(approval_id, ApprovalStatus.DENIED, approver, reason, tenant, database, reason_optional)


def _decide(
    approval_id: str,
    status: ApprovalStatus,
    approver: str | None,
    reason: str,
    tenant: str | None,
    database: str | None,
    reason_optional: bool = False,
) -> None:
    # Stripped, so that "bot " cannot pass for someone other than "bot".
    identity = approver if approver is not None else os.environ.get("INTERLOCK_APPROVER", "")
    identity = identity.strip()
    if not identity:
        raise fail(
            "a decision must name its approver: pass --as IDENTITY or set INTERLOCK_APPROVER"
        )
    if not reason_optional and not has_words(reason):
        raise fail(
            "a decision needs a reason: pass --reason TEXT (kept with the approval, audited "
            "and shown to whoever reads it), or --reason-optional"
        )
    with _opened(database) as store:
        decide = store.approve if status is ApprovalStatus.APPROVED else store.deny
        try:
            record = decide(
                approval_id,
                by=identity,
                reason=reason,
                tenant=tenant,
                require_reason=not reason_optional,
            )
        except ApprovalError as exc:
            raise fail(message_of(exc), code=EXIT_FAILED) from None
    effect = "may run once" if status is ApprovalStatus.APPROVED else "is denied"
    out.print(
        Text(
            f"approval {record.id}: {record.status.value} by {identity}; the identical call "
            f"{effect} until {_iso(record.expires_us)}"
        )
    )


# -- budgets -----------------------------------------------------------------------


_BUDGET_COLUMNS = (
    ("tenant", "tenant"),
    ("budget", "budget_id"),
    ("scope key", "scope_key"),
    ("window start", "window_start"),
    ("unit", "unit"),
    ("cap", "cap"),
    ("spent", "spent"),
    ("reserved", "reserved"),
    ("held for overruns", "headroom"),
    ("available", "available"),
    ("overage", "overage"),
    ("excess", "excess"),
    ("closed since", "closed"),
)


def _budget_json(row: BudgetRow) -> dict[str, Any]:
    return {
        "tenant": row.tenant,
        "budget_id": row.budget_id,
        "scope_key": row.scope_key,
        "window_start": None if row.window_start == 0 else _iso(row.window_start * 1_000_000),
        "unit": row.unit,
        **{
            name: _amount(units, row.unit)
            for name, units in (
                ("cap", row.cap),
                ("spent", row.spent),
                ("reserved", row.reserved),
                ("headroom", row.headroom),
                ("available", row.available),
                ("overage", row.overage),
                ("excess", row.excess),
            )
        },
        "closed": None if row.closed_us is None else _iso(row.closed_us),
        "updated": _iso(row.updated_us),
    }


@budgets_app.command("status")
def budgets_status(
    database: DatabaseOption = None,
    tenant: TenantOption = None,
    budget: Annotated[str | None, typer.Option(help="Only this budget id.")] = None,
    as_json: JsonOption = False,
) -> None:
    """Every budget counter: cap, spent, reserved, held for overruns, available,
    overage, excess, and since when an overrun closed it."""
    with _opened(database) as store:
        rows = store.budget_rows(tenant=tenant, budget_id=budget)
    data = [_budget_json(row) for row in rows]
    if as_json:
        _write_lines(data, sys.stdout)
        return
    if not data:
        out.print(Text("no budget counters yet"))
        return
    table = _table(*(heading for heading, _ in _BUDGET_COLUMNS))
    for item in data:
        _row(table, *(item[key] or "—" for _, key in _BUDGET_COLUMNS))
    out.print(table)


@budgets_app.command("reap")
def budgets_reap(database: DatabaseOption = None) -> None:
    """Expire reservations past their TTL (charged in full: nobody said the call did
    not run) and lapsed approvals, now."""
    with _opened(database) as store:
        result = store.reap()
    out.print(
        Text(
            f"charged {result.reservations} expired reservation(s); "
            f"expired {result.approvals} approval(s)"
        )
    )


@budgets_app.command("reopen")
def budgets_reopen(
    budget_id: Annotated[str, typer.Argument(help="The budget's id in the policy.")],
    tenant: Annotated[str, typer.Option(help="The tenant whose budget it is.")],
    scope: Annotated[
        str | None,
        typer.Option(
            help="Only this scope key (e.g. agent:support-bot); default: every closed one.",
            show_default=False,
        ),
    ] = None,
    admin: Annotated[
        str | None,
        typer.Option(
            "--as",
            help="Who reopens, for the audit log (default: $INTERLOCK_ADMIN). Required.",
            show_default=False,
        ),
    ] = None,
    database: DatabaseOption = None,
) -> None:
    """Reopen a budget a call's overrun closed: it admits reservations again (its
    counters keep what they spent). Recorded in the tenant's audit log."""
    from interlock.store.audit import AuditWriter

    identity = (admin if admin is not None else os.environ.get("INTERLOCK_ADMIN", "")).strip()
    if not identity:
        raise fail("reopening a budget names who does it: pass --as NAME or set INTERLOCK_ADMIN")
    with _opened(database) as store:
        lifted = store.reopen_budget(tenant=tenant, budget_id=budget_id, scope_key=scope)
        if not lifted:
            where = f" ({scope})" if scope else ""
            raise fail(
                f"budget {budget_id!r}{where} of tenant {tenant!r} is not closed",
                code=EXIT_FAILED,
            )
        writer = AuditWriter(store, durability="process")
        try:
            writer.write_record(
                tenant,
                "budget",
                {
                    "status": "reopened",
                    "budget_id": budget_id,
                    "reopened": [closure.as_dict() for closure in lifted],
                    "by": identity,
                },
            )
        finally:
            writer.close()
        units = {
            row.scope_key: row.unit for row in store.budget_rows(tenant=tenant, budget_id=budget_id)
        }
    for closure in lifted:
        excess = closure.excess
        unit = units.get(closure.scope_key)
        shown = f"{_amount(excess, unit)} {unit}" if unit else f"{excess} units"
        out.print(
            Text(
                f"budget {budget_id} ({closure.scope_key}) reopened by {identity}; closed "
                f"since {_iso(closure.closed_us)}, when reservation {closure.reservation_id} "
                f"ran {shown} past its reservation and max_overage"
            )
        )
