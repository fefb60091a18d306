"""Outcomes in the audit chain, and ``audit show``: an allowed call that ran, one that
raised, one approved then claimed, budgets committed, released and reaped — against a
real SQLite file, through the real guard and CLI."""

from __future__ import annotations

import asyncio
import hashlib
import json
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from interlock import Action, ApprovalRequired, Context, Guard
from interlock.cli import app
from interlock.policy import load_policy_text
from interlock.store import SqlStore, open_store
from interlock.store.outcomes import recover_outcomes
from interlock.store.story import action_story

POLICY = """
version: 1
default: deny
pricing:
  currency: USD
  models:
    "test-model": {input: 2, output: 10}
budgets:
  - id: llm-tokens
    limit: 5000
    unit: tokens
    scope: agent
    kind: llm
  - id: tool-spend
    limit: 10
    unit: USD
    scope: agent
    kind: tool
    name: "paid_*"
    max_overage: 0
rules:
  - id: models
    decision: allow
    reason: the test model is allowed
    kind: llm
    name: test-model
  - id: tools-ok
    decision: allow
    reason: tools are fine
    kind: tool
    name: ["search", "paid_*", "explode", "fetch"]
  - id: refund-large
    decision: require_approval
    reason: refunds over 100 need a human
    name: refund
    when: "args.amount > 100"
"""

AGENT = Context(tenant="acme", agent="support-bot", session_id="s-1")
SECRET = "sk-live-abcdef1234567890"


@pytest.fixture
def db(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'state.db'}"


@pytest.fixture
def store(db: str) -> Any:
    with open_store(db) as opened:
        yield opened


@pytest.fixture
def guard(store: SqlStore) -> Any:
    with Guard(load_policy_text(POLICY), store=store, context=AGENT, reap_interval=None) as g:
        yield g


def _ids(store: SqlStore, kind: str) -> list[str]:
    return [row.decision_id or "" for row in store.audit_rows(kind=kind)]


def test_an_allowed_call_that_ran_tells_its_whole_story(guard: Guard, store: SqlStore) -> None:
    @guard.protect(name="search")
    def search(query: str) -> str:
        return f"3 hits for {query}"

    assert search("invoices") == "3 hits for invoices"
    assert guard.audit is not None and guard.audit.flush()
    (decision_id,) = _ids(store, "tool_invoke")
    story = action_story(store, decision_id)
    assert story["outcome"] == "ran"
    assert [s["step"] for s in story["steps"]] == ["decided", "started", "result"]
    result = story["steps"][-1]["record"]
    expected = hashlib.sha256(b"3 hits for invoices").hexdigest()
    assert result["digest"] == f"sha256:{expected}"
    assert result["preview"] == "3 hits for invoices"
    assert result["ok"] is True and result["agent"] == "support-bot"
    assert store.verify_audit().ok


def test_a_call_that_raised_records_its_error_type_and_a_redacted_message(
    guard: Guard, store: SqlStore
) -> None:
    @guard.protect(name="explode")
    def explode() -> None:
        raise PermissionError(f"token {SECRET} was refused")

    with pytest.raises(PermissionError):
        explode()
    assert guard.audit is not None and guard.audit.flush()
    (decision_id,) = _ids(store, "tool_invoke")
    story = action_story(store, decision_id)
    assert story["outcome"] == "raised"
    error = story["steps"][-1]
    assert error["step"] == "error"
    assert error["record"]["error_type"] == "PermissionError"
    assert "was refused" in error["record"]["error"]
    assert SECRET not in " ".join(row.body for row in store.audit_rows())


def test_a_budgeted_call_is_charged_and_a_failed_one_released(
    guard: Guard, store: SqlStore
) -> None:
    @guard.protect(name="paid_lookup")
    def paid_lookup(q: str, est_cost: float) -> str:
        if q == "bad":
            raise ValueError("upstream said no")
        return "found"

    paid_lookup("a", 0.5)
    with pytest.raises(ValueError):
        paid_lookup("bad", 0.25)
    assert guard.audit is not None and guard.audit.flush()
    ran, failed = _ids(store, "tool_invoke")
    charged = action_story(store, ran)
    assert [s["step"] for s in charged["steps"]] == [
        "decided",
        "started",
        "budget committed",
        "result",
    ]
    assert charged["steps"][2]["record"]["actual"] == {"tool-spend": 500_000}
    released = action_story(store, failed)
    assert "budget released" in [s["step"] for s in released["steps"]]
    assert released["outcome"] == "raised"


def test_an_approved_then_claimed_call_shows_who_approved_it(guard: Guard, store: SqlStore) -> None:
    @guard.protect(name="refund")
    def refund(order_id: int, amount: float) -> str:
        return f"refunded {amount}"

    with pytest.raises(ApprovalRequired) as pending:
        refund(42, 500)
    approval_id = pending.value.approval_id
    assert approval_id is not None
    store.approve(approval_id, by="alice", reason="customer verified")
    assert refund(42, 500) == "refunded 500"
    assert guard.audit is not None and guard.audit.flush()
    (claimed,) = _ids(store, "tool_invoke")
    story = action_story(store, claimed)
    steps = [s["step"] for s in story["steps"]]
    assert steps == [
        "approval requested",
        "approval approved",
        "approval claimed",
        "started",
        "result",
    ]
    assert "by alice: customer verified" in story["steps"][1]["summary"]
    # read from the request's side, the same story
    requested = story["steps"][0]["decision_id"]
    assert [s["step"] for s in action_story(store, requested)["steps"]] == steps


