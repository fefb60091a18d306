"""Every error answer has one shape, ``{"error": {"code", "message", "field"}}``, and
the status that fits: bad input is a 4xx naming the field, never a 5xx."""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest

from .harness import Api


def error_of(response: httpx.Response) -> dict[str, Any]:
    body = response.json()
    assert set(body) == {"error"}, body
    assert set(body["error"]) == {"code", "message", "field"}, body
    error: dict[str, Any] = body["error"]
    return error


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({}, "name"),
        ({"name": ""}, "name"),
        ({"name": "x", "kind": "rocket"}, "kind"),
        ({"name": "x", "arguments": "rm -rf /"}, "arguments"),
        ({"name": "x", "arguments": {"n": float("nan")}}, "arguments"),
        ({"name": "x", "arguments": {"n": float("inf")}}, "arguments"),
        ({"name": "x", "arguments": {"s": "\ud800"}}, "arguments"),
        ({"name": "x", "surprise": 1}, "surprise"),
        ({"name": "x", "context": {"session_id": "a\x00b"}}, "context.session_id"),
        ({"name": "x", "context": {"tenant": "globex"}}, "context.tenant"),
        ({"name": "x", "capabilities": ["ok", 3]}, "capabilities.1"),
    ],
)
async def test_an_invalid_check_is_422_naming_the_field(
    sqlite_api: Api, body: dict[str, Any], field: str
) -> None:
    raw = json.dumps(body)  # NaN and Infinity as Python writes them: the parser accepts them
    response = await sqlite_api.client.post(
        "/v1/check",
        content=raw,
        headers={**sqlite_api.h("agent"), "content-type": "application/json"},
    )
    assert response.status_code == 422, response.text
    error = error_of(response)
    assert (error["code"], error["field"]) == ("invalid_request", field)
    assert error["message"].startswith(f"{field}: ")


async def test_arguments_nested_too_deep_are_refused(sqlite_api: Api) -> None:
    # 70 levels: within the server's limit on the whole body (test_limits.py), over
    # the 64 the arguments may nest.
    deep: Any = "bottom"
    for _ in range(70):
        deep = {"a": deep}
    response = await sqlite_api.client.post(
        "/v1/check", json={"name": "x", "arguments": deep}, headers=sqlite_api.h("agent")
    )
    assert response.status_code == 422
    assert "nested deeper than 64" in error_of(response)["message"]


async def test_malformed_json_is_422(sqlite_api: Api) -> None:
    response = await sqlite_api.client.post(
        "/v1/check",
        content=b'{"name": ',
        headers={**sqlite_api.h("agent"), "content-type": "application/json"},
    )
    assert response.status_code == 422
    assert error_of(response)["field"] == "body"


@pytest.mark.parametrize(
    ("url", "field"),
    [
        ("/v1/approvals?limit=0", "limit"),
        ("/v1/approvals?status=maybe", "status"),
        ("/v1/audit?since_seq=-1", "since_seq"),
        ("/v1/audit?decision=perhaps", "decision"),
        ("/v1/approvals/apr%20x", "approval_id"),
        ("/v1/approvals/apr_1/wait?timeout=nan", "timeout"),
        ("/v1/approvals/apr_1/wait?timeout=-1", "timeout"),
    ],
)
async def test_invalid_query_and_path_values_are_422(sqlite_api: Api, url: str, field: str) -> None:
    response = await sqlite_api.client.get(url, headers=sqlite_api.h("admin"))
    assert response.status_code == 422, response.text
    assert error_of(response)["field"] == field


async def test_unknown_ids_are_404(sqlite_api: Api) -> None:
    for method, url, body in (
        ("GET", "/v1/approvals/apr_nope", None),
        ("POST", "/v1/approvals/apr_nope/approve", None),
        ("GET", "/v1/approvals/apr_nope/wait?timeout=60", None),
        ("POST", "/v1/budgets/commit", {"reservation_id": "res_nope"}),
        ("POST", "/v1/budgets/release", {"reservation_id": "res_nope"}),
    ):
        response = await sqlite_api.client.request(
            method, url, json=body, headers=sqlite_api.h("admin")
        )
        assert response.status_code == 404, (url, response.text)
        assert error_of(response)["code"] == "not_found"


