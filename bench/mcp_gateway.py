"""Benchmark ``mcp-gateway``: an MCP ``tools/call`` round trip through
``interlock mcp-gateway`` against the same call straight to the same upstream.

Two processes, measured in the same run by the same client:

* **direct** — the upstream alone: the Python SDK's ``MCPServer`` over stdio with one
  trivial tool (``echo``), launched as ``python upstream.py`` — the baseline;
* **through the gateway** — ``interlock mcp-gateway --policy P -- python upstream.py``:
  the same upstream behind the real command, with a one-rule policy that allows
  ``echo`` (no store: the command's default), so every timed call is judged and
  relayed both ways;
* **through the merging gateway** — ``--upstream up=python upstream.py``: the same,
  with the tool offered as ``up__echo``, every message re-encoded and its id remapped.

The client is raw newline-delimited JSON-RPC over the subprocess's pipes, written and
read from one thread (no ``ClientSession``: its own tasks and streams would add noise
to both sides alike and hide the gateway's share). Each side is initialized, then the
two are taken in turn, ``BLOCK`` calls each, so drift in the machine's load falls on
both alike. A call is timed from before the request line is written to after its
answer line is read. Every answer is checked (the id, the echoed text, no error), and
a call the policy denies is sent through the gateway once at the end: it must come
back refused — either failing is a correctness problem.

The gateway logs one line per judged call to its stderr, as it does in use; here its
stderr (and the upstream's) goes to ``/dev/null``.

With ``INTERLOCK_BENCH_BASELINE_SRC`` set to another source tree (``.../src`` of a
checkout of main), a third process is measured in the same rounds: the gateway run
from that tree (``python -m interlock`` with that tree first on ``PYTHONPATH``), and
this tree's p50 is reported against it.

Target (issue 14): at most 0.5 ms added to the round trip's p50.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any, Final

from bench.harness import BenchResult, Target, summarise

__all__ = ["run"]

#: timed calls per subject (default, quick)
CALLS: Final = (5000, 200)
WARMUP: Final = 300
#: calls to one side before moving to the other
BLOCK: Final = 50
TARGET_ADDED_MS: Final = 0.5
DIRECT: Final = "direct to the upstream (MCPServer, stdio)"
GATEWAY: Final = "through interlock mcp-gateway"
MERGED: Final = "through interlock mcp-gateway --upstream (merging)"
BASELINE: Final = "through the baseline tree's gateway"

UPSTREAM: Final = """\
from mcp.server.mcpserver import MCPServer

server = MCPServer("bench-upstream")


@server.tool()
def echo(text: str) -> str:
    \"\"\"Say the text back.\"\"\"
    return text


@server.tool()
def delete_file(path: str) -> str:
    \"\"\"Delete a file (never reached: the policy denies it).\"\"\"
    return "deleted " + path


if __name__ == "__main__":
    server.run("stdio")
"""

POLICY: Final = """\
version: 1
default: deny
rules:
  - id: allow-echo
    decision: allow
    reason: echo is harmless
    name: echo
"""

INIT: Final = {
    "jsonrpc": "2.0",
    "id": 0,
    "method": "initialize",
    "params": {
        "protocolVersion": "2025-11-25",
        "capabilities": {},
        "clientInfo": {"name": "interlock-bench", "version": "1"},
    },
}


def _line(body: Any) -> bytes:
    return json.dumps(body, separators=(",", ":")).encode() + b"\n"


class _Wire:
    """One stdio MCP server spoken to line by line from this thread."""

    def __init__(
        self, argv: list[str], env: dict[str, str] | None = None, prefix: str = ""
    ) -> None:
        self.prefix = prefix  # of the tools' names (a merging gateway's)
        self.process = subprocess.Popen(
            argv,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            env=env,
        )
        assert self.process.stdin is not None and self.process.stdout is not None
        self._in: IO[bytes] = self.process.stdin
        self._out: IO[bytes] = self.process.stdout
        self.next_id = 1

    def request(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        """Send a request; the answer with its id (notifications before it skipped)."""
        request_id = self.next_id
        self.next_id += 1
        self._in.write(
            _line({"jsonrpc": "2.0", "id": request_id, "method": method, "params": params})
        )
        self._in.flush()
        while True:
            raw = self._out.readline()
            if not raw:
                raise RuntimeError(f"{self.process.args!r} closed its stdout")
            answer: dict[str, Any] = json.loads(raw)
            if answer.get("id") == request_id:
                return answer

    def start(self) -> None:
        self._in.write(_line(INIT))
        self._in.flush()
        answer = json.loads(self._out.readline())
        if "result" not in answer:
            raise RuntimeError(f"initialize failed: {answer}")
        self._in.write(_line({"jsonrpc": "2.0", "method": "notifications/initialized"}))
        self._in.flush()
        self.request("tools/list", {})  # as a client does first; the gateway learns the schema

    def close(self) -> None:
        self._in.close()
        try:
            self.process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


@contextmanager
def _wires(scratch: Path) -> Iterator[dict[str, _Wire]]:
    upstream = scratch / "upstream.py"
    upstream.write_text(UPSTREAM, encoding="utf-8")
    policy = scratch / "interlock.yaml"
    policy.write_text(POLICY, encoding="utf-8")
    interlock = str(Path(sys.executable).with_name("interlock"))
    direct = [sys.executable, str(upstream)]
    gateway = [interlock, "mcp-gateway", "--policy", str(policy), "--", *direct]
    merged = [interlock, "mcp-gateway", "--policy", str(policy)]
    merged += ["--upstream", f"up={sys.executable} {upstream}"]
    wires = {DIRECT: _Wire(direct), GATEWAY: _Wire(gateway), MERGED: _Wire(merged, prefix="up__")}
    baseline_src = os.environ.get("INTERLOCK_BENCH_BASELINE_SRC")
    if baseline_src:
        env = {**os.environ, "PYTHONPATH": baseline_src}
        argv = [sys.executable, "-m", "interlock", *gateway[1:]]
        wires[BASELINE] = _Wire(argv, env)
    try:
        for wire in wires.values():
            wire.start()
        yield wires
    finally:
        for wire in wires.values():
            wire.close()


def echoed(answer: dict[str, Any], text: str) -> bool:
    """Whether ``answer`` is a successful echo of ``text``."""
    result = answer.get("result")
    if not isinstance(result, dict) or result.get("isError"):
        return False
    content = result.get("content")
    return isinstance(content, list) and bool(content) and content[0].get("text") == text


def refused(answer: dict[str, Any]) -> bool:
    """Whether ``answer`` is the gateway's refusal: a tool result with ``isError``."""
    result = answer.get("result")
    return isinstance(result, dict) and result.get("isError") is True


