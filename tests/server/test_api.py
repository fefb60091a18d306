"""Every endpoint's happy path, on SQLite and PostgreSQL: the HTTP API is the Guard
and its store, reached over HTTP with an API key."""

from __future__ import annotations

import json

from .harness import Api

# -- check ---------------------------------------------------------------------------------


async def test_check_returns_each_verdict_with_its_rules(api: Api) -> None:
    allow = await api.check(name="search", arguments={"q": "order 42"})
    deny = await api.check(name="shell", arguments={"command": "ls"})
    unknown = await api.check(name="launch_rocket")
    assert (allow["verdict"], allow["rule_ids"]) == ("allow", ["tools"])
    assert (deny["verdict"], deny["rule_ids"], deny["reason"]) == (
        "deny",
        ["no-shell"],
        "no shell for support agents",
    )
    assert unknown["verdict"] == "deny" and unknown["rule_ids"] == []
    assert len({allow["decision_id"], deny["decision_id"], unknown["decision_id"]}) == 3


async def test_a_check_that_needs_approval_opens_one_requested_by_the_keys_name(api: Api) -> None:
    decision = await api.check(name="refund_order", arguments={"amount": 250})
    approval = decision["approval"]
    assert decision["verdict"] == "require_approval"
    assert approval["status"] == "pending"
    assert approval["url"] == f"https://interlock.example.com/approvals/{approval['id']}"
    record = await api.client.get(f"/v1/approvals/{approval['id']}", headers=api.h("approver"))
    assert record.status_code == 200
    assert record.json()["requested_by"] == "ops-bot"
    assert record.json()["context"]["tenant"] == "acme"


async def test_the_body_may_state_session_and_call_ids_but_the_key_states_who(api: Api) -> None:
    decision = await api.check(
        name="refund_order",
        arguments={"amount": 300},
        context={"session_id": "s-9", "call_id": "call-1", "runtime": "langgraph"},
    )
    record = await api.client.get(
        f"/v1/approvals/{decision['approval']['id']}", headers=api.h("agent")
    )
    context = record.json()["context"]
    assert (context["agent"], context["tenant"]) == ("ops-bot", "acme")
    assert (context["session_id"], context["call_id"], context["runtime"]) == (
        "s-9",
        "call-1",
        "langgraph",
    )


async def test_an_allowed_check_that_costs_something_holds_a_reservation(api: Api) -> None:
    decision = await api.check(name="paid_lookup", arguments={"query": "q", "est_cost": 0.25})
    reservation = decision["reservation"]
    assert decision["verdict"] == "allow"
    assert reservation["amounts"] == [{"budget_id": "lookups", "amount": 250_000, "unit": "USD"}]


async def test_batch_halts_at_the_first_action_that_is_not_allowed(api: Api) -> None:
    response = await api.client.post(
        "/v1/check/batch",
        json={
            "actions": [
                {"name": "search", "arguments": {"q": "x"}},
                {"name": "shell", "arguments": {"command": "ls"}},
                {"name": "read_file", "arguments": {"path": "/workspace/a"}},
            ]
        },
        headers=api.h("agent"),
    )
    assert response.status_code == 200
    assert (response.json()["verdict"], response.json()["rule_ids"]) == ("deny", ["no-shell"])


async def test_batch_of_allowed_actions_returns_the_last_allow(api: Api) -> None:
    response = await api.client.post(
        "/v1/check/batch",
        json={"actions": [{"name": "search"}, {"name": "read_file"}]},
        headers=api.h("admin"),
    )
    assert response.status_code == 200
    assert (response.json()["verdict"], response.json()["rule_ids"]) == ("allow", ["tools"])


# -- approvals -----------------------------------------------------------------------------


async def test_list_shows_the_tenants_pending_approvals_newest_first(api: Api) -> None:
    first = await api.pending_approval(amount=200)
    second = await api.pending_approval(amount=300)
    response = await api.client.get("/v1/approvals", headers=api.h("approver"))
    assert response.status_code == 200
    assert [a["id"] for a in response.json()["approvals"]] == [second, first]


