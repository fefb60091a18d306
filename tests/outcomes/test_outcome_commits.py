"""One durable write before a body runs (issue 13): a protected call's start record
(``tool_invoke`` / ``llm_input``) commits in its decision's own transaction — the
reservation's, when a budget covers the call — never in one of its own.

Counted, not timed: the SQLite store counts the write transactions it commits
(``SqliteStore._writes``: every ``BEGIN IMMEDIATE`` committed and every write in
autocommit), and the body reads that count when it starts. Each test fails if the
start record gets its own transaction again (2 writes instead of 1), and checks the
chain: the start record right after its decision, the same decision id, verified."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from interlock import Context, Guard
from interlock.adapters.base import decide_starting, run_settled
from interlock.core.starting import STARTING, Starting
from interlock.errors import ActionDenied
from interlock.ledger.usage import Usage
from interlock.policy import load_policy_text
from interlock.store import SqlStore, open_store

POLICY = """
version: 1
default: deny
pricing:
  currency: USD
  models:
    "test-model": {input: 2, output: 10}
budgets:
  - id: llm-tokens
    limit: 1000000
    unit: tokens
    scope: agent
    kind: llm
  - id: tool-spend
    limit: 1000
    unit: USD
    scope: agent
    kind: tool
    name: "paid_*"
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
    name: ["search", "paid_search"]
  - id: no-drop
    decision: deny
    reason: never drop
    kind: tool
    name: drop
