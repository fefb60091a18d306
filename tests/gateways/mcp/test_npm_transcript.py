"""The wire transcript with the npm reference servers, as ``test_transcript.py`` does it
for the Python SDK's server: one scripted session run straight into the server and
through the gateway. What the client receives and what the server receives are the
same bytes, line for line — except the refused call (the last of the script), which the
server never sees and the gateway answers itself.

The server runs behind ``tee``, which records the exact bytes it is sent. Each run gets
the same paths (the filesystem root and the memory file are laid out anew before each),
so paths in the answers are the same bytes too. One field differs from run to run by
the server's own making and is normalised by name: the time a dynamic resource of
``server-everything`` says it was made."""

from __future__ import annotations

import json
import re
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from .npm_servers import NodeServers, env_options, gateway_command
from .support import RawWire, base_env

pytestmark = pytest.mark.skipif(shutil.which("tee") is None, reason="needs tee")


@dataclass(frozen=True)
class Expect:
    """Read until the server sends ``method`` (a request it makes in its own time, or
    the notification that follows it), so that the rest of the script starts from the
    same place on both runs."""

    method: str


Step = dict[str, Any] | Expect

#: The client's answers to the server's requests.
ANSWERS: dict[str, Any] = {
    "sampling/createMessage": {
        "role": "assistant",
        "content": {"type": "text", "text": "yes"},
        "model": "fake-model",
    },
    "elicitation/create": {"action": "accept", "content": {"name": "Ada", "check": True}},
    "roots/list": {"roots": [{"uri": "file:///srv/project", "name": "project"}]},
}

#: A named field that differs run to run: ``Resource N: This is a plaintext resource
#: created at 7:45:03 PM`` (the time in the server's locale).
NORMALISED = [
    (
        "the time a dynamic text resource was made",
        re.compile(rb"(plaintext resource created at )[^\"]+"),
    )
]


def request(request_id: int, method: str, params: Any = None) -> dict[str, Any]:
    message: dict[str, Any] = {"jsonrpc": "2.0", "id": request_id, "method": method}
    if params is not None:
        message["params"] = params
    return message


def call(request_id: int, name: str, arguments: dict[str, Any], **meta: Any) -> dict[str, Any]:
    params: dict[str, Any] = {"name": name, "arguments": arguments}
    if meta:
        params["_meta"] = meta
    return request(request_id, "tools/call", params)


def initialize(*capabilities: str) -> list[Step]:
    params = {
        "protocolVersion": "2025-11-25",
        "capabilities": {name: {} for name in capabilities},
        "clientInfo": {"name": "scripted", "version": "1"},
    }
    return [
        request(0, "initialize", params),
        {"jsonrpc": "2.0", "method": "notifications/initialized"},
    ]


