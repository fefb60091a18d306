"""Launching the gateway and its upstream, reading the upstream's record, and a raw
newline-delimited JSON-RPC client (a thread reads the gateway's stdout)."""

from __future__ import annotations

import json
import os
import queue
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

from mcp import StdioServerParameters

UPSTREAM = Path(__file__).with_name("upstream_server.py")
INTERLOCK = str(Path(sys.executable).with_name("interlock"))
#: A bound on how long a test waits for a line, so that a hang fails instead of
#: blocking the suite; never an assertion about speed.
WAIT = 60.0

POLICY = """\
version: 1
default: deny
approvals:
  url: https://approvals.example.com/a/{id}
rules:
  - id: allow-safe
    decision: allow
    reason: safe tools
    name: [echo, fail, count, ask, muse, confirm, roots, chatty, whoami]
  - id: sampling-ok
    decision: allow
    reason: the upstream may ask the client's model
    kind: llm
    name: mcp-sampling
  - id: no-deletes
    decision: deny
    reason: deleting files is not allowed
    name: delete_file
  - id: big-echo-needs-a-human
    decision: require_approval
    reason: a human reads loud echoes first
    name: echo
    when: "args.text.startsWith('LOUD')"
"""


def write_policy(directory: Path, text: str = POLICY) -> Path:
    path = directory / "interlock.yaml"
    path.write_text(text, encoding="utf-8")
    return path


def base_env() -> dict[str, str]:
    return {name: os.environ[name] for name in ("PATH", "HOME") if name in os.environ}


def gateway_command(
    policy: Path, log: Path, *options: str, upstream: list[str] | None = None
) -> list[str]:
    return [
        INTERLOCK,
        "mcp-gateway",
        "--policy",
        str(policy),
        "--env",
        f"MCP_TEST_LOG={log}",
        *options,
        "--",
        *(upstream or [sys.executable, str(UPSTREAM)]),
    ]


def direct_command() -> list[str]:
    return [sys.executable, str(UPSTREAM)]


def gateway_params(policy: Path, log: Path, *options: str) -> StdioServerParameters:
    command = gateway_command(policy, log, *options)
    return StdioServerParameters(command=command[0], args=command[1:], env=base_env())


def direct_params(log: Path) -> StdioServerParameters:
    command = direct_command()
    env = {**base_env(), "MCP_TEST_LOG": str(log)}
    return StdioServerParameters(command=command[0], args=command[1:], env=env)


def reached(log: Path) -> list[dict[str, Any]]:
    """What the upstream's tool bodies recorded: the calls that reached it."""
    if not log.exists():
        return []
    return [json.loads(line) for line in log.read_text(encoding="utf-8").splitlines()]


INIT = {
    "jsonrpc": "2.0",
    "id": 0,
    "method": "initialize",
    "params": {
        "protocolVersion": "2025-11-25",
        "capabilities": {"sampling": {}, "elicitation": {}, "roots": {"listChanged": True}},
        "clientInfo": {"name": "raw-test", "version": "1"},
    },
}
INITIALIZED = {"jsonrpc": "2.0", "method": "notifications/initialized"}


def line(body: Any) -> bytes:
    return json.dumps(body, ensure_ascii=False, separators=(",", ":")).encode() + b"\n"


class RawWire:
    """A process (the gateway, or the upstream directly) spoken to line by line."""

    def __init__(self, command: list[str], env: dict[str, str]) -> None:
        self.process = subprocess.Popen(
            command,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=env,
        )
        self.lines: queue.Queue[bytes] = queue.Queue()
        self.stderr: list[bytes] = []
        threading.Thread(target=self._pump, daemon=True).start()
        threading.Thread(target=self._pump_stderr, daemon=True).start()

    def _pump(self) -> None:
        assert self.process.stdout is not None
        for raw in self.process.stdout:
            self.lines.put(raw)
        self.lines.put(b"")

    def _pump_stderr(self) -> None:
        assert self.process.stderr is not None
        for raw in self.process.stderr:
            self.stderr.append(raw)

    def send(self, data: bytes | dict[str, Any] | list[Any]) -> None:
        assert self.process.stdin is not None
        self.process.stdin.write(data if isinstance(data, bytes) else line(data))
        self.process.stdin.flush()

    def next_raw(self) -> bytes:
        raw = self.lines.get(timeout=WAIT)
        assert raw, "the process closed its stdout"
        return raw

    def next(self) -> dict[str, Any]:
        return json.loads(self.next_raw())  # type: ignore[no-any-return]

    def until(self, request_id: Any) -> tuple[dict[str, Any], list[bytes]]:
        """Read up to the response to ``request_id``; it and the lines before it."""
        before: list[bytes] = []
        while True:
            raw = self.next_raw()
            body = json.loads(raw)
            if "method" not in body and body.get("id") == request_id:
                return body, before
            before.append(raw)

    def handshake(self) -> dict[str, Any]:
        self.send(INIT)
        reply, _ = self.until(0)
        self.send(INITIALIZED)
        return reply

    def close(self) -> int:
        assert self.process.stdin is not None
        self.process.stdin.close()
        code = self.process.wait(timeout=WAIT)
        return code

    def kill(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait(timeout=WAIT)


def gateway_wire(policy: Path, log: Path, *options: str) -> RawWire:
    return RawWire(gateway_command(policy, log, *options), base_env())


def direct_wire(log: Path) -> RawWire:
    return RawWire(direct_command(), {**base_env(), "MCP_TEST_LOG": str(log)})
