"""Tenant isolation on every endpoint, on SQLite and PostgreSQL: a key of tenant
``globex`` can neither see nor change what tenant ``acme`` has — approvals, audit,
budgets — and another tenant's id is "not found", exactly like an id that never was.

Both tenants have an agent key named ``ops-bot``: the same name in two tenants is two
identities."""

from __future__ import annotations

import json

import pytest

from .harness import Api

OTHERS = ["other_agent", "other_approver", "other_admin"]


async def test_another_tenants_approval_is_not_found_like_a_missing_one(api: Api) -> None:
    approval_id = await api.pending_approval()
    theirs = await api.client.get(f"/v1/approvals/{approval_id}", headers=api.h("other_admin"))
    missing = await api.client.get("/v1/approvals/apr_000000", headers=api.h("other_admin"))
    assert theirs.status_code == missing.status_code == 404
    assert theirs.json()["error"]["code"] == missing.json()["error"]["code"] == "not_found"
    assert theirs.json()["error"]["message"] == f"no approval {approval_id!r}"


@pytest.mark.parametrize("who", OTHERS)
async def test_another_tenant_cannot_wait_on_an_approval(api: Api, who: str) -> None:
    approval_id = await api.pending_approval()
    response = await api.client.get(
        f"/v1/approvals/{approval_id}/wait?timeout=60", headers=api.h(who)
    )
    assert response.status_code == 404


@pytest.mark.parametrize("action", ["approve", "deny"])
@pytest.mark.parametrize("who", ["other_approver", "other_admin"])
async def test_another_tenant_cannot_decide_an_approval(api: Api, action: str, who: str) -> None:
    approval_id = await api.pending_approval()
    response = await api.client.post(f"/v1/approvals/{approval_id}/{action}", headers=api.h(who))
    assert response.status_code == 404
    record = await api.client.get(f"/v1/approvals/{approval_id}", headers=api.h("approver"))
    assert (record.json()["status"], record.json()["decided_by"]) == ("pending", None)


async def test_approval_lists_show_only_the_keys_tenant(api: Api) -> None:
    ours = await api.pending_approval("agent")
    theirs = await api.pending_approval("other_agent")
    for who, expected in (("approver", ours), ("other_approver", theirs)):
        response = await api.client.get("/v1/approvals?status=all", headers=api.h(who))
        assert [a["id"] for a in response.json()["approvals"]] == [expected]


async def test_an_approval_granted_in_one_tenant_is_not_claimed_by_another(api: Api) -> None:
    approval_id = await api.pending_approval("agent")
    await api.client.post(
        f"/v1/approvals/{approval_id}/approve",
        json={"reason": "checked"},
        headers=api.h("approver"),
    )
    # globex's ops-bot makes the identical call: its own request, not acme's grant.
    theirs = await api.check("other_agent", name="refund_order", arguments={"amount": 250})
    assert theirs["verdict"] == "require_approval"
    assert theirs["approval"]["id"] != approval_id
    record = await api.client.get(f"/v1/approvals/{approval_id}", headers=api.h("approver"))
    assert record.json()["status"] == "approved"  # still acme's to claim
    ours = await api.check("agent", name="refund_order", arguments={"amount": 250})
    assert ours["verdict"] == "allow"


async def test_audit_shows_only_the_keys_tenant(api: Api) -> None:
    ours = await api.check("agent", name="search")
    theirs = await api.check("other_agent", name="shell", arguments={"command": "ls"})
    for who, expected, foreign in (("admin", ours, theirs), ("other_admin", theirs, ours)):
        page = await api.client.get("/v1/audit", headers=api.h(who))
        assert [r["decision_id"] for r in page.json()["records"]] == [expected["decision_id"]]
        by_id = await api.client.get(
            f"/v1/audit?decision_id={foreign['decision_id']}", headers=api.h(who)
        )
        assert by_id.json()["records"] == []  # the other tenant's decision, by its id
        export = await api.client.get("/v1/audit/export", headers=api.h(who))
        lines = [json.loads(line) for line in export.text.splitlines()]
        assert [line["decision_id"] for line in lines] == [expected["decision_id"]]
        verify = await api.client.get("/v1/audit/verify", headers=api.h(who))
        assert (verify.json()["tenant"], verify.json()["records"]) == (
            "acme" if who == "admin" else "globex",
            1,
        )


async def test_budgets_show_only_the_keys_tenant(api: Api) -> None:
    await api.check("agent", name="paid_lookup", arguments={"query": "q", "est_cost": 0.3})
    await api.client.post(
        "/v1/budgets/reserve",
        json={"lines": [{"budget_id": "model-tokens", "amount": 10}]},
        headers=api.h("other_agent"),
    )
    ours = (await api.client.get("/v1/budgets", headers=api.h("approver"))).json()
    theirs = (await api.client.get("/v1/budgets", headers=api.h("other_approver"))).json()
    assert [(r["budget_id"], r["reserved"]) for r in ours["budgets"]] == [("lookups", 300_000)]
    assert [(r["budget_id"], r["reserved"]) for r in theirs["budgets"]] == [("model-tokens", 10)]
    assert (ours["tenant"], theirs["tenant"]) == ("acme", "globex")


@pytest.mark.parametrize("settle", ["commit", "release"])
async def test_another_tenant_cannot_settle_a_reservation(api: Api, settle: str) -> None:
    decision = await api.check(name="paid_lookup", arguments={"query": "q", "est_cost": 0.3})
    reservation_id = decision["reservation"]["id"]
    response = await api.client.post(
        f"/v1/budgets/{settle}",
        json={"reservation_id": reservation_id},
        headers=api.h("other_admin"),
    )
    assert response.status_code == 404
    assert response.json()["error"]["message"] == f"no reservation {reservation_id!r}"
    (row,) = (await api.client.get("/v1/budgets", headers=api.h("agent"))).json()["budgets"]
    assert (row["reserved"], row["spent"]) == (300_000, 0)  # untouched


async def test_a_reservation_is_made_in_the_keys_tenant(api: Api) -> None:
    body = {"lines": [{"budget_id": "lookups", "amount": 900_000}], "idempotency_key": "same"}
    ours = await api.client.post("/v1/budgets/reserve", json=body, headers=api.h("agent"))
    theirs = await api.client.post("/v1/budgets/reserve", json=body, headers=api.h("other_agent"))
    # Same budget, same agent name, same idempotency key: two tenants, two reservations.
    assert ours.json()["reserved"] and theirs.json()["reserved"]
    assert ours.json()["reservation"]["tenant"] == "acme"
    assert theirs.json()["reservation"]["tenant"] == "globex"
    assert ours.json()["reservation"]["id"] != theirs.json()["reservation"]["id"]


async def test_a_request_cannot_state_its_tenant_or_agent(api: Api) -> None:
    for field in ("tenant", "agent"):
        response = await api.client.post(
            "/v1/check",
            json={"name": "search", "context": {field: "globex"}},
            headers=api.h("agent"),
        )
        assert response.status_code == 422
        assert response.json()["error"]["field"] == f"context.{field}"
    page = await api.client.get("/v1/audit", headers=api.h("other_admin"))
    assert page.json()["records"] == []