def everything_script(tmp: Path) -> list[Step]:
    del tmp
    data = "data:text/plain;base64,aGVsbG8K"
    return [
        *initialize("sampling", "elicitation", "roots"),
        Expect("roots/list"),  # asked 350 ms after the handshake
        Expect("notifications/message"),  # "Roots updated: 1 root(s) received from client"
        request(1, "tools/list"),
        request(2, "prompts/list"),
        request(3, "resources/list"),
        request(4, "resources/templates/list"),
        request(5, "ping"),
        call(6, "echo", {"message": "héllo ✓ \u2028 wörld"}),
        call(7, "get-sum", {"a": 2, "b": 40}),
        call(
            8, "trigger-long-running-operation", {"duration": 0.1, "steps": 2}, progressToken="p8"
        ),
        call(9, "trigger-sampling-request", {"prompt": "ready?", "maxTokens": 5}),
        call(10, "trigger-elicitation-request", {}),
        call(11, "get-roots-list", {}),
        call(12, "get-structured-content", {"location": "Chicago"}),
        request(13, "logging/setLevel", {"level": "info"}),
        request(14, "resources/subscribe", {"uri": "demo://resource/static/document/features.md"}),
        request(15, "resources/read", {"uri": "demo://resource/static/document/features.md"}),
        request(16, "resources/read", {"uri": "demo://resource/dynamic/text/3"}),
        request(17, "prompts/get", {"name": "args-prompt", "arguments": {"city": "Oslo"}}),
        request(
            18,
            "completion/complete",
            {
                "ref": {"type": "ref/prompt", "name": "completable-prompt"},
                "argument": {"name": "name", "value": "A"},
                "context": {"arguments": {"department": "Engineering"}},
            },
        ),
        call(19, "gzip-file-as-resource", {"name": "hello.gz", "data": data}),
        request(20, "resources/read", {"uri": "demo://resource/session/hello.gz"}),
        {"jsonrpc": "2.0", "method": "notifications/roots/list_changed"},
        Expect("roots/list"),
        Expect("notifications/message"),
        {"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 99}},
        request(
            21, "resources/unsubscribe", {"uri": "demo://resource/static/document/features.md"}
        ),
        request(22, "no/such/method"),
        call(23, "get-env", {}),  # refused: last, so that the rest compare
    ]


#: What ``mcp.Client`` sends first: the 2026-07-28 probe, which these servers answer
#: with "method not found" before the client falls back to ``initialize``.
DISCOVER = request(
    100,
    "server/discover",
    {
        "_meta": {
            "io.modelcontextprotocol/protocolVersion": "2026-07-28",
            "io.modelcontextprotocol/clientInfo": {"name": "scripted", "version": "1"},
            "io.modelcontextprotocol/clientCapabilities": {},
        }
    },
)


def memory_script(tmp: Path) -> list[Step]:
    del tmp
    ada = {"name": "Ada", "entityType": "person", "observations": ["writes programs"]}
    return [
        DISCOVER,
        *initialize(),
        request(1, "tools/list"),
        call(2, "create_entities", {"entities": [ada]}),
        call(
            3, "add_observations", {"observations": [{"entityName": "Ada", "contents": ["1815"]}]}
        ),
        call(4, "search_nodes", {"query": "Ada"}),
        call(5, "read_graph", {}),
        call(6, "delete_entities", {"entityNames": ["Ada"]}),  # refused
    ]


def filesystem_script(tmp: Path) -> list[Step]:
    root = tmp / "root"
    return [
        *initialize(),
        request(1, "tools/list"),
        call(2, "list_allowed_directories", {}),
        call(3, "write_file", {"path": f"{root}/workspace/notes.txt", "content": "one\ntwo\n"}),
        call(
            4,
            "edit_file",
            {"path": f"{root}/workspace/notes.txt", "edits": [{"oldText": "two", "newText": "2"}]},
        ),
        call(5, "read_text_file", {"path": f"{root}/workspace/notes.txt"}),
        call(6, "list_directory", {"path": f"{root}/workspace"}),
        call(7, "write_file", {"path": f"{root}/workspace/../private/x.txt", "content": "x"}),
    ]


POLICIES = {
    "server-everything": """
version: 1
default: allow
rules:
  - id: no-environment
    decision: deny
    reason: the server's environment holds its secrets
    name: get-env
""",
    "server-memory": """
version: 1
default: allow
rules:
  - id: forgetting-needs-a-human
    decision: require_approval
    reason: deleting memories needs a human
    name: [delete_entities, delete_observations, delete_relations]
""",
    "server-filesystem": """
version: 1
default: allow
rules:
  - id: writes-in-the-workspace
    decision: deny
    reason: the agent writes in its workspace only
    name: [write_file, edit_file, move_file, create_directory]
    params: {{path: {{not_glob: "{root}/workspace/*"}}}}
""",
}


@dataclass(frozen=True)
class Scenario:
    script: Callable[[Path], list[Step]]
    lay_out: Callable[[Path], tuple[list[str], dict[str, str]]]  # arguments, environment


def everything_layout(tmp: Path) -> tuple[list[str], dict[str, str]]:
    del tmp
    return [], {}


def memory_layout(tmp: Path) -> tuple[list[str], dict[str, str]]:
    memory = tmp / "memory.jsonl"
    memory.unlink(missing_ok=True)
    return [], {"MEMORY_FILE_PATH": str(memory)}


def filesystem_layout(tmp: Path) -> tuple[list[str], dict[str, str]]:
    root = tmp / "root"
    shutil.rmtree(root, ignore_errors=True)
    (root / "workspace").mkdir(parents=True)
    (root / "private").mkdir()
    return [str(root)], {}


SCENARIOS = {
    "server-everything": Scenario(everything_script, everything_layout),
    "server-memory": Scenario(memory_script, memory_layout),
    "server-filesystem": Scenario(filesystem_script, filesystem_layout),
}


def run(wire: RawWire, script: list[Step]) -> list[bytes]:
    """Send each message; for a request, read up to its response; for an ``Expect``, up
    to that method. The server's requests are answered on the way. Every line read."""
    received: list[bytes] = []

    def read_until(done: Callable[[dict[str, Any]], bool]) -> None:
        while True:
            raw = wire.next_raw()
            received.append(raw)
            body = json.loads(raw)
            if body.get("method") in ANSWERS and "id" in body:
                wire.send({"jsonrpc": "2.0", "id": body["id"], "result": ANSWERS[body["method"]]})
            if done(body):
                return

    for step in script:
        if isinstance(step, Expect):
            read_until(lambda body, step=step: body.get("method") == step.method)
            continue
        wire.send(step)
        if "id" in step:
            read_until(
                lambda body, step=step: "method" not in body and body.get("id") == step["id"]
            )
    assert wire.close() == 0
    return received


def normalised(line: bytes) -> bytes:
    for _, pattern in NORMALISED:
        line = pattern.sub(rb"\1<made at run time>", line)
    return line


def behind_tee(wire_log: Path, upstream: list[str]) -> list[str]:
    quoted = " ".join(f'"{part}"' for part in upstream)
    return ["sh", "-c", f'tee "{wire_log}" | exec {quoted}']


@pytest.mark.parametrize("package", sorted(SCENARIOS))
def test_allowed_traffic_is_byte_identical(
    package: str, node_servers: NodeServers, tmp_path: Path
) -> None:
    scenario = SCENARIOS[package]
    policy = tmp_path / "interlock.yaml"
    policy.write_text(POLICIES[package].format(root=tmp_path / "root"), encoding="utf-8")
    direct_in, gated_in = tmp_path / "direct.in", tmp_path / "gated.in"

    arguments, env = scenario.lay_out(tmp_path)
    upstream = node_servers.command(package, *arguments)
    direct = RawWire(behind_tee(direct_in, upstream), {**base_env(), **env})
    try:
        direct_out = run(direct, scenario.script(tmp_path))
    finally:
        direct.kill()

    arguments, env = scenario.lay_out(tmp_path)
    command = gateway_command(policy, behind_tee(gated_in, upstream), *env_options(env))
    gated = RawWire(command, base_env())
    try:
        gated_out = run(gated, scenario.script(tmp_path))
    finally:
        gated.kill()

    # The client side: every line but the last (the refusal) the same.
    assert [normalised(line) for line in gated_out[:-1]] == [
        normalised(line) for line in direct_out[:-1]
    ]
    assert len(gated_out) == len(direct_out)
    refusal = json.loads(gated_out[-1])
    assert refusal["result"]["isError"] is True
    assert refusal["result"]["_meta"]["interlock/decision"]["verdict"] != "allow"
    assert "interlock/decision" not in direct_out[-1].decode()  # ungated, the server ran it

    # The server side: the same bytes, minus the refused call.
    direct_lines = direct_in.read_bytes().splitlines(keepends=True)
    assert gated_in.read_bytes().splitlines(keepends=True) == direct_lines[:-1]
    last_call = json.loads(direct_lines[-1])
    assert last_call["method"] == "tools/call"

    if package == "server-everything":  # every kind of message went through both ways
        methods = [json.loads(line).get("method") for line in gated_out]
        for method in (
            "notifications/tools/list_changed",
            "notifications/progress",
            "sampling/createMessage",
            "elicitation/create",
            "roots/list",
            "notifications/message",
            "notifications/resources/list_changed",
        ):
            assert method in methods, method
        assert any(b"<made at run time>" in normalised(line) for line in gated_out)
    if package == "server-memory":  # the probe of the per-request generation, refused
        assert json.loads(gated_out[0])["error"]["code"] == -32601
    if package == "server-filesystem":
        assert not (tmp_path / "root" / "private" / "x.txt").exists()