"""

AGENT = Context(tenant="acme", agent="bot")


@pytest.fixture
def store(tmp_path: Path) -> Iterator[SqlStore]:
    with open_store(f"sqlite:///{tmp_path / 'commits.db'}") as opened:
        yield opened


@pytest.fixture
def guard(store: SqlStore) -> Iterator[Guard]:
    with Guard(load_policy_text(POLICY), store=store, context=AGENT, reap_interval=None) as g:
        yield g


class Writes:
    """The store's committed write transactions since :meth:`mark`; the body of the
    call under test calls :meth:`seen` when it starts."""

    def __init__(self, guard: Guard, store: SqlStore) -> None:
        self.guard, self.store = guard, store
        self.before = 0
        self.at_body: list[int] = []

    def mark(self) -> None:
        assert self.guard.audit is not None and self.guard.audit.flush()  # the last end
        self.before = self.store._writes  # type: ignore[attr-defined]

    def seen(self) -> None:
        self.at_body.append(self.store._writes - self.before)  # type: ignore[attr-defined]


@pytest.fixture
def writes(guard: Guard, store: SqlStore) -> Writes:
    return Writes(guard, store)


def _start_follows_decision(store: SqlStore, kind: str, count: int) -> None:
    """Every ``kind`` start record sits right after its own allowed decision, in the
    same tenant chain, and the chain verifies."""
    rows = list(store.audit_rows(tenant="acme"))
    starts = [row for row in rows if row.kind == kind]
    assert len(starts) == count
    by_seq = {row.seq: row for row in rows}
    for start in starts:
        decision = by_seq[start.seq - 1]
        assert decision.kind == "decision"
        assert decision.decision_id == start.decision_id
        assert json.loads(decision.body)["decision"] == "allow"
    assert store.verify_audit().ok


# -- protect ---------------------------------------------------------------------------


@pytest.mark.parametrize("tool", ["search", "paid_search"], ids=["unbudgeted", "budgeted"])
def test_a_protected_body_starts_after_one_write(
    guard: Guard, store: SqlStore, writes: Writes, tool: str
) -> None:
    @guard.protect(name=tool)
    def body(query: str, est_cost: float) -> str:
        writes.seen()
        return "ok"

    for _ in range(3):
        writes.mark()
        assert body("q", 0.01) == "ok"
    assert writes.at_body == [1, 1, 1]
    _start_follows_decision(store, "tool_invoke", 3)
    if tool == "paid_search":  # the reservation rode in that one write, and was settled
        assert [row.kind for row in store.audit_rows(tenant="acme")].count("budget") == 3


def test_an_async_protected_budgeted_body_starts_after_one_write(
    guard: Guard, store: SqlStore, writes: Writes
) -> None:
    @guard.protect(name="paid_search")
    async def body(query: str, est_cost: float) -> str:
        writes.seen()
        return "ok"

    for _ in range(2):
        writes.mark()
        assert asyncio.run(body("q", 0.01)) == "ok"
    (row,) = store.budget_rows(tenant="acme", budget_id="tool-spend")
    assert row.reserved == 0 and row.spent == 2 * 10_000  # reserved with it, then settled
    assert writes.at_body == [1, 1]
    _start_follows_decision(store, "tool_invoke", 2)


def test_a_denied_call_writes_its_decision_alone_and_starts_nothing(
    guard: Guard, store: SqlStore, writes: Writes
) -> None:
    @guard.protect(name="drop")
    def drop() -> str:
        writes.seen()
        return "dropped"

    writes.mark()
    with pytest.raises(ActionDenied):
        drop()
    assert writes.at_body == []
    assert store._writes - writes.before == 1  # type: ignore[attr-defined]
    kinds = [row.kind for row in store.audit_rows(tenant="acme")]
    assert kinds == ["decision"]  # no tool_invoke, no tool_result: nothing started


# -- llm_call --------------------------------------------------------------------------


def test_a_model_call_is_made_after_one_write(
    guard: Guard, store: SqlStore, writes: Writes
) -> None:
    for _ in range(3):
        writes.mark()
        with guard.llm_call("test-model", estimate=Usage(100, 50)) as call:
            writes.seen()
            call.record(Usage(40, 2))
    assert writes.at_body == [1, 1, 1]
    _start_follows_decision(store, "llm_input", 3)
    start = next(iter(store.audit_rows(tenant="acme", kind="llm_input")))
    record = json.loads(start.body)
    assert record["model"] == "test-model" and record["agent"] == "bot"
    assert record["estimate"] == {"input_tokens": 100, "output_tokens": 50}
    (row,) = store.budget_rows(tenant="acme", budget_id="llm-tokens")
    assert row.reserved == 0 and row.spent == 3 * (40 + 2)  # reserved with it, settled


def test_an_async_model_call_is_made_after_one_write(
    guard: Guard, store: SqlStore, writes: Writes
) -> None:
    async def run() -> None:
        async with guard.llm_call("test-model", estimate=Usage(100, 50)) as call:
            writes.seen()
            call.record(Usage(10, 1))

    for _ in range(2):
        writes.mark()
        asyncio.run(run())
    assert writes.at_body == [1, 1]
    _start_follows_decision(store, "llm_input", 2)


def test_a_model_call_without_an_estimate_still_joins(store: SqlStore, tmp_path: Path) -> None:
    """No budget covers it (no estimate, no budgets in the policy): the start record
    rides in the audit writer's commit of the decision instead."""
    policy = load_policy_text(
        "version: 1\ndefault: deny\nrules:\n  - id: m\n    decision: allow\n"
        "    reason: ok\n    kind: llm\n    name: test-model\n"
    )
    with Guard(policy, store=store, context=AGENT, reap_interval=None) as guard:
        writes = Writes(guard, store)
        writes.mark()
        with guard.llm_call("test-model"):
            writes.seen()
        assert writes.at_body == [1]
        _start_follows_decision(store, "llm_input", 1)
        record = json.loads(next(iter(store.audit_rows(kind="llm_input"))).body)
        assert record["estimate"] == {"input_tokens": 0, "output_tokens": 0}


# -- adapters: run_settled ---------------------------------------------------------------


@pytest.mark.parametrize("tool", ["search", "paid_search"], ids=["unbudgeted", "budgeted"])
def test_an_adapter_body_starts_after_one_write(
    guard: Guard, store: SqlStore, writes: Writes, tool: str
) -> None:
    from interlock import Action

    def check() -> Any:
        return guard.check(Action.tool(tool, {"q": "x", "est_cost": 0.01}))

    writes.mark()
    decision, started = decide_starting(guard, tool, check)
    assert decision.allowed and started
    assert run_settled(
        guard, decision, lambda: writes.seen() or "ok", (tool, "{}"), started=started
    )
    assert writes.at_body == [1]
    _start_follows_decision(store, "tool_invoke", 1)
    assert guard.audit is not None and guard.audit.flush()
    assert [row.kind for row in store.audit_rows(kind="tool_result")] == ["tool_result"]


