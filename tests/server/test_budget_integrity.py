"""Budgets that cannot be dodged over HTTP (issue 12), on SQLite and PostgreSQL: a model
call that states no cost is refused by ``/v1/check``; only the key that reserved (or an
admin key) settles a reservation; absurd numbers are a 4xx, never a 5xx; a budget that
a call overran is closed until an admin reopens it."""

from __future__ import annotations

from typing import Any

import pytest

from interlock.server import Role

from .harness import Api, bearer


async def model_check(api: Api, who: str = "agent", **arguments: Any) -> dict[str, Any]:
    return await api.check(who, kind="llm", name="house-model", arguments=arguments)


async def rows(api: Api) -> dict[str, dict[str, Any]]:
    response = await api.client.get("/v1/budgets", headers=api.h("admin"))
    return {row["budget_id"]: row for row in response.json()["budgets"]}


async def test_a_model_check_that_states_no_cost_is_refused(api: Api) -> None:
    for arguments in ({}, {"input_tokens": 0, "max_output_tokens": 0}):
        decision = await model_check(api, **arguments)
        assert decision["verdict"] == "deny", decision
        assert decision["rule_ids"] == ["budget:model-tokens"]
        assert "max_tokens" in decision["reason"] and "default_estimate" in decision["reason"]
        assert decision["reservation"] is None


async def test_a_model_check_reserves_from_the_request_and_the_real_usage_is_charged(
    api: Api,
) -> None:
    messages = [{"role": "user", "content": "y" * 4000}]
    decision = await model_check(api, messages=messages, max_tokens=1000)
    assert decision["verdict"] == "allow"
    assert decision["reservation"]["amounts"] == [  # 4004 characters / 4, + 1000
        {"budget_id": "model-tokens", "amount": 2001, "unit": "tokens"}
    ]
    committed = await api.client.post(
        "/v1/budgets/commit",
        json={
            "reservation_id": decision["reservation"]["id"],
            "usage": {"input_tokens": 1_000_000, "output_tokens": 500_000},
        },
        headers=api.h("agent"),
    )
    assert committed.status_code == 200
    row = (await rows(api))["model-tokens"]
    assert row["spent"] == 1_500_000  # charged in full, far past the reservation
    assert row["excess"] == 1_500_000 - 2001 - 2001 and row["closed"] is True
    again = await model_check(api, max_tokens=10)
    assert again["verdict"] == "deny" and "closed" in again["reason"]


async def another_agent(api: Api) -> dict[str, str]:
    return bearer(api.keys.create(tenant="acme", role=Role.AGENT, name="mallory").token)


async def test_only_the_agent_that_reserved_or_an_admin_settles_a_reservation(api: Api) -> None:
    mallory = await another_agent(api)
    held = await api.check(name="paid_lookup", arguments={"query": "q", "est_cost": 0.25})
    body = {"reservation_id": held["reservation"]["id"]}
    for route in ("release", "commit"):
        refused = await api.client.post(f"/v1/budgets/{route}", json=body, headers=mallory)
        assert refused.status_code == 403, refused.text
        assert "ops-bot" not in refused.text  # says it is not theirs, not whose it is
    zero = {**body, "usage": {"input_tokens": 0, "output_tokens": 0}, "model": "x"}
    assert (
        await api.client.post("/v1/budgets/commit", json=zero, headers=mallory)
    ).status_code == 403
    assert (await rows(api))["lookups"]["reserved"] == 250_000
    released = await api.client.post("/v1/budgets/release", json=body, headers=api.h("admin"))
    assert released.status_code == 200 and released.json()["status"] == "released"

    named = await api.client.post(
        "/v1/budgets/reserve",
        json={"lines": [{"budget_id": "lookups", "amount": 1000}]},
        headers=api.h("agent"),
    )
    reservation = named.json()["reservation"]
    assert reservation["owner"] == "ops-bot"
    taken = {"reservation_id": reservation["id"]}
    assert (
        await api.client.post("/v1/budgets/commit", json=taken, headers=mallory)
    ).status_code == 403
    done = await api.client.post("/v1/budgets/commit", json=taken, headers=api.h("agent"))
    assert done.status_code == 200 and done.json()["actual"] == {"lookups": 1000}


