"""``interlock serve`` leaves what its startup made out of the collector's full passes
(each walked every object the libraries, app and policy made: pauses of up to ~90 ms
under load, the p99; ADR 0033), and picks uvicorn's protocol that writes a small
response in one write where httptools is installed."""

from __future__ import annotations

import gc
from collections.abc import Iterator

import pytest

from interlock import cli_server


@pytest.fixture
def unfrozen() -> Iterator[None]:
    gc.unfreeze()
    yield
    gc.unfreeze()


def test_startup_objects_are_frozen_and_garbage_collected_first(unfrozen: None) -> None:
    class Cycle:
        pass

    garbage = Cycle()
    garbage.me = garbage  # type: ignore[attr-defined]
    del garbage
    assert gc.get_freeze_count() == 0
    cli_server._freeze_startup_objects()
    assert gc.get_freeze_count() > 0
    # what startup left as garbage was collected, not frozen (frozen objects are out of
    # get_objects' sight: thawed first)
    gc.unfreeze()
    assert not any(type(o).__name__ == "Cycle" for o in gc.get_objects())


def test_serve_uses_the_coalescing_protocol_with_httptools() -> None:
    pytest.importorskip("httptools")
    from interlock.server.http_protocol import CoalescingProtocol

    assert cli_server._http_protocol() is CoalescingProtocol
