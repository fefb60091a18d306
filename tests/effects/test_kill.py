"""kill -9 of the agent process between execute and report, then a restart's
reconciliation (SQLite and PostgreSQL): the effect happened exactly once, the budget is
charged once."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from interlock import Guard
from interlock.effects import EffectStatus, Outcome, reconcile_pending, run_effect
from interlock.effects.http import HttpEffect
from interlock.effects.records import find_effect
from interlock.errors import EffectInFlight

from .chaos import CutProxy
from .provider import Provider, Served, guarded
from .support import refund, spent

AGENT = Path(__file__).with_name("_agent.py")


class Agent:
    """The agent process: runs one effect; the test kills it with SIGKILL."""

    def __init__(self, store_url: str, provider_url: str, key: str) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, str(AGENT), store_url, provider_url, key],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        assert json.loads(line or "{}").get("started") == key, self.proc.stderr.read()  # type: ignore[union-attr]

    def kill(self) -> None:
        self.proc.kill()
        self.proc.wait(30)  # reaped: its pid no longer exists

    def dispose(self) -> None:
        if self.proc.poll() is None:
            self.kill()
        for stream in (self.proc.stdout, self.proc.stderr):
            if stream is not None:
                stream.close()


@pytest.fixture
def agents() -> Iterator[list[Agent]]:
    started: list[Agent] = []
    yield started
    for agent in started:
        agent.dispose()


@pytest.fixture
def shared_url(store_url: str, tmp_path: Path) -> str:
    """The store the agent and the test share (SQLite file, or a PostgreSQL schema with
    a key ring file both processes are given)."""
    if store_url.startswith("postgresql"):
        from interlock.store.grant_keys import create_key_ring

        ring = tmp_path / "grant-keys.json"
        create_key_ring(ring)
        return store_url + f"&grant_key_file={ring}"
    return store_url


@pytest.fixture
def local_guard(shared_url: str) -> Iterator[Guard]:
    from .support import POLICY

    with Guard(POLICY, store=shared_url, reap_interval=None) as opened:
        yield opened


@pytest.fixture
def holding_provider(local_guard: Guard) -> Iterator[tuple[Provider, Served]]:
    app = Provider()
    app.hold.set()
    wrapped, app.receipt_jwks = guarded(app, local_guard.grant_jwks)  # the agent's keys too
    served = Served(wrapped)
    yield app, served
    app.released.set()
    served.close()


def test_killed_after_the_provider_committed_reconciles_committed(
    shared_url: str,
    local_guard: Guard,
    holding_provider: tuple[Provider, Served],
    agents: list[Agent],
) -> None:
    app, served = holding_provider
    agent = Agent(shared_url, served.url, "kill-after")
    agents.append(agent)
    assert app.committed.wait(60), agent.proc.stderr.read()  # type: ignore[union-attr]
    agent.kill()  # between execute and report: the answer is still held
    app.released.set()
    store = local_guard.store
    assert store is not None
    record = find_effect(store, "acme", "kill-after")
    assert record is not None and record.status is EffectStatus.EXECUTING
    held = spent(store)
    assert held[0] == 0 and held[1] > 0
    adapter = HttpEffect(served.url, audience="shop")
    report = reconcile_pending(store, [adapter], audit=local_guard.audit)  # "after a restart"
    assert [r.status for r in report.settled] == [EffectStatus.COMMITTED]
    assert len(app.effects) == 1
    assert spent(store) == (held[1], 0)  # charged once
    again = run_effect(local_guard, adapter, refund(), idempotency_key="kill-after")
    assert again.replayed and again.outcome is Outcome.COMMITTED
    assert len(app.effects) == 1 and spent(store) == (held[1], 0)
    adapter.close()


def test_killed_before_the_provider_saw_it_reconciles_never_executed_and_retries_once(
    shared_url: str,
    local_guard: Guard,
    agents: list[Agent],
) -> None:
    app = Provider()
    wrapped, app.receipt_jwks = guarded(app, local_guard.grant_jwks)
    served = Served(wrapped)
    proxy = CutProxy(served.port)
    try:
        proxy.next("hold_before")
        agent = Agent(shared_url, proxy.url, "kill-before")
        agents.append(agent)
        assert proxy.arrived.wait(60), agent.proc.stderr.read()  # type: ignore[union-attr]
        agent.kill()  # the request is in the proxy: sent, never delivered
        proxy.release.set()
        store = local_guard.store
        assert store is not None
        assert app.effects == []
        adapter = HttpEffect(proxy.url, audience="shop")
        report = reconcile_pending(store, [adapter], audit=local_guard.audit)
        assert [r.status for r in report.settled] == [EffectStatus.NEVER_EXECUTED]
        assert spent(store) == (0, 0)  # released
        retry = run_effect(local_guard, adapter, refund(), idempotency_key="kill-before")
        assert retry.outcome is Outcome.COMMITTED and retry.attempt == 2
        assert len(app.effects) == 1
        charged, held = spent(store)
        assert charged > 0 and held == 0
        adapter.close()
    finally:
        proxy.release.set()
        proxy.close()
        served.close()


def test_a_live_attempt_is_not_taken_by_the_reconciler(
    shared_url: str,
    local_guard: Guard,
    holding_provider: tuple[Provider, Served],
    agents: list[Agent],
) -> None:
    app, served = holding_provider
    agent = Agent(shared_url, served.url, "alive")
    agents.append(agent)
    assert app.committed.wait(60)
    store = local_guard.store
    assert store is not None
    adapter = HttpEffect(served.url, audience="shop")
    report = reconcile_pending(store, [adapter])
    assert report.settled == () and [r.idempotency_key for r in report.skipped] == ["alive"]
    with pytest.raises(EffectInFlight):  # a second caller neither runs it nor guesses
        run_effect(local_guard, adapter, refund(), idempotency_key="alive")
    assert len(app.effects) == 1
    app.released.set()
    assert agent.proc.wait(60) == 0
    assert '"committed"' in (agent.proc.stdout.read() if agent.proc.stdout else "")
    record = find_effect(store, "acme", "alive")
    assert record is not None and record.status is EffectStatus.COMMITTED
    adapter.close()
