"""Shared pieces of the MCP gateway tests: the policy, the upstream's record, how to
launch the gateway (the real ``interlock`` command) and the upstream directly, and a
raw JSON-RPC line client for the wire-level tests."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

pytest.importorskip("mcp")


@pytest.fixture(scope="session")
def http_gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """The HTTP gateway in front of the stdio test server, shared by the HTTP tests
    (each of them opens sessions of its own)."""
    from .http_support import HTTP_POLICY, TRANSPARENT, Gateway

    running = Gateway(tmp_path_factory.mktemp("http-gateway"), HTTP_POLICY, TRANSPARENT)
    yield running
    running.close()