async def test_list_filters_by_status(api: Api) -> None:
    decided = await api.pending_approval(amount=200)
    waiting = await api.pending_approval(amount=300)
    await api.client.post(
        f"/v1/approvals/{decided}/deny", json={"reason": "checked"}, headers=api.h("approver")
    )
    denied = await api.client.get("/v1/approvals?status=denied", headers=api.h("approver"))
    every = await api.client.get("/v1/approvals?status=all", headers=api.h("admin"))
    assert [a["id"] for a in denied.json()["approvals"]] == [decided]
    assert {a["id"] for a in every.json()["approvals"]} == {decided, waiting}


async def test_approve_records_the_approver_and_reason(api: Api) -> None:
    approval_id = await api.pending_approval()
    response = await api.client.post(
        f"/v1/approvals/{approval_id}/approve",
        json={"reason": "order checked"},
        headers=api.h("approver"),
    )
    assert response.status_code == 200
    body = response.json()
    assert (body["status"], body["decided_by"], body["decision_reason"]) == (
        "approved",
        "alice",
        "order checked",
    )


async def test_deny_denies_and_the_retry_is_denied(api: Api) -> None:
    approval_id = await api.pending_approval()
    response = await api.client.post(
        f"/v1/approvals/{approval_id}/deny", json={"reason": "checked"}, headers=api.h("admin")
    )
    assert response.status_code == 200 and response.json()["status"] == "denied"
    retry = await api.check(name="refund_order", arguments={"amount": 250})
    assert retry["verdict"] == "deny"
    assert retry["reason"].startswith("denied by root")


async def test_approve_then_the_identical_retry_is_allowed_exactly_once(api: Api) -> None:
    approval_id = await api.pending_approval()
    approved = await api.client.post(
        f"/v1/approvals/{approval_id}/approve",
        json={"reason": "checked"},
        headers=api.h("approver"),
    )
    assert approved.status_code == 200
    first = await api.check(name="refund_order", arguments={"amount": 250})
    second = await api.check(name="refund_order", arguments={"amount": 250})
    assert first["verdict"] == "allow"
    assert first["approval"] == {
        "id": approval_id,
        "status": "claimed",
        "url": f"https://interlock.example.com/approvals/{approval_id}",
    }
    assert second["verdict"] == "require_approval"  # the grant was single-use
    assert second["approval"]["id"] != approval_id
    record = await api.client.get(f"/v1/approvals/{approval_id}", headers=api.h("agent"))
    assert record.json()["status"] == "claimed"


async def test_a_changed_argument_does_not_use_the_approval(api: Api) -> None:
    approval_id = await api.pending_approval(amount=250)
    await api.client.post(
        f"/v1/approvals/{approval_id}/approve",
        json={"reason": "checked"},
        headers=api.h("approver"),
    )
    other = await api.check(name="refund_order", arguments={"amount": 251})
    assert other["verdict"] == "require_approval" and other["approval"]["id"] != approval_id


async def test_deciding_twice_is_a_conflict(api: Api) -> None:
    approval_id = await api.pending_approval()
    await api.client.post(
        f"/v1/approvals/{approval_id}/approve",
        json={"reason": "checked"},
        headers=api.h("approver"),
    )
    again = await api.client.post(
        f"/v1/approvals/{approval_id}/deny", json={"reason": "checked"}, headers=api.h("admin")
    )
    assert again.status_code == 409
    assert again.json()["error"]["code"] == "conflict"


async def test_wait_returns_at_once_for_a_decided_approval(api: Api) -> None:
    approval_id = await api.pending_approval()
    await api.client.post(
        f"/v1/approvals/{approval_id}/deny", json={"reason": "checked"}, headers=api.h("approver")
    )
    response = await api.client.get(
        f"/v1/approvals/{approval_id}/wait?timeout=60", headers=api.h("agent")
    )
    assert response.status_code == 200 and response.json()["status"] == "denied"


async def test_wait_with_no_decision_returns_the_pending_record(api: Api) -> None:
    approval_id = await api.pending_approval()
    response = await api.client.get(
        f"/v1/approvals/{approval_id}/wait?timeout=0", headers=api.h("agent")
    )
    assert response.status_code == 200
    assert (response.json()["id"], response.json()["status"]) == (approval_id, "pending")


# -- budgets -------------------------------------------------------------------------------


