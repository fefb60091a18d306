"""Outcome records go to the chain of the tenant whose call it was.

A gateway (the LLM proxy, the MCP gateway over HTTP) runs one guard for many tenants:
each call carries its caller's context, taken from the caller's key. The decision's
record goes to that tenant's chain; its outcome records (the start, the result, the
charge) must go there too — never to the guard's own default tenant, where another
tenant's audit export would show them and the owner's story would lack them.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from interlock import Action, Context, Guard
from interlock.ledger.usage import Usage
from interlock.policy import load_policy_text
from interlock.store import SqlStore, open_store
from interlock.store.story import action_story

POLICY = """
version: 1
default: deny
budgets:
  - id: llm-tokens
    limit: 100000
    unit: tokens
    scope: agent
    kind: llm
rules:
  - id: models
    decision: allow
    reason: the test model is allowed
    kind: llm
    name: test-model
  - id: search
    decision: allow
    reason: search is fine
    kind: tool
    name: search
"""

GATEWAY = Context(tenant="gateway", agent="llm-proxy")
ACME = Context(tenant="acme", agent="acme-bot")
GLOBEX = Context(tenant="globex", agent="globex-bot")


@pytest.fixture
def store(tmp_path: Path) -> Any:
    with open_store(f"sqlite:///{tmp_path / 'state.db'}") as opened:
        yield opened


@pytest.fixture
def guard(store: SqlStore) -> Any:
    policy = load_policy_text(POLICY)
    with Guard(policy, store=store, context=GATEWAY, reap_interval=None) as opened:
        yield opened


def kinds(store: SqlStore, tenant: str) -> list[tuple[str, str | None]]:
    return [(row.kind, row.agent) for row in store.audit_rows(tenant=tenant)]


def test_a_model_call_made_for_a_tenant_is_told_in_that_tenants_chain(
    guard: Guard, store: SqlStore
) -> None:
    for context in (ACME, GLOBEX):
        with guard.llm_call("test-model", estimate=Usage(10, 10), context=context) as call:
            call.record({"input_tokens": 5, "output_tokens": 1})
    assert guard.audit is not None and guard.audit.flush()
    for context in (ACME, GLOBEX):
        found = kinds(store, context.tenant)
        assert ("llm_input", context.agent) in found
        assert ("llm_output", context.agent) in found
        assert all(agent == context.agent for kind, agent in found if kind != "budget"), found
        (started,) = list(store.audit_rows(tenant=context.tenant, kind="llm_input"))
        story = action_story(store, started.decision_id or "", tenant=context.tenant)
        assert story["outcome"] == "ran"
    assert kinds(store, GATEWAY.tenant) == []  # nothing of theirs in the gateway's own


def test_a_protected_tool_run_for_a_tenant_is_told_in_that_tenants_chain(
    guard: Guard, store: SqlStore
) -> None:
    @guard.protect(
        mapper=lambda q, tenant: Action.tool(
            "search", {"q": q}, context=ACME if tenant == "acme" else GLOBEX
        )
    )
    def search(q: str, tenant: str) -> str:
        return f"results for {q}"

    @guard.protect(mapper=lambda q: Action.tool("search", {"q": q}, context=GLOBEX))
    async def asearch(q: str) -> str:
        return f"results for {q}"

    assert search("a", "acme") == "results for a"
    assert asyncio.run(asearch("b")) == "results for b"
    assert guard.audit is not None and guard.audit.flush()
    assert [k for k, _ in kinds(store, "acme")] == ["decision", "tool_invoke", "tool_result"]
    assert [k for k, _ in kinds(store, "globex")] == ["decision", "tool_invoke", "tool_result"]
    assert {agent for _, agent in kinds(store, "globex")} == {"globex-bot"}
    assert kinds(store, GATEWAY.tenant) == []


def test_a_long_body_finds_its_tenant_after_many_other_decisions(
    guard: Guard, store: SqlStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The guard remembers the newest ``_OWNERS_KEPT`` callers (4,096; 3 here): a body
    that runs while more calls are decided used to have its end record written to the
    gateway's own chain — another tenant's data where the gateway's export shows it."""
    import interlock.guard

    monkeypatch.setattr(interlock.guard, "_OWNERS_KEPT", 3)

    def busy() -> None:
        for i in range(6):
            assert guard.check(Action.tool("search", {"q": f"o{i}"}, context=GLOBEX)).allowed

    @guard.protect(mapper=lambda q: Action.tool("search", {"q": q}, context=ACME))
    def search(q: str) -> str:
        busy()
        return f"results for {q}"

    @guard.protect(mapper=lambda q: Action.tool("search", {"q": q}, context=ACME))
    async def asearch(q: str) -> str:
        busy()
        return f"results for {q}"

    assert search("a") == "results for a"
    assert asyncio.run(asearch("b")) == "results for b"
    with guard.llm_call("test-model", estimate=Usage(10, 10), context=ACME) as call:
        busy()
        call.record({"input_tokens": 5, "output_tokens": 1})
    assert guard.audit is not None and guard.audit.flush()
    acme = [k for k, _ in kinds(store, "acme")]
    assert acme.count("tool_result") == 2 and acme.count("llm_output") == 1, acme
    assert {agent for kind, agent in kinds(store, "acme") if kind != "budget"} == {"acme-bot"}
    assert kinds(store, GATEWAY.tenant) == []
