"""The conformance table (``tests/adapters/conformance.py``) at the stdio gateway: one
policy, the same verdict and the same refusal semantics as in-process
(``tests/adapters/test_mcp.py`` drives the same rows through ``guard_server`` and checks
them with the same ``check_row``).

The upstream is the Python SDK server of the adapter tests
(``tests/adapters/mcp_servers/tools_server.py``, unguarded), whose tool bodies append
a line to a file when they run: that file says whether a body ran. Each row's call is
made twice at once, as in-process. The gateway decides with the table's policy file
(``--policy``), or through the Interlock server holding that policy (``--server``, the
app under uvicorn in a thread), for each client generation.

Not every row can be asked of a gateway — see ``NOT_AT_A_GATEWAY``."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from mcp import StdioServerParameters

from adapters.conformance import POLICY_TEXT, ROWS, Row
from adapters.test_mcp import SERVER_SCRIPT, check_row, read_log, twice

from .npm_servers import Blocking, ClientKind, blocking_client, portal
from .support import INTERLOCK, base_env

#: The rows that need what only an in-process guard has, and why.
NOT_AT_A_GATEWAY = {
    "a mapper that throws is undetermined": "a mapper is a Python callable of the guard; "
    "the gateway builds its action itself (interlock.adapters.mcp.tool_action) and takes none",
    "a mapper that returns garbage is undetermined": "as above: no mapper at a gateway",
    "a mapper that returns None passes the call through": "as above: no mapper at a gateway, "
    "so no call is passed through unjudged",
    "a timeout is undetermined": "the row's decider is a Python object (SlowDecider) and its "
    "timeout a guard option; the gateway's command line takes neither",
    "an observer that throws keeps allow an allow": "observers (on_decision, on_blocked) are "
    "Python hooks of an in-process guard; the gateway has none to install",
    "an observer that throws keeps deny a deny": "as above: no observer hooks at a gateway",
}
GATEWAY_ROWS = [row for row in ROWS if row.behaviour not in NOT_AT_A_GATEWAY]
assert {row.behaviour for row in ROWS} == {row.behaviour for row in GATEWAY_ROWS} | set(
    NOT_AT_A_GATEWAY
)
assert all(row.mapper is None and not row.guard_options for row in GATEWAY_ROWS)

#: (how the gateway decides, the client): both generations with a policy file; the
#: server mode, which changes only where the verdict comes from, with one of them.
SETUPS: list[tuple[str, ClientKind]] = [
    ("--policy", "ClientSession"),
    ("--policy", "Client"),
    ("--server", "Client"),
]


@dataclass
class Gateway:
    client: Blocking
    log: Path

    def run_twice(self, row: Row) -> tuple[list[Any], list[tuple[str, dict[str, Any]]]]:
        """The row's call made twice at once; the results and the bodies that ran."""
        before = len(read_log(self.log))
        results = self.client.portal.call(
            twice, lambda: self.client.client.call_tool(row.tool, row.args)
        )
        return results, read_log(self.log)[before:]


@pytest.fixture(scope="module", params=SETUPS, ids=[" ".join(setup) for setup in SETUPS])
def gateway(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Gateway]:
    mode, kind = request.param
    tmp = tmp_path_factory.mktemp("conformance")
    log = tmp / "bodies.jsonl"
    upstream = ["--env", f"MCP_TEST_LOG={log}", "--", sys.executable, str(SERVER_SCRIPT)]
    env = base_env()
    server = None
    if mode == "--policy":
        policy = tmp / "conformance.yaml"
        policy.write_text(POLICY_TEXT, encoding="utf-8")
        command = [INTERLOCK, "mcp-gateway", "--policy", str(policy), *upstream]
    else:
        pytest.importorskip("uvicorn")
        from remote.test_remote_guard import Server

        server = Server(tmp, policy=POLICY_TEXT)
        command = [INTERLOCK, "mcp-gateway", "--server", server.url, *upstream]
        env["INTERLOCK_API_KEY"] = server.agent_key
    params = StdioServerParameters(command=command[0], args=command[1:], env=env)
    try:
        with portal() as running, blocking_client(running, kind, params) as client:
            client.list_tools()  # the gateway learns the schemas it judges with
            yield Gateway(client, log)
    finally:
        if server is not None:
            server.close()


@pytest.mark.parametrize("row", GATEWAY_ROWS, ids=[row.behaviour for row in GATEWAY_ROWS])
def test_the_gateway_runs_the_tool_only_on_allow_and_the_client_reads_the_refusal(
    gateway: Gateway, row: Row
) -> None:
    results, ran = gateway.run_twice(row)
    check_row(row, results, ran)
