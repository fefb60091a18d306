"""The proxy under test: a real Guard on a SQLite store, the proxy app and the
stand-in upstream each served by uvicorn on a real port of 127.0.0.1.

| key | tenant | role | name |
| --- | --- | --- | --- |
| ``agent`` | acme | agent | ops-bot |
| ``other`` | globex | agent | ops-bot |
| ``approver`` | acme | approver | alice |
"""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import uvicorn

from interlock import Guard
from interlock.gateways.llm_proxy import ProxyConfig, Upstream, create_app
from interlock.ledger.llm_call import LLMCall
from interlock.server import KeyStore, Role
from interlock.store.sql import SqlStore

from .standin import StandIn

POLICY = """\
version: 1
default: deny
approvals:
  url: "https://interlock.example.com/approvals/{id}"
budgets:
  - id: tokens
    limit: 100000
    unit: tokens
    scope: agent
    window: day
    kind: llm
pricing:
  default_max_tokens:
    "*": 256
rules:
  - id: models
    decision: allow
    reason: the agent may call its models
    kind: llm
    name: ["gpt-4o-mini", "claude-sonnet-4-5"]
  - id: stateless-model
    decision: allow
    reason: this model is called with the whole conversation
    kind: llm
    name: gpt-4.1-mini
  - id: no-hidden-context
    decision: deny
    reason: the proxy must see the whole prompt of this model
    kind: llm
    name: gpt-4.1-mini
    when: "has(args.previous_response_id) || has(args.conversation) || has(args.prompt)"
  - id: review-model
    decision: require_approval
    reason: the big model needs a human
    kind: llm
    name: gpt-5-pro
  - id: weather
    decision: allow
    reason: looking up the weather is fine
    name: get_weather
  - id: no-delete
    decision: deny
    reason: nothing is deleted by a model
    name: delete_account
  - id: small-refunds
    decision: allow
    reason: small refunds are routine
    name: refund
    when: "args.amount <= 100"
"""
# A budget that covers a tool: each allowed refund reserves 1 USD, committed when the
# proxy lets the call through to the agent.
POLICY = POLICY.replace(
    "pricing:",
    """  - id: refunds
    limit: 1000
    unit: USD
    kind: tool
    name: refund
    default_estimate: 1
    max_overage: 0
pricing:""",
)

KEYS = {
    "agent": ("acme", Role.AGENT, "ops-bot"),
    "other": ("globex", Role.AGENT, "ops-bot"),
    "approver": ("acme", Role.APPROVER, "alice"),
}


class Served:
    """An ASGI app served by uvicorn in a thread, on a free port."""

    def __init__(self, app: Any) -> None:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}"
        config = uvicorn.Config(app, log_level="critical", lifespan="on")
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(
            target=self.server.run, kwargs={"sockets": [self.sock]}, daemon=True
        )
        self.thread.start()
        for _ in range(4000):
            if self.server.started:
                break
            threading.Event().wait(0.005)
        assert self.server.started

    def close(self) -> None:
        self.server.should_exit = True
        self.thread.join()
        self.sock.close()


@dataclass
class Settled:
    """The model calls the proxy has settled, to wait on (no sleeps)."""

    calls: list[LLMCall] = field(default_factory=list)
    changed: threading.Condition = field(default_factory=threading.Condition)

    def __call__(self, call: LLMCall) -> None:
        with self.changed:
            self.calls.append(call)
            self.changed.notify_all()

    def wait_for(self, count: int) -> list[LLMCall]:
        with self.changed:
            assert self.changed.wait_for(lambda: len(self.calls) >= count, timeout=30)
            return list(self.calls)


@dataclass
class Proxy:
    url: str
    standin: StandIn
    guard: Guard
    tokens: dict[str, str]
    settled: Settled

    @property
    def store(self) -> SqlStore:
        assert isinstance(self.guard.store, SqlStore)
        return self.guard.store

    def spent(self, tenant: str = "acme", budget: str = "tokens") -> tuple[Any, Any]:
        """(spent, reserved) of the tenant's token budget (or another one)."""
        rows = self.store.budget_rows(tenant=tenant, budget_id=budget)
        return sum(r.spent for r in rows), sum(r.reserved for r in rows)


@pytest.fixture
def proxy(tmp_path: Path) -> Iterator[Proxy]:
    yield from _proxy(tmp_path)


#: the held-bytes cap of :func:`capped_proxy`
SMALL_CAP = 2048


@pytest.fixture
def capped_proxy(tmp_path: Path) -> Iterator[Proxy]:
    """A proxy that holds at most :data:`SMALL_CAP` bytes of tool calls per stream."""
    yield from _proxy(tmp_path, max_held_bytes=SMALL_CAP)


def _proxy(tmp_path: Path, **options: Any) -> Iterator[Proxy]:
    policy = tmp_path / "interlock.yaml"
    policy.write_text(POLICY)
    guard = Guard.from_file(policy, store=f"sqlite:///{tmp_path / 'interlock.db'}")
    assert isinstance(guard.store, SqlStore)
    keys = KeyStore(guard.store)
    tokens = {
        label: keys.create(tenant=t, role=role, name=name).token
        for label, (t, role, name) in KEYS.items()
    }
    standin = StandIn()
    upstream = Served(standin.app())
    config = ProxyConfig(
        openai=Upstream(upstream.url + "/v1", "sk-upstream-openai"),
        anthropic=Upstream(upstream.url, "sk-upstream-anthropic"),
        **options,
    )
    settled = Settled()
    served = Served(create_app(guard, config, on_settled=settled))
    try:
        yield Proxy(served.url, standin, guard, tokens, settled)
    finally:
        standin.release.set()
        served.close()
        upstream.close()
        guard.close()
