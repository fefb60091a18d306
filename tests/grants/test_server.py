"""Grants over HTTP: the public JWK set, issue and claim through the server, and
``Guard.remote`` doing both — the real app under uvicorn on a real socket, SQLite and
PostgreSQL."""

from __future__ import annotations

import asyncio
import socket
import threading
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

pytest.importorskip("fastapi")
pytest.importorskip("uvicorn")

import uvicorn

from interlock import Action, Guard, load_policy_text
from interlock.core.decision import Verdict
from interlock.errors import GrantError, GrantInvalid, GrantReplayed, RemoteError
from interlock.server import KeyStore, Role, create_app
from interlock.verify.binding import http_binding
from interlock.verify.tokens import keys_from_jwks, read_grant

POLICY = """\
version: 1
default: deny
tools:
  refund_order:
    intent: {target: "shop:order:{order_id}", system: shop, operation: refund}
    grant: {ttl: 30s}
rules:
  - {id: refunds, decision: allow, reason: refunds are fine, name: refund_order}
  - {id: lookups, decision: allow, reason: reading is fine, name: lookup}
  - {id: no-shell, decision: deny, reason: no shell, name: shell}
"""


class Server:
    """The real app under uvicorn in a thread; agent keys of two tenants."""

    def __init__(self, store_url: str) -> None:
        self.guard = Guard(load_policy_text(POLICY), store=store_url, reap_interval=None)
        assert self.guard.store is not None
        keys = KeyStore(self.guard.store)
        self.agent_key = keys.create(tenant="acme", role=Role.AGENT, name="ops-bot").token
        self.other_key = keys.create(tenant="globex", role=Role.AGENT, name="ops-bot").token
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}"
        config = uvicorn.Config(create_app(self.guard), log_level="warning", lifespan="off")
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(
            target=self.server.run, kwargs={"sockets": [self.sock]}, daemon=True
        )
        self.thread.start()
        started = threading.Event()
        for _ in range(4000):
            if self.server.started:
                break
            started.wait(0.005)
        assert self.server.started

    def close(self) -> None:
        self.server.should_exit = True
        self.thread.join()
        self.sock.close()
        self.guard.close()


@pytest.fixture
def server(store_url: str) -> Iterator[Server]:
    running = Server(store_url)
    yield running
    running.close()


def test_the_jwks_is_public_and_verifies_the_servers_grants(server: Server) -> None:
    response = httpx.get(f"{server.url}/v1/keys/jwks.json")
    assert response.status_code == 200
    assert "max-age" in response.headers["cache-control"]
    document = response.json()
    assert all(set(jwk) == {"kty", "crv", "x", "kid", "use", "alg"} for jwk in document["keys"])
    with Guard.remote(server.url, server.agent_key) as remote:
        decision = remote.check(Action.tool("refund_order", {"order_id": 7}))
        assert decision.verdict is Verdict.ALLOW
        grant = remote.issue_grant(decision)  # the one the policy asked for
        assert grant.claims.audience == "shop" and grant.claims.tenant == "acme"
        assert read_grant(grant.token, keys_from_jwks(document)) == grant.claims
        assert remote.grant_jwks() == document


def test_the_check_answer_carries_the_grant_the_policy_asks_for(server: Server) -> None:
    headers = {"Authorization": f"Bearer {server.agent_key}"}
    call = {"name": "refund_order", "arguments": {"order_id": 9}}
    answer = httpx.post(f"{server.url}/v1/check", json=call, headers=headers).json()
    assert answer["verdict"] == "allow"
    assert answer["grant"]["claims"]["audience"] == "shop"
    plain = {"name": "lookup", "arguments": {"q": 1}}
    assert httpx.post(f"{server.url}/v1/check", json=plain, headers=headers).json()["grant"] is None
    with Guard.remote(server.url, server.agent_key) as remote:
        decision = remote.check(Action.tool("refund_order", {"order_id": 9}))
        assert decision.grant is not None
        # the same intent, checked again: another decision, another single-use grant
        assert decision.grant.claims.intent_hash == answer["grant"]["claims"]["intent_hash"]
        assert decision.grant.claims.grant_id != answer["grant"]["claims"]["grant_id"]
        assert remote.claim_grant(decision.grant).audience == "shop"
    token = answer["grant"]["token"]
    claimed = httpx.post(f"{server.url}/v1/grants/claim", json={"token": token}, headers=headers)
    assert (
        claimed.status_code == 200
        and claimed.json()["grant_id"] == answer["grant"]["claims"]["grant_id"]
    )
    again = httpx.post(f"{server.url}/v1/grants/claim", json={"token": token}, headers=headers)
    assert again.status_code == 409 and again.json()["error"]["code"] == "grant_replayed"