@pytest.mark.parametrize(
    "usage",
    [
        {"input_tokens": 0, "output_tokens": 2**62},
        {"input_tokens": 2**53 + 1, "output_tokens": 0},
        {"input_tokens": -1, "output_tokens": 0},
        {"input_tokens": 1.5, "output_tokens": 0},
        {"input_tokens": 10.0, "output_tokens": 0},
        {"input_tokens": True, "output_tokens": 0},
        {"input_tokens": "10", "output_tokens": 0},
    ],
    ids=["2**62", "over 2**53", "negative", "fraction", "float", "bool", "text"],
)
async def test_an_absurd_usage_is_a_4xx_and_changes_nothing(
    api: Api, usage: dict[str, Any]
) -> None:
    decision = await model_check(api, input_tokens=10, max_output_tokens=10)
    response = await api.client.post(
        "/v1/budgets/commit",
        json={"reservation_id": decision["reservation"]["id"], "usage": usage},
        headers=api.h("agent"),
    )
    assert response.status_code == 422, response.text
    assert response.json()["error"]["field"].startswith("usage.")
    row = (await rows(api))["model-tokens"]
    assert (row["spent"], row["reserved"]) == (0, 20)


@pytest.mark.parametrize("amount", [0, -5, 2**53 + 1, 2**62, 1.5, True])
async def test_an_absurd_reservation_amount_is_a_4xx(api: Api, amount: Any) -> None:
    response = await api.client.post(
        "/v1/budgets/reserve",
        json={"lines": [{"budget_id": "lookups", "amount": amount}]},
        headers=api.h("agent"),
    )
    assert response.status_code == 422, response.text
    assert response.json()["error"]["field"] == "lines.0.amount"


async def test_a_priced_usage_too_large_to_count_is_a_4xx(api: Api) -> None:
    # 2**53 tokens of a model at 4 USD per million: more micro-USD than a budget counts
    decision = await api.check(name="paid_lookup", arguments={"query": "q", "est_cost": 0.1})
    response = await api.client.post(
        "/v1/budgets/commit",
        json={
            "reservation_id": decision["reservation"]["id"],
            "usage": {"input_tokens": 0, "output_tokens": 2**53},
            "model": "house-model",
        },
        headers=api.h("agent"),
    )
    assert response.status_code == 422, response.text
    assert (await rows(api))["lookups"]["reserved"] == 100_000


async def test_only_an_admin_reopens_a_closed_budget(api: Api) -> None:
    decision = await model_check(api, input_tokens=5, max_output_tokens=5)
    await api.client.post(
        "/v1/budgets/commit",
        json={
            "reservation_id": decision["reservation"]["id"],
            "usage": {"input_tokens": 100, "output_tokens": 0},
        },
        headers=api.h("agent"),
    )
    row = (await rows(api))["model-tokens"]
    assert (row["spent"], row["excess"], row["closed"]) == (100, 80, True)
    body = {"budget_id": "model-tokens", "scope_key": "agent:ops-bot"}
    for who in ("agent", "approver"):
        refused = await api.client.post("/v1/budgets/reopen", json=body, headers=api.h(who))
        assert refused.status_code == 403
    assert (
        await api.client.post("/v1/budgets/reopen", json=body, headers=api.h("other_admin"))
    ).json()["reopened"] == []  # another tenant's admin finds nothing to reopen
    reopened = await api.client.post("/v1/budgets/reopen", json=body, headers=api.h("admin"))
    assert reopened.status_code == 200
    (closure,) = reopened.json()["reopened"]
    assert (closure["scope_key"], closure["excess"]) == ("agent:ops-bot", 80)
    assert (await rows(api))["model-tokens"]["closed"] is False
    assert (await model_check(api, input_tokens=5, max_output_tokens=5))["verdict"] == "allow"
