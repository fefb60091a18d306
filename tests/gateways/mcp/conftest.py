"""Shared pieces of the MCP gateway tests: the policy, the upstream's record, how to
launch the gateway (the real ``interlock`` command) and the upstream directly, and a
raw JSON-RPC line client for the wire-level tests."""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import pytest

pytest.importorskip("mcp")


@pytest.fixture(scope="session")
def node_servers() -> Any:
    """The npm reference servers, installed; else skip (or fail when
    ``INTERLOCK_REQUIRE_NODE_SERVERS=1``)."""
    from .npm_servers import NPM, REQUIRE_VARIABLE, find_node_servers

    found = find_node_servers()
    if not isinstance(found, str):
        return found
    if os.environ.get(REQUIRE_VARIABLE) == "1":
        pytest.fail(
            f"{found} ({REQUIRE_VARIABLE}=1 requires the npm reference servers)", pytrace=False
        )
    pytest.skip(
        f"{found}: these tests need node 20 or later and the servers installed "
        f"(`make node-servers`, which `make test` runs, or: npm ci --prefix {NPM})"
    )


@pytest.fixture(scope="session")
def http_gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """The HTTP gateway in front of the stdio test server, shared by the HTTP tests
    (each of them opens sessions of its own)."""
    from .http_support import HTTP_POLICY, TRANSPARENT, Gateway

    running = Gateway(tmp_path_factory.mktemp("http-gateway"), HTTP_POLICY, TRANSPARENT)
    yield running
    running.close()
