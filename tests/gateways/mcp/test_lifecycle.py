"""The ``interlock mcp-gateway`` command around the relay: what the upstream inherits,
exit codes both ways, usage errors, and budgets settled from the upstream's answers."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

from .support import (
    INTERLOCK,
    POLICY,
    WAIT,
    RawWire,
    base_env,
    gateway_command,
    gateway_wire,
    reached,
    write_policy,
)


def whoami(policy: Path, log: Path, *options: str) -> list[str]:
    wire = RawWire(gateway_command(policy, log, *options), {**base_env(), "SECRET_TOKEN": "s3"})
    try:
        wire.handshake()
        wire.send(
            {
                "jsonrpc": "2.0",
                "id": 1,
                "method": "tools/call",
                "params": {"name": "whoami", "arguments": {}},
            }
        )
        reply, _ = wire.until(1)
        assert wire.close() == 0
    finally:
        wire.kill()
    names: list[str] = json.loads(reply["result"]["content"][0]["text"])
    return names


def test_the_upstream_gets_path_and_home_not_the_gateways_secrets(tmp_path: Path) -> None:
    policy, log = write_policy(tmp_path), tmp_path / "upstream.jsonl"
    names = whoami(policy, log, "--env", "EXTRA=1")
    assert {"PATH", "HOME", "MCP_TEST_LOG", "EXTRA"} <= set(names)
    assert "SECRET_TOKEN" not in names
    assert "SECRET_TOKEN" in whoami(policy, log, "--inherit-env")


def test_the_upstreams_exit_code_ends_the_gateway(tmp_path: Path) -> None:
    policy, log = write_policy(tmp_path), tmp_path / "upstream.jsonl"
    command = gateway_command(
        policy,
        log,
        upstream=[sys.executable, "-c", "import sys; sys.stdin.readline(); sys.exit(7)"],
    )
    gateway = subprocess.Popen(
        command,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=base_env(),
    )
    out, _ = gateway.communicate(
        b'{"jsonrpc":"2.0","method":"notifications/initialized"}\n', timeout=WAIT
    )
    assert gateway.returncode == 7
    assert out == b""


def test_the_upstream_exiting_first_ends_the_gateway_with_the_client_still_open(
    tmp_path: Path,
) -> None:
    policy, log = write_policy(tmp_path), tmp_path / "upstream.jsonl"
    command = gateway_command(policy, log, upstream=[sys.executable, "-c", "raise SystemExit(3)"])
    gateway = subprocess.Popen(
        command,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=base_env(),
    )
    try:
        assert gateway.wait(timeout=WAIT) == 3  # stdin never closed
    finally:
        gateway.kill()
        gateway.communicate()


def test_usage_errors_exit_2_without_starting_anything(tmp_path: Path) -> None:
    log = tmp_path / "upstream.jsonl"
    bad = tmp_path / "bad.yaml"
    bad.write_text("version: 1\ndefault: maybe\n", encoding="utf-8")
    for command in (
        gateway_command(bad, log),
        gateway_command(write_policy(tmp_path), log, upstream=[str(tmp_path / "no-such-server")]),
        [
            INTERLOCK,
            "mcp-gateway",
            "--policy",
            str(write_policy(tmp_path)),
            "--env",
            "NOEQUALS",
            "--",
            "true",
        ],
    ):
        done = subprocess.run(
            command, capture_output=True, env=base_env(), timeout=WAIT, check=False
        )
        assert done.returncode == 2, done.stderr
        assert done.stdout == b""
    assert reached(log) == []


BUDGET_POLICY = """\
version: 1
default: deny
budgets:
  - id: lookups
    limit: 1
    unit: USD
    scope: agent
    kind: tool
    name: lookup
    max_overage: 0
rules:
  - id: models-ok
    decision: allow
    reason: no model calls here
    kind: llm
  - id: lookups-ok
    decision: allow
    reason: lookups are fine
    name: lookup
"""


def test_budgets_are_committed_when_the_call_completes_and_released_when_it_fails(
    tmp_path: Path,
) -> None:
    policy, log = write_policy(tmp_path, BUDGET_POLICY), tmp_path / "upstream.jsonl"
    database = f"sqlite:///{tmp_path / 'interlock.db'}"
    wire = gateway_wire(policy, log, "--database", database)
    try:
        wire.handshake()
        results = []
        for number, (query, cost) in enumerate([("a", 0.6), ("fail", 0.3), ("b", 0.6)], start=1):
            params = {"name": "lookup", "arguments": {"query": query, "est_cost": cost}}
            wire.send({"jsonrpc": "2.0", "id": number, "method": "tools/call", "params": params})
            reply, _ = wire.until(number)
            results.append(reply["result"])
        assert wire.close() == 0  # the gateway settles everything before it exits
    finally:
        wire.kill()
    assert not results[0]["isError"]
    assert results[1]["isError"]  # the upstream's failure, relayed
    assert results[2]["isError"] and "interlock/decision" in results[2]["_meta"]  # over budget
    assert [entry["args"]["query"] for entry in reached(log)] == ["a", "fail"]

    status = subprocess.run(
        [INTERLOCK, "budgets", "status", "--json", "-d", database],
        capture_output=True,
        env=base_env(),
        timeout=WAIT,
        check=True,
    )
    (counter,) = [json.loads(row) for row in status.stdout.splitlines()]
    assert float(counter["spent"]) == 0.6 and float(counter["reserved"]) == 0, counter
    assert os.path.exists(tmp_path / "interlock.db")


ASK_BUDGET_POLICY = """\
version: 1
default: deny
budgets:
  - id: asks
    limit: 1
    unit: USD
    scope: agent
    kind: tool
    name: ask
    default_estimate: 1
    max_overage: 0
