"""The corpus through ``POST /v1/check`` on the real server app (FastAPI over a Guard
with a SQLite store, reached with httpx through its ASGI transport, an agent's API
key): with the tool's schema, as a remote adapter sends it, and without one, as a
caller that declares none. One app per policy, built once per module."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import httpx
import pytest

from interlock import Guard
from interlock.server import KeyStore, Role, create_app

from .case import DESCRIPTION, POLICIES, Case, PolicyName, tool_schema
from .surfaces import assert_outcome
from .table import params


@dataclass
class Server:
    guard: Guard
    client: httpx.AsyncClient
    token: str


@dataclass
class ServerSurface:
    servers: dict[PolicyName, Server]
    loop: asyncio.Runner  # one event loop for the module's rows


async def _client(guard: Guard) -> httpx.AsyncClient:
    app = create_app(guard, keys=KeyStore(guard.store))  # type: ignore[arg-type]
    return httpx.AsyncClient(
        transport=httpx.ASGITransport(app=app), base_url="http://interlock.test"
    )


@pytest.fixture(scope="module")
def surface(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerSurface]:
    root = tmp_path_factory.mktemp("corpus-server")
    servers: dict[PolicyName, Server] = {}
    with asyncio.Runner() as loop:
        for policy, text in POLICIES.items():
            policy_file = root / f"{policy}.yaml"
            policy_file.write_text(text)
            guard = Guard(
                str(policy_file), store=f"sqlite:///{root / f'{policy}.db'}", reap_interval=None
            )
            assert guard.store is not None
            token = KeyStore(guard.store).create(tenant="acme", role=Role.AGENT, name="bot").token
            servers[policy] = Server(guard, loop.run(_client(guard)), token)
        yield ServerSurface(servers, loop)
        for server in servers.values():
            loop.run(server.client.aclose())
    for server in servers.values():
        server.guard.close()


async def _check(server: Server, body: dict[str, Any]) -> dict[str, Any]:
    response = await server.client.post(
        "/v1/check", json=body, headers={"Authorization": f"Bearer {server.token}"}
    )
    assert response.status_code == 200, response.text
    answer: dict[str, Any] = response.json()
    return answer


@pytest.mark.parametrize("schema", [True, False], ids=["with-schema", "no-schema"])
@pytest.mark.parametrize("case", params())
def test_v1_check(case: Case, schema: bool, surface: ServerSurface) -> None:
    body: dict[str, Any] = {"name": case.tool, "arguments": dict(case.args)}
    if schema:
        body.update(schema=tool_schema(case.tool), description=DESCRIPTION)
    answer = surface.loop.run(_check(surface.servers[case.policy], body))
    decision = (answer["verdict"], answer["rule_ids"], answer["reason"])
    assert_outcome(case, [decision], None, f"POST /v1/check ({'with' if schema else 'no'} schema)")