def test_a_remote_guard_issues_and_claims_once(server: Server) -> None:
    with Guard.remote(server.url, server.agent_key) as remote:
        decision = remote.check(Action.tool("lookup", {"q": "x"}))
        binding = http_binding("GET", "/lookup?q=x", b"", "k-1", audience="search")
        grant = remote.issue_grant(decision, audience="search", binding=binding, ttl=20)
        assert grant.claims.binding == binding
        assert grant.claims.agent == "ops-bot"  # the key's identity, not the caller's say
        with pytest.raises(GrantError, match=r"granted already|not made|no recent allow"):
            remote.issue_grant(decision, audience="search")
        assert remote.claim_grant(grant).grant_id == grant.claims.grant_id
        with pytest.raises(GrantReplayed):
            remote.claim_grant(grant.token)


def test_a_remote_guards_async_twins(server: Server) -> None:
    async def run() -> None:
        with Guard.remote(server.url, server.agent_key) as remote:
            decision = await remote.acheck(Action.tool("lookup", {"q": "y"}))
            grant = await remote.aissue_grant(decision, audience="search")
            assert (await remote.aclaim_grant(grant)).grant_id == grant.claims.grant_id
            with pytest.raises(GrantReplayed):
                await remote.aclaim_grant(grant)

    asyncio.run(run())


def test_what_the_server_refuses(server: Server) -> None:
    with (
        Guard.remote(server.url, server.agent_key) as remote,
        Guard.remote(server.url, server.other_key) as other_tenant,
    ):
        denied = remote.check(Action.tool("shell", {"command": "ls"}))
        with pytest.raises(GrantError, match="no recent allow"):
            remote.issue_grant(denied, audience="x")
        allowed = remote.check(Action.tool("lookup", {"q": "z"}))
        with pytest.raises(GrantError, match="no recent allow"):
            other_tenant.issue_grant(allowed, audience="search")  # another tenant's decision
        grant = remote.issue_grant(allowed, audience="search")
        with pytest.raises(GrantInvalid, match="not issued to tenant"):
            other_tenant.claim_grant(grant)  # ... and it is left claimable
        with pytest.raises(GrantInvalid):
            remote.claim_grant(grant.token[:-4] + "AAAA")
        assert remote.claim_grant(grant).grant_id == grant.claims.grant_id


@pytest.mark.parametrize(
    "body",
    [
        {"token": ""},
        {"token": "x" * 9000},
        {"token": "a.b.c", "extra": 1},
        {},
    ],
)
def test_malformed_claims_are_refused_before_the_store(server: Server, body: Any) -> None:
    headers = {"Authorization": f"Bearer {server.agent_key}"}
    response = httpx.post(f"{server.url}/v1/grants/claim", json=body, headers=headers)
    assert response.status_code == 422


def test_a_claim_needs_a_key(server: Server) -> None:
    response = httpx.post(f"{server.url}/v1/grants/claim", json={"token": "a.b.c"})
    assert response.status_code == 401


def test_an_unreachable_server_is_a_remote_error() -> None:
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    sock.close()
    with (
        Guard.remote(f"http://127.0.0.1:{port}", "ilk_x_y", request_timeout=0.5) as remote,
        pytest.raises(RemoteError),
    ):
        remote.claim_grant("a.b.c")