async def test_commit_spends_the_reservation_a_check_holds(api: Api) -> None:
    decision = await api.check(name="paid_lookup", arguments={"query": "q", "est_cost": 0.4})
    reservation_id = decision["reservation"]["id"]
    response = await api.client.post(
        "/v1/budgets/commit", json={"reservation_id": reservation_id}, headers=api.h("agent")
    )
    assert response.status_code == 200
    assert (response.json()["status"], response.json()["actual"]) == (
        "committed",
        {"lookups": 400_000},
    )
    status = await api.client.get("/v1/budgets", headers=api.h("agent"))
    (row,) = status.json()["budgets"]
    assert (row["budget_id"], row["spent"], row["reserved"], row["available"]) == (
        "lookups",
        400_000,
        0,
        600_000,
    )


async def test_commit_with_usage_charges_what_the_model_used(api: Api) -> None:
    decision = await api.check(
        kind="llm", name="house-model", arguments={"input_tokens": 1000, "max_output_tokens": 500}
    )
    response = await api.client.post(
        "/v1/budgets/commit",
        json={
            "reservation_id": decision["reservation"]["id"],
            "usage": {"input_tokens": 700, "output_tokens": 100},
            "model": "house-model",
        },
        headers=api.h("agent"),
    )
    assert response.status_code == 200
    assert response.json()["actual"] == {"model-tokens": 800}


async def test_release_gives_the_reservation_back_and_twice_is_a_no_op(api: Api) -> None:
    decision = await api.check(name="paid_lookup", arguments={"query": "q", "est_cost": 0.4})
    body = {"reservation_id": decision["reservation"]["id"]}
    first = await api.client.post("/v1/budgets/release", json=body, headers=api.h("agent"))
    second = await api.client.post("/v1/budgets/release", json=body, headers=api.h("agent"))
    assert first.json()["status"] == "released" and not first.json()["replayed"]
    assert second.json()["status"] == "released" and second.json()["replayed"]
    status = await api.client.get("/v1/budgets", headers=api.h("approver"))
    assert status.json()["budgets"][0]["reserved"] == 0


async def test_commit_after_release_is_a_conflict(api: Api) -> None:
    decision = await api.check(name="paid_lookup", arguments={"query": "q", "est_cost": 0.4})
    body = {"reservation_id": decision["reservation"]["id"]}
    await api.client.post("/v1/budgets/release", json=body, headers=api.h("agent"))
    commit = await api.client.post("/v1/budgets/commit", json=body, headers=api.h("agent"))
    assert commit.status_code == 409 and commit.json()["error"]["code"] == "conflict"


async def test_reserve_takes_every_line_or_none(api: Api) -> None:
    taken = await api.client.post(
        "/v1/budgets/reserve",
        json={
            "lines": [
                {"budget_id": "lookups", "amount": 600_000},
                {"budget_id": "model-tokens", "amount": 1_000},
            ],
            "idempotency_key": "call-1",
        },
        headers=api.h("agent"),
    )
    refused = await api.client.post(
        "/v1/budgets/reserve",
        json={
            "lines": [
                {"budget_id": "model-tokens", "amount": 1_000},
                {"budget_id": "lookups", "amount": 600_000},
            ],
        },
        headers=api.h("agent"),
    )
    assert taken.status_code == 200 and taken.json()["reserved"] is True
    reservation = taken.json()["reservation"]
    assert {line["scope_key"] for line in reservation["lines"]} == {"agent:ops-bot"}
    assert refused.status_code == 200 and refused.json()["reserved"] is False
    refusal = refused.json()["refusal"]
    assert (refusal["budget_id"], refusal["available"]) == ("lookups", 400_000)
    rows = (await api.client.get("/v1/budgets", headers=api.h("agent"))).json()["budgets"]
    assert {r["budget_id"]: r["reserved"] for r in rows} == {
        "lookups": 600_000,
        "model-tokens": 1_000,  # the refused reservation took nothing
    }


async def test_reserve_again_with_the_same_idempotency_key_replays(api: Api) -> None:
    body = {"lines": [{"budget_id": "lookups", "amount": 100_000}], "idempotency_key": "k-1"}
    first = await api.client.post("/v1/budgets/reserve", json=body, headers=api.h("agent"))
    again = await api.client.post("/v1/budgets/reserve", json=body, headers=api.h("agent"))
    assert again.json()["reservation"]["id"] == first.json()["reservation"]["id"]
    assert again.json()["reservation"]["replayed"] is True


