"""``interlock sessions``: the session history kept in the store (issue 18).

    interlock sessions list                         # most recently touched first
    interlock sessions show s-1 --tenant acme       # its labels and last steps
    interlock sessions expire --idle 24h            # forget the idle ones now

Every command takes ``--database/-d URL`` as the other store commands do. Fingerprints
are shown as a count (they are hashes: nothing to read in them). Exit codes: 0 done;
1 no such session; 2 a usage error or a store that cannot be used.
"""

from __future__ import annotations

import json
import sys
from datetime import UTC, datetime
from typing import Annotated, Any

import typer
from rich.table import Table
from rich.text import Text

from interlock.cli_console import EXIT_FAILED, fail, out
from interlock.cli_store import DatabaseOption, JsonOption, TenantOption, _opened
from interlock.policy.specs import parse_duration
from interlock.session.history import Step

__all__ = ["sessions_app"]

sessions_app = typer.Typer(
    help="Session history in the store: list, show, expire.", no_args_is_help=True
)


def _iso(seconds: float) -> str:
    return datetime.fromtimestamp(seconds, UTC).isoformat(timespec="seconds")


def _step_json(step: Step) -> dict[str, Any]:
    return {
        "seq": step.seq,
        "at": _iso(step.at),
        "kind": step.kind,
        "name": step.name,
        "verdict": step.verdict,
        "decision_id": step.decision_id,
        "labels": sorted(step.labels),
        "fingerprints": len(step.fingerprints),
        "trusted": step.trusted,
        "executed": step.executed,
    }


@sessions_app.command("list")
def sessions_list(
    database: DatabaseOption = None,
    tenant: TenantOption = None,
    limit: Annotated[int, typer.Option(min=1, help="At most this many.")] = 100,
    as_json: JsonOption = False,
) -> None:
    """List sessions, the most recently touched first."""
    with _opened(database) as store:
        found = store.list_sessions(tenant=tenant, limit=limit)
    if as_json:
        for summary in found:
            data = summary.as_dict()
            data["touched"] = _iso(summary.touched_us / 1_000_000)
            sys.stdout.write(json.dumps(data, sort_keys=True) + "\n")
        return
    if not found:
        out.print(Text("no sessions"))
        return
    table = Table(show_edge=False, pad_edge=False)
    for heading in ("tenant", "session", "steps", "labels", "touched"):
        table.add_column(heading)
    for summary in found:
        table.add_row(
            Text(summary.tenant),
            Text(summary.session_id),
            Text(str(summary.steps)),
            Text(", ".join(sorted(summary.labels))),
            Text(_iso(summary.touched_us / 1_000_000)),
        )
    out.print(table)


@sessions_app.command("show")
def sessions_show(
    session_id: Annotated[str, typer.Argument(help="The session's id.")],
    tenant: Annotated[str, typer.Option(help="Its tenant.")] = "default",
    database: DatabaseOption = None,
    steps: Annotated[int, typer.Option(min=1, help="Its last steps shown, at most.")] = 200,
    as_json: JsonOption = False,
) -> None:
    """One session: its labels and its last steps."""
    with _opened(database) as store:
        view = store.session_history(max_steps=steps).view(tenant, session_id)
    if view.next_seq == 1:
        raise fail(f"no session {session_id!r} in tenant {tenant!r}", code=EXIT_FAILED)
    if as_json:
        data = {
            "tenant": view.tenant,
            "session_id": view.session_id,
            "labels": sorted(view.labels),
            "next_seq": view.next_seq,
            "steps": [_step_json(step) for step in view.steps],
        }
        sys.stdout.write(json.dumps(data, sort_keys=True) + "\n")
        return
    out.print(Text(f"session {view.session_id} (tenant {view.tenant})"))
    out.print(Text(f"labels: {', '.join(sorted(view.labels)) or '-'}"))
    table = Table(show_edge=False, pad_edge=False)
    for heading in ("seq", "at", "kind", "name", "verdict", "executed", "labels", "prints"):
        table.add_column(heading)
    for step in view.steps:
        table.add_row(
            *(
                Text(str(cell))
                for cell in (
                    step.seq,
                    _iso(step.at),
                    step.kind,
                    step.name,
                    step.verdict,
                    "-" if step.executed is None else step.executed,
                    ", ".join(sorted(step.labels)),
                    len(step.fingerprints),
                )
            )
        )
    out.print(table)


@sessions_app.command("expire")
def sessions_expire(
    idle: Annotated[str, typer.Option(help="Forget sessions idle longer than this (24h, 90m).")],
    database: DatabaseOption = None,
) -> None:
    """Forget the sessions idle for longer than ``--idle`` (every tenant's)."""
    try:
        seconds = parse_duration(idle)
    except ValueError as exc:
        raise fail(f"--idle: {exc}") from None
    with _opened(database) as store:
        count = store.expire_sessions(seconds)
    out.print(Text(f"{count} session(s) forgotten"))
