"""Benchmark ``server``: a remote check over HTTP against the floor HTTP itself sets.

Servers, each its own process (or processes) under the same uvicorn, measured in the
same run by the same clients:

* **fixed JSON** — a bare Starlette endpoint that reads the request body and returns a
  constant decision-shaped JSON: what one HTTP round trip costs here, the baseline;
* **interlock serve** — the real server on an embedded SQLite store: key check, body
  validation, the policy decision, the audit record (durability ``none``, then the
  default ``process``, which returns once the record's transaction has committed);
* **the server layer alone** — the same app under the same uvicorn, its guard's check
  replaced by a fixed decision: key, limits, validation, the answer, metrics — what
  the server adds to the check, apart from the check itself.

Latency: ``httpx.Client`` with keep-alive — what ``Guard.remote`` uses — sending one
request at a time, the servers taken in turn 50 requests each, so load drift falls on
all alike. Target: a remote check p50 within 1.2× the fixed-JSON p50.

Throughput: ``wrk`` (when installed), 32 connections, a 5-call mix (three shell
commands, a file read, an unmatched tool), against the fixed endpoint and
``interlock serve --workers 1`` and ``--workers 2`` (and ``--workers 1`` with
durability ``none``, and the fixed endpoint under uvicorn's own ``--workers 2``),
the subjects taken in turn for a few seconds each, several rounds, the median kept.
Target: ``--workers 1`` at least 0.5× the fixed endpoint's checks per second. wrk
shares the machine's cores with the servers.
"""

from __future__ import annotations

import os
import re
import shutil
import socket
import statistics
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
TARGET_RATIO: Final = 1.2
#: wrk: connections, seconds per subject per round (default, quick), rounds
CONNECTIONS: Final = 32
WRK_SECONDS: Final = (5, 2)
WRK_ROUNDS: Final = (3, 1)
TARGET_THROUGHPUT: Final = 0.5
#: the subject with the guard's check stubbed
STUB: Final = "server layer alone (guard check stubbed)"

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
  - id: read-docs
    decision: allow
    reason: the docs are public
    name: read_file
    params:
      path: ["docs/*"]
