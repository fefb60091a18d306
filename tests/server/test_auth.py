"""Who may call what: 401 without a live key, 403 for a role that lacks the
permission, and nobody decides their own request."""

from __future__ import annotations

import tempfile
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import httpx
import pytest

from interlock.policy.reload import PolicyWatcher
from interlock.server import Role

from .harness import POLICY, Api, bearer, legacy_key

Build = Callable[[Api], Awaitable[dict[str, Any]]]


async def _nothing(api: Api) -> dict[str, Any]:
    return {}


async def _approval(api: Api) -> dict[str, Any]:
    return {"id": await api.pending_approval()}


async def _reservation(api: Api) -> dict[str, Any]:
    decision = await api.check(name="paid_lookup", arguments={"query": "q", "est_cost": 0.1})
    return {"id": decision["reservation"]["id"]}


async def _allowed(api: Api) -> dict[str, Any]:
    return {"id": (await api.check(name="search"))["decision_id"]}


async def _grant(api: Api) -> dict[str, Any]:
    decision = await api.check(name="search")
    body = {"decision_id": decision["decision_id"], "audience": "search-api"}
    response = await api.client.post("/v1/grants", json=body, headers=api.h("agent"))
    assert response.status_code == 200, response.text
    return {"token": response.json()["token"]}


async def _held_reload(api: Api) -> dict[str, Any]:
    """A reload of the server's policy file held for confirmation (4 of 5 rules
    removed); its digest."""
    path = Path(tempfile.mkdtemp()) / "interlock.yaml"
    path.write_text(POLICY)
    watcher = PolicyWatcher(api.guard, path)
    path.write_text(POLICY[: POLICY.index("  - id: no-shell")])
    assert watcher.reload() is False and watcher.held is not None
    api.app.state.interlock = replace(api.app.state.interlock, watcher=watcher)
    return {"sha256": watcher.held.sha256}


@dataclass(frozen=True)
class Endpoint:
    method: str
    path: str  # the route's template, as OpenAPI names it
    roles: frozenset[str]  # the roles that may call it
    make: Build = _nothing  # what the request needs to exist first
    url: str = ""  # the path with its ids filled in ({id})
    body: Any = None

    def request(self, values: dict[str, Any]) -> tuple[str, str, Any]:
        url = (self.url or self.path).format(**values)
        body = self.body
        if isinstance(body, dict):
            body = {k: (v.format(**values) if isinstance(v, str) else v) for k, v in body.items()}
        return self.method, url, body


AGENT, APPROVER, ADMIN = "agent", "approver", "admin"
EVERYONE = frozenset({AGENT, APPROVER, ADMIN})

