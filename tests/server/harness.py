"""The server under test, shared by the server tests: the policy, the keys of two
tenants, and :class:`Api` — the real FastAPI app over a real Guard and store, reached
with httpx through its ASGI transport.

| key | tenant | role | name |
| --- | --- | --- | --- |
| ``agent`` | acme | agent | ops-bot |
| ``approver`` | acme | approver | alice |
| ``admin`` | acme | admin | root |
| ``other_agent`` | globex | agent | ops-bot |
| ``other_approver`` | globex | approver | bob |
| ``other_admin`` | globex | admin | root |
"""

from __future__ import annotations

import hashlib
import secrets
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
from fastapi import FastAPI

from interlock import Guard
from interlock.server import KeyStore, Role, create_app
from interlock.store import SqlStore

POLICY = """\
version: 1
default: deny
approvals:
  url: "https://interlock.example.com/approvals/{id}"
  ttl: 1h
  grant_ttl: 15m
pricing:
  currency: USD
  models:
    "house-model": {input: 1.0, output: 4.0}
budgets:
  - id: lookups
    limit: 1
    unit: USD
    scope: agent
    window: day
    kind: tool
    name: paid_lookup
    max_overage: 0
  - id: model-tokens
    limit: 20000
    unit: tokens
    scope: agent
    window: day
    kind: llm
  - id: per-tool
    limit: 5
    unit: USD
    scope: tool
    window: none
    name: nothing-matches-this
rules:
  - id: tools
    decision: allow
    reason: the support tools are fine
    name: ["search", "paid_lookup", "read_file"]
  - id: no-shell
    decision: deny
    reason: no shell for support agents
    name: shell
  - id: refund-small
    decision: allow
    reason: small refunds are routine
    name: refund_order
    when: "args.amount <= 100"
  - id: refund-large
    decision: require_approval
    reason: refunds over 100 need a human
    name: refund_order
    when: "args.amount > 100"
  - id: house-model
    decision: allow
    reason: the house model is allowed
    kind: llm
    name: house-model
"""

KEYS = {
    "agent": ("acme", Role.AGENT, "ops-bot"),
    "approver": ("acme", Role.APPROVER, "alice"),
    "admin": ("acme", Role.ADMIN, "root"),
    "other_agent": ("globex", Role.AGENT, "ops-bot"),
    "other_approver": ("globex", Role.APPROVER, "bob"),
    "other_admin": ("globex", Role.ADMIN, "root"),
}


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


@dataclass
class Api:
    """One app under test: its guard, key store, key tokens and an async client."""

    guard: Guard
    keys: KeyStore
    app: FastAPI
    tokens: dict[str, str]
    client: httpx.AsyncClient

    def h(self, who: str) -> dict[str, str]:
        """The Authorization header of key ``who`` (see the table above)."""
        return bearer(self.tokens[who])

    async def check(self, who: str = "agent", **action: Any) -> dict[str, Any]:
        response = await self.client.post("/v1/check", json=action, headers=self.h(who))
        assert response.status_code == 200, response.text
        body: dict[str, Any] = response.json()
        return body

    async def pending_approval(self, who: str = "agent", amount: int = 250) -> str:
        """The id of a fresh pending approval, requested by ``who``'s check."""
        decision = await self.check(who, name="refund_order", arguments={"amount": amount})
        assert decision["verdict"] == "require_approval", decision
        approval_id: str = decision["approval"]["id"]
        return approval_id


def legacy_key(store: SqlStore, *, tenant: str, role: str, name: str) -> str:
    """A key as a version before look-alike names were refused could make it: written
    into the table directly. Its token."""
    key_id, secret = secrets.token_hex(8), secrets.token_urlsafe(32)
    with store.transaction(write=True) as cur:
        cur.execute(
            store.q(
                "INSERT INTO api_keys (id, tenant, role, name, secret_hash, created_us, "
                "revoked_us) VALUES (?, ?, ?, ?, ?, ?, NULL)"
            ),
            (key_id, tenant, role, name, hashlib.sha256(secret.encode()).hexdigest(), 1),
        )
    return f"ilk_{key_id}_{secret}"


def open_guard(url: str, policy_file: Path) -> Guard:
    return Guard(str(policy_file), store=url, reap_interval=None)


def make_keys(keys: KeyStore) -> dict[str, str]:
    return {
        who: keys.create(tenant=tenant, role=role, name=name).token
        for who, (tenant, role, name) in KEYS.items()
    }


async def open_api(url: str, policy_file: Path, **options: Any) -> AsyncIterator[Api]:
    """An :class:`Api` on the database at ``url``; ``options`` go to ``create_app``."""
    guard = open_guard(url, policy_file)
    assert guard.store is not None
    keys = KeyStore(guard.store, cache_ttl=options.pop("key_cache_ttl", 5.0))
    app = create_app(guard, keys=keys, **options)
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://interlock.test") as client:
        yield Api(guard, keys, app, make_keys(keys), client)
    guard.close()