rules:
  - id: models-ok
    decision: allow
    reason: no model calls here
    kind: llm
  - id: asks-ok
    decision: allow
    reason: asking is fine
    name: ask
"""


def ask(wire: RawWire, request_id: int) -> dict[str, Any]:
    params = {"name": "ask", "arguments": {"question": f"q{request_id}"}}
    wire.send({"jsonrpc": "2.0", "id": request_id, "method": "tools/call", "params": params})
    while True:  # the sampling request, or the refusal (past any notification)
        body = wire.next()
        if body.get("method") == "sampling/createMessage" or body.get("id") == request_id:
            return body


def test_a_cancelled_call_gives_its_reservation_back(tmp_path: Path) -> None:
    """The budget holds one ``ask``: while one is in flight a second is refused; once
    the client cancels the first, the next is admitted."""
    policy, log = write_policy(tmp_path, ASK_BUDGET_POLICY), tmp_path / "upstream.jsonl"
    wire = gateway_wire(policy, log, "--database", f"sqlite:///{tmp_path / 'interlock.db'}")
    try:
        wire.handshake()
        assert ask(wire, 1)["method"] == "sampling/createMessage"
        refused = ask(wire, 2)
        assert refused["id"] == 2 and refused["result"]["isError"] is True
        cancel = {"requestId": 1, "reason": "the user gave up"}
        wire.send({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": cancel})
        sampling = ask(wire, 3)
        assert sampling["method"] == "sampling/createMessage"
        answer = {"role": "assistant", "content": {"type": "text", "text": "ok"}, "model": "m"}
        wire.send({"jsonrpc": "2.0", "id": sampling["id"], "result": answer})
        reply, _ = wire.until(3)
        assert reply["result"]["content"][0]["text"] == "ok"
        assert wire.close() == 0
    finally:
        wire.kill()
    assert [entry["args"]["question"] for entry in reached(log)] == ["q1", "q3"]


def test_an_upstream_that_ignores_the_end_of_input_is_stopped(tmp_path: Path) -> None:
    policy, log = write_policy(tmp_path), tmp_path / "upstream.jsonl"
    stubborn = [sys.executable, "-c", "import signal, time; time.sleep(600)"]
    wire = RawWire(gateway_command(policy, log, "--grace", "0.2", upstream=stubborn), base_env())
    try:
        assert wire.close() == 128 + signal.SIGTERM
    finally:
        wire.kill()


def test_large_messages_both_ways_at_once_do_not_deadlock(tmp_path: Path) -> None:
    """Five 3 MB calls sent before any answer is read: the pipes (64 KiB) fill both
    ways at once, and every answer still arrives whole."""
    policy, log = write_policy(tmp_path), tmp_path / "upstream.jsonl"
    wire = gateway_wire(policy, log)
    try:
        wire.handshake()
        texts = {n: chr(ord("a") + n) * 3_000_000 for n in range(1, 6)}
        for n, text in texts.items():
            params = {"name": "echo", "arguments": {"text": text}}
            wire.send({"jsonrpc": "2.0", "id": n, "method": "tools/call", "params": params})
        answers = {}
        while len(answers) < len(texts):
            body = wire.next()
            answers[body["id"]] = body["result"]["content"][0]["text"]
        assert answers == texts
        assert wire.close() == 0
    finally:
        wire.kill()


SCRIPTED = Path(__file__).with_name("scripted_server.py")


def test_the_clients_stdout_carries_json_rpc_only(tmp_path: Path) -> None:
    """An upstream's stray output (a ``print``, a JSON value that is not a message) is
    dropped and said on stderr; the gateway's own log lines (a refused call's) go to
    stderr too: every line the client reads is one JSON-RPC message. The look-alike —
    a notification the upstream sends between them — arrives."""
    policy = write_policy(tmp_path, POLICY.replace("name: [echo,", "name: [script, echo,"))
    log = tmp_path / "upstream.jsonl"
    wire = RawWire(
        gateway_command(policy, log, upstream=[sys.executable, str(SCRIPTED)]), base_env()
    )
    note = {
        "jsonrpc": "2.0",
        "method": "notifications/message",
        "params": {"level": "info", "data": "kept"},
    }
    steps = [
        {"print": "Server starting... (a stray print)"},
        {"print": '"a JSON string"'},
        {"send": note},
        {"print": "[1, 2, 3]"},
        {"result": {"content": [{"type": "text", "text": "done"}]}},
    ]
    try:
        wire.handshake()
        wire.send(
            {
                "jsonrpc": "2.0",
                "id": 1,
                "method": "tools/call",
                "params": {"name": "delete_file", "arguments": {}},
            }
        )
        refused, _ = wire.until(1)
        wire.send(
            {
                "jsonrpc": "2.0",
                "id": 2,
                "method": "tools/call",
                "params": {"name": "script", "arguments": {"steps": steps}},
            }
        )
        answered, before = wire.until(2)
        assert wire.close() == 0
    finally:
        wire.kill()
    assert refused["result"]["isError"]
    assert [json.loads(raw) for raw in before] == [note]
    assert answered["result"]["content"][0]["text"] == "done"
    said = b"".join(wire.stderr)
    assert b"dropped an upstream line" in said and b"tools/call 'delete_file'" in said
