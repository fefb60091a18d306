"""Benchmark ``mcp-gateway --http``: an MCP ``tools/call`` round trip over streamable
HTTP through ``interlock mcp-gateway --http`` against the same call straight to the
same HTTP upstream.

Three endpoints, measured in the same run by the same client:

* **direct** — the upstream alone: the Python SDK's ``MCPServer`` with one trivial
  tool (``echo``), served over streamable HTTP (``streamable_http_app()`` under
  uvicorn, its default SSE answers) — the baseline;
* **through the gateway** — ``interlock mcp-gateway --http -d <sqlite> --config C``,
  the real command, whose one upstream is that server (``url:``, ``namespace:
  false``, so the tool keeps its name): every timed call is authenticated (an agent
  key from the store), judged (a one-rule policy), relayed to the upstream over
  HTTP and back, and settled;
* **a bare relay** — the floor of any two-hop relay in Python: a Starlette app
  under uvicorn that POSTs each body on to the upstream with one ``httpx``
  ``AsyncClient`` and streams the answer back (session headers passed both ways),
  judging nothing, parsing nothing.

The client is a raw ``httpx`` client with keep-alive, one thread, one session per
endpoint (``initialize``, ``notifications/initialized``, a ``tools/list``). A call is
timed from before its POST to after the last byte of its SSE answer; every answer
is checked, and a denied call goes through the gateway once at the end: it must come
back refused. Calls are taken in turn, ``BLOCK`` at a time per endpoint.

With ``INTERLOCK_BENCH_BASELINE_SRC`` set to another source tree (``.../src`` of a
``git worktree`` of the base commit), a fourth endpoint is that tree's gateway (run
by this interpreter with ``PYTHONPATH`` on it), measured in the same run.

No target of its own in issue 14 (the stdio gateway's is 0.5 ms added at p50); the
figure reported is the added p50 and the ratio.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Final

from bench.harness import BenchResult, summarise
from bench.mcp_gateway import POLICY, echoed, refused

__all__ = ["run"]

CALLS: Final = (2000, 200)
WARMUP: Final = 100
BLOCK: Final = 50
DIRECT: Final = "direct to the upstream (MCPServer, streamable HTTP)"
GATEWAY: Final = "through interlock mcp-gateway --http"
RELAY: Final = "through a bare Starlette + httpx relay"
BASELINE: Final = "through the baseline tree's gateway"

RELAY_APP: Final = """\
import sys

import httpx
import uvicorn
from starlette.applications import Starlette
from starlette.responses import Response, StreamingResponse
from starlette.routing import Route

UPSTREAM = sys.argv[2]
PASSED = ("accept", "content-type", "mcp-session-id", "mcp-protocol-version")
client = httpx.AsyncClient(timeout=60.0)


async def relay(request):
    headers = {k: v for k, v in request.headers.items() if k in PASSED}
    sent = client.build_request(
        request.method, UPSTREAM, content=await request.body(), headers=headers
    )
    answer = await client.send(sent, stream=True)
    back = {k: v for k, v in answer.headers.items() if k in PASSED}

    async def body():
        async for chunk in answer.aiter_raw():
            yield chunk
        await answer.aclose()

    if answer.status_code == 202 or request.method == "DELETE":
        await answer.aclose()
        return Response(status_code=answer.status_code, headers=back)
    return StreamingResponse(body(), status_code=answer.status_code, headers=back)


app = Starlette(routes=[Route("/mcp", relay, methods=["GET", "POST", "DELETE"])])
uvicorn.run(app, host="127.0.0.1", port=int(sys.argv[1]), log_level="warning")
"""

UPSTREAM: Final = """\
import sys

import uvicorn
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
    uvicorn.run(server.streamable_http_app(), host="127.0.0.1", port=int(sys.argv[1]),
                log_level="warning")