def _interleaved(
    wires: dict[str, _Wire], calls: int, problems: list[str]
) -> dict[str, tuple[list[int], int]]:
    clock = time.perf_counter_ns
    samples: dict[str, list[int]] = {label: [] for label in wires}
    walls: dict[str, int] = dict.fromkeys(wires, 0)

    def call(label: str, wire: _Wire, n: int) -> int:
        text = f"hello {n}"
        t0 = clock()
        name = wire.prefix + "echo"
        answer = wire.request("tools/call", {"name": name, "arguments": {"text": text}})
        elapsed = clock() - t0
        if not echoed(answer, text) and len(problems) < 5:
            problems.append(f"{label}: a wrong answer to echo {text!r}: {answer}")
        return elapsed

    for label, wire in wires.items():
        for n in range(WARMUP):
            call(label, wire, n)
    done = 0
    while done < calls:
        block = min(BLOCK, calls - done)
        for label, wire in wires.items():
            began = clock()
            for n in range(done, done + block):
                samples[label].append(call(label, wire, n))
            walls[label] += clock() - began
        done += block
    return {label: (samples[label], walls[label]) for label in wires}


def run(calls: int | None, quick: bool) -> BenchResult:
    """``calls``: timed ``tools/call`` round trips per subject."""
    count = calls or CALLS[1 if quick else 0]
    result = BenchResult("mcp-gateway")
    with (
        tempfile.TemporaryDirectory(prefix="interlock-bench-mcp-") as scratch_dir,
        _wires(Path(scratch_dir)) as wires,
    ):
        measured = _interleaved(wires, count, result.problems)
        denied = wires[GATEWAY].request(
            "tools/call", {"name": "delete_file", "arguments": {"path": "/etc/passwd"}}
        )
        if not refused(denied):
            result.problems.append(f"the gateway did not refuse a denied call: {denied}")
    stats = {label: summarise(label, *samples) for label, samples in measured.items()}
    result.stats.extend(stats.values())
    direct, gateway, merged = stats[DIRECT], stats[GATEWAY], stats[MERGED]
    added_p50 = (gateway.p50_ns - direct.p50_ns) / 1e6
    merged_p50 = (merged.p50_ns - direct.p50_ns) / 1e6
    added_p99 = (gateway.p99_ns - direct.p99_ns) / 1e6
    ratio = gateway.p50_ns / direct.p50_ns
    result.info.update(
        {
            "client": "raw newline JSON-RPC over the subprocess pipes, one thread",
            "block": BLOCK,
            "warmup": WARMUP,
            "added_p50_ms": round(added_p50, 3),
            "added_p99_ms": round(added_p99, 3),
            "p50_ratio gateway / direct": round(ratio, 3),
            "merged_added_p50_ms": round(merged_p50, 3),
        }
    )
    result.notes.append(
        f"added by the gateway: p50 {added_p50:.3f} ms, p99 {added_p99:.3f} ms; "
        f"p50 {ratio:.2f}× direct; merging (one upstream, re-encoded, ids remapped): "
        f"p50 {merged_p50:.3f} ms"
    )
    if BASELINE in stats:
        mine = gateway.p50_ns - direct.p50_ns
        theirs = stats[BASELINE].p50_ns - direct.p50_ns
        result.info["baseline_added_p50_ms"] = round(theirs / 1e6, 3)
        result.notes.append(
            f"the baseline tree's gateway adds p50 {theirs / 1e6:.3f} ms; this tree "
            f"{mine / 1e6:.3f} ms (p50 {gateway.p50_ns / stats[BASELINE].p50_ns:.2f}× "
            "the baseline's)"
        )
    else:
        result.notes.append("set INTERLOCK_BENCH_BASELINE_SRC=<main>/src to compare two trees")
    result.targets.append(
        Target("added p50, gateway - direct", added_p50, "<=", TARGET_ADDED_MS, "ms")
    )
    return result