def test_a_langchain_tool_starts_after_one_write(
    guard: Guard, store: SqlStore, writes: Writes
) -> None:
    pytest.importorskip("langchain_core")
    from langchain_core.tools import tool

    @tool
    def paid_search(query: str, est_cost: float) -> str:
        """Search, paid."""
        writes.seen()
        return "found " + query

    guard.attach(paid_search)
    for _ in range(2):
        writes.mark()
        assert paid_search.invoke({"query": "q", "est_cost": 0.01}) == "found q"
    assert writes.at_body == [1, 1]
    _start_follows_decision(store, "tool_invoke", 2)


# -- a start that went with a decision that does not stand ---------------------------------


def test_a_start_claimed_by_another_decision_is_closed_not_left_open(
    guard: Guard, store: SqlStore
) -> None:
    """A mapper's several actions: the first allow's commit carries the start, the
    call's decision is another one (here a denial): the start is closed as not run,
    so recovery never calls it ``outcome unknown``."""
    from interlock import Action
    from interlock.store.outcomes import recover_outcomes

    def check() -> Any:
        return guard.check_batch(
            [Action.tool("search", {"q": 1}), Action.tool("drop", {"table": "t"})]
        )

    decision, started = decide_starting(guard, "search", check)
    assert not decision.allowed and not started
    assert guard.audit is not None and guard.audit.flush()
    invoke = next(iter(store.audit_rows(kind="tool_invoke")))
    result = next(iter(store.audit_rows(kind="tool_result")))
    assert invoke.decision_id == result.decision_id
    assert json.loads(result.body)["error_type"] == "NotRun"
    assert recover_outcomes(store, older_than=0.0).appended == 0
    assert store.verify_audit().ok


@pytest.mark.parametrize(
    ("kind", "name", "ok"),
    [
        ("tool_invoke", "search", True),
        ("llm_input", "test-model", True),
        ("tool_result", "search", False),  # an end is not a start
        ("decision", "search", False),
        ("", "search", False),
    ],
)
def test_only_start_records_are_offered(kind: str, name: str, ok: bool) -> None:
    if ok:
        assert Starting(kind, name).kind == kind
    else:
        with pytest.raises(ValueError, match="tool_invoke or llm_input"):
            Starting(kind, name)


def test_nothing_is_offered_outside_a_check() -> None:
    assert STARTING.get() is None


# -- both back ends: audit commits before the body ------------------------------------------


def test_one_audit_commit_before_the_body_on_either_back_end(store_url: str) -> None:
    """On SQLite the start rides in the reservation's transaction; on PostgreSQL (the
    reservation one statement, the records through the writer, ADR 0012 §5) the
    decision's record and its start share the writer's commit. Either way the body
    starts after exactly one commit that appends audit records, holding both."""
    commits: list[dict[str, Any]] = []
    at_body: list[int] = []
    with open_store(store_url) as store:
        store.add_audit_listener(lambda heads: commits.append(dict(heads)))
        with Guard(
            load_policy_text(POLICY), store=store, context=AGENT, reap_interval=None
        ) as guard:

            @guard.protect(name="paid_search")
            def paid_search(query: str, est_cost: float) -> str:
                at_body.append(len(commits))
                return "ok"

            assert guard.audit is not None
            for _ in range(2):
                guard.audit.flush()
                commits.clear()
                paid_search("q", 0.01)
                assert at_body[-1] == 1
                guard.audit.flush()
                commits.clear()
                with guard.llm_call("test-model", estimate=Usage(100, 50)):
                    at_body.append(len(commits))
                assert at_body[-1] == 1
        _start_follows_decision(store, "tool_invoke", 2)
        _start_follows_decision(store, "llm_input", 2)
