"""The npm reference servers behind the HTTP gateway (``--http``), driven by the SDK's
own streamable-HTTP client with an agent key (a handshake client, and ``mcp.Client``,
whose ``server/discover`` probe these servers answer "method not found" through the
gateway), beside the same server driven straight over stdio by a ``ClientSession``:

- ``server-everything``: the handshake's outcome, the listings and the allowed tools
  answer as directly; its sampling, elicitation and roots requests reach the HTTP
  client's callbacks as they reach the direct client's; a refused ``get-env`` comes
  back refused and registers nothing on the server;
- ``server-memory``: the same answers to allowed calls, and a refused call leaves the
  knowledge graph what it is straight in (the two graphs stay equal).

``test_npm_everything.py`` and ``test_npm_memory.py`` do the same over stdio; this
is the HTTP transport's share of "the gateway in front of the reference servers"."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from interlock.gateways.mcp.config import GatewayConfig, UpstreamSpec

from .http_support import Gateway, http_client
from .npm_servers import (
    Blocking,
    NodeServers,
    blocking_client,
    decision_of,
    direct_params,
    dumped,
    portal,
    text_of,
)
from .test_npm_everything import ALLOWED as EVERYTHING_ALLOWED
from .test_npm_everything import POLICY as EVERYTHING_POLICY
from .test_npm_everything import Heard, same
from .test_npm_memory import ALLOWED as MEMORY_ALLOWED
from .test_npm_memory import POLICY as MEMORY_POLICY
from .test_npm_memory import entity

MODES = ["legacy", "auto"]


@dataclass
class HttpPair:
    direct: Blocking
    gated: Blocking
    heard: dict[str, Heard]
    gateway: Gateway


def behind_http(
    tmp: Path, policy: str, upstream: list[str], env: dict[str, str] | None = None
) -> Gateway:
    spec = UpstreamSpec(None, command=tuple(upstream), env=env or {})
    return Gateway(tmp, policy, GatewayConfig((spec,)))


@pytest.fixture(scope="module", params=MODES)
def everything(
    request: pytest.FixtureRequest,
    node_servers: NodeServers,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[HttpPair]:
    upstream = node_servers.command("server-everything")
    gateway = behind_http(tmp_path_factory.mktemp("everything-http"), EVERYTHING_POLICY, upstream)
    heard = {"direct": Heard(), "gated": Heard()}
    client = http_client(
        gateway.url, gateway.keys.bot, mode=request.param, **heard["gated"].callbacks()
    )
    try:
        with (
            portal() as running,
            blocking_client(
                running, "ClientSession", direct_params(upstream), **heard["direct"].callbacks()
            ) as direct,
            running.wrap_async_context_manager(client) as gated_client,
        ):
            gated = Blocking(running, gated_client)
            for each in (direct, gated):  # as clients do, before calling
                each.list_tools()
            yield HttpPair(direct, gated, heard, gateway)
    finally:
        gateway.close()


def test_everything_the_handshake_is_the_servers(everything: HttpPair) -> None:
    direct, gated = everything.direct.client, everything.gated.client
    assert gated.protocol_version == direct.protocol_version == "2025-11-25"
    for settled in ("server_info", "server_capabilities", "instructions"):
        assert dumped(getattr(gated, settled)) == dumped(getattr(direct, settled)), settled


def test_everything_the_listings_are_the_servers(everything: HttpPair) -> None:
    for listing in ("list_tools", "list_prompts", "list_resources", "list_resource_templates"):
        same(getattr(everything.direct, listing)(), getattr(everything.gated, listing)())


@pytest.mark.parametrize(
    ("name", "arguments"), EVERYTHING_ALLOWED, ids=[f"{n} {a}" for n, a in EVERYTHING_ALLOWED]
)
def test_everything_an_allowed_tool_answers_as_directly(
    everything: HttpPair, name: str, arguments: dict[str, Any]
) -> None:
    direct, gated = (
        side.call_tool(name, arguments) for side in (everything.direct, everything.gated)
    )
    assert not gated.is_error, text_of(gated)
    same(direct, gated)


def test_everything_the_servers_requests_reach_the_http_clients_callbacks(
    everything: HttpPair,
) -> None:
    calls = [
        ("trigger-sampling-request", {"prompt": "ready?", "maxTokens": 9}),
        ("trigger-elicitation-request", {}),
        ("get-roots-list", {}),
    ]
    for name, arguments in calls:
        direct, gated = (
            side.call_tool(name, arguments) for side in (everything.direct, everything.gated)
        )
        assert not gated.is_error, text_of(gated)
        same(direct, gated)
    heard = everything.heard
    assert heard["gated"].sampling == heard["direct"].sampling != []
    assert heard["gated"].elicitation == heard["direct"].elicitation != []
    assert heard["gated"].roots >= 1


def test_everything_a_refused_call_never_reaches_the_server(everything: HttpPair) -> None:
    refused = everything.gated.call_tool("get-env", {})
    assert refused.is_error and "secrets" in text_of(refused)
    assert decision_of(refused)["rule_ids"] == ["no-environment"]
    echoed = everything.gated.call_tool("echo", {"message": "get-env"})  # the look-alike
    assert not echoed.is_error and "get-env" in text_of(echoed)


# -- server-memory -----------------------------------------------------------------------


@pytest.fixture(scope="module", params=MODES)
def memory(
    request: pytest.FixtureRequest,
    node_servers: NodeServers,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[HttpPair]:
    tmp = tmp_path_factory.mktemp("memory-http")
    upstream = node_servers.command("server-memory")
    direct_env = {"MEMORY_FILE_PATH": str(tmp / "direct.jsonl")}
    gateway = behind_http(
        tmp, MEMORY_POLICY, upstream, {"MEMORY_FILE_PATH": str(tmp / "gated.jsonl")}
    )
    client = http_client(gateway.url, gateway.keys.bot, mode=request.param)
    try:
        with (
            portal() as running,
            blocking_client(
                running, "ClientSession", direct_params(upstream, direct_env)
            ) as direct,
            running.wrap_async_context_manager(client) as gated_client,
        ):
            gated = Blocking(running, gated_client)
            for each in (direct, gated):
                each.list_tools()
            yield HttpPair(direct, gated, {}, gateway)
    finally:
        gateway.close()


def test_memory_allowed_calls_answer_as_directly_and_refused_ones_change_nothing(
    memory: HttpPair,
) -> None:
    for name, arguments in MEMORY_ALLOWED:
        direct, gated = (side.call_tool(name, arguments) for side in (memory.direct, memory.gated))
        assert not gated.is_error, (name, text_of(gated))
        same(direct, gated)
    refused = [
        ("create_entities", {"entities": [entity("prod-db", "credential", "hunter2")]}),
        ("delete_entities", {"entityNames": ["Ada"]}),
    ]
    for name, arguments in refused:
        result = memory.gated.call_tool(name, arguments)
        assert result.is_error, name
        assert decision_of(result)["verdict"] in ("deny", "require_approval")
    same(memory.direct.call_tool("read_graph", {}), memory.gated.call_tool("read_graph", {}))
    graph = text_of(memory.gated.call_tool("read_graph", {}))
    assert "Ada" in graph and "prod-db" not in graph and "hunter2" not in graph
