"""``interlock audit replay``: what a draft policy would have decided on the calls the
audit log holds.

    interlock audit replay --policy draft.yaml
    interlock audit replay --policy draft.yaml --since 2026-01-05 --tenant acme --tool 'refund_*'
    interlock audit replay --policy draft.yaml --format json --fail-on loosen   # in CI

Exit codes: 0 replayed (and the ``--fail-on`` condition not met); 1 the ``--fail-on``
condition met (``loosen``: some call would run more freely; ``any``: some verdict
would change or cannot be told); 2 a usage error, a policy that does not load (each
problem with its file, line and field) or a store that cannot be used.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.table import Table
from rich.text import Text

from interlock.cli_console import EXIT_FAILED, EXIT_USAGE, err, fail, out
from interlock.cli_store import _instant, _opened, audit_app

if TYPE_CHECKING:
    from interlock.policy.compiled import CompiledPolicy
    from interlock.replay.report import ReplayReport

__all__ = ["audit_replay", "render_text"]

_LABELS = {
    "deny_to_allow": "deny → allow",
    "deny_to_approval": "deny → require_approval",
    "approval_removed": "require_approval → allow (approval removed)",
    "allow_to_deny": "allow → deny",
    "approval_added": "allow → require_approval (approval added)",
    "approval_to_deny": "require_approval → deny",
    "undetermined_changed": "to or from undetermined",
    "rules_changed": "same verdict, other rules",
    "cannot_tell": "cannot tell (redacted or unrecorded)",
}


@audit_app.command("replay")
def audit_replay(
    policy: Annotated[
        str, typer.Option("--policy", "-p", help="The draft policy file to judge the log by.")
    ],
    database: Annotated[
        str | None,
        typer.Option(
            "--store",
            "--database",
            "-d",
            help="Store URL (default: $INTERLOCK_DATABASE_URL or the embedded SQLite file).",
            show_default=False,
        ),
    ] = None,
    since: Annotated[
        str | None, typer.Option(help="From this ISO date or time (inclusive; naive = UTC).")
    ] = None,
    until: Annotated[
        str | None, typer.Option(help="Before this ISO date or time (exclusive; naive = UTC).")
    ] = None,
    tenant: Annotated[str | None, typer.Option(help="Only this tenant.")] = None,
    agent: Annotated[str | None, typer.Option(help="Only this agent.")] = None,
    tool: Annotated[
        str | None, typer.Option(help="Only calls of tools (or models) matching this glob.")
    ] = None,
    fmt: Annotated[str, typer.Option("--format", help="text or json.")] = "text",
    fail_on: Annotated[
        str,
        typer.Option(
            "--fail-on", help="Exit 1 when: loosen (a call would run more freely), any, never."
        ),
    ] = "never",
    examples: Annotated[
        int, typer.Option(min=0, max=1000, help="Example calls shown per change.")
    ] = 3,
) -> None:
    """Re-decide the recorded calls under a draft policy (pure engine, nothing written)
    and show what would change: loosenings (red), tightenings, approvals added or
    removed, counts per rule, the rules the draft never fires, and example calls."""
    from interlock.replay.report import FAIL_ON, ReplayFilter

    if fmt not in ("text", "json"):
        raise fail(f"--format must be text or json, not {fmt!r}")
    if fail_on not in FAIL_ON:
        raise fail(f"--fail-on must be one of {', '.join(FAIL_ON)}, not {fail_on!r}")
    since_us = _instant("--since", since)
    until_us = _instant("--until", until)
    if since_us is not None and until_us is not None and since_us >= until_us:
        raise fail(f"--since {since} is not before --until {until}")
    draft = _draft(policy)
    filters = ReplayFilter(since_us, until_us, tenant, agent, tool)
    from interlock.replay.run import replay_store

    with _opened(database) as store:
        report = replay_store(store, draft, filters, examples=examples)
    if fmt == "json":
        out.file.write(json.dumps(report.as_json(fail_on), indent=2) + "\n")  # type: ignore[arg-type]
    else:
        render_text(report, fail_on)
    if report.fails(fail_on):  # type: ignore[arg-type]
        raise typer.Exit(EXIT_FAILED)


def _draft(path: str) -> CompiledPolicy:
    """The draft, or exit 2 with each of its problems (file:line: rule: field)."""
    from interlock.errors import PolicyError
    from interlock.policy.loader import load_policy

    try:
        return load_policy(path)
    except PolicyError as exc:
        for issue in exc.issues:
            err.print(Text.assemble(("error:", "red"), " ", str(issue)))
        raise typer.Exit(EXIT_USAGE) from None


def render_text(report: ReplayReport, fail_on: Any = "never") -> None:
    """The report for a person: loosenings in red (when the output is a terminal)."""
    data = report.as_json(fail_on)
    records, outcome = data["records"], data["outcome"]
    source = data["policy"]["source"] or "<draft>"
    head = (
        f"Replayed {records['replayed']} recorded decisions under {source} "
        f"({data['policy']['rules']} rules, default {data['policy']['default']})"
    )
    out.print(Text(head, style="bold"))
    skipped = ", ".join(f"{n} {why}" for why, n in records["skipped"].items())
    if skipped:
        out.print(Text(f"  skipped: {skipped}"))
    if records["truncated"]:
        out.print(Text("  cut short: the record limit was reached", style="yellow"))
    out.print(
        Text(
            f"  unchanged {outcome['unchanged']} · same verdict, other rules "
            f"{outcome['rules_changed']} · changed {outcome['changed']} · cannot tell "
            f"{outcome['cannot_tell']}"
        )
    )
    _changes(data)
    _stateful(data)
    _rules(data)
    never = data["never_fired"]
    if never:
        out.print(Text(f"Never fired under the draft: {', '.join(never)}", style="yellow"))
    _examples(data)
    verdict = f"{data['loosened']} loosened, {data['tightened']} tightened"
    if data["failed"]:
        out.print(Text(f"FAIL (--fail-on {fail_on}): {verdict}", style="bold red"))
    else:
        out.print(Text(f"Result: {verdict}", style="bold"))


def _changes(data: dict[str, Any]) -> None:
    table = Table(title="Verdict changes (recorded → draft)", title_justify="left")
    table.add_column("change")
    table.add_column("calls", justify="right")
    loosening = set(data["loosening"])
    for name, count in data["changes"].items():
        style = "bold red" if name in loosening and count else None
        label = ("LOOSENED " if name in loosening else "") + _LABELS[name]
        table.add_row(Text(label, style=style or ""), Text(str(count), style=style or ""))
    out.print(table)


def _stateful(data: dict[str, Any]) -> None:
    stateful = data["stateful"]
    parts = [f"recorded {rule}: {n}" for rule, n in stateful["recorded"].items()]
    parts += [f"draft {spec} covers {n} allowed calls" for spec, n in stateful["draft"].items()]
    if parts:
        out.print(Text("Stateful, not replayed: " + "; ".join(parts)))


def _rules(data: dict[str, Any]) -> None:
    rules = data["rules"]
    if not rules:
        return
    table = Table(title="Rules (calls decided)", title_justify="left")
    for column in ("rule", "recorded", "draft", "in changes"):
        table.add_column(column, justify="left" if column == "rule" else "right")
    for rule_id, counts in rules.items():
        changes = ", ".join(f"{n} {name}" for name, n in counts["changes"].items())
        table.add_row(Text(rule_id), str(counts["old"]), str(counts["new"]), Text(changes))
    out.print(table)


def _examples(data: dict[str, Any]) -> None:
    loosening = set(data["loosening"])
    for name, found in data["examples"].items():
        style = "red" if name in loosening else ""
        out.print(Text(f"Examples: {_LABELS.get(name, name)}", style=f"bold {style}".strip()))
        for example in found:
            recorded, draft = example["recorded"], example["draft"]
            line = (
                f"  {example['time']} {example['tenant']}/{example['agent']} "
                f"{example['tool']} {example['arguments']}\n"
                f"    recorded {recorded['verdict']} {recorded['rule_ids']} → draft "
                f"{draft['verdict']} {draft['rule_ids']}: {draft['reason']}"
            )
            if "why" in example:
                line += f"\n    cannot tell: {example['why']}"
            out.print(Text(line, style=style))
