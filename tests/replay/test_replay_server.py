"""``POST /v1/audit/replay``: admin keys only, the key's tenant only, bounded, and in
the OpenAPI document. On SQLite and PostgreSQL (the ``store_url`` back ends)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from interlock.server.routes.replay import MAX_POLICY_CHARS
from server.harness import POLICY, Api, open_api

LOOSENED = POLICY.replace(
    "  - id: no-shell\n    decision: deny\n    reason: no shell for support agents\n"
    "    name: shell\n",
    "  - id: shell-ok\n    decision: allow\n    reason: (draft) shell is fine\n    name: shell\n",
)
assert LOOSENED != POLICY


@pytest.fixture
async def api(store_url: str, tmp_path: Path) -> AsyncIterator[Api]:
    policy_file = tmp_path / "interlock.yaml"
    policy_file.write_text(POLICY)
    async for opened in open_api(store_url, policy_file):
        yield opened


async def _record_calls(api: Api) -> None:
    """Real checks through the server: recorded by its guard in each key's tenant."""
    for command in ("ls", "rm -rf /", "whoami"):
        await api.check("agent", name="shell", arguments={"command": command})
    await api.check("agent", name="search", arguments={"q": "refunds"})
    await api.check("agent", name="refund_order", arguments={"amount": 250})
    await api.check("other_agent", name="shell", arguments={"command": "ls"})  # globex


async def _replay(api: Api, who: str, **body: Any) -> Any:
    body.setdefault("policy", LOOSENED)
    return await api.client.post("/v1/audit/replay", json=body, headers=api.h(who))


async def test_an_admin_replays_the_tenants_log_under_a_draft(api: Api) -> None:
    await _record_calls(api)
    response = await _replay(api, "admin", fail_on="loosen", examples=1)
    assert response.status_code == 200, response.text
    data = response.json()
    assert data["schema"] == "interlock.replay/1"
    assert data["records"]["replayed"] == 5  # acme's five, not globex's
    assert data["changes"]["deny_to_allow"] == 3 == data["loosened"]
    assert data["failed"] is True
    assert data["filters"]["tenant"] == "acme"
    assert data["examples"]["deny_to_allow"][0]["tool"] == "shell"
    assert data["never_fired"] == ["refund-small", "house-model"]


async def test_the_other_tenants_admin_sees_only_its_own_log(api: Api) -> None:
    await _record_calls(api)
    data = (await _replay(api, "other_admin")).json()
    assert data["records"]["replayed"] == 1 and data["changes"]["deny_to_allow"] == 1


@pytest.mark.parametrize("who", ["agent", "approver", "other_agent", "other_approver"])
async def test_only_admin_keys_may_replay(api: Api, who: str) -> None:
    response = await _replay(api, who)
    assert response.status_code == 403
    assert response.json()["error"]["code"] == "forbidden"


async def test_a_draft_that_does_not_load_is_422_naming_its_line(api: Api) -> None:
    bad = "version: 1\nrules:\n  - id: x\n    decision: alow\n    reason: r\n"
    response = await _replay(api, "admin", policy=bad)
    assert response.status_code == 422
    error = response.json()["error"]
    assert error["code"] == "invalid_policy" and error["field"] == "policy"
    assert "draft:4: rule 'x': field 'decision'" in error["message"]


@pytest.mark.parametrize(
    "body",
    [
        {"policy": "x" * (MAX_POLICY_CHARS + 1)},
        {"max_records": 0},
        {"max_records": 1_000_001},
        {"examples": 21},
        {"fail_on": "sometimes"},
        {"since_us": 10, "until_us": 5},
        {"tenant": "globex"},  # the tenant is the key's, never the body's
    ],
    ids=["long-policy", "no-records", "too-many", "examples", "fail-on", "times", "tenant"],
)
async def test_bounds_and_bad_input_are_422(api: Api, body: dict[str, Any]) -> None:
    response = await _replay(api, "admin", **body)
    assert response.status_code in (413, 422), response.text


async def test_max_records_cuts_the_replay_short(api: Api) -> None:
    await _record_calls(api)
    data = (await _replay(api, "admin", max_records=2)).json()
    assert data["records"]["replayed"] == 2 and data["records"]["truncated"] is True


async def test_the_route_is_in_the_openapi_document(api: Api) -> None:
    document = (await api.client.get("/v1/openapi.json")).json()
    operation = document["paths"]["/v1/audit/replay"]["post"]
    assert operation["security"]
    assert "403" in operation["responses"]
    schema = document["components"]["schemas"]["ReplayIn"]
    assert schema["properties"]["policy"]["maxLength"] == MAX_POLICY_CHARS
