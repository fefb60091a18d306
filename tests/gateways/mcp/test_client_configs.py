"""The MCP client configs the README and docs/mcp-gateway.md give for copy and paste
(```json blocks with ``mcpServers``), each run as a client runs it: a stdio entry's
``command`` and ``args`` launched by the SDK's client (the gateway, which launches the
servers), an HTTP entry's ``url`` and ``headers`` used by the SDK's streamable-HTTP
client against the gateway started with the documented command line. Only what a
reader would fill in is filled in — the paths under ``/srv``, the key (``ilk_...``),
the port (a free one, not 8770), and ``interlock`` / ``python`` as this environment
names them; a test fails when a config stops being valid JSON, names an option the
gateway refuses, or no longer reaches the tools."""

from __future__ import annotations

import contextlib
import json
import re
import signal
import socket
import subprocess
import sys
import threading
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import httpx2
import mcp_types as types
import pytest
from mcp import Client, StdioServerParameters
from mcp.client.streamable_http import streamable_http_client

from interlock.server.keys import KeyStore, Role
from interlock.store import open_store

from .npm_servers import NPM
from .support import INTERLOCK, WAIT, base_env

pytestmark = pytest.mark.anyio

ROOT = Path(__file__).resolve().parents[3]
README = ROOT / "README.md"
GUIDE = ROOT / "docs" / "mcp-gateway.md"
FENCE = re.compile(r"^```(\w+)[^\n]*\n(.*?)^```", re.DOTALL | re.MULTILINE)


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def configs(path: Path) -> list[dict[str, Any]]:
    """The ``mcpServers`` entries of a document's ```json blocks, in order."""
    found = []
    for language, body in FENCE.findall(path.read_text(encoding="utf-8")):
        if language == "json" and "mcpServers" in body:
            found.extend(json.loads(body)["mcpServers"].values())
    return found


def stdio_config(path: Path) -> dict[str, Any]:
    (entry,) = [entry for entry in configs(path) if "command" in entry]
    return entry


def http_config(path: Path) -> dict[str, Any]:
    (entry,) = [entry for entry in configs(path) if entry.get("type") == "http"]
    return entry


def guide_block(starts: str, language: str = "python") -> str:
    for found, body in FENCE.findall(GUIDE.read_text(encoding="utf-8")):
        if found == language and body.startswith(starts):
            return body
    raise AssertionError(f"no {language} block starting {starts!r} in {GUIDE.name}")


def guide_policy() -> str:
    return guide_block("version: 1", "yaml")


def filled(values: list[str], fills: dict[str, str]) -> list[str]:
    """``values`` with what a reader fills in filled in: a word (``python``) where it
    is the whole value, a path (``/srv/...``) wherever it occurs."""
    out = []
    for value in values:
        done = fills.get(value, value)
        for placeholder, fill in fills.items():
            if placeholder.startswith("/"):
                done = done.replace(placeholder, fill)
        out.append(done)
    return out


def text_of(result: types.CallToolResult) -> str:
    return "".join(block.text for block in result.content if isinstance(block, types.TextContent))


def launched(entry: dict[str, Any], fills: dict[str, str], cwd: Path) -> StdioServerParameters:
    """The entry as a client launches it."""
    command = entry["command"]
    assert command == "interlock", entry  # what the docs tell the client to run
    return StdioServerParameters(
        command=INTERLOCK, args=filled(entry["args"], fills), env=base_env(), cwd=cwd
    )


# -- stdio ------------------------------------------------------------------------------


async def test_the_guides_stdio_config(tmp_path: Path) -> None:
    (tmp_path / "server.py").write_text(guide_block("# server.py"), encoding="utf-8")
    (tmp_path / "interlock.yaml").write_text(guide_policy(), encoding="utf-8")
    fills = {"/srv/tools/": f"{tmp_path}/", "python": sys.executable}
    params = launched(stdio_config(GUIDE), fills, tmp_path)
    async with Client(params) as client:
        names = {tool.name for tool in (await client.list_tools()).tools}
        found = await client.call_tool("search_docs", {"query": "budgets"})
        refused = await client.call_tool("delete_file", {"path": "/etc/passwd"})
    assert names == {"search_docs", "delete_file"}
    assert text_of(found) == "3 pages match 'budgets'"
    assert refused.is_error and "deleting files is not allowed" in text_of(refused)