"""

#: wrk's request mix: one of five bodies per request, in turn
WRK_SCRIPT: Final = """
local bodies = {
  '{"kind":"tool","name":"shell","arguments":{"command":"ls -la"}}',
  '{"kind":"tool","name":"shell","arguments":{"command":"rm -rf /tmp/x"}}',
  '{"kind":"tool","name":"shell","arguments":{"command":"cat notes.md"}}',
  '{"kind":"tool","name":"read_file","arguments":{"path":"docs/api.md"}}',
  '{"kind":"tool","name":"send_email","arguments":{"to":"a@example.com","body":"hi"}}',
}
local headers = {["Content-Type"] = "application/json", ["Authorization"] = "Bearer KEY"}
local i = 0
request = function()
  i = i + 1
  return wrk.format("POST", "/v1/check", headers, bodies[(i % #bodies) + 1])
end
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

#: The server app with its guard's check stubbed: argv is port, policy, database, key file.
STUB_APP: Final = """
import sys
from pathlib import Path

import uvicorn

from interlock import Action, Guard
from interlock.server import KeyStore, Role, create_app

port, policy, database, key_file = sys.argv[1:5]
guard = Guard(policy, store=database, reap_interval=None)
key = KeyStore(guard.store).create(tenant="bench", role=Role.AGENT, name="bench-agent")
Path(key_file).write_text(key.token)
decision = guard.check(Action.tool("shell", {"command": "ls"}))


async def decided(action, **options):
    return decision


guard.acheck = decided
try:  # the protocol `interlock serve` runs (one write per small response)
    from interlock.server.http_protocol import CoalescingProtocol as http
except ImportError:
    http = "auto"
config = uvicorn.Config(
    create_app(guard), port=int(port), log_level="warning", lifespan="off",
    access_log=False, server_header=False, http=http,
)
uvicorn.Server(config).run()
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
def _fixed_server(scratch: Path, workers: int = 1) -> Iterator[str]:
    (scratch / "fixed_app.py").write_text(FIXED_APP)
    port = _free_port()
    url = f"http://127.0.0.1:{port}"
    argv = [sys.executable, "-m", "uvicorn", "fixed_app:app", "--port", str(port)]
    argv += ["--log-level", "warning", "--no-access-log", "--app-dir", str(scratch)]
    argv += ["--workers", str(workers)] if workers > 1 else []
    with _process(argv, url + "/v1/check"):
        yield url


@contextmanager
def _interlock_server(
    scratch: Path, durability: str, workers: int = 1
) -> Iterator[tuple[str, str]]:
    from interlock.server import KeyStore, Role
    from interlock.store import open_store

    policy = scratch / f"policy-{durability}.yaml"
    policy.write_text(POLICY.format(durability=durability))
    database = f"sqlite:///{scratch / f'server-{durability}-{workers}.db'}"
    with open_store(database) as store:
        key = KeyStore(store).create(tenant="bench", role=Role.AGENT, name="bench-agent").token
    port = _free_port()
    url = f"http://127.0.0.1:{port}"
    exe = str(Path(sys.executable).parent / "interlock")
    argv = [exe, "serve", "--policy", str(policy), "--database", database, "--port", str(port)]
    argv += ["--log-level", "warning", "--workers", str(workers)]
    with _process(argv, url + "/v1/health"):
        yield url, key


@contextmanager
def _stub_server(scratch: Path) -> Iterator[tuple[str, str]]:
    """The server app with a fixed decision in place of its guard's check."""
    (scratch / "stub_app.py").write_text(STUB_APP)
    policy = scratch / "policy-stub.yaml"
    policy.write_text(POLICY.format(durability="none"))
    key_file = scratch / "stub.key"
    port = _free_port()
    url = f"http://127.0.0.1:{port}"
    database = f"sqlite:///{scratch / 'server-stub.db'}"
    argv = [sys.executable, str(scratch / "stub_app.py"), str(port), str(policy), database]
    with _process([*argv, str(key_file)], url + "/v1/health"):
        yield url, key_file.read_text()


def _wrk(scratch: Path, url: str, key: str, seconds: int) -> tuple[float, float]:
    """Checks per second and p99 (ms) under wrk's 32 connections; every answer a 2xx."""
    script = scratch / "mix.lua"
    script.write_text(WRK_SCRIPT.replace("KEY", key))
    argv = ["wrk", "-t1", f"-c{CONNECTIONS}", f"-d{seconds}s", "--latency", "-s", str(script)]
    done = subprocess.run([*argv, url], capture_output=True, text=True, check=True).stdout
    if "Non-2xx" in done or "Socket errors" in done:
        raise RuntimeError(f"wrk saw failures:\n{done}")
    rate = float(re.search(r"Requests/sec:\s+([\d.]+)", done).group(1))  # type: ignore[union-attr]
    p99, unit = re.search(r"99%\s+([\d.]+)(us|ms|s)", done).groups()  # type: ignore[union-attr]
    return rate, float(p99) * {"us": 0.001, "ms": 1.0, "s": 1000.0}[unit]


def _under_load(scratch: Path, quick: bool, result: BenchResult) -> None:
    """checks/s per worker count against the fixed endpoint, taken in turn, in rounds."""
    seconds, rounds = WRK_SECONDS[1 if quick else 0], WRK_ROUNDS[1 if quick else 0]
    fixed1, fixed2 = "fixed JSON, 1 process", "fixed JSON, 2 processes"
    one, two = "interlock serve --workers 1", "interlock serve --workers 2"
    none = "interlock serve --workers 1, durability none"
    stub = STUB
    rates: dict[str, list[float]] = {fixed1: [], fixed2: [], one: [], two: [], none: [], stub: []}
    p99s: dict[str, list[float]] = {label: [] for label in rates}
    with ExitStack() as running:
        servers = {
            fixed1: (running.enter_context(_fixed_server(scratch)), "unused"),
            fixed2: (running.enter_context(_fixed_server(scratch, workers=2)), "unused"),
            one: running.enter_context(_interlock_server(scratch, "process", workers=1)),
            two: running.enter_context(_interlock_server(scratch, "process", workers=2)),
            none: running.enter_context(_interlock_server(scratch, "none", workers=1)),
            stub: running.enter_context(_stub_server(scratch)),
        }
        for url, key in servers.values():  # warm up: imports, caches, the first commits
            _wrk(scratch, url, key, 1)
        for _ in range(rounds):
            for label, (url, key) in servers.items():
                rate, p99 = _wrk(scratch, url, key, seconds)
                rates[label].append(rate)
                p99s[label].append(p99)
    median = {label: statistics.median(values) for label, values in rates.items()}
    for label, measured in rates.items():
        result.info[f"wrk_per_s {label}"] = round(median[label], 1)
        result.info[f"wrk_p99_ms {label}"] = round(statistics.median(p99s[label]), 2)
        result.info[f"wrk_rounds {label}"] = [round(rate, 1) for rate in measured]
        result.notes.append(
            f"{label}: {median[label]:,.0f}/s, p99 {statistics.median(p99s[label]):.1f} ms "
            f"(wrk, {CONNECTIONS} connections, median of {rounds})"
        )
    ratio = median[one] / median[fixed1]
    result.info["wrk_ratio workers 1 / fixed 1"] = round(ratio, 3)
    result.info["wrk_ratio durability none / fixed 1"] = round(median[none] / median[fixed1], 3)
    result.info["wrk_ratio server layer / fixed 1"] = round(median[stub] / median[fixed1], 3)
    result.info["wrk_ratio workers 2 / fixed 2"] = round(median[two] / median[fixed2], 3)
    result.info["wrk_scaling interlock 2 / 1"] = round(median[two] / median[one], 3)
    result.info["wrk_scaling fixed 2 / 1"] = round(median[fixed2] / median[fixed1], 3)
    result.notes.append(
        f"scaling 1 → 2 processes: interlock {median[two] / median[one]:.2f}×, "
        f"fixed JSON {median[fixed2] / median[fixed1]:.2f}× (2 cores, wrk on them too)"
    )
    result.targets.append(
        Target("serve --workers 1 / fixed JSON, checks/s", ratio, ">=", TARGET_THROUGHPUT, "×")
    )


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
    ratios = (*labels, (STUB, "stub"))
    with tempfile.TemporaryDirectory(prefix="interlock-bench-server-") as scratch_dir:
        scratch = Path(scratch_dir)
        with ExitStack() as running:
            servers = [(fixed, *running.enter_context(_fixed_keyless(scratch)))]
            for label, durability in labels:
                servers.append(
                    (label, *running.enter_context(_interlock_server(scratch, durability)))
                )
            servers.append((STUB, *running.enter_context(_stub_server(scratch))))
            measured = _interleaved(servers, count)
            p50: dict[str, int] = {}
            for label, _, _ in servers:
                stats = summarise(label, *measured[label])
                result.stats.append(stats)
                p50[label] = stats.p50_ns
            if shutil.which("wrk") is None:
                for label, url, key in servers:
                    rate = _throughput(url, key, per_thread)
                    result.info[f"throughput_per_s {label}"] = round(rate, 1)
                    result.notes.append(f"{label}: {rate:,.0f} checks/s with {THREADS} clients")
        if shutil.which("wrk") is not None:
            _under_load(scratch, quick, result)
        else:
            result.notes.append("wrk is not installed: no throughput per worker count")
        result.info["http"] = _http_stack()
    base = p50[fixed]
    for label, _ in ratios:
        ratio = p50[label] / base
        result.info[f"p50_ratio {label}"] = round(ratio, 3)
        result.notes.append(f"{label}: p50 {ratio:.2f}× the fixed-JSON endpoint")
        if label == STUB:
            continue  # what the server adds: no target of its own
        result.targets.append(
            Target(f"remote check p50 / fixed JSON p50 ({label})", ratio, "<=", TARGET_RATIO, "×")
        )
    return result


def _http_stack() -> str:
    """The HTTP parser and event loop uvicorn picks here ("auto")."""
    import importlib.util

    http = "httptools" if importlib.util.find_spec("httptools") else "h11"
    loop = "uvloop" if importlib.util.find_spec("uvloop") else "asyncio"
    return f"{http} + {loop}"


@contextmanager
def _fixed_keyless(scratch: Path) -> Iterator[tuple[str, str]]:
    with _fixed_server(scratch) as url:
        yield url, "unused"
