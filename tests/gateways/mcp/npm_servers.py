"""The npm reference MCP servers as upstreams: ``@modelcontextprotocol/server-everything``,
``server-filesystem`` and ``server-memory``, pinned in ``npm/package.json`` and
``npm/package-lock.json`` and installed into ``npm/node_modules`` by ``make test`` (or
``npm ci --prefix tests/gateways/mcp/npm``); no test fetches a package.

Their tests skip when node (20 or later) or the installed packages are missing, unless
``INTERLOCK_REQUIRE_NODE_SERVERS=1`` (CI), which turns that into a failure.

Here: finding the servers, launching one directly or behind the gateway, and a client of
either generation on it (``ClientSession`` over ``stdio_client``, which opens with
``initialize``; ``mcp.Client``, which probes ``server/discover`` first and falls back to
``initialize`` on these servers, whose SDK speaks protocol 2025-11-25 at most)."""

from __future__ import annotations

import contextlib
import functools
import json
import re
import shutil
import subprocess
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import anyio
import mcp_types as types
from anyio.from_thread import BlockingPortal, start_blocking_portal
from mcp import Client, ClientSession, StdioServerParameters, stdio_client

from .support import INTERLOCK, WAIT, base_env

NPM = Path(__file__).with_name("npm")
REQUIRE_VARIABLE = "INTERLOCK_REQUIRE_NODE_SERVERS"
MIN_NODE_MAJOR = 20
SCOPE = "@modelcontextprotocol"
PACKAGES = ("server-everything", "server-filesystem", "server-memory")

ClientKind = Literal["ClientSession", "Client"]
CLIENT_KINDS: list[ClientKind] = ["ClientSession", "Client"]


@dataclass(frozen=True)
class NodeServers:
    """Where node and the installed servers are."""

    node: str
    scripts: dict[str, Path]

    def command(self, package: str, *args: str) -> list[str]:
        """The command line that runs ``package``'s server over stdio."""
        return [self.node, str(self.scripts[package]), *args]

    def version(self, package: str) -> str:
        manifest = NPM / "node_modules" / SCOPE / package / "package.json"
        version: str = json.loads(manifest.read_text(encoding="utf-8"))["version"]
        return version


def find_node_servers() -> NodeServers | str:
    """The installed servers, or what is missing."""
    node = shutil.which("node")
    if node is None:
        return "node is not on PATH"
    shown = subprocess.run(
        [node, "--version"], capture_output=True, text=True, timeout=WAIT, check=False
    )
    match = re.match(r"v(\d+)\.", shown.stdout.strip())
    if match is None or int(match.group(1)) < MIN_NODE_MAJOR:
        return f"node {shown.stdout.strip()!r} is older than {MIN_NODE_MAJOR}"
    scripts = {}
    for package in PACKAGES:
        manifest = NPM / "node_modules" / SCOPE / package / "package.json"
        if not manifest.is_file():
            return f"{SCOPE}/{package} is not installed in {NPM}/node_modules"
        (script,) = json.loads(manifest.read_text(encoding="utf-8"))["bin"].values()
        scripts[package] = (manifest.parent / script).resolve()
    return NodeServers(node=node, scripts=scripts)


def gateway_command(policy: Path, upstream: list[str], *options: str) -> list[str]:
    return [INTERLOCK, "mcp-gateway", "--policy", str(policy), *options, "--", *upstream]


def env_options(env: dict[str, str]) -> list[str]:
    """``--env NAME=VALUE`` for each variable the upstream needs."""
    return [option for name, value in env.items() for option in ("--env", f"{name}={value}")]


def direct_params(upstream: list[str], env: dict[str, str] | None = None) -> StdioServerParameters:
    return StdioServerParameters(
        command=upstream[0], args=upstream[1:], env={**base_env(), **(env or {})}
    )


def gated_params(
    policy: Path, upstream: list[str], env: dict[str, str] | None = None, *options: str
) -> StdioServerParameters:
    command = gateway_command(policy, upstream, *env_options(env or {}), *options)
    return StdioServerParameters(command=command[0], args=command[1:], env=base_env())


@contextlib.asynccontextmanager
async def connect(
    kind: ClientKind, params: StdioServerParameters, **callbacks: Any
) -> AsyncIterator[Any]:
    """A client of ``kind`` on the process ``params`` launch: a ``ClientSession`` (after
    ``initialize``) or an ``mcp.Client`` (after its ``server/discover`` probe). Both
    answer ``call_tool``, ``list_tools``, ``read_resource``, ``get_prompt`` … alike."""
    if kind == "ClientSession":
        async with (
            stdio_client(params) as (read, write),
            ClientSession(read, write, **callbacks) as session,
        ):
            await session.initialize()
            yield session
    else:
        async with Client(params, **callbacks) as client:
            yield client


class Blocking:
    """A client that lives on a portal's event loop (a thread of its own), called from
    plain test functions: one client and its server serve a whole module, whatever
    event-loop plugin runs the tests. Each call is bounded by ``WAIT``."""

    def __init__(self, portal: BlockingPortal, client: Any) -> None:
        self.portal, self.client = portal, client

    def __getattr__(self, name: str) -> Callable[..., Any]:
        method = getattr(self.client, name)

        def call(*args: Any, **kwargs: Any) -> Any:
            return self.portal.call(bounded, functools.partial(method, *args, **kwargs))

        return call


async def bounded(call: Callable[[], Awaitable[Any]]) -> Any:
    with anyio.fail_after(WAIT):
        return await call()


@contextlib.contextmanager
def portal() -> Iterator[BlockingPortal]:
    with start_blocking_portal(backend="asyncio") as running:
        yield running


@contextlib.contextmanager
def blocking_client(
    running: BlockingPortal, kind: ClientKind, params: StdioServerParameters, **callbacks: Any
) -> Iterator[Blocking]:
    """``connect`` entered on the portal's loop; closed (and the server with it) on exit."""
    with running.wrap_async_context_manager(connect(kind, params, **callbacks)) as client:
        yield Blocking(running, client)


def text_of(result: types.CallToolResult) -> str:
    return "".join(block.text for block in result.content if isinstance(block, types.TextContent))


def decision_of(result: types.CallToolResult) -> dict[str, Any]:
    decision: dict[str, Any] = (result.meta or {})["interlock/decision"]
    return decision


def dumped(result: Any) -> Any:
    """A result as the client sees it, for comparing one side with the other."""
    if result is None or isinstance(result, str):
        return result
    return result.model_dump(mode="json", by_alias=True, exclude_none=True)


__all__ = [
    "CLIENT_KINDS",
    "NPM",
    "PACKAGES",
    "REQUIRE_VARIABLE",
    "Blocking",
    "ClientKind",
    "NodeServers",
    "blocking_client",
    "connect",
    "decision_of",
    "direct_params",
    "dumped",
    "env_options",
    "find_node_servers",
    "gated_params",
    "gateway_command",
    "portal",
    "text_of",
]