README_POLICY = """\
version: 1
default: deny
rules:
  - id: see-the-docs
    decision: allow
    reason: the agent may see what it can read
    name: [list_allowed_directories, read_graph]
  - id: no-writes
    decision: deny
    reason: the docs are read-only
    name: write_file
"""


async def test_the_readmes_stdio_config(tmp_path: Path, node_servers: Any) -> None:
    docs = tmp_path / "docs"
    docs.mkdir()
    policy = tmp_path / "interlock.yaml"
    policy.write_text(README_POLICY, encoding="utf-8")
    fills = {"/srv/interlock.yaml": str(policy), "/srv/docs": str(docs)}
    # npx finds the servers installed beside the tests (never fetched): run from there
    params = launched(stdio_config(README), fills, NPM)
    async with Client(params) as client:
        names = {tool.name for tool in (await client.list_tools()).tools}
        where = await client.call_tool("files__list_allowed_directories", {})
        graph = await client.call_tool("memory__read_graph", {})
        refused = await client.call_tool(
            "files__write_file", {"path": str(docs / "x.txt"), "content": "no"}
        )
    assert {"files__write_file", "memory__read_graph"} <= names
    assert str(docs.resolve()) in text_of(where) and not graph.is_error
    assert refused.is_error and "the docs are read-only" in text_of(refused)
    assert list(docs.iterdir()) == []


# -- HTTP -------------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@contextlib.contextmanager
def http_gateway(tmp_path: Path) -> Iterator[tuple[int, str]]:
    """The README's ``interlock mcp-gateway --http -d sqlite:///.interlock/interlock.db
    -- python server.py``, run in ``tmp_path`` (on a free port), and an agent key."""
    (tmp_path / "server.py").write_text(guide_block("# server.py"), encoding="utf-8")
    (tmp_path / "interlock.yaml").write_text(guide_policy(), encoding="utf-8")
    readme = README.read_text(encoding="utf-8")
    shown = re.search(r"with `(interlock mcp-gateway --http [^`]+)`", readme)
    assert shown is not None, "the README no longer shows the HTTP gateway's command"
    (tmp_path / ".interlock").mkdir()
    database = "sqlite:///.interlock/interlock.db"
    assert database in shown.group(1)
    store = open_store(f"sqlite:///{tmp_path / '.interlock' / 'interlock.db'}")
    key = KeyStore(store).create(tenant="acme", role=Role.AGENT, name="desktop").token
    store.close()
    port = free_port()
    words = filled(shown.group(1).split(), {"python": sys.executable})
    command = [
        INTERLOCK,
        *words[1 : words.index("--")],
        "--port",
        str(port),
        *words[words.index("--") :],
    ]
    process = subprocess.Popen(command, cwd=tmp_path, stderr=subprocess.PIPE, env=base_env())
    lines: list[bytes] = []
    ready = threading.Event()

    def read() -> None:
        assert process.stderr is not None
        for line in process.stderr:
            lines.append(line)
            if b"Uvicorn running on" in line:
                ready.set()

    threading.Thread(target=read, daemon=True).start()
    try:
        assert ready.wait(WAIT), b"".join(lines)
        yield port, key
        process.send_signal(signal.SIGTERM)
        assert process.wait(WAIT) == 0, b"".join(lines)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait(WAIT)


@contextlib.asynccontextmanager
async def configured_client(entry: dict[str, Any], port: int, key: str) -> AsyncIterator[Client]:
    """An SDK client with the entry's url and headers (key and port filled in)."""
    assert entry["type"] == "http"
    url = entry["url"].replace(":8770/", f":{port}/")
    headers = {name: value.replace("ilk_...", key) for name, value in entry["headers"].items()}
    async with (
        httpx2.AsyncClient(headers=headers, timeout=WAIT) as http,
        Client(streamable_http_client(url, http_client=http)) as client,
    ):
        yield client


@pytest.mark.parametrize("document", [README, GUIDE], ids=["README", "mcp-gateway.md"])
async def test_an_http_config(tmp_path: Path, document: Path) -> None:
    entry = http_config(document)
    with http_gateway(tmp_path) as (port, key):
        async with configured_client(entry, port, key) as client:
            found = await client.call_tool("search_docs", {"query": "budgets"})
            refused = await client.call_tool("delete_file", {"path": "/etc/passwd"})
    assert text_of(found) == "3 pages match 'budgets'"
    assert refused.is_error and "deleting files is not allowed" in text_of(refused)
