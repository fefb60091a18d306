"""Benchmark ``server``: a remote check over HTTP against the floor HTTP itself sets.

Two servers, each its own process under the same uvicorn, measured in the same run by
the same client:

* **fixed JSON** — a bare Starlette endpoint that reads the request body and returns a
  constant decision-shaped JSON: what one HTTP round trip costs here, the baseline;
* **interlock serve** — the real server on an embedded SQLite store: key check, body
  validation, the policy decision, the audit record (durability ``none``, then the
  default ``process``, which returns once the record's transaction has committed).

The client is ``httpx.Client`` with keep-alive — what ``Guard.remote`` uses — sending
one request at a time for latency (p50/p99) — the three servers taken in turn, 50
requests each, so load drift falls on all alike — then 16 threads at once for throughput.
Target: a remote check within 1.5× the fixed-JSON latency.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Final

from bench.harness import BenchResult, Target, summarise

__all__ = ["run"]

#: sequential timed requests per subject (default, quick)
CALLS: Final = (3000, 300)
WARMUP: Final = 200
#: requests to one server before moving to the next
BLOCK: Final = 50
THREADS: Final = 16
#: requests per thread in the throughput run (default, quick)
PER_THREAD: Final = (200, 30)
TARGET_RATIO: Final = 1.5

POLICY: Final = """\
version: 1
default: deny
audit:
  durability: {durability}
rules:
  - id: shell-read
    decision: allow
    reason: read-only shell commands are fine
    name: shell
    params:
      command: ["ls *", "ls", "cat *"]
  - id: no-rm
    decision: deny
    reason: no recursive deletes
    name: shell
    when: "args.command.startsWith('rm')"
"""

FIXED_APP: Final = """
from starlette.applications import Starlette
from starlette.responses import Response
from starlette.routing import Route

BODY = (
    b'{"verdict":"allow","reason":"read-only shell commands are fine",'
    b'"rule_ids":["shell-read"],"decision_id":"dec_0000000000000000",'
    b'"approval":null,"reservation":null,"shadow":null,"cause":null,"fail_open":false}'
)

async def check(request):
    await request.body()
    return Response(BODY, media_type="application/json")