async def test_reserve_on_a_per_tool_budget_needs_the_tool(api: Api) -> None:
    line = {"budget_id": "per-tool", "amount": 1_000}
    missing = await api.client.post(
        "/v1/budgets/reserve", json={"lines": [line]}, headers=api.h("agent")
    )
    named = await api.client.post(
        "/v1/budgets/reserve", json={"lines": [line], "tool": "scraper"}, headers=api.h("agent")
    )
    assert missing.status_code == 422 and missing.json()["error"]["field"] == "tool"
    assert named.json()["reservation"]["lines"][0]["scope_key"] == "tool:scraper"


# -- audit ---------------------------------------------------------------------------------


async def test_audit_query_pages_through_the_tenants_chain(api: Api) -> None:
    decisions = [await api.check(name="search", arguments={"q": str(i)}) for i in range(3)]
    first = await api.client.get("/v1/audit?limit=2", headers=api.h("approver"))
    rest = await api.client.get(
        f"/v1/audit?limit=2&since_seq={first.json()['next_since_seq']}",
        headers=api.h("approver"),
    )
    records = first.json()["records"] + rest.json()["records"]
    assert [r["seq"] for r in records] == [1, 2, 3]
    assert [r["decision_id"] for r in records] == [d["decision_id"] for d in decisions]
    assert rest.json()["next_since_seq"] is None
    assert records[0]["record"]["action"]["name"] == "search"
    assert records[0]["agent"] == "ops-bot"


async def test_audit_query_finds_a_decision_by_id(api: Api) -> None:
    await api.check(name="search")
    wanted = await api.check(name="shell", arguments={"command": "ls"})
    response = await api.client.get(
        f"/v1/audit?decision_id={wanted['decision_id']}", headers=api.h("admin")
    )
    (record,) = response.json()["records"]
    assert (record["decision"], record["record"]["rule_ids"]) == ("deny", ["no-shell"])


async def test_audit_export_streams_json_lines(api: Api) -> None:
    for i in range(3):
        await api.check(name="search", arguments={"q": str(i)})
    response = await api.client.get("/v1/audit/export?since_seq=1", headers=api.h("approver"))
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("application/x-ndjson")
    lines = [json.loads(line) for line in response.text.splitlines()]
    assert [line["seq"] for line in lines] == [2, 3]


async def test_audit_verify_walks_the_tenants_chain(api: Api) -> None:
    await api.check(name="search")
    approval_id = await api.pending_approval()
    await api.client.post(
        f"/v1/approvals/{approval_id}/approve",
        json={"reason": "checked"},
        headers=api.h("approver"),
    )
    response = await api.client.get("/v1/audit/verify", headers=api.h("approver"))
    assert response.json() == {"tenant": "acme", "ok": True, "records": 3, "breaks": []}


# -- service -------------------------------------------------------------------------------


async def test_health_and_ready_need_no_key(api: Api) -> None:
    health = await api.client.get("/v1/health")
    ready = await api.client.get("/v1/ready")
    assert (health.status_code, health.json()) == (200, {"status": "ok"})
    assert (ready.status_code, ready.json()) == (
        200,
        {
            "status": "ready",
            "checks": {"store": "ok", "policy": "ok"},
            "policy_reload_held": None,
        },
    )


async def test_whoami_names_the_key(api: Api) -> None:
    response = await api.client.get("/v1/whoami", headers=api.h("approver"))
    assert response.json() == {
        "id": api.tokens["approver"].split("_")[1],
        "tenant": "acme",
        "role": "approver",
        "name": "alice",
    }


async def test_the_openapi_document_is_published_under_v1(api: Api) -> None:
    response = await api.client.get("/v1/openapi.json")
    paths = response.json()["paths"]
    assert {
        "/v1/check",
        "/v1/check/batch",
        "/v1/approvals",
        "/v1/approvals/{approval_id}",
        "/v1/approvals/{approval_id}/wait",
        "/v1/approvals/{approval_id}/approve",
        "/v1/approvals/{approval_id}/deny",
        "/v1/budgets",
        "/v1/budgets/reserve",
        "/v1/budgets/commit",
        "/v1/budgets/release",
        "/v1/audit",
        "/v1/audit/export",
        "/v1/audit/verify",
        "/v1/health",
        "/v1/ready",
    } <= set(paths)
    assert all(path.startswith("/v1/") for path in paths)
