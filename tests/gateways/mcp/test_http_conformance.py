"""The conformance table (``tests/adapters/conformance.py``) at the HTTP gateway, as
``test_conformance.py`` drives it through the stdio one: one policy, the same verdict
and the same refusal semantics as in-process, checked by the in-process table's own
``check_row`` — with a client key over streamable HTTP, for both client generations
with the gateway's own policy and store, and with the gateway deciding through the
Interlock server (``ServerKeys``: the server judges, under the client's key).

The rows that cannot be asked of any gateway are those of the stdio gateway's test
(``NOT_AT_A_GATEWAY``, with why)."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from adapters.conformance import POLICY_TEXT, Row
from adapters.test_mcp import SERVER_SCRIPT, check_row, read_log, twice
from interlock.gateways.mcp.config import GatewayConfig, UpstreamSpec
from interlock.gateways.mcp.http_auth import ServerKeys
from interlock.gateways.mcp.http_server import HttpGateway, HttpOptions, relays_for

from .http_support import Gateway, Uvicorn, http_client
from .npm_servers import Blocking, portal
from .support import base_env
from .test_conformance import GATEWAY_ROWS

TOOLS = GatewayConfig((UpstreamSpec(None, command=(sys.executable, str(SERVER_SCRIPT))),))
#: (how the gateway decides, the client's mode): its own policy and store, both
#: generations; the shared server, with the newer one.
SETUPS = [("store", "legacy"), ("store", "auto"), ("server", "auto")]


@dataclass
class Running:
    client: Blocking
    log: Path

    def run_twice(self, row: Row) -> tuple[list[Any], list[tuple[str, dict[str, Any]]]]:
        before = len(read_log(self.log))
        results = self.client.portal.call(
            twice, lambda: self.client.client.call_tool(row.tool, row.args)
        )
        return results, read_log(self.log)[before:]


@pytest.fixture(scope="module", params=SETUPS, ids=["-".join(setup) for setup in SETUPS])
def gateway(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Running]:
    decides, mode = request.param
    tmp = tmp_path_factory.mktemp("http-conformance")
    closing: list[Any] = []
    if decides == "store":
        local = Gateway(tmp, POLICY_TEXT, TOOLS)
        closing.append(local)
        url, key, log = local.url, local.keys.bot, local.log
    else:
        from remote.test_remote_guard import Server

        server = Server(tmp, policy=POLICY_TEXT)
        closing.append(server)
        log = tmp / "upstream.jsonl"
        env = {**base_env(), "MCP_TEST_LOG": str(log)}
        remote = HttpGateway(
            ServerKeys(server.url),
            relays_for(TOOLS, env, grace=2.0),
            HttpOptions.for_bind("127.0.0.1"),
        )
        served = Uvicorn(remote.app())
        closing.append(served)
        url, key = f"{served.url}/mcp", server.agent_key
    try:
        with (
            portal() as running,
            running.wrap_async_context_manager(http_client(url, key, mode=mode)) as client,
        ):
            blocking = Blocking(running, client)
            blocking.list_tools()  # the gateway learns the schemas it judges with
            yield Running(blocking, log)
    finally:
        for each in reversed(closing):
            each.close()


@pytest.mark.parametrize("row", GATEWAY_ROWS, ids=[row.behaviour for row in GATEWAY_ROWS])
def test_the_http_gateway_runs_the_tool_only_on_allow_and_the_client_reads_the_refusal(
    gateway: Running, row: Row
) -> None:
    results, ran = gateway.run_twice(row)
    check_row(row, results, ran)
