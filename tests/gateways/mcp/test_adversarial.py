"""Side doors: every way a ``tools/call`` could reach the upstream without the
verdict it should have had. Each is judged (and refused by this policy) or refused
as a message; none is relayed ungated. Benign look-alikes next to them pass.

One gateway serves the whole table (a case is one exchange); after every case the
upstream's own record must still hold no call the policy refuses."""

from __future__ import annotations

import itertools
import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from .support import (
    INTERLOCK,
    UPSTREAM,
    RawWire,
    base_env,
    direct_wire,
    gateway_wire,
    line,
    reached,
    write_policy,
)

DELETE = {"path": "/etc/passwd"}


def call_line(name: Any, arguments: Any = DELETE, request_id: Any = 1, **extra: Any) -> bytes:
    body = {"jsonrpc": "2.0", "id": request_id, "method": "tools/call"}
    body["params"] = {"name": name, "arguments": arguments}
    body.update(extra)
    return line(body)


def raw_call(method: str = "tools/call", name: str = "delete_file", request_id: str = "1") -> bytes:
    """A tools/call line written by hand (so that ``method`` is sent as it is)."""
    params = '{"name":"' + name + '","arguments":{"path":"/"}}'
    head = '{"jsonrpc":"2.0","id":' + request_id + ',"method":"' + method + '"'
    return (head + ',"params":' + params + "}\n").encode()


#: (label, the line sent, what must come back): ("refused", verdict) an isError
#: refusal with that verdict; ("error", code) a JSON-RPC error; ("silent",) nothing.
SIDE_DOORS: list[tuple[str, bytes, tuple[Any, ...]]] = [
    # tool names that look like an allowed one are judged as what they are
    ("name in capitals", call_line("ECHO"), ("refused", "deny")),
    ("name with a trailing space", call_line("echo "), ("refused", "deny")),
    ("name with a zero-width space", call_line("ec\u200bho"), ("refused", "deny")),
    ("name with a Cyrillic e", call_line("\u0435cho"), ("refused", "deny")),
    ("name in fullwidth letters", call_line("\uff45\uff43\uff48\uff4f"), ("refused", "deny")),
    ("name namespaced with a dot", call_line("upstream.echo"), ("refused", "deny")),
    ("name namespaced with a slash", call_line("upstream/echo"), ("refused", "deny")),
    ("name with a NUL", call_line("echo\u0000"), ("refused", "deny")),
    ("the denied tool in other case", call_line("Delete_File"), ("refused", "deny")),
    ("the denied tool itself", call_line("delete_file"), ("refused", "deny")),
    # tools/call in disguise: another case, padding, invisible marks, other slashes
    ("method in title case", raw_call("Tools/Call"), ("error", -32601)),
    ("method in capitals", raw_call("TOOLS/CALL"), ("error", -32601)),
    ("method with a trailing space", raw_call("tools/call "), ("error", -32601)),
    ("method with a leading tab", raw_call("\\ttools/call"), ("error", -32601)),
    ("method with a zero-width joiner", raw_call("tools/\u200dcall"), ("error", -32601)),
    ("method with a fullwidth solidus", raw_call("tools\uff0fcall"), ("error", -32601)),
    ("method with a division slash", raw_call("tools\u2215call"), ("error", -32601)),
    # tools/call where no verdict could be answered
    (
        "as a notification",
        line(
            {
                "jsonrpc": "2.0",
                "method": "tools/call",
                "params": {"name": "delete_file", "arguments": DELETE},
            }
        ),
        ("silent",),
    ),
    ("with a null id", call_line("delete_file", request_id=None), ("error", -32600)),
    ("with a boolean id", call_line("delete_file", request_id=True), ("error", -32600)),
    ("with a float id", call_line("delete_file", request_id=1.5), ("error", -32600)),
    ("with an object id", call_line("delete_file", request_id={"a": 1}), ("error", -32600)),
    # messages two parsers could read two ways
    ("a batch of one", b"[" + call_line("delete_file").rstrip() + b"]\n", ("error", -32600)),
    (
        "a batch behind an allowed call",
        b"["
        + call_line("echo", {"text": "x"}).rstrip()
        + b","
        + call_line("delete_file", request_id=2).rstrip()
        + b"]\n",
        ("error", -32600),
    ),
    ("an empty batch", b"[]\n", ("error", -32600)),
    (
        "a duplicate method key",
        b'{"jsonrpc":"2.0","id":1,"method":"tools/list","method":"tools/call","params":{"name":"delete_file","arguments":{"path":"/"}}}\n',
        ("error", -32600),
    ),
    (
        "a duplicate name key",
        b'{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"echo","name":"delete_file","arguments":{"path":"/"}}}\n',
        ("error", -32600),
    ),
    (
        "a duplicate params key",
        b'{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"echo","arguments":{"text":"x"}},"params":{"name":"delete_file","arguments":{"path":"/"}}}\n',
        ("error", -32600),
    ),
    (
        "a call between carriage returns",
        b'{"jsonrpc":"2.0","method":"notifications/message","params":{"x":\r'
        + raw_call(request_id="9").rstrip()
        + b"\r}}\n",
        ("error", -32600),
    ),
    (
        "invalid UTF-8",
        raw_call(name="delete_file").replace(b"delete_file", b"delete_file\xff"),
        ("error", -32700),
    ),
    ("a UTF-16 line", raw_call().rstrip().decode().encode("utf-16") + b"\n", ("error", -32700)),
    (
        "NaN in the arguments",
        b'{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"delete_file","arguments":{"path":NaN}}}\n',
        ("error", -32700),
    ),
    (
        "no jsonrpc version",
        b'{"id":1,"method":"tools/call","params":{"name":"delete_file","arguments":{"path":"/"}}}\n',
        ("error", -32600),
    ),
    (
        "a request and a response at once",
        b'{"jsonrpc":"2.0","id":1,"method":"tools/call","result":{},"params":{"name":"delete_file","arguments":{"path":"/"}}}\n',
        ("error", -32600),
    ),
    (
        "huge arguments",
        call_line("delete_file", {"path": "/" + "a" * 4_000_000}),
        ("refused", "undetermined"),
    ),
]