ENDPOINTS = [
    Endpoint("POST", "/v1/check", frozenset({AGENT, ADMIN}), body={"name": "search"}),
    Endpoint(
        "POST", "/v1/check/batch", frozenset({AGENT, ADMIN}), body={"actions": [{"name": "x"}]}
    ),
    Endpoint("GET", "/v1/approvals", frozenset({APPROVER, ADMIN})),
    Endpoint("GET", "/v1/approvals/history", frozenset({APPROVER, ADMIN})),
    Endpoint("GET", "/v1/approvals/{approval_id}", EVERYONE, _approval, "/v1/approvals/{id}"),
    Endpoint(
        "GET",
        "/v1/approvals/{approval_id}/wait",
        EVERYONE,
        _approval,
        "/v1/approvals/{id}/wait?timeout=0",
    ),
    Endpoint(
        "POST",
        "/v1/approvals/{approval_id}/approve",
        frozenset({APPROVER, ADMIN}),
        _approval,
        "/v1/approvals/{id}/approve",
        body={"reason": "checked"},
    ),
    Endpoint(
        "POST",
        "/v1/approvals/{approval_id}/deny",
        frozenset({APPROVER, ADMIN}),
        _approval,
        "/v1/approvals/{id}/deny",
        body={"reason": "checked"},
    ),
    Endpoint("GET", "/v1/budgets", EVERYONE),
    Endpoint(
        "POST",
        "/v1/budgets/reserve",
        frozenset({AGENT, ADMIN}),
        body={"lines": [{"budget_id": "lookups", "amount": 1}]},
    ),
    Endpoint(
        "POST",
        "/v1/budgets/commit",
        frozenset({AGENT, ADMIN}),
        _reservation,
        body={"reservation_id": "{id}"},
    ),
    Endpoint(
        "POST",
        "/v1/budgets/release",
        frozenset({AGENT, ADMIN}),
        _reservation,
        body={"reservation_id": "{id}"},
    ),
    Endpoint("POST", "/v1/budgets/reopen", frozenset({ADMIN}), body={"budget_id": "lookups"}),
    Endpoint("GET", "/v1/audit", frozenset({APPROVER, ADMIN})),
    Endpoint("GET", "/v1/audit/export", frozenset({APPROVER, ADMIN})),
    Endpoint("GET", "/v1/audit/verify", frozenset({APPROVER, ADMIN})),
    Endpoint(
        "POST",
        "/v1/audit/replay",
        frozenset({ADMIN}),
        body={"policy": "version: 1\ndefault: deny\n"},
    ),
    Endpoint("GET", "/v1/whoami", EVERYONE),
    Endpoint(
        "POST",
        "/v1/grants",
        frozenset({AGENT, ADMIN}),
        _allowed,
        body={"decision_id": "{id}", "audience": "search-api"},
    ),
    Endpoint(
        "POST", "/v1/grants/claim", frozenset({AGENT, ADMIN}), _grant, body={"token": "{token}"}
    ),
    Endpoint(
        "POST",
        "/v1/sessions/outcome",
        frozenset({AGENT, ADMIN}),
        _allowed,
        body={"session_id": "s-1", "decision_id": "{id}", "executed": True, "fingerprints": ""},
    ),
    Endpoint(
        "POST",
        "/v1/sessions/input",
        frozenset({AGENT, ADMIN}),
        body={"session_id": "s-1", "fingerprints": "", "trusted": True},
    ),
    Endpoint(
        "POST",
        "/v1/policy/reload/confirm",
        frozenset({ADMIN}),
        _held_reload,
        body={"sha256": "{sha256}"},
    ),
]


def _id(endpoint: Endpoint) -> str:
    return f"{endpoint.method} {endpoint.path}"


async def send(
    api: Api, endpoint: Endpoint, headers: dict[str, str], values: dict[str, Any]
) -> httpx.Response:
    method, url, body = endpoint.request(values)
    return await api.client.request(method, url, json=body, headers=headers)


async def test_the_matrix_covers_every_route_that_needs_a_key(sqlite_api: Api) -> None:
    document = (await sqlite_api.client.get("/v1/openapi.json")).json()
    secured = {
        f"{method.upper()} {path}"
        for path, operations in document["paths"].items()
        for method, operation in operations.items()
        if operation.get("security")
    }
    assert secured == {_id(endpoint) for endpoint in ENDPOINTS}


@pytest.mark.parametrize("endpoint", ENDPOINTS, ids=_id)
@pytest.mark.parametrize("role", [AGENT, APPROVER, ADMIN])
async def test_each_role_gets_exactly_its_permissions(
    sqlite_api: Api, endpoint: Endpoint, role: str
) -> None:
    values = await endpoint.make(sqlite_api)
    response = await send(sqlite_api, endpoint, sqlite_api.h(role), values)
    if role in endpoint.roles:
        assert response.status_code == 200, response.text
    else:
        assert response.status_code == 403, response.text
        assert response.json()["error"]["code"] == "forbidden"


@pytest.mark.parametrize("endpoint", ENDPOINTS, ids=_id)
async def test_no_live_key_is_401(sqlite_api: Api, endpoint: Endpoint) -> None:
    values = await endpoint.make(sqlite_api)
    token = sqlite_api.tokens["admin"]
    revoked = sqlite_api.keys.create(tenant="acme", role=Role.ADMIN, name="gone")
    sqlite_api.keys.revoke(revoked.key.id)
    key_id, secret = token[len("ilk_") :].split("_", 1)
    wrong_secret = f"ilk_{key_id}_{'A' * len(secret)}"
    for headers in (
        {},
        {"Authorization": f"Basic {token}"},
        bearer("not-a-key"),
        bearer(wrong_secret),
        bearer(f"ilk_{'0' * 16}_{secret}"),  # no such id
        bearer(revoked.token),
    ):
        response = await send(sqlite_api, endpoint, headers, values)
        assert response.status_code == 401, (headers, response.text)
        assert response.json()["error"]["code"] == "unauthorized"
        assert response.headers["www-authenticate"] == "Bearer"