async def test_unknown_routes_and_methods_keep_the_shape(sqlite_api: Api) -> None:
    missing = await sqlite_api.client.get("/v1/nothing-here")
    wrong = await sqlite_api.client.delete("/v1/check", headers=sqlite_api.h("agent"))
    assert (missing.status_code, error_of(missing)["code"]) == (404, "not_found")
    assert (wrong.status_code, error_of(wrong)["code"]) == (405, "method_not_allowed")


async def test_a_body_over_the_limit_is_413(sqlite_api: Api) -> None:
    response = await sqlite_api.client.post(
        "/v1/check",
        json={"name": "x", "arguments": {"blob": "x" * (1 << 20)}},
        headers=sqlite_api.h("agent"),
    )
    assert response.status_code == 413
    assert error_of(response)["code"] == "too_large"


async def test_a_streamed_body_over_the_limit_is_413(sqlite_api: Api) -> None:
    async def chunks() -> Any:
        yield b'{"name": "x", "arguments": {"blob": "'
        for _ in range(20):
            yield b"x" * 65_536
        yield b'"}}'

    response = await sqlite_api.client.post(
        "/v1/check",
        content=chunks(),  # no Content-Length: counted as it arrives
        headers={**sqlite_api.h("agent"), "content-type": "application/json"},
    )
    assert response.status_code == 413
    assert error_of(response)["code"] == "too_large"


async def test_reserving_on_a_budget_the_policy_lacks_is_422(sqlite_api: Api) -> None:
    for lines, field in (
        ([{"budget_id": "nope", "amount": 1}], "lines.0.budget_id"),
        ([{"budget_id": "lookups", "amount": 1}] * 2, "lines.1.budget_id"),
        ([{"budget_id": "lookups", "amount": -1}], "lines.0.amount"),
        ([], "lines"),
    ):
        response = await sqlite_api.client.post(
            "/v1/budgets/reserve", json={"lines": lines}, headers=sqlite_api.h("agent")
        )
        assert response.status_code == 422, response.text
        assert error_of(response)["field"] == field


async def test_committing_usage_of_a_model_with_no_price_is_422(sqlite_api: Api) -> None:
    decision = await sqlite_api.check(name="paid_lookup", arguments={"query": "q", "est_cost": 0.1})
    response = await sqlite_api.client.post(
        "/v1/budgets/commit",
        json={
            "reservation_id": decision["reservation"]["id"],
            "usage": {"input_tokens": 10, "output_tokens": 10},
            "model": "mystery-model",
        },
        headers=sqlite_api.h("agent"),
    )
    assert response.status_code == 422
    assert error_of(response)["field"] == "model"
    assert "no price for model 'mystery-model'" in error_of(response)["message"]


async def test_a_store_that_is_down_fails_checks_closed_and_the_rest_with_503(
    sqlite_api: Api,
) -> None:
    await sqlite_api.client.get("/v1/whoami", headers=sqlite_api.h("agent"))  # key cached
    store = sqlite_api.guard.store
    assert store is not None
    store.close()
    decision = await sqlite_api.check(name="refund_order", arguments={"amount": 250})
    listing = await sqlite_api.client.get("/v1/approvals", headers=sqlite_api.h("approver"))
    ready = await sqlite_api.client.get("/v1/ready")
    assert decision["verdict"] == "undetermined" and decision["cause"]
    assert (listing.status_code, error_of(listing)["code"]) == (503, "unavailable")
    assert ready.status_code == 503 and ready.json()["status"] == "unavailable"
    assert ready.json()["checks"]["policy"] == "ok"
    assert "closed" in ready.json()["checks"]["store"]


async def test_an_unexpected_failure_is_a_500_that_says_nothing_more(
    sqlite_api: Api, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = sqlite_api.guard.store
    assert store is not None

    def broken(**options: Any) -> Any:
        raise RuntimeError("secret internals")

    monkeypatch.setattr(store, "budget_rows", broken)
    transport = httpx.ASGITransport(app=sqlite_api.app, raise_app_exceptions=False)
    async with httpx.AsyncClient(transport=transport, base_url="http://t") as client:
        response = await client.get("/v1/budgets", headers=sqlite_api.h("agent"))
    assert response.status_code == 500
    error = error_of(response)
    assert error["code"] == "internal" and "secret" not in error["message"]