app = Starlette(routes=[Route("/v1/check", check, methods=["POST"])])
"""

ACTIONS: Final = [
    {"kind": "tool", "name": "shell", "arguments": {"command": "ls -la"}},
    {"kind": "tool", "name": "shell", "arguments": {"command": "rm -rf /tmp/x"}},
    {"kind": "tool", "name": "shell", "arguments": {"command": "cat notes.md"}},
]


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _wait_up(url: str, process: subprocess.Popen[bytes]) -> None:
    import httpx

    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"the server at {url} exited with {process.returncode}")
        try:
            httpx.get(url, timeout=1)
            return
        except httpx.HTTPError:
            time.sleep(0.05)
    raise RuntimeError(f"the server at {url} did not come up")


@contextmanager
def _process(argv: list[str], url: str, env: dict[str, str] | None = None) -> Iterator[None]:
    process = subprocess.Popen(
        argv, env={**os.environ, **(env or {})}, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
    )
    try:
        _wait_up(url, process)
        yield
    finally:
        process.terminate()
        process.wait(timeout=30)


@contextmanager
def _fixed_server(scratch: Path) -> Iterator[str]:
    (scratch / "fixed_app.py").write_text(FIXED_APP)
    port = _free_port()
    url = f"http://127.0.0.1:{port}"
    argv = [sys.executable, "-m", "uvicorn", "fixed_app:app", "--port", str(port)]
    argv += ["--log-level", "warning", "--no-access-log", "--app-dir", str(scratch)]
    with _process(argv, url + "/v1/check"):
        yield url


@contextmanager
def _interlock_server(scratch: Path, durability: str) -> Iterator[tuple[str, str]]:
    from interlock.server import KeyStore, Role
    from interlock.store import open_store

    policy = scratch / f"policy-{durability}.yaml"
    policy.write_text(POLICY.format(durability=durability))
    database = f"sqlite:///{scratch / f'server-{durability}.db'}"
    with open_store(database) as store:
        key = KeyStore(store).create(tenant="bench", role=Role.AGENT, name="bench-agent").token
    port = _free_port()
    url = f"http://127.0.0.1:{port}"
    exe = str(Path(sys.executable).parent / "interlock")
    argv = [exe, "serve", "--policy", str(policy), "--database", database, "--port", str(port)]
    argv += ["--log-level", "warning"]
    with _process(argv, url + "/v1/health"):
        yield url, key


def _throughput(url: str, key: str, per_thread: int) -> float:
    import httpx

    start = threading.Barrier(THREADS + 1)
    failures: list[str] = []

    def work() -> None:
        with httpx.Client(base_url=url, headers={"authorization": f"Bearer {key}"}) as client:
            client.post("/v1/check", json=ACTIONS[0])
            start.wait()
            for i in range(per_thread):
                answer = client.post("/v1/check", json=ACTIONS[i % len(ACTIONS)])
                if answer.status_code != 200:
                    failures.append(str(answer.status_code))

    threads = [threading.Thread(target=work) for _ in range(THREADS)]
    for thread in threads:
        thread.start()
    start.wait()
    began = time.perf_counter()
    for thread in threads:
        thread.join()
    elapsed = time.perf_counter() - began
    if failures:
        raise RuntimeError(f"{len(failures)} requests failed under load: {failures[:3]}")
    return THREADS * per_thread / elapsed


def _interleaved(
    servers: list[tuple[str, str, str]], calls: int
) -> dict[str, tuple[list[int], int]]:
    """Sequential requests to every server in turn, ``BLOCK`` at a time, so drift in the
    machine's load falls on all of them alike."""
    import httpx

    clients = {
        label: httpx.Client(base_url=url, headers={"authorization": f"Bearer {key}"})
        for label, url, key in servers
    }
    samples: dict[str, list[int]] = {label: [] for label, _, _ in servers}
    walls: dict[str, int] = dict.fromkeys(samples, 0)
    try:
        for client in clients.values():
            for i in range(WARMUP):
                client.post("/v1/check", json=ACTIONS[i % len(ACTIONS)]).raise_for_status()
        done = 0
        while done < calls:
            block = min(BLOCK, calls - done)
            for label, client in clients.items():
                began = time.perf_counter_ns()
                for i in range(block):
                    t0 = time.perf_counter_ns()
                    response = client.post("/v1/check", json=ACTIONS[(done + i) % len(ACTIONS)])
                    samples[label].append(time.perf_counter_ns() - t0)
                    if response.status_code != 200 or "verdict" not in response.json():
                        raise RuntimeError(f"a bad answer: {response.status_code}")
                walls[label] += time.perf_counter_ns() - began
            done += block
    finally:
        for client in clients.values():
            client.close()
    return {label: (samples[label], walls[label]) for label in samples}


def run(calls: int | None, quick: bool) -> BenchResult:
    """``calls``: sequential timed requests per subject."""
    count = calls or CALLS[1 if quick else 0]
    per_thread = PER_THREAD[1 if quick else 0]
    result = BenchResult("server")
    fixed = "fixed JSON (Starlette)"
    labels = (
        ("interlock serve, durability none", "none"),
        ("interlock serve, durability process", "process"),
    )
    with tempfile.TemporaryDirectory(prefix="interlock-bench-server-") as scratch_dir:
        scratch = Path(scratch_dir)
        with ExitStack() as running:
            servers = [(fixed, *running.enter_context(_fixed_keyless(scratch)))]
            for label, durability in labels:
                servers.append(
                    (label, *running.enter_context(_interlock_server(scratch, durability)))
                )
            measured = _interleaved(servers, count)
            p50: dict[str, int] = {}
            for label, _, _ in servers:
                stats = summarise(label, *measured[label])
                result.stats.append(stats)
                p50[label] = stats.p50_ns
            for label, url, key in servers:
                rate = _throughput(url, key, per_thread)
                result.info[f"throughput_per_s {label}"] = round(rate, 1)
                result.notes.append(f"{label}: {rate:,.0f} checks/s with {THREADS} clients")
    base = p50[fixed]
    for label, _ in labels:
        ratio = p50[label] / base
        result.info[f"p50_ratio {label}"] = round(ratio, 3)
        result.notes.append(f"{label}: p50 {ratio:.2f}× the fixed-JSON endpoint")
        result.targets.append(
            Target(f"remote check p50 / fixed JSON p50 ({label})", ratio, "<=", TARGET_RATIO, "×")
        )
    return result


@contextmanager
def _fixed_keyless(scratch: Path) -> Iterator[tuple[str, str]]:
    with _fixed_server(scratch) as url:
        yield url, "unused"
