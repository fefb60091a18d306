"""Fixtures of the effect tests: a guard on each store back end, the provider stand-in
on a real socket, and the cut proxy in front of it."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from interlock import Guard
from interlock.effects.http import HttpEffect

from .chaos import CutProxy
from .provider import Provider, Served, guarded
from .support import POLICY


@pytest.fixture
def guard(store_url: str, tmp_path: Path) -> Iterator[Guard]:
    if store_url.startswith("postgresql"):  # many hosts: the key ring is given, not made
        from interlock.store.grant_keys import create_key_ring

        ring = tmp_path / "grant-keys.json"
        create_key_ring(ring)
        store_url += f"&grant_key_file={ring}"
    opened = Guard(POLICY, store=store_url, reap_interval=None)
    yield opened
    opened.close()


@pytest.fixture
def provider(guard: Guard) -> Iterator[tuple[Provider, Served]]:
    app = Provider()
    wrapped, app.receipt_jwks = guarded(app, guard.grant_jwks)
    served = Served(wrapped)
    yield app, served
    served.close()


@pytest.fixture
def proxy(provider: tuple[Provider, Served]) -> Iterator[CutProxy]:
    cut = CutProxy(provider[1].port)
    yield cut
    cut.close()


@pytest.fixture
def refunds(proxy: CutProxy, provider: tuple[Provider, Served]) -> Iterator[HttpEffect]:
    app = provider[0]
    adapter = HttpEffect(
        proxy.url, audience="shop", action_types=("refund",), receipt_keys=app.receipt_jwks
    )
    yield adapter
    adapter.close()