def test_the_reaper_charges_are_in_the_chain(guard: Guard, store: SqlStore) -> None:
    decision = guard.check(Action.tool("paid_lookup", {"q": "a", "est_cost": 0.1}))
    assert decision.reservation is not None
    far = store.clock() + 10**13
    assert store.reap(now=far, audited=True).reservations == 1
    story = action_story(store, decision.decision_id)
    reaped = story["steps"][-1]
    assert reaped["step"] == "budget expired"
    assert reaped["record"]["by"] == "reaper"
    assert reaped["record"]["actual"] == {"tool-spend": 100_000}
    assert store.verify_audit().ok


def test_an_unaudited_reap_appends_nothing(guard: Guard, store: SqlStore) -> None:
    guard.check(Action.tool("paid_lookup", {"q": "a", "est_cost": 0.1}))
    before = len(list(store.audit_rows()))
    assert store.reap(now=store.clock() + 10**13).reservations == 1
    assert len(list(store.audit_rows())) == before


def test_async_protected_calls_are_recorded_too(guard: Guard, store: SqlStore) -> None:
    @guard.protect(name="fetch")
    async def fetch(url: str) -> dict[str, int]:
        return {"status": 200}

    async def main() -> list[dict[str, int]]:
        return await asyncio.gather(*(fetch(f"https://example.com/{i}") for i in range(5)))

    assert asyncio.run(main()) == [{"status": 200}] * 5
    assert guard.audit is not None and guard.audit.flush()
    for decision_id in _ids(store, "tool_invoke"):
        assert action_story(store, decision_id)["outcome"] == "ran"
    assert len(_ids(store, "tool_result")) == 5


def test_recovery_leaves_finished_and_recent_calls_alone(guard: Guard, store: SqlStore) -> None:
    @guard.protect(name="search")
    def search(query: str) -> str:
        return "ok"

    search("a")
    assert guard.audit is not None and guard.audit.flush()
    assert recover_outcomes(store, older_than=0.0).appended == 0
    # a start with no end, but younger than the bound: it may still be running
    from interlock.core.phases import ToolInvoke, record_phase

    record_phase(guard, ToolInvoke("search", "", "d-running"))
    assert recover_outcomes(store, older_than=3600.0).appended == 0
    assert recover_outcomes(store, older_than=0.0).appended == 1
    assert recover_outcomes(store, older_than=0.0).appended == 0  # closed once
    assert action_story(store, "d-running")["outcome"] == "unknown"
    assert store.verify_audit().ok


@pytest.mark.parametrize(
    ("needle", "other"),
    [
        ("d-%", "d-1"),  # LIKE wildcards in an id match only themselves
        ("d-_", "d-1"),
        ("d-!", "d-1"),
    ],
)
def test_mentions_is_literal(store: SqlStore, needle: str, other: str) -> None:
    from interlock.store.chain import encode_body

    for decision_id in (needle, other):
        body = encode_body({"kind": "note", "reservation_id": decision_id})
        store.append_audit([("acme", store.clock(), "note", None, None, None, body)])
    found = list(store.audit_rows(mentions=f'"reservation_id":{json.dumps(needle)}'))
    assert [json.loads(r.body)["reservation_id"] for r in found] == [needle]


def test_cli_show_tail_and_export_know_the_new_kinds(
    guard: Guard, store: SqlStore, db: str
) -> None:
    @guard.protect(name="search")
    def search(query: str) -> str:
        return "found it"

    search("x")
    assert guard.audit is not None and guard.audit.flush()
    (decision_id,) = _ids(store, "tool_invoke")
    runner = CliRunner()
    shown = runner.invoke(app, ["audit", "show", decision_id, "--database", db])
    assert shown.exit_code == 0, shown.output
    assert f"decision {decision_id}: ran" in shown.output
    assert "search returned" in shown.output and "sha256:" in shown.output
    as_json = runner.invoke(app, ["audit", "show", decision_id, "--database", db, "--json"])
    assert json.loads(as_json.output)["outcome"] == "ran"
    missing = runner.invoke(app, ["audit", "show", "d-nope", "--database", db])
    assert missing.exit_code == 1
    tail = runner.invoke(app, ["audit", "tail", "--kind", "tool_result", "--database", db])
    assert tail.exit_code == 0, tail.output
    assert "tool search" in tail.output and "decided" not in tail.output
    export = runner.invoke(app, ["audit", "export", "--kind", "tool_invoke", "--database", db])
    lines = [json.loads(line) for line in export.output.splitlines()]
    assert [line["kind"] for line in lines] == ["tool_invoke"]
    verify = runner.invoke(app, ["audit", "verify", "--database", db])
    assert verify.exit_code == 0, verify.output