"""


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class _Endpoint:
    """One streamable-HTTP MCP endpoint, one session, spoken to from this thread."""

    def __init__(self, url: str, key: str | None = None) -> None:
        import httpx

        self.url = url
        self.http = httpx.Client(timeout=60.0)
        self.headers = {
            "content-type": "application/json",
            "accept": "application/json, text/event-stream",
        }
        if key:
            self.headers["authorization"] = f"Bearer {key}"
        self.next_id = 1

    def _post(self, body: dict[str, Any]) -> Any:
        response = self.http.post(self.url, content=json.dumps(body), headers=self.headers)
        if response.status_code == 202:
            return None
        response.raise_for_status()
        if response.headers.get("content-type", "").startswith("application/json"):
            return response.json()
        data = [line[5:].strip() for line in response.text.splitlines() if line.startswith("data:")]
        return json.loads([d for d in data if d][-1])

    def request(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        request_id = self.next_id
        self.next_id += 1
        answer: dict[str, Any] = self._post(
            {"jsonrpc": "2.0", "id": request_id, "method": method, "params": params}
        )
        return answer

    def wait_ready(self) -> None:
        import httpx

        for _ in range(600):
            try:
                self.http.get(self.url, headers={"accept": "text/event-stream"}, timeout=1.0)
                return
            except httpx.HTTPError:
                time.sleep(0.05)
        raise RuntimeError(f"{self.url} never answered")

    def start(self) -> None:
        self.wait_ready()
        response = self.http.post(
            self.url,
            content=json.dumps(
                {
                    "jsonrpc": "2.0",
                    "id": 0,
                    "method": "initialize",
                    "params": {
                        "protocolVersion": "2025-11-25",
                        "capabilities": {},
                        "clientInfo": {"name": "interlock-bench", "version": "1"},
                    },
                }
            ),
            headers=self.headers,
        )
        response.raise_for_status()
        self.headers["mcp-session-id"] = response.headers["mcp-session-id"]
        self.headers["mcp-protocol-version"] = "2025-11-25"
        self._post({"jsonrpc": "2.0", "method": "notifications/initialized"})
        self.request("tools/list", {})

    def close(self) -> None:
        self.http.delete(self.url, headers=self.headers)
        self.http.close()


@contextmanager
def _endpoints(scratch: Path) -> Iterator[dict[str, _Endpoint]]:
    from interlock.server.keys import KeyStore, Role
    from interlock.store import open_store

    upstream = scratch / "upstream.py"
    upstream.write_text(UPSTREAM, encoding="utf-8")
    policy = scratch / "interlock.yaml"
    policy.write_text(POLICY, encoding="utf-8")
    database = f"sqlite:///{scratch / 'gateway.db'}"
    store = open_store(database)
    key = KeyStore(store).create(tenant="bench", role=Role.AGENT, name="bench").token
    store.close()
    relay = scratch / "relay.py"
    relay.write_text(RELAY_APP, encoding="utf-8")
    up_port, gw_port, relay_port, base_port = _free_port(), _free_port(), _free_port(), _free_port()
    config = scratch / "gateway.yaml"
    config.write_text(
        f"upstreams:\n  up:\n    url: http://127.0.0.1:{up_port}/mcp\n    namespace: false\n",
        encoding="utf-8",
    )
    interlock = str(Path(sys.executable).with_name("interlock"))
    processes = [
        subprocess.Popen([sys.executable, str(upstream), str(up_port)], stderr=subprocess.DEVNULL),
        subprocess.Popen(
            [
                interlock, "mcp-gateway", "--http", "--port", str(gw_port), "-d", database,
                "--policy", str(policy), "--config", str(config), "--log-level", "warning",
            ],
            stderr=subprocess.DEVNULL,
        ),
        subprocess.Popen(
            [sys.executable, str(relay), str(relay_port), f"http://127.0.0.1:{up_port}/mcp"],
            stderr=subprocess.DEVNULL,
        ),
    ]  # fmt: skip
    endpoints = {
        DIRECT: _Endpoint(f"http://127.0.0.1:{up_port}/mcp"),
        GATEWAY: _Endpoint(f"http://127.0.0.1:{gw_port}/mcp", key),
        RELAY: _Endpoint(f"http://127.0.0.1:{relay_port}/mcp"),
    }
    baseline_src = os.environ.get("INTERLOCK_BENCH_BASELINE_SRC")
    if baseline_src:
        processes.append(
            subprocess.Popen(
                [
                    sys.executable, "-m", "interlock", "mcp-gateway", "--http", "--port",
                    str(base_port), "-d", database, "--policy", str(policy), "--config",
                    str(config), "--log-level", "warning",
                ],
                stderr=subprocess.DEVNULL,
                env={**os.environ, "PYTHONPATH": baseline_src},
            )
        )  # fmt: skip
        endpoints[BASELINE] = _Endpoint(f"http://127.0.0.1:{base_port}/mcp", key)
    try:
        for endpoint in endpoints.values():
            endpoint.start()
        yield endpoints
    finally:
        for endpoint in endpoints.values():
            endpoint.close()
        for process in processes:
            process.terminate()
            process.wait(timeout=30)


def _interleaved(
    endpoints: dict[str, _Endpoint], calls: int, problems: list[str]
) -> dict[str, tuple[list[int], int]]:
    clock = time.perf_counter_ns
    samples: dict[str, list[int]] = {label: [] for label in endpoints}
    walls: dict[str, int] = dict.fromkeys(endpoints, 0)

    def call(label: str, endpoint: _Endpoint, n: int) -> int:
        text = f"hello {n}"
        t0 = clock()
        answer = endpoint.request("tools/call", {"name": "echo", "arguments": {"text": text}})
        elapsed = clock() - t0
        if not echoed(answer, text) and len(problems) < 5:
            problems.append(f"{label}: a wrong answer to echo {text!r}: {answer}")
        return elapsed

    for label, endpoint in endpoints.items():
        for n in range(WARMUP):
            call(label, endpoint, n)
    done = 0
    while done < calls:
        block = min(BLOCK, calls - done)
        for label, endpoint in endpoints.items():
            began = clock()
            for n in range(done, done + block):
                samples[label].append(call(label, endpoint, n))
            walls[label] += clock() - began
        done += block
    return {label: (samples[label], walls[label]) for label in endpoints}


def run(calls: int | None, quick: bool) -> BenchResult:
    """``calls``: timed ``tools/call`` round trips per endpoint."""
    count = calls or CALLS[1 if quick else 0]
    result = BenchResult("mcp-gateway-http")
    with (
        tempfile.TemporaryDirectory(prefix="interlock-bench-mcp-http-") as scratch_dir,
        _endpoints(Path(scratch_dir)) as endpoints,
    ):
        measured = _interleaved(endpoints, count, result.problems)
        denied = endpoints[GATEWAY].request(
            "tools/call", {"name": "delete_file", "arguments": {"path": "/etc/passwd"}}
        )
        if not refused(denied):
            result.problems.append(f"the gateway did not refuse a denied call: {denied}")
    stats = {label: summarise(label, *samples) for label, samples in measured.items()}
    result.stats.extend(stats.values())
    direct, gateway = stats[DIRECT], stats[GATEWAY]
    added_p50 = (gateway.p50_ns - direct.p50_ns) / 1e6
    added_p99 = (gateway.p99_ns - direct.p99_ns) / 1e6
    ratio = gateway.p50_ns / direct.p50_ns
    result.info.update(
        {
            "client": "raw httpx, keep-alive, one thread, SSE answers read whole",
            "block": BLOCK,
            "warmup": WARMUP,
            "added_p50_ms": round(added_p50, 3),
            "added_p99_ms": round(added_p99, 3),
            "p50_ratio gateway / direct": round(ratio, 3),
        }
    )
    relay = stats[RELAY]
    relay_added = (relay.p50_ns - direct.p50_ns) / 1e6
    result.info["relay_added_p50_ms"] = round(relay_added, 3)
    result.info["p50_ratio gateway / bare relay"] = round(gateway.p50_ns / relay.p50_ns, 3)
    result.notes.append(
        f"added by the HTTP gateway (client→gateway→HTTP upstream vs client→upstream): "
        f"p50 {added_p50:.3f} ms, p99 {added_p99:.3f} ms; p50 {ratio:.2f}× direct"
    )
    result.notes.append(
        f"added by a bare Starlette + httpx relay: p50 {relay_added:.3f} ms; the gateway's "
        f"own share (judging, key, audit record, parsing): {added_p50 - relay_added:.3f} ms"
    )
    baseline = stats.get(BASELINE)
    if baseline is not None:
        base_added = (baseline.p50_ns - direct.p50_ns) / 1e6
        result.info["baseline_added_p50_ms"] = round(base_added, 3)
        result.info["p50_ratio gateway / baseline"] = round(gateway.p50_ns / baseline.p50_ns, 3)
        result.notes.append(
            f"the baseline tree's gateway added p50 {base_added:.3f} ms (this tree "
            f"{added_p50:.3f} ms): p50 ratio this / baseline "
            f"{gateway.p50_ns / baseline.p50_ns:.3f}"
        )
    else:
        result.notes.append("set INTERLOCK_BENCH_BASELINE_SRC=<base>/src to compare two trees")
    return result