def merged_wire(directory: Path, log: Path) -> RawWire:
    """The gateway merging upstreams, with one: every message is re-encoded on the way
    (the ids are the gateway's), so the same doors are tried on that path too."""
    config = directory / "gateway.yaml"
    command = json.dumps([sys.executable, str(UPSTREAM)])
    config.write_text(
        f"upstreams:\n  files:\n    command: {command}\n    namespace: false\n", encoding="utf-8"
    )
    policy = write_policy(directory)
    args = ["mcp-gateway", "--policy", str(policy), "--config", str(config)]
    return RawWire([INTERLOCK, *args, "--env", f"MCP_TEST_LOG={log}"], base_env())


@pytest.fixture(scope="module", params=["relayed", "merged"])
def gateway(
    tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest
) -> Iterator[tuple[RawWire, Path]]:
    directory = tmp_path_factory.mktemp("side-doors")
    log = directory / "upstream.jsonl"
    if request.param == "relayed":
        wire = gateway_wire(write_policy(directory), log)
    else:
        wire = merged_wire(directory, log)
    try:
        wire.handshake()
        yield wire, log
        assert wire.close() == 0
    finally:
        wire.kill()


_pings = itertools.count(10_000)


def exchange(wire: RawWire, data: bytes) -> list[dict[str, Any]]:
    """Send ``data``, then a ping; what came back before the ping's answer."""
    wire.send(data)
    ping = next(_pings)
    wire.send({"jsonrpc": "2.0", "id": ping, "method": "ping"})
    _, before = wire.until(ping)
    return [json.loads(raw) for raw in before]


