"""``interlock effects``: the recorded effect attempts, and reconciling the open ones.

    interlock effects list                          # newest first; --status indeterminate
    interlock effects show eff_...                  # one attempt, all of it
    interlock effects reconcile --adapter shop.effects:refunds        # every open one
    interlock effects reconcile eff_... --adapter shop.effects:refunds

``--adapter MODULE:ATTRIBUTE`` names the effect adapters to reconcile with (repeat it):
an adapter, a list of them, or a function returning either — reconciling asks the
provider, so the command needs the same adapter (base URL, lookup, credentials) the
agent used. Every command takes ``--database/-d URL`` as the other store commands do.
Exit codes: 0 done; 1 an attempt is still open (or no such attempt); 2 a usage error
or a store that cannot be used.
"""

from __future__ import annotations

import json
import sys
from datetime import UTC, datetime
from importlib import import_module
from typing import Annotated, Any

import typer
from rich.table import Table
from rich.text import Text

from interlock.cli_console import EXIT_FAILED, fail, out
from interlock.cli_store import DatabaseOption, JsonOption, TenantOption, _opened
from interlock.effects.protocol import EffectAdapter
from interlock.effects.records import EffectRecord, EffectStatus, get_effect, list_effects
from interlock.errors import EffectError, describe

__all__ = ["effects_app", "load_adapters"]

effects_app = typer.Typer(
    help="Effect attempts: list, show, reconcile the open ones.", no_args_is_help=True
)

_STATUSES = (*(status.value for status in EffectStatus), "open", "all")
AdapterOption = Annotated[
    list[str],
    typer.Option(
        "--adapter",
        help="MODULE:ATTRIBUTE of an effect adapter, a list of them, or a function "
        "returning either (repeatable).",
    ),
]


def _iso(us: int) -> str:
    return datetime.fromtimestamp(us / 1_000_000, UTC).isoformat(timespec="seconds")


def _json(record: EffectRecord) -> dict[str, Any]:
    data = record.as_dict()
    data["created"] = _iso(record.created_us)
    data["updated"] = _iso(record.updated_us)
    data["deadline"] = _iso(record.deadline_us)
    return data


def load_adapters(targets: list[str]) -> list[EffectAdapter]:
    """The adapters ``MODULE:ATTRIBUTE`` names (see the module)."""
    adapters: list[EffectAdapter] = []
    for target in targets:
        module_name, _, attribute = target.partition(":")
        if not module_name or not attribute:
            raise fail(f"--adapter {target!r} is not MODULE:ATTRIBUTE")
        try:
            value = getattr(import_module(module_name), attribute)
        except (ImportError, AttributeError) as exc:
            raise fail(f"--adapter {target!r}: {describe(exc)}") from None
        if callable(value) and not isinstance(value, EffectAdapter):
            try:
                value = value()
            except Exception as exc:
                raise fail(f"--adapter {target!r}: calling it failed: {describe(exc)}") from None
        found = value if isinstance(value, (list, tuple)) else [value]
        for adapter in found:
            if not isinstance(adapter, EffectAdapter):
                raise fail(f"--adapter {target!r} gives a {type(adapter).__name__}, not an adapter")
            adapters.append(adapter)
    return adapters


@effects_app.command("list")
def effects_list(
    database: DatabaseOption = None,
    status: Annotated[
        str, typer.Option(help=f"One of {', '.join(_STATUSES)} (open: executing or indeterminate).")
    ] = "all",
    tenant: TenantOption = None,
    limit: Annotated[int, typer.Option(min=1, help="At most this many, newest first.")] = 100,
    as_json: JsonOption = False,
) -> None:
    """List effect attempts, newest first."""
    if status not in _STATUSES:
        raise fail(f"--status must be one of {', '.join(_STATUSES)}, not {status!r}")
    statuses: tuple[EffectStatus, ...] = ()
    if status == "open":
        statuses = (EffectStatus.EXECUTING, EffectStatus.INDETERMINATE)
    elif status != "all":
        statuses = (EffectStatus(status),)
    with _opened(database) as store:
        records = list_effects(store, tenant=tenant, statuses=statuses, limit=limit)
    if as_json:
        for record in records:
            sys.stdout.write(json.dumps(_json(record), sort_keys=True) + "\n")
        return
    if not records:
        out.print(Text("no effect attempts"))
        return
    table = Table(show_edge=False, pad_edge=False)
    for heading in ("id", "tenant", "key", "adapter", "status", "attempt", "reason", "updated"):
        table.add_column(heading, no_wrap=heading in ("id", "status", "updated"))
    for record in records:
        table.add_row(
            *(
                Text(str(cell))
                for cell in (
                    record.id,
                    record.tenant,
                    record.idempotency_key,
                    f"{record.adapter_id}@{record.adapter_version}",
                    record.status.value,
                    record.attempt,
                    record.reason,
                    _iso(record.updated_us),
                )
            )
        )
    out.print(table)


@effects_app.command("show")
def effects_show(
    effect_id: Annotated[str, typer.Argument(help="The attempt's id (eff_...).")],
    database: DatabaseOption = None,
    as_json: JsonOption = False,
) -> None:
    """One attempt: its request, grant, decision, reservation, outcome."""
    with _opened(database) as store:
        record = get_effect(store, effect_id)
    if record is None:
        raise fail(f"no effect {effect_id!r}", code=EXIT_FAILED)
    data = _json(record)
    if as_json:
        sys.stdout.write(json.dumps(data, sort_keys=True) + "\n")
        return
    for name, value in data.items():
        shown = json.dumps(value, sort_keys=True) if isinstance(value, (dict, list)) else value
        out.print(Text(f"{name}: {'—' if shown is None else shown}"))


@effects_app.command("reconcile")
def effects_reconcile(
    effect_id: Annotated[
        str | None, typer.Argument(help="One attempt (default: every open one).")
    ] = None,
    adapter: AdapterOption = [],  # noqa: B006 - typer reads the default, never mutates it
    database: DatabaseOption = None,
    as_json: JsonOption = False,
) -> None:
    """Ask each open attempt's provider what became of it, and settle it: committed
    (the budget charged once), never executed (released; a retry may run it), or
    still unknown (it stays open: exit 1)."""
    from interlock.effects.reconcile import reconcile_effect, reconcile_pending
    from interlock.store.audit import AuditWriter

    adapters = load_adapters(adapter)
    if not adapters:
        raise fail("give the adapters to reconcile with: --adapter MODULE:ATTRIBUTE")
    with _opened(database) as store:
        audit = AuditWriter(store)
        try:
            if effect_id is not None:
                try:
                    records = [reconcile_effect(store, adapters, effect_id, audit=audit)]
                except LookupError as exc:
                    raise fail(str(exc).strip("'\""), code=EXIT_FAILED) from None
                except EffectError as exc:
                    raise fail(describe(exc), code=EXIT_FAILED) from None
                skipped: list[EffectRecord] = []
            else:
                report = reconcile_pending(store, adapters, audit=audit)
                records = [*report.settled, *report.unresolved]
                skipped = list(report.skipped)
        finally:
            audit.close()
    for record in records:
        if as_json:
            sys.stdout.write(json.dumps(_json(record), sort_keys=True) + "\n")
        else:
            out.print(Text(f"{record.id} {record.status.value}: {record.reason}"))
    for record in skipped:
        if not as_json:
            out.print(Text(f"{record.id} left {record.status.value}: executing, or no adapter"))
    if any(record.status.open for record in [*records, *skipped]):
        raise typer.Exit(EXIT_FAILED)
