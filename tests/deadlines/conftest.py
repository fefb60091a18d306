"""Fixtures for the deadline tests: a throwaway PostgreSQL cluster of the test's own."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from .cluster import Blackhole, Cluster, ClusterUnavailable


@pytest.fixture
def cluster() -> Iterator[Cluster]:
    """A started PostgreSQL cluster the test may stop, freeze and restart; destroyed
    after it. Skipped (with the reason) where no server binaries can run, failed
    instead under ``INTERLOCK_REQUIRE_POSTGRES=1``."""
    try:
        made = Cluster()
    except ClusterUnavailable as exc:
        if os.environ.get("INTERLOCK_REQUIRE_POSTGRES") == "1":
            pytest.fail(f"no throwaway PostgreSQL cluster: {exc}", pytrace=False)
        pytest.skip(f"no throwaway PostgreSQL cluster: {exc}")
    try:
        made.start()
        yield made
    finally:
        made.destroy()


@pytest.fixture
def blackhole() -> Iterator[Blackhole]:
    hole = Blackhole()
    yield hole
    hole.close()
