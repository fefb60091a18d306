"""Every client test runs on asyncio's own loop and on uvloop (the proxy's, under
uvicorn): their transports differ in when they report a close and how they write."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping
from typing import Any

import pytest


def pytest_asyncio_loop_factories(
    config: pytest.Config, item: pytest.Item
) -> Mapping[str, Callable[[], asyncio.AbstractEventLoop]]:
    factories: dict[str, Any] = {"asyncio": asyncio.new_event_loop}
    try:
        import uvloop

        factories["uvloop"] = uvloop.new_event_loop
    except ImportError:  # pragma: no cover - uvloop is not on every platform
        pass
    return factories
