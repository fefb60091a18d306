"""Fixtures of the effect tests: a guard on each store back end, the provider stand-in
on a real socket, and the cut proxy in front of it."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from interlock import Guard
from interlock.effects.http import HttpEffect

from .chaos import CutProxy
from .provider import Provider, Served
from .support import POLICY, grant_checker


@pytest.fixture
def guard(store_url: str, tmp_path: Path) -> Iterator[Guard]:
    from . import _grant_shim

    _grant_shim.install()
    opened = Guard(POLICY, store=store_url, reap_interval=None)
    yield opened
    opened.close()


@pytest.fixture
def provider(guard: Guard) -> Iterator[tuple[Provider, Served]]:
    app = Provider(grant_checker(guard))
    served = Served(app)
    yield app, served
    served.close()


@pytest.fixture
def proxy(provider: tuple[Provider, Served]) -> Iterator[CutProxy]:
    cut = CutProxy(provider[1].port)
    yield cut
    cut.close()


@pytest.fixture
def refunds(proxy: CutProxy) -> Iterator[HttpEffect]:
    adapter = HttpEffect(proxy.url, audience="shop", action_types=("refund",))
    yield adapter
    adapter.close()
