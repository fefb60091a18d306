"""The ``interlock`` command's typer application (:mod:`interlock.cli` runs it).

    interlock check --name shell --arg command="rm -rf /"     # exit code by verdict
    interlock policy lint interlock.yaml
    interlock policy test tests/policy_cases.yaml
    interlock policy schema > interlock.schema.json
    interlock demo

The commands over the durable store (``db``, ``audit``, ``approvals``, ``budgets``)
live in :mod:`interlock.cli_store`; the audit log's integrity (``audit verify``,
``audit key``, ``audit checkpoint-key``) in :mod:`interlock.cli_audit`.

Exit codes of ``check``: 0 allow, 3 deny, 4 require_approval, 5 undetermined; 2 for a
usage error or an invalid policy or input.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from interlock.cli_check import (
    EXIT_CODES,
    CheckRequest,
    policy_path,
    print_lines,
    run_check,
    verdict_line,
)
from interlock.cli_console import err, fail, out
from interlock.cli_lazy import lazy_group
from interlock.errors import PolicyError, describe

if TYPE_CHECKING:
    from interlock.policy.compiled import CompiledPolicy

__all__ = ["EXIT_CODES", "app"]

# The commands over the store, the audit log and the server are imported when they are
# run, so that `interlock check` and `interlock policy lint` load neither (ADR 0014).
_LAZY_COMMANDS = {
    "serve": "interlock.cli_server:serve",
    "db": "interlock.cli_store:db_app",
    "audit": "interlock.cli_audit:audit_app",
    "approvals": "interlock.cli_store:approvals_app",
    "budgets": "interlock.cli_store:budgets_app",
    "effects": "interlock.cli_effects:effects_app",
    "sessions": "interlock.cli_sessions:sessions_app",
    "keys": "interlock.cli_server:keys_app",
    "mcp-gateway": "interlock.cli_gateways_mcp:mcp_gateway",
    "llm-proxy": "interlock.cli_gateways_llm_proxy:llm_proxy",
}
_HELP_ORDER = (
    "serve",
    "init",
    "check",
    "demo",
    "policy",
    "db",
    "audit",
    "approvals",
    "budgets",
    "effects",
    "sessions",
    "keys",
    "mcp-gateway",
    "llm-proxy",
)

app = typer.Typer(
    cls=lazy_group(_LAZY_COMMANDS, order=_HELP_ORDER),
    help="Interlock: one decision point before every agent action.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
policy_app = typer.Typer(help="Lint, test and describe policies.", no_args_is_help=True)
app.add_typer(policy_app, name="policy")


def _print_version(value: bool) -> None:
    if value:
        from interlock import __version__

        out.print(f"interlock {__version__}")
        raise typer.Exit(0)


@app.callback()
def _main(
    version: Annotated[
        bool,
        typer.Option(
            "--version",
            help="Print Interlock's version and exit.",
            callback=_print_version,
            is_eager=True,
        ),
    ] = False,
) -> None:
    """Interlock: one decision point before every agent action."""


@app.command()
def init(
    directory: Annotated[
        Path, typer.Argument(help="Where to write the files (default: here).")
    ] = Path("."),
    force: Annotated[
        bool, typer.Option("--force", help="Overwrite files that already exist.")
    ] = False,
) -> None:
    """Write a starter policy (interlock.yaml: the safe example) and its test cases
    (interlock.cases.yaml), ready for `interlock policy test`."""
    from importlib import resources

    examples = resources.files("interlock").joinpath("examples")
    files = {name: examples.joinpath(name).read_text("utf-8") for name in _STARTER_FILES}
    existing = [name for name in files if (directory / name).exists()]
    if existing and not force:
        raise fail(
            f"{', '.join(str(directory / n) for n in existing)} already "
            f"{'exists' if len(existing) == 1 else 'exist'}; use --force to overwrite"
        )
    directory.mkdir(parents=True, exist_ok=True)
    for name, text in files.items():
        (directory / name).write_text(text, encoding="utf-8")
        out.print(f"wrote {directory / name}")
    cases = directory / "interlock.cases.yaml"
    out.print(
        "next:\n"
        f"  interlock policy lint {directory / 'interlock.yaml'}\n"
        f"  interlock policy test {cases}\n"
        f"  interlock check -p {directory / 'interlock.yaml'} --name shell "
        "--arg command='ls -la; rm -rf /'"
    )


_STARTER_FILES = ("interlock.yaml", "interlock.cases.yaml")

PolicyOption = Annotated[
    Path | None,
    typer.Option(
        "--policy",
        "-p",
        help="Policy file (default: $INTERLOCK_POLICY or ./interlock.yaml).",
        show_default=False,
    ),
]


def _load(policy: Path | None) -> CompiledPolicy:
    from interlock.policy.loader import load_policy

    try:
        return load_policy(policy_path(policy))
    except PolicyError as exc:
        raise fail(str(exc)) from None


@app.command()
def check(
    policy: PolicyOption = None,
    action_json: Annotated[
        str | None,
        typer.Option(
            "--json",
            help="The action as JSON ('-' reads stdin): "
            '{"kind": "tool", "name": "shell", "arguments": {...}, "context": {...}}',
        ),
    ] = None,
    name: Annotated[str | None, typer.Option("--name", "-n", help="Tool or model name.")] = None,
    kind: Annotated[str, typer.Option(help="tool, llm, mcp, browser or effect.")] = "tool",
    arg: Annotated[
        list[str] | None,
        typer.Option(
            "--arg", "-a", help="An argument as key=value (value parsed as JSON if it can be)."
        ),
    ] = None,
    scope: Annotated[str | None, typer.Option(help="Pin the scope.")] = None,
    description: Annotated[
        str | None, typer.Option(help="Tool description (scope inference).")
    ] = None,
    tenant: Annotated[str, typer.Option(help="Tenant of the trusted context.")] = "default",
    agent: Annotated[str | None, typer.Option(help="Agent id of the trusted context.")] = None,
    session: Annotated[str | None, typer.Option(help="Session id of the trusted context.")] = None,
    events: Annotated[
        Path | None, typer.Option(help="Append the decision event to this JSONL file.")
    ] = None,
    as_json: Annotated[
        bool, typer.Option("--output-json", help="Print the decision as JSON.")
    ] = False,
) -> None:
    """Check one action against a policy. Exit code: 0 allow, 3 deny, 4 approval, 5 undetermined."""
    request = CheckRequest(
        policy=policy,
        action_json=action_json,
        name=name,
        kind=kind,
        arg=tuple(arg or ()),
        scope=scope,
        description=description,
        tenant=tenant,
        agent=agent,
        session=session,
        events=events,
        as_json=as_json,
    )
    outcome = run_check(request, fail)
    print_lines(outcome.lines)
    raise typer.Exit(outcome.code)


@policy_app.command("lint")
def policy_lint(
    files: Annotated[
        list[Path] | None, typer.Argument(help="Policy files (default: ./interlock.yaml).")
    ] = None,
    tools: Annotated[
        list[str] | None,
        typer.Option(
            "--tools",
            help="module:object — an agent (or tool, list of tools, MCP server) whose tools' "
            "argument schemas every `args.<name>` a rule reads is checked against.",
        ),
    ] = None,
) -> None:
    """Validate policy files: schema, regexes, globs and CEL, with file:line for each
    problem (exit 1); then warn (exit 0) about what is valid but probably not meant."""
    from interlock.policy.advice import policy_advice
    from interlock.policy.loader import load_policy

    schemas = _tool_schemas(tools or [])
    failed = False
    for file in files or [policy_path(None)]:
        try:
            compiled = load_policy(file)
        except PolicyError as exc:
            failed = True
            for issue in exc.issues:
                err.print(f"[red]✗[/red] {issue}", markup=True)
            continue
        if schemas:
            from interlock.policy.toolschema import argument_issues

            problems = argument_issues(compiled, schemas)
            for issue in problems:
                err.print(f"[red]✗[/red] {issue}", markup=True)
            if problems:
                failed = True
                continue
        shadow = sum(rule.shadow for rule in compiled.rules)
        mode = "shadow" if compiled.shadow_mode else "enforce"
        out.print(
            f"[green]✓[/green] {file}: {len(compiled.rules)} rules ({shadow} in shadow mode), "
            f"default {compiled.default.value}, mode {mode}",
            markup=True,
        )
        for warning in policy_advice(compiled):
            err.print(f"[yellow]![/yellow] {warning}", markup=True, highlight=False)
    if failed:
        raise typer.Exit(1)


def _tool_schemas(specs: list[str]) -> dict[str, Any]:
    """The tools of every ``module:object`` given, by name."""
    from interlock.policy.toolschema import load_object, schemas_of

    found: dict[str, Any] = {}
    for spec in specs:
        try:
            found.update(schemas_of(load_object(spec)))
        except Exception as exc:
            raise fail(f"--tools {spec}: {describe(exc)}") from None
    return found


@policy_app.command("test")
def policy_test(
    files: Annotated[list[Path], typer.Argument(help="YAML case files.")],
    policy: PolicyOption = None,
    verbose: Annotated[
        bool, typer.Option("--verbose", "-v", help="List passing cases too.")
    ] = False,
) -> None:
    """Run policy test cases (action in, expected decision and rule ids out)."""
    from interlock.policy.testing import run_cases

    compiled = _load(policy) if policy is not None else None
    passed = failed = 0
    for file in files:
        try:
            _, results = run_cases(file, compiled)
        except PolicyError as exc:
            raise fail(str(exc)) from None
        for result in results:
            where = f"{file}:{result.line}" if result.line else str(file)
            if result.passed:
                passed += 1
                if verbose:
                    out.print(f"[green]PASS[/green] {where} {result.name}", markup=True)
            else:
                failed += 1
                out.print(
                    f"[red]FAIL[/red] {where} {result.name}: expected {result.expected}, "
                    f"got {result.actual}",
                    markup=True,
                )
    out.print(
        f"{'-' * 40}\nPASS: {passed}/{passed + failed}" + (f"  FAIL: {failed}" if failed else "")
    )
    if failed:
        raise typer.Exit(1)


@policy_app.command("schema")
def policy_schema() -> None:
    """Print the JSON Schema of interlock.yaml."""
    from interlock.policy.schema import policy_json_schema

    sys.stdout.write(json.dumps(policy_json_schema(), indent=2) + "\n")


@app.command()
def demo(
    events: Annotated[
        Path | None, typer.Option(help="Also append the run's events to this JSONL file.")
    ] = None,
    database: Annotated[
        str | None,
        typer.Option(
            "--database",
            "-d",
            help="Store URL (default: $INTERLOCK_DATABASE_URL or the embedded "
            "sqlite:///.interlock/interlock.db).",
            show_default=False,
        ),
    ] = None,
    no_store: Annotated[
        bool, typer.Option("--no-store", help="Decide in memory only: no audit, no approvals.")
    ] = False,
) -> None:
    """Run an offline LangGraph agent (a scripted fake model) under the example policy
    and show every verdict.

    On the store (the embedded SQLite file by default) every decision is audited, model
    calls are charged to the token budget, and the large refund interrupts the graph
    until a supervisor approves it; the resumed call runs exactly once."""
    from rich.table import Table

    from interlock.core.events import JsonlSink
    from interlock.core.redaction import Redactor
    from interlock.demo import run_demo
    from interlock.errors import StoreError
    from interlock.store import default_database_url, open_store

    sink = JsonlSink(events) if events is not None else None
    store = None
    if not no_store:
        try:
            store = open_store(database or default_database_url())
        except (StoreError, ImportError) as exc:
            raise fail(describe(exc)) from None
    try:
        try:
            results = run_demo(sink=sink, store=store)
        except ImportError as exc:
            raise fail(describe(exc)) from None
        report = store.verify_audit() if store is not None else None
        tokens = store.budget_rows(tenant="acme", budget_id="model-tokens") if store else []
    finally:
        if sink is not None:
            sink.close()
        if store is not None:
            store.close()
    redactor = Redactor()
    table = Table(
        title="interlock demo — a LangGraph support agent (scripted model) under "
        "examples/interlock.yaml"
    )
    table.add_column("#", no_wrap=True)
    table.add_column("agent wants to")
    table.add_column("tool call", overflow="fold", ratio=3)
    table.add_column("verdict", no_wrap=True)
    table.add_column("rule", no_wrap=True)
    table.add_column("ran?", no_wrap=True)
    for i, result in enumerate(results, 1):
        call = json.dumps(redactor.redact_value(result.step.arguments))
        decision = result.decision
        verdict = verdict_line(decision)[0] if decision else "pass-through"
        rules = ", ".join(decision.rule_ids) if decision and decision.rule_ids else "(default)"
        if decision and decision.shadow:
            rules += f" [dim]/ shadow: {', '.join(decision.shadow.rule_ids)}[/dim]"
        table.add_row(
            str(i),
            result.step.intent,
            f"{result.step.tool}({call})",
            verdict,
            rules,
            "[green]yes[/green]" if result.ran else "[red]no[/red]",
        )
    out.print(table)
    counts: dict[str, int] = {}
    for result in results:
        if result.decision is not None:
            counts[result.decision.verdict.value] = counts.get(result.decision.verdict.value, 0) + 1
    out.print(
        "verdicts: "
        + ", ".join(f"{k} {v}" for k, v in sorted(counts.items()))
        + ". A tool body ran only on allow."
    )
    if events is not None:
        out.print(f"events appended to {events} (see: interlock audit tail --events {events})")
    for row in tokens:
        out.print(
            f"model calls: budget {row.budget_id} ({row.scope_key}) has {row.spent:,} of "
            f"{row.cap:,} {row.unit} spent, {row.reserved:,} reserved"
        )
    if store is not None and report is not None:
        records = sum(report.checked.values())
        state = "intact" if report.ok else "BROKEN"
        out.print(
            f"audit: {records} records in {store.url}, chain {state} "
            "(see: interlock audit tail, interlock audit verify, interlock approvals list "
            "--status all)"
        )