@pytest.mark.parametrize(("label", "data", "expected"), SIDE_DOORS, ids=[c[0] for c in SIDE_DOORS])
def test_a_side_door_is_judged_or_refused(
    gateway: tuple[RawWire, Path], label: str, data: bytes, expected: tuple[Any, ...]
) -> None:
    wire, log = gateway
    replies = exchange(wire, data)
    if expected[0] == "silent":
        assert replies == []
    else:
        assert len(replies) == 1, replies
        (reply,) = replies
        if expected[0] == "refused":
            assert reply["result"]["isError"] is True
            assert reply["result"]["_meta"]["interlock/decision"]["verdict"] == expected[1]
        else:
            assert reply["error"]["code"] == expected[1]
    assert reached(log) == [], label


BENIGN: list[tuple[str, dict[str, Any], str]] = [
    ("the allowed tool", {"name": "echo", "arguments": {"text": "hi"}}, "hi"),
    (
        "a denied name inside the arguments",
        {"name": "echo", "arguments": {"text": "delete_file"}},
        "delete_file",
    ),
    (
        "a method name inside the arguments",
        {"name": "echo", "arguments": {"text": "Tools/Call"}},
        "Tools/Call",
    ),
    (
        "unicode arguments",
        {"name": "echo", "arguments": {"text": "\u0435cho \u200b \u2028 ✓"}},
        "\u0435cho \u200b \u2028 ✓",
    ),
    ("huge arguments", {"name": "echo", "arguments": {"text": "b" * 4_000_000}}, "b" * 4_000_000),
]


@pytest.mark.parametrize(("label", "params", "echoed"), BENIGN, ids=[c[0] for c in BENIGN])
def test_a_benign_look_alike_passes(
    gateway: tuple[RawWire, Path], label: str, params: dict[str, Any], echoed: str
) -> None:
    wire, log = gateway
    request_id = f"benign-{label}"
    wire.send({"jsonrpc": "2.0", "id": request_id, "method": "tools/call", "params": params})
    reply, _ = wire.until(request_id)
    assert reply["result"]["content"][0]["text"] == echoed
    assert reached(log)[-1] == {"tool": "echo", "args": params["arguments"]}
    assert "delete_file" not in {entry["tool"] for entry in reached(log)}


def test_a_live_request_id_cannot_be_reused(tmp_path: Path) -> None:
    """While ``ask`` waits on the client's model, its id is live: a second request
    under it (the same id, or its string twin) is refused, judged or not."""
    log = tmp_path / "upstream.jsonl"
    wire = gateway_wire(write_policy(tmp_path), log)
    try:
        wire.handshake()
        wire.send(call_line("ask", {"question": "q"}, request_id=7))
        sampling = wire.next()
        assert sampling["method"] == "sampling/createMessage"
        for twin in (7, "7"):
            for name, arguments in (("delete_file", DELETE), ("echo", {"text": "x"})):
                (reply,) = exchange(wire, call_line(name, arguments, request_id=twin))
                assert reply["error"]["code"] == -32600
        assert exchange(wire, line({"jsonrpc": "2.0", "id": 7, "method": "ping"})) != []
        result = {"role": "assistant", "content": {"type": "text", "text": "a"}, "model": "m"}
        wire.send({"jsonrpc": "2.0", "id": sampling["id"], "result": result})
        reply, _ = wire.until(7)
        assert reply["result"]["content"][0]["text"] == "a"
        assert wire.close() == 0
    finally:
        wire.kill()
    assert [entry["tool"] for entry in reached(log)] == ["ask"]


def test_the_carriage_return_door_is_real_without_the_gateway(tmp_path: Path) -> None:
    """Why the gateway refuses a carriage return: straight into the SDK's server,
    the call hidden between two of them runs."""
    log = tmp_path / "upstream.jsonl"
    wire = direct_wire(log)
    try:
        wire.handshake()
        wire.send(
            b'{"jsonrpc":"2.0","method":"notifications/message","params":{"x":\r'
            + raw_call(request_id="9").rstrip()
            + b"\r}}\n"
        )
        reply, _ = wire.until(9)
        assert "deleted" in json.dumps(reply)
    finally:
        wire.kill()
    assert reached(log) == [{"tool": "delete_file", "args": {"path": "/"}}]
