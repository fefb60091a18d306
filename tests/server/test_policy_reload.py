"""A policy reload held because it removes most of the rules: ``/v1/ready`` says so
(and stays ready, on the old policy), and an admin key confirms it."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest

from interlock.policy.reload import PolicyWatcher
from interlock.server import KeyStore, create_app

from .harness import POLICY, Api, make_keys, open_api, open_guard

# The first rule of the harness's five: four of five removed.
TRUNCATED = POLICY[: POLICY.index("  - id: no-shell")]
SHELL = {"name": "shell", "arguments": {"command": "ls"}}
LOOKUP = {"name": "search", "arguments": {"query": "x"}}


def _replace(path: Path, text: str) -> None:
    scratch = path.with_suffix(".tmp")
    scratch.write_text(text)
    os.replace(scratch, path)


@pytest.fixture
async def watched(sqlite_url: str, policy_file: Path) -> AsyncIterator[tuple[Api, PolicyWatcher]]:
    guard = open_guard(sqlite_url, policy_file)
    assert guard.store is not None
    keys = KeyStore(guard.store)
    watcher = PolicyWatcher(guard, policy_file)
    app = create_app(guard, keys=keys, watcher=watcher)
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://interlock.test") as client:
        yield Api(guard, keys, app, make_keys(keys), client), watcher
    guard.close()


async def test_a_held_reload_keeps_the_server_ready_on_the_old_policy_until_confirmed(
    watched: tuple[Api, PolicyWatcher], policy_file: Path
) -> None:
    api, watcher = watched
    assert (await api.check(**SHELL))["verdict"] == "deny"
    _replace(policy_file, TRUNCATED)
    assert watcher.reload() is False

    ready = await api.client.get("/v1/ready")
    assert ready.status_code == 200
    body = ready.json()
    assert body["status"] == "ready"
    assert body["checks"]["policy_reload"].startswith("held: the new policy removes 4 of 5")
    held = body["policy_reload_held"]
    assert (held["serving_rules"], held["new_rules"], held["removed_rules"]) == (5, 1, 4)
    assert held["sha256"] == watcher.status.held.sha256  # type: ignore[union-attr]
    assert (await api.check(**SHELL))["verdict"] == "deny"  # the old policy is in force

    confirm = "/v1/policy/reload/confirm"
    extra = await api.client.post(confirm, json=held, headers=api.h("admin"))
    assert extra.status_code == 422  # the digest, and nothing else
    forbidden = await api.client.post(
        confirm, json={"sha256": held["sha256"]}, headers=api.h("approver")
    )
    assert forbidden.status_code == 403
    stale = await api.client.post(confirm, json={"sha256": "0" * 64}, headers=api.h("admin"))
    assert stale.status_code == 409 and stale.json()["error"]["field"] == "sha256"

    done = await api.client.post(confirm, json={"sha256": held["sha256"]}, headers=api.h("admin"))
    assert done.status_code == 200, done.text
    assert done.json() == {"serving_sha256": held["sha256"], "rules": 1}
    assert (await api.check(**SHELL))["verdict"] == "deny"  # now by the default
    assert (await api.check(**LOOKUP))["verdict"] == "allow"
    after = (await api.client.get("/v1/ready")).json()
    assert after["checks"]["policy_reload"] == "ok" and after["policy_reload_held"] is None
    again = await api.client.post(confirm, json={"sha256": held["sha256"]}, headers=api.h("admin"))
    assert again.status_code == 409 and "no reload" in again.json()["error"]["message"]


async def test_confirming_on_a_server_that_reloads_no_file_is_404(sqlite_api: Api) -> None:
    response = await sqlite_api.client.post(
        "/v1/policy/reload/confirm", json={"sha256": "a" * 64}, headers=sqlite_api.h("admin")
    )
    assert response.status_code == 404
    ready = (await sqlite_api.client.get("/v1/ready")).json()
    assert "policy_reload" not in ready["checks"] and ready["policy_reload_held"] is None


async def test_the_open_api_names_the_confirm_route(sqlite_url: str, policy_file: Path) -> None:
    async for api in open_api(sqlite_url, policy_file):
        paths = api.app.openapi()["paths"]
        assert "post" in paths["/v1/policy/reload/confirm"]