def test_replay_reads_decisions_only(guard: Guard, store: SqlStore) -> None:
    from interlock.replay.run import replay_rows, replay_store

    @guard.protect(name="search")
    def search(query: str) -> str:
        return "ok"

    for query in ("a", "b", "c"):
        search(query)
    assert guard.audit is not None and guard.audit.flush()
    rows = list(store.audit_rows())
    assert {row.kind for row in rows} == {"decision", "tool_invoke", "tool_result"}
    policy = load_policy_text(POLICY)
    assert replay_store(store, policy).tally.read == 3
    assert replay_rows(rows, policy).tally.read == 3  # fed everything: outcomes skipped


def test_model_calls_sync_and_async_tell_their_story(guard: Guard, store: SqlStore) -> None:
    from interlock.ledger.usage import Usage

    with guard.llm_call("test-model", estimate=Usage(100, 100)) as call:
        call.record({"input_tokens": 40, "output_tokens": 2})

    async def failing() -> None:
        async with guard.llm_call("test-model", estimate=Usage(100, 100)):
            raise ConnectionError(f"upstream refused key {SECRET}")

    with pytest.raises(ConnectionError):
        asyncio.run(failing())
    assert guard.audit is not None and guard.audit.flush()
    ran, failed = [row.decision_id or "" for row in store.audit_rows(kind="llm_input")]
    story = action_story(store, ran)
    assert story["outcome"] == "ran"
    steps = {s["step"]: s["record"] for s in story["steps"]}
    assert steps["result"]["usage"] == {"input_tokens": 40, "output_tokens": 2}
    assert steps["budget committed"]["actual"] == {"llm-tokens": 42}
    broken = action_story(store, failed)
    assert broken["outcome"] == "raised"
    assert {s["step"] for s in broken["steps"]} >= {"error", "budget released"}
    error = next(s["record"] for s in broken["steps"] if s["step"] == "error")
    assert error["error_type"] == "ConnectionError"
    assert SECRET not in " ".join(row.body for row in store.audit_rows())
    assert store.verify_audit().ok


class _Unprintable:
    def __repr__(self) -> str:
        raise RuntimeError("no repr")


@pytest.mark.parametrize(
    ("result", "preview_has", "preview_lacks"),
    [
        ("plain answer", "plain answer", None),  # benign: kept as it is
        (f"the key is {SECRET}", "the key is", SECRET),  # a secret: redacted
        ("x" * 1_000_000, "xxx", None),  # huge: bounded
        (b"\x00\xff raw bytes", "raw bytes", None),  # bytes: digested as they are
        (_Unprintable(), "unrepresentable", None),  # a repr that raises: still recorded
        ({"token": SECRET, "rows": 3}, "rows", SECRET),  # a secret inside a structure
    ],
)
def test_results_are_digested_whole_and_previewed_redacted_and_bounded(
    guard: Guard, store: SqlStore, result: object, preview_has: str, preview_lacks: str | None
) -> None:
    @guard.protect(name="search")
    def search(query: str) -> object:
        return result

    assert search("q") is result
    assert guard.audit is not None and guard.audit.flush()
    (row,) = store.audit_rows(kind="tool_result")
    record = json.loads(row.body)
    assert record["ok"] is True and record["digest"].startswith("sha256:")
    assert len(record["preview"]) <= 200
    assert preview_has in record["preview"]
    if preview_lacks is not None:
        assert preview_lacks not in row.body
    if isinstance(result, bytes):
        assert record["digest"] == "sha256:" + hashlib.sha256(result).hexdigest()


def test_a_reservation_id_that_prefixes_another_is_not_joined_to_it(store: SqlStore) -> None:
    from interlock.store.chain import encode_body

    for rid in ("r-1", "r-10"):
        body = encode_body({"kind": "budget", "reservation_id": rid, "status": "committed"})
        store.append_audit([("acme", store.clock(), "budget", None, None, None, body)])
    found = list(store.audit_rows(kind="budget", mentions='"reservation_id":"r-1"'))
    assert [json.loads(r.body)["reservation_id"] for r in found] == ["r-1"]


def test_a_protected_calls_invoke_follows_its_decision_in_one_commit(
    guard: Guard, store: SqlStore
) -> None:
    @guard.protect(name="search")
    def search(query: str) -> str:
        return "ok"

    @guard.protect(name="fetch")
    async def fetch(url: str) -> str:
        return "ok"

    search("a")
    asyncio.run(fetch("https://example.com/"))
    assert guard.audit is not None and guard.audit.flush()
    rows = list(store.audit_rows(tenant="acme"))
    for invoke in (row for row in rows if row.kind == "tool_invoke"):
        decision = next(row for row in rows if row.seq == invoke.seq - 1)
        assert decision.kind == "decision" and decision.decision_id == invoke.decision_id
    assert len([row for row in rows if row.kind == "tool_invoke"]) == 2
