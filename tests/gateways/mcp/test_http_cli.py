"""``interlock mcp-gateway --http``: the real command serving a client and stopping
cleanly, its usage errors, and the gateway deciding through the shared server
(``--server``) with each client's own key."""

from __future__ import annotations

import signal
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import mcp_types as types
import pytest

from interlock.gateways.mcp.config import GatewayConfig, UpstreamSpec
from interlock.gateways.mcp.http_auth import ServerKeys
from interlock.gateways.mcp.http_server import HttpGateway, HttpOptions, relays_for
from interlock.server.keys import KeyStore, Role
from interlock.store import open_store

from .http_support import RawHttp, Uvicorn, http_client, wait_until
from .support import INTERLOCK, POLICY, UPSTREAM, WAIT, base_env, reached, write_policy

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def text_of(result: types.CallToolResult) -> str:
    return "".join(block.text for block in result.content if isinstance(block, types.TextContent))


async def test_the_command_serves_a_client_and_stops_cleanly(tmp_path: Path) -> None:
    database = f"sqlite:///{tmp_path / 'gateway.db'}"
    store = open_store(database)
    key = KeyStore(store).create(tenant="acme", role=Role.AGENT, name="bot").token
    store.close()
    log, port = tmp_path / "upstream.jsonl", free_port()
    command = [
        INTERLOCK,
        "mcp-gateway",
        "--http",
        "--port",
        str(port),
        "-d",
        database,
        "--policy",
        str(write_policy(tmp_path)),
        "--env",
        f"MCP_TEST_LOG={log}",
        "--",
        sys.executable,
        str(UPSTREAM),
    ]
    process = subprocess.Popen(command, stderr=subprocess.PIPE, env=base_env())
    lines: list[bytes] = []
    ready = threading.Event()

    def read_stderr() -> None:
        assert process.stderr is not None
        for line in process.stderr:
            lines.append(line)
            # uvicorn says "Application startup complete" before it binds the socket:
            # only "Uvicorn running on" means a client can connect (a CI run under load
            # connected in between and was refused).
            if b"Uvicorn running on" in line:
                ready.set()

    threading.Thread(target=read_stderr, daemon=True).start()
    try:
        assert ready.wait(WAIT), b"".join(lines)
        url = f"http://127.0.0.1:{port}/mcp"
        async with http_client(url, key, mode="legacy") as client:
            echoed = await client.call_tool("echo", {"text": "from the command"})
            refused = await client.call_tool("delete_file", {"path": "/"})
        process.send_signal(signal.SIGTERM)
        assert process.wait(WAIT) == 0, b"".join(lines)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait(WAIT)
    assert text_of(echoed) == "from the command" and refused.is_error
    assert [entry["tool"] for entry in reached(log)] == ["echo"]
    assert any(b"tools/call 'delete_file'" in line and b"deny" in line for line in lines)


@pytest.mark.parametrize(
    ("options", "says"),
    [
        (["--allowed-host", "example.com"], b"--http"),
        (["--http", "--server", "http://127.0.0.1:9", "-d", "sqlite:///x.db"], b"--server"),
        (["--http", "--server", "ftp://example.com"], b"http(s)"),
    ],
)
def test_usage_errors_exit_2(tmp_path: Path, options: list[str], says: bytes) -> None:
    command = [INTERLOCK, "mcp-gateway", *options, "--", "true"]
    done = subprocess.run(
        command, cwd=tmp_path, capture_output=True, env=base_env(), timeout=WAIT, check=False
    )
    assert done.returncode == 2, done.stderr
    assert says in done.stderr


async def test_without_a_store_named_the_keys_are_the_default_stores(tmp_path: Path) -> None:
    """``--http`` with neither ``-d`` nor ``--server``: the store ``interlock keys
    create`` writes to by default (``.interlock/interlock.db`` here), as ``serve`` and
    ``llm-proxy`` read it."""
    keys = subprocess.run(
        [INTERLOCK, "keys", "create", "--tenant", "acme", "--role", "agent", "--name", "bot"],
        cwd=tmp_path,
        capture_output=True,
        env=base_env(),
        timeout=WAIT,
        check=True,
    )
    key = next(word for word in keys.stdout.decode().split() if word.startswith("ilk_"))
    write_policy(tmp_path)
    log, port = tmp_path / "upstream.jsonl", free_port()
    command = [INTERLOCK, "mcp-gateway", "--http", "--port", str(port)]
    command += ["--env", f"MCP_TEST_LOG={log}", "--", sys.executable, str(UPSTREAM)]
    process = subprocess.Popen(command, cwd=tmp_path, stderr=subprocess.PIPE, env=base_env())
    lines: list[bytes] = []
    ready = threading.Event()

    def read_stderr() -> None:
        assert process.stderr is not None
        for line in process.stderr:
            lines.append(line)
            if b"Uvicorn running on" in line:
                ready.set()

    threading.Thread(target=read_stderr, daemon=True).start()
    try:
        assert ready.wait(WAIT), b"".join(lines)
        async with http_client(f"http://127.0.0.1:{port}/mcp", key, mode="legacy") as client:
            echoed = await client.call_tool("echo", {"text": "the default store's key"})
        process.send_signal(signal.SIGTERM)
        assert process.wait(WAIT) == 0, b"".join(lines)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait(WAIT)
    assert text_of(echoed) == "the default store's key"
    assert b"no agent API key" not in b"".join(lines)


@pytest.fixture
def shared_server(tmp_path: Path) -> Iterator[object]:
    from remote.test_remote_guard import Server  # the real server app under uvicorn

    server = Server(tmp_path, policy=POLICY)
    yield server
    server.close()


async def test_with_server_each_client_is_judged_there_under_its_own_key(
    tmp_path: Path, shared_server: object
) -> None:
    server = shared_server
    log = tmp_path / "upstream.jsonl"
    config = GatewayConfig((UpstreamSpec(None, command=(sys.executable, str(UPSTREAM))),))
    env = {**base_env(), "MCP_TEST_LOG": str(log)}
    gateway = HttpGateway(
        ServerKeys(server.url),  # type: ignore[attr-defined]
        relays_for(config, env, grace=2.0),
        HttpOptions.for_bind("127.0.0.1"),
    )
    running = Uvicorn(gateway.app())
    url = f"{running.url}/mcp"
    try:
        async with http_client(url, server.agent_key, mode="legacy") as client:  # type: ignore[attr-defined]
            echoed = await client.call_tool("echo", {"text": "decided remotely"})
            refused = await client.call_tool("delete_file", {"path": "/"})
            held = await client.call_tool("echo", {"text": "LOUD remote"})
        statuses = {}
        for name, key in (
            ("approver", server.approver_key),  # type: ignore[attr-defined]
            ("unknown", "ilk_0000000000000000_" + "y" * 43),
        ):
            raw = RawHttp(url, key)
            statuses[name] = raw.post(
                {"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {}}
            ).status_code
            raw.close()
        wait_until(lambda: not gateway.sessions, "the client's session ended")
    finally:
        running.close()
    assert text_of(echoed) == "decided remotely"
    assert refused.is_error and refused.meta is not None
    assert refused.meta["interlock/decision"]["rule_ids"] == ["no-deletes"]
    approval = (held.meta or {})["interlock/decision"]
    record = server.guard.store.get_approval(approval["approval_id"])  # type: ignore[attr-defined]
    assert (record.tenant, record.context.get("agent")) == ("acme", "ops-bot")
    assert statuses == {"approver": 403, "unknown": 401}
    assert [entry["tool"] for entry in reached(log)] == ["echo"]