async def test_health_ready_metrics_and_openapi_need_no_key(sqlite_api: Api) -> None:
    for path in ("/v1/health", "/v1/ready", "/metrics", "/v1/openapi.json"):
        assert (await sqlite_api.client.get(path)).status_code == 200, path


# -- nobody decides their own request ------------------------------------------------------


async def test_an_agent_key_cannot_approve(sqlite_api: Api) -> None:
    approval_id = await sqlite_api.pending_approval()
    for action in ("approve", "deny"):
        response = await sqlite_api.client.post(
            f"/v1/approvals/{approval_id}/{action}", headers=sqlite_api.h("agent")
        )
        assert response.status_code == 403
    record = await sqlite_api.client.get(
        f"/v1/approvals/{approval_id}", headers=sqlite_api.h("agent")
    )
    assert record.json()["status"] == "pending"


@pytest.mark.parametrize("action", ["approve", "deny"])
async def test_an_admin_cannot_decide_a_request_its_own_check_made(
    sqlite_api: Api, action: str
) -> None:
    approval_id = await sqlite_api.pending_approval("admin")
    response = await sqlite_api.client.post(
        f"/v1/approvals/{approval_id}/{action}", headers=sqlite_api.h("admin")
    )
    assert response.status_code == 403
    assert response.json()["error"]["code"] == "self_approval"
    assert sqlite_api.guard.store is not None
    record = sqlite_api.guard.store.get_approval(approval_id)
    assert (record.requested_by, record.status.value) == ("root", "pending")


@pytest.mark.parametrize("name", ["ops-bot", " ops-bot "])
async def test_an_approver_key_with_the_requesters_name_cannot_approve(
    sqlite_api: Api, name: str
) -> None:
    approval_id = await sqlite_api.pending_approval("agent")  # requested by ops-bot
    twin = sqlite_api.keys.create(tenant="acme", role=Role.APPROVER, name=name)
    response = await sqlite_api.client.post(
        f"/v1/approvals/{approval_id}/approve",
        json={"reason": "checked"},
        headers=bearer(twin.token),
    )
    assert response.status_code == 403
    assert response.json()["error"]["code"] == "self_approval"
    other = await sqlite_api.client.post(
        f"/v1/approvals/{approval_id}/approve",
        json={"reason": "checked"},
        headers=sqlite_api.h("approver"),
    )
    assert other.status_code == 200 and other.json()["decided_by"] == "alice"


@pytest.mark.parametrize(
    "name",
    [
        "OPS-BOT",
        "\uff4f\uff50\uff53-\uff42\uff4f\uff54",  # fullwidth
        "ops\u200b-bot",
        "\ufeffops-bot",
        "ops\u00ad-bot",
        "\u043eps-bot",  # Cyrillic o
        "o\u0440s-bot",  # Cyrillic er
        "ops-b0t",
    ],
)
@pytest.mark.parametrize("action", ["approve", "deny"])
async def test_a_key_named_like_the_requester_before_such_names_were_refused_cannot_decide(
    api: Api, name: str, action: str
) -> None:
    approval_id = await api.pending_approval("agent")  # requested by ops-bot
    assert api.guard.store is not None
    twin = legacy_key(api.guard.store, tenant="acme", role="approver", name=name)
    response = await api.client.post(f"/v1/approvals/{approval_id}/{action}", headers=bearer(twin))
    assert response.status_code == 403, response.text
    error = response.json()["error"]
    assert error["code"] == "self_approval" and "'ops-bot'" in error["message"]
    assert api.guard.store.get_approval(approval_id).status.value == "pending"


async def test_a_key_revoked_here_is_refused_at_once(sqlite_api: Api) -> None:
    created = sqlite_api.keys.create(tenant="acme", role=Role.AGENT, name="temp")
    before = await sqlite_api.client.get("/v1/whoami", headers=bearer(created.token))
    sqlite_api.keys.revoke(created.key.id)
    after = await sqlite_api.client.get("/v1/whoami", headers=bearer(created.token))
    assert (before.status_code, after.status_code) == (200, 401)
