"""Benchmark ``llm-proxy``: what ``interlock llm-proxy`` adds to a model call.

One upstream stand-in (:mod:`bench.llm_standin`, a fake OpenAI model under uvicorn in
its own process) and the real proxy (``interlock llm-proxy`` in its own process, the
embedded SQLite store at its default durability, a token budget, an agent key). The
official ``openai`` client calls the stand-in **directly** (the baseline),
**through the proxy**, through the proxy **in front of the shared server**
(``interlock llm-proxy --server``, ``interlock serve`` on a store of its own), through
**LiteLLM's proxy** (:mod:`bench.llm_litellm`, its own environment and process, a
master key, no database) and through a **bare relay** (:mod:`bench.llm_relay`:
Starlette and ``httpx.AsyncClient`` forwarding the bytes, nothing of Interlock's —
what the extra hop alone costs), taken in turn ``BLOCK`` calls at a time (the order
reversing every round), so drift in the machine's load falls on all alike:

* ``chat.completions.create`` (not streamed): the whole call, answer parsed;
* the same streamed, ``stream_options={"include_usage": true}``: the time to the
  first chunk the client yields and to the end of the stream (usage chunk included);
* streamed with ``tools`` (the stand-in then streams a ``get_weather`` call after the
  text, which the proxy holds, judges and releases): the time to the first text
  chunk (what holding must not delay) and to the end of the stream (the released
  call included).
* ``responses.create`` (an answer with a message and a ``get_weather`` function call,
  which the proxy judges as a tool call), not streamed and streamed (``RESPONSES`` of
  the calls above): the whole call, and the time to the first event and to the end
  (the proxy holds the call's events until it is complete and judged).

Targets (issue 14): ≤ 1 ms added at p50 to a call, and the first streamed chunk
≤ 1 ms later. Every answer is checked (text and usage), and after the proxy has
stopped the budget's ``spent`` must equal the tokens of every proxied call (in the
proxy's store, and in the server's): a wrong answer or a call the proxy did not settle
is a correctness problem (exit 2). LiteLLM's side is left out when its environment is
not built and the run is ``--quick`` (a full run builds it, once).
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any, Final

from bench import llm_litellm
from bench.harness import BenchResult, Target, summarise
from bench.llm_standin import ARGUMENTS, RESPONSE_ARGUMENTS, RESPONSES_USAGE, TEXT, TOOL, USAGE

__all__ = ["run"]

ROOT: Final = Path(__file__).resolve().parents[1]
#: timed calls per subject, not streamed and streamed (default, quick)
CALLS: Final = (1000, 40)
STREAMS: Final = (600, 30)
WARMUP: Final = (50, 5)
#: the share of the calls above made with the Responses API
RESPONSES: Final = 0.5
#: calls to one side before switching to the other
BLOCK: Final = 25
TARGET_ADDED_MS: Final = 1.0
MODEL: Final = "gpt-4o-mini"
MESSAGES: Final = [{"role": "user", "content": "Say hello to the agent."}]
TENANT: Final = "bench"

POLICY: Final = """\
version: 1
default: deny
budgets:
  - id: tokens
    limit: 1000000000
    unit: tokens
    scope: agent
    window: day
    kind: llm
pricing:
  default_max_tokens:
    "*": 256
rules:
  - id: models
    decision: allow
    reason: the agent may call its model
    kind: llm
    name: gpt-4o-mini
  - id: weather
    decision: allow
    reason: the agent may read the weather
    name: get_weather
"""
TOOLS: Final = [{"type": "function", "function": {"name": TOOL, "parameters": {"type": "object"}}}]

DIRECT: Final = "direct"
PROXY: Final = "through proxy"
BASELINE: Final = "through proxy, tree before"
REMOTE: Final = "through proxy --server"
LITELLM: Final = "through LiteLLM"
RELAY: Final = "bare relay"
LEAN: Final = "lean relay"
SPLICE: Final = "tcp splice"
#: how long a server process may take to answer at all (LiteLLM's start-up is slow)
START_TIMEOUT: Final = 180.0


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@contextmanager
def _process(
    argv: list[str], url: str, env: dict[str, str], cwd: Path | None = None
) -> Iterator[int]:
    """A server process, up once it answers HTTP at all (any status); yields its pid.
    Its stderr goes to a file (a chatty server never blocks on a full pipe), read if
    it fails."""
    import httpx

    with tempfile.TemporaryFile() as log:
        process = subprocess.Popen(
            argv, env={**os.environ, **env}, stdout=subprocess.DEVNULL, stderr=log, cwd=cwd
        )
        try:
            deadline = time.monotonic() + START_TIMEOUT
            while True:
                if process.poll() is not None:
                    log.seek(0)
                    error = log.read().decode(errors="replace")[-4000:]
                    raise RuntimeError(f"{argv[0]} exited with {process.returncode}: {error}")
                try:
                    httpx.get(url, timeout=1)
                    break
                except httpx.HTTPError:
                    if time.monotonic() > deadline:
                        raise RuntimeError(f"the server at {url} did not come up") from None
                    time.sleep(0.05)
            yield process.pid
        finally:
            process.terminate()
            process.wait(timeout=30)


@contextmanager
def _standin() -> Iterator[str]:
    port = _free_port()
    argv = [sys.executable, "-m", "uvicorn", "bench.llm_standin:app", "--port", str(port)]
    argv += ["--log-level", "warning", "--no-access-log", "--app-dir", str(ROOT)]
    url = f"http://127.0.0.1:{port}/v1"
    with _process(argv, url, {}):
        yield url


@contextmanager
def _relay(upstream: str) -> Iterator[tuple[str, list[int]]]:
    """:mod:`bench.llm_relay`: the same hop with nothing of Interlock's."""
    port = _free_port()
    argv = [sys.executable, "-m", "uvicorn", "bench.llm_relay:app", "--port", str(port)]
    argv += ["--log-level", "warning", "--no-access-log", "--app-dir", str(ROOT)]
    url = f"http://127.0.0.1:{port}/v1"
    with _process(argv, url, {"BENCH_UPSTREAM": upstream}) as pid:
        yield url, [pid]


@contextmanager
def _lean_relay(upstream: str) -> Iterator[tuple[str, list[int]]]:
    """:mod:`bench.llm_relay_lean`: the proxy's own stack, nothing of Interlock's."""
    port = _free_port()
    argv = [sys.executable, "-m", "uvicorn", "bench.llm_relay_lean:app", "--port", str(port)]
    argv += [
        "--log-level",
        "warning",
        "--no-access-log",
        "--no-proxy-headers",
        "--app-dir",
        str(ROOT),
    ]
    url = f"http://127.0.0.1:{port}/v1"
    with _process(argv, url, {"BENCH_UPSTREAM": upstream}) as pid:
        yield url, [pid]


@contextmanager
def _splice(upstream: str) -> Iterator[tuple[str, list[int]]]:
    """:mod:`bench.llm_splice`: bytes copied across, no HTTP at all (the floor)."""
    port = _free_port()
    origin = upstream.removeprefix("http://").removesuffix("/v1")
    argv = [sys.executable, "-m", "bench.llm_splice", str(port), origin]
    url = f"http://127.0.0.1:{port}/v1"
    with _process(argv, url, {}, cwd=ROOT) as pid:
        yield url, [pid]


def _agent_key(database: str) -> str:
    from interlock.server import KeyStore, Role
    from interlock.store import open_store

    with open_store(database) as store:
        key = KeyStore(store).create(tenant=TENANT, role=Role.AGENT, name="bench-agent")
        return key.token


@contextmanager
def _proxy(
    scratch: Path,
    database: str,
    upstream: str,
    profile_to: Path | None = None,
    source: str | None = None,
) -> Iterator[tuple[str, list[int]]]:
    """``interlock llm-proxy`` in a process of its own (under cProfile, writing to
    ``profile_to`` when it stops, if given; from the source tree ``source`` if given)."""
    policy = scratch / "interlock.yaml"
    policy.write_text(POLICY)
    port = _free_port()
    env = {"OPENAI_API_KEY": "sk-standin"}
    if source is not None:
        command = [sys.executable, "-m", "interlock"]
        env["PYTHONPATH"] = source
    elif profile_to is None:
        command = [str(Path(sys.executable).parent / "interlock")]
    else:
        command = [sys.executable, "-m", "cProfile", "-o", str(profile_to), "-m", "interlock"]
    argv = [*command, "llm-proxy", "--policy", str(policy), "--store", database]
    argv += ["--openai-upstream", upstream, "--port", str(port), "--log-level", "warning"]
    argv += ["--reload-interval", "0"]
    url = f"http://127.0.0.1:{port}/v1"
    with _process(argv, url, env) as pid:
        yield url, [pid]


@contextmanager
def _remote_proxy(scratch: Path, database: str, upstream: str) -> Iterator[tuple[str, list[int]]]:
    """``interlock serve`` on ``database`` (the benchmark's policy) and
    ``interlock llm-proxy --server`` in front of it, each in a process of its own."""
    policy = scratch / "server.yaml"
    policy.write_text(POLICY)
    interlock = str(Path(sys.executable).parent / "interlock")
    server_port, proxy_port = _free_port(), _free_port()
    server = f"http://127.0.0.1:{server_port}"
    serve = [interlock, "serve", "--policy", str(policy), "--database", database]
    serve += ["--port", str(server_port), "--log-level", "warning", "--reload-interval", "0"]
    argv = [interlock, "llm-proxy", "--server", server, "--openai-upstream", upstream]
    argv += ["--port", str(proxy_port), "--log-level", "warning"]
    url = f"http://127.0.0.1:{proxy_port}/v1"
    with (
        _process(serve, server + "/v1/health", {}) as server_pid,
        _process(argv, url, {"OPENAI_API_KEY": "sk-standin"}) as proxy_pid,
    ):
        yield url, [proxy_pid, server_pid]


@contextmanager
def _litellm(scratch: Path, upstream: str, command: Path) -> Iterator[tuple[str, list[int]]]:
    """LiteLLM's proxy (:mod:`bench.llm_litellm`) relaying to the stand-in."""
    config = scratch / "litellm.yaml"
    config.write_text(llm_litellm.config_yaml(MODEL, upstream, "sk-standin"))
    port = _free_port()
    argv = llm_litellm.litellm_argv(command, config, port)
    url = f"http://127.0.0.1:{port}/v1"
    with _process(argv, url, llm_litellm.litellm_env(), cwd=scratch) as pid:
        yield url, [pid]


def _cpu_seconds(pids: list[int]) -> float:
    """User + system CPU of the processes ``pids`` and their descendants, so far."""
    ticks = os.sysconf("SC_CLK_TCK")
    total = 0
    pending = list(pids)
    while pending:
        pid = pending.pop()
        try:
            stat = Path(f"/proc/{pid}/stat").read_text()
            for task in Path(f"/proc/{pid}/task").iterdir():
                pending.extend(int(c) for c in (task / "children").read_text().split())
        except OSError:  # gone, or not Linux: counted as nothing
            continue
        fields = stat[stat.rindex(")") + 2 :].split()
        total += int(fields[11]) + int(fields[12])
    return total / ticks


def _litellm_command(wanted: bool | None, quick: bool) -> Path | None:
    """LiteLLM's command: built if ``wanted`` (or on a full run); None: left out."""
    if wanted is False:
        return None
    command = llm_litellm.litellm_command()
    if command is None and (wanted or not quick):
        command = llm_litellm.ensure_litellm()
    return command


def check_completion(completion: Any) -> str | None:
    """What is wrong with a non-streamed answer, or None."""
    text = completion.choices[0].message.content if completion.choices else None
    total = completion.usage.total_tokens if completion.usage else None
    if text != "".join(TEXT) or total != USAGE["total_tokens"]:
        return f"a wrong answer: text {text!r}, total_tokens {total}"
    return None


def check_stream(chunks: list[Any]) -> str | None:
    """What is wrong with a streamed answer (its chunks, in order), or None."""
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    usage = [c.usage.total_tokens for c in chunks if c.usage is not None]
    if text != "".join(TEXT) or usage != [USAGE["total_tokens"]]:
        return f"a wrong stream: text {text!r}, usage chunks {usage}"
    return None


def _create(client: Any, problems: list[str]) -> int:
    t0 = time.perf_counter_ns()
    completion = client.chat.completions.create(model=MODEL, messages=MESSAGES, max_tokens=64)
    elapsed = time.perf_counter_ns() - t0
    if (problem := check_completion(completion)) is not None:
        problems.append(problem)
    return elapsed


def _stream(client: Any, problems: list[str]) -> tuple[int, int]:
    t0 = time.perf_counter_ns()
    stream = client.chat.completions.create(
        model=MODEL,
        messages=MESSAGES,
        max_tokens=64,
        stream=True,
        stream_options={"include_usage": True},
    )
    first = 0
    chunks = []
    for chunk in stream:
        if not first:
            first = time.perf_counter_ns() - t0
        chunks.append(chunk)
    end = time.perf_counter_ns() - t0
    if (problem := check_stream(chunks)) is not None:
        problems.append(problem)
    return first, end


def check_response(response: Any) -> str | None:
    """What is wrong with a Responses answer (its message and its call), or None."""
    calls = [(i.name, i.arguments) for i in response.output if i.type == "function_call"]
    total = response.usage.total_tokens if response.usage else None
    expected = [("get_weather", "".join(RESPONSE_ARGUMENTS))]
    if response.output_text != "".join(TEXT) or calls != expected:
        return f"a wrong response: text {response.output_text!r}, calls {calls}"
    if total != RESPONSES_USAGE["total_tokens"]:
        return f"a wrong response usage: total_tokens {total}"
    return None


def _respond(client: Any, problems: list[str]) -> int:
    t0 = time.perf_counter_ns()
    response = client.responses.create(model=MODEL, input=MESSAGES, max_output_tokens=64)
    elapsed = time.perf_counter_ns() - t0
    if (problem := check_response(response)) is not None:
        problems.append(problem)
    return elapsed


def _respond_streamed(client: Any, problems: list[str]) -> tuple[int, int]:
    t0 = time.perf_counter_ns()
    stream = client.responses.create(model=MODEL, input=MESSAGES, max_output_tokens=64, stream=True)
    first = 0
    final = None
    for event in stream:
        if not first:
            first = time.perf_counter_ns() - t0
        if event.type == "response.completed":
            final = event.response
    end = time.perf_counter_ns() - t0
    problem = "a stream without response.completed" if final is None else check_response(final)
    if problem is not None:
        problems.append(problem)
    return first, end


def check_tool_stream(chunks: list[Any]) -> str | None:
    """What is wrong with a streamed answer with a tool call, or None."""
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    calls = [
        (call.function.name, call.function.arguments)
        for c in chunks
        if c.choices
        for call in c.choices[0].delta.tool_calls or ()
        if call.function is not None
    ]
    usage = [c.usage.total_tokens for c in chunks if c.usage is not None]
    arguments = "".join(a or "" for _, a in calls)
    names = "".join(n or "" for n, _ in calls)
    if text != "".join(TEXT) or (names, arguments) != (TOOL, ARGUMENTS):
        return f"a wrong stream with tools: text {text!r}, calls {calls}"
    if usage != [USAGE["total_tokens"]]:
        return f"a wrong stream with tools: usage chunks {usage}"
    return None


def _stream_tools(client: Any, problems: list[str]) -> tuple[int, int]:
    t0 = time.perf_counter_ns()
    stream = client.chat.completions.create(
        model=MODEL,
        messages=MESSAGES,
        max_tokens=64,
        tools=TOOLS,
        stream=True,
        stream_options={"include_usage": True},
    )
    first_text = 0
    chunks = []
    for chunk in stream:
        if not first_text and chunk.choices and chunk.choices[0].delta.content:
            first_text = time.perf_counter_ns() - t0
        chunks.append(chunk)
    end = time.perf_counter_ns() - t0
    if (problem := check_tool_stream(chunks)) is not None:
        problems.append(problem)
    return first_text, end


def _interleaved(
    clients: dict[str, Any], calls: int, warmup: int, one: Callable[[Any], list[int]]
) -> tuple[dict[str, list[list[int]]], dict[str, int]]:
    """``one(client)`` -> its timings (ns); ``calls`` per side, ``BLOCK`` at a time, the
    side that goes first alternating. Returns per side: a list per timing, the wall."""
    for client in clients.values():
        for _ in range(warmup):
            one(client)
    samples: dict[str, list[list[int]]] = {label: [] for label in clients}
    walls = dict.fromkeys(clients, 0)
    order = list(clients)
    done = 0
    while done < calls:
        block = min(BLOCK, calls - done)
        for label in order:
            began = time.perf_counter_ns()
            for _ in range(block):
                samples[label].append(one(clients[label]))
            walls[label] += time.perf_counter_ns() - began
        order.reverse()
        done += block
    columns = {label: [list(c) for c in zip(*rows, strict=True)] for label, rows in samples.items()}
    return columns, walls


#: streams run through the tool-call gate in process (:func:`_gate_cost`)
GATE_STREAMS: Final = (400, 100)


async def _events(tools: bool) -> list[tuple[list[str], Any]]:
    """The stand-in's stream (with or without its tool call) as the relay sees it:
    each event's lines and its parsed data."""
    from bench.llm_standin import _chunks
    from interlock.gateways.llm_proxy.relay import _data, sse_events

    async def lines() -> Any:
        async for frame in _chunks(MODEL, True, tools=tools):
            for line in frame.split("\n"):
                yield line

    return [(event, _data(event)) for event in [e async for e in sse_events(lines())]]


async def _gate_cost(scratch: Path, streams: int) -> dict[str, tuple[list[int], list[int]]]:
    """Per stream (ns): what the relay does with each event without a gate (frame it)
    and through the tool-call gate — a text-only stream (it only looks) and the stream
    with a ``get_weather`` call (held, judged by the real guard, released)."""
    from interlock import Guard
    from interlock.core.action import Context
    from interlock.gateways.llm_proxy.relay import sse_frame
    from interlock.gateways.llm_proxy.stream_tools import tool_gate

    policy = scratch / "gate.yaml"
    policy.write_text(POLICY)
    guard = Guard.from_file(policy, store=f"sqlite:///{scratch / 'gate.db'}")
    context = Context(tenant=TENANT, agent="bench-agent", runtime="llm-proxy")
    costs: dict[str, tuple[list[int], list[int]]] = {}
    try:
        for label, tools in (("text", False), ("tools", True)):
            events = await _events(tools)
            bare: list[int] = []
            gated: list[int] = []
            for i in range(streams + 20):
                t0 = time.perf_counter_ns()
                frames = [sse_frame(event) for event, _ in events]
                t1 = time.perf_counter_ns()
                gate = tool_gate("openai", guard, context, max_held_bytes=1 << 25)
                sent = [f for event, data in events for f in await gate.feed(event, data)]
                sent += await gate.end()
                t2 = time.perf_counter_ns()
                if i >= 20:
                    bare.append(t1 - t0)
                    gated.append(t2 - t1)
                if not frames or (tools and b'"name":"get_weather"' not in b"".join(sent)):
                    raise RuntimeError("the gate did not release the benchmark's call")
            costs[label] = (bare, gated)
    finally:
        guard.close()
    return costs


def _spent(database: str) -> int:
    from interlock.store import open_store

    with open_store(database) as store:
        rows = store.budget_rows(tenant=TENANT, budget_id="tokens")
        return sum(r.spent for r in rows)


def run(
    calls: int | None, quick: bool, *, litellm: bool | None = None, remote: bool = True
) -> BenchResult:
    """``calls``: timed non-streamed calls per side (streamed: 0.6 of it).
    ``litellm``: whether LiteLLM's side runs (``None``: when its environment is built,
    or on a full run, which builds it); ``remote``: whether the ``--server`` side runs."""
    import openai

    pick = 1 if quick else 0
    creates = calls or CALLS[pick]
    streams = max(1, round(creates * 0.6)) if calls else STREAMS[pick]
    responses = max(1, round(creates * RESPONSES))
    responses_streamed = max(1, round(streams * RESPONSES))
    warmup = WARMUP[pick]
    result = BenchResult("llm-proxy")
    problems: list[str] = []
    command = _litellm_command(litellm, quick)
    if command is None:
        result.notes.append(
            "LiteLLM's side left out: its environment is not built "
            "(python -m bench.llm_litellm --setup, or a full run)"
        )
    with tempfile.TemporaryDirectory(prefix="interlock-bench-proxy-") as tmp, ExitStack() as up:
        scratch = Path(tmp)
        database = f"sqlite:///{scratch / 'interlock.db'}"
        server_database = f"sqlite:///{scratch / 'server.db'}"
        baseline_database = f"sqlite:///{scratch / 'baseline.db'}"
        token = _agent_key(database)
        upstream = up.enter_context(_standin())
        urls = {
            PROXY: (*up.enter_context(_proxy(scratch, database, upstream)), token),
            RELAY: (*up.enter_context(_relay(upstream)), "unused"),
            LEAN: (*up.enter_context(_lean_relay(upstream)), "unused"),
            SPLICE: (*up.enter_context(_splice(upstream)), "unused"),
        }
        baseline_src = os.environ.get("INTERLOCK_BENCH_BASELINE_SRC")
        if baseline_src:
            base_scratch = scratch / "baseline"
            base_scratch.mkdir()
            side = up.enter_context(
                _proxy(base_scratch, baseline_database, upstream, source=baseline_src)
            )
            urls[BASELINE] = (*side, _agent_key(baseline_database))
        if remote:
            remote_token = _agent_key(server_database)
            side = up.enter_context(_remote_proxy(scratch, server_database, upstream))
            urls[REMOTE] = (*side, remote_token)
        if command is not None:
            side = up.enter_context(_litellm(scratch, upstream, command))
            urls[LITELLM] = (*side, llm_litellm.MASTER_KEY)
        clients = {
            DIRECT: up.enter_context(
                openai.OpenAI(base_url=upstream, api_key="sk-standin", max_retries=0)
            )
        }
        for label, (url, _pids, key) in urls.items():
            client = openai.OpenAI(base_url=url, api_key=key, max_retries=0)
            clients[label] = up.enter_context(client)
        cpu_before = {label: _cpu_seconds(pids) for label, (_, pids, _) in urls.items()}
        remote_pids = urls[REMOTE][1] if remote else []
        remote_before = [_cpu_seconds([pid]) for pid in remote_pids]
        created, create_walls = _interleaved(
            clients, creates, warmup, lambda c: [_create(c, problems)]
        )
        streamed, stream_walls = _interleaved(
            clients, streams, warmup, lambda c: list(_stream(c, problems))
        )
        # LiteLLM's side answers the chat calls only: the Responses API and streamed
        # tool calls are compared between Interlock's sides, the relay and direct.
        ours = {label: client for label, client in clients.items() if label != LITELLM}
        responded, respond_walls = _interleaved(
            ours, responses, warmup, lambda c: [_respond(c, problems)]
        )
        respond_streamed, respond_stream_walls = _interleaved(
            ours, responses_streamed, warmup, lambda c: list(_respond_streamed(c, problems))
        )
        tooled, tool_walls = _interleaved(
            ours, streams, warmup, lambda c: list(_stream_tools(c, problems))
        )
        cpu = {
            label: _cpu_seconds(pids) - cpu_before[label] for label, (_, pids, _) in urls.items()
        }
        remote_cpu = [
            _cpu_seconds([pid]) - before
            for pid, before in zip(remote_pids, remote_before, strict=True)
        ]
        up.close()  # the proxies stop (gracefully) before their stores are read
        spent = {PROXY: _spent(database)}
        if BASELINE in urls:
            spent[BASELINE] = _spent(baseline_database)
        if remote:
            spent[REMOTE] = _spent(server_database)
    proxied = creates + 2 * streams + responses + responses_streamed + 5 * warmup
    for side, tokens in spent.items():
        if tokens != proxied * USAGE["total_tokens"]:
            problems.append(
                f"{side}: the budget's spent is {tokens} tokens after {proxied} proxied calls "
                f"of {USAGE['total_tokens']}: some call was not settled (or settled twice)"
            )
    result.problems.extend(sorted(set(problems)))
    series: list[Series] = [
        ("create", created, create_walls, 0),
        ("stream first chunk", streamed, stream_walls, 0),
        ("stream end", streamed, stream_walls, 1),
        ("responses create", responded, respond_walls, 0),
        ("responses stream first event", respond_streamed, respond_stream_walls, 0),
        ("responses stream end", respond_streamed, respond_stream_walls, 1),
        ("tools stream first text", tooled, tool_walls, 0),
        ("tools stream end", tooled, tool_walls, 1),
    ]
    _report(result, clients, series)
    _gate_report(result, pick)
    # CPU per call of each side's processes (the --server side: proxy and server):
    # what a call costs whatever the load, in ms
    per_call = {label: round(seconds * 1000 / proxied, 3) for label, seconds in cpu.items()}
    result.info["cpu_ms_per_call"] = per_call
    if remote:
        proxy_ms, server_ms = (round(seconds * 1000 / proxied, 3) for seconds in remote_cpu)
        result.info["remote_cpu_ms_per_call"] = {"proxy": proxy_ms, "server": server_ms}
    result.notes.append(
        "CPU per call (create and stream alike, warm-up included): "
        + ", ".join(f"{label} {ms:.2f} ms" for label, ms in per_call.items())
        + (
            f" (of --server's: the proxy {proxy_ms:.2f} ms, the server {server_ms:.2f} ms)"
            if remote
            else ""
        )
    )
    result.info["calls"] = {
        "create": creates,
        "stream": streams,
        "responses create": responses,
        "responses stream": responses_streamed,
        "warmup": warmup,
    }
    result.info["openai"] = openai.__version__
    result.info["budget_spent_tokens"] = spent[PROXY]
    if remote:
        result.info["server_budget_spent_tokens"] = spent[REMOTE]
    if command is not None:
        result.info["litellm"] = _litellm_version(command)
    return result


#: one timed series: what it times, its samples and walls by side, and which sample
#: of each call (0, or 1 for a stream's end)
Series = tuple[str, dict[str, list[list[int]]], dict[str, int], int]


def _report(result: BenchResult, sides: dict[str, Any], series: list[Series]) -> None:
    p50: dict[str, int] = {}
    p99: dict[str, int] = {}
    order = [
        side
        for side in (DIRECT, SPLICE, LEAN, RELAY, PROXY, BASELINE, REMOTE, LITELLM)
        if side in sides
    ]
    for side in order:
        subjects = [
            (f"{side}, {what}", samples[side][i], walls[side])
            for what, samples, walls, i in series
            if side in samples
        ]
        for label, samples, wall in subjects:
            stats = summarise(label, samples, wall)
            result.stats.append(stats)
            p50[label], p99[label] = stats.p50_ns, stats.p99_ns

    def added(side: str, what: str, table: dict[str, int]) -> float:
        return (table[f"{side}, {what}"] - table[f"{DIRECT}, {what}"]) / 1e6

    for what, samples, _, _ in series:
        added50, added99 = added(PROXY, what, p50), added(PROXY, what, p99)
        ratio = p50[f"{PROXY}, {what}"] / p50[f"{DIRECT}, {what}"]
        hop, lean, splice = (added(side, what, p50) for side in (RELAY, LEAN, SPLICE))
        result.info[f"added_p50_ms {what}"] = round(added50, 3)
        result.info[f"added_p99_ms {what}"] = round(added99, 3)
        result.info[f"p50_ratio {what}"] = round(ratio, 3)
        result.info[f"bare_relay_added_p50_ms {what}"] = round(hop, 3)
        result.info[f"lean_relay_added_p50_ms {what}"] = round(lean, 3)
        result.info[f"splice_added_p50_ms {what}"] = round(splice, 3)
        note = (
            f"{what}: +{added50:.2f} ms at p50 ({ratio:.2f}× direct), +{added99:.2f} ms at "
            f"p99; the bare relay (Starlette + httpx) +{hop:.2f} ms, the lean relay "
            f"(the proxy's stack) +{lean:.2f} ms, the TCP splice (the floor) "
            f"+{splice:.2f} ms at p50"
        )
        if BASELINE in samples:
            base50 = added(BASELINE, what, p50)
            result.info[f"baseline_added_p50_ms {what}"] = round(base50, 3)
            note += f"; the tree before +{base50:.2f} ms at p50"
        if REMOTE in samples:
            remote50, remote99 = added(REMOTE, what, p50), added(REMOTE, what, p99)
            result.info[f"remote_added_p50_ms {what}"] = round(remote50, 3)
            result.info[f"remote_added_p99_ms {what}"] = round(remote99, 3)
            note += f"; --server +{remote50:.2f} ms at p50, +{remote99:.2f} ms at p99"
        if LITELLM in samples:
            lite50, lite99 = added(LITELLM, what, p50), added(LITELLM, what, p99)
            result.info[f"litellm_added_p50_ms {what}"] = round(lite50, 3)
            result.info[f"litellm_added_p99_ms {what}"] = round(lite99, 3)
            if lite50 > 0:
                result.info[f"interlock_over_litellm_added_p50 {what}"] = round(added50 / lite50, 3)
            note += (
                f"; LiteLLM +{lite50:.2f} ms at p50, +{lite99:.2f} ms at p99 "
                f"(Interlock's added p50 {added50 / lite50:.2f}× LiteLLM's)"
                if lite50 > 0
                else f"; LiteLLM +{lite50:.2f} ms at p50"
            )
        result.notes.append(note)
    result.targets.append(
        Target("added p50, create", result.info["added_p50_ms create"], "<=", TARGET_ADDED_MS, "ms")
    )
    result.targets.append(
        Target(
            "added p50, first streamed chunk",
            result.info["added_p50_ms stream first chunk"],
            "<=",
            TARGET_ADDED_MS,
            "ms",
        )
    )


def _gate_report(result: BenchResult, pick: int) -> None:
    import asyncio

    with tempfile.TemporaryDirectory(prefix="interlock-bench-gate-") as tmp:
        gate = asyncio.run(_gate_cost(Path(tmp), GATE_STREAMS[pick]))
    for label, (bare, gated) in gate.items():
        bare_us, gated_us = _p50_us(bare), _p50_us(gated)
        result.info[f"gate_p50_us {label} stream"] = round(gated_us, 1)
        result.info[f"frame_only_p50_us {label} stream"] = round(bare_us, 1)
        result.notes.append(
            f"the tool-call gate, in process, per {label} stream ({len(gate[label][0])} "
            f"streams): p50 {gated_us:.0f} µs against {bare_us:.0f} µs to frame its events "
            f"without it"
        )


def _litellm_version(command: Path) -> str:
    python = command.parent / "python"
    done = subprocess.run(
        [str(python), "-c", "import importlib.metadata as m; print(m.version('litellm'))"],
        capture_output=True,
        text=True,
        check=False,
    )
    return done.stdout.strip() or "?"


#: calls through the proxy while it runs under cProfile (not streamed, streamed)
PROFILE_CALLS: Final = (400, 200)
#: timed rounds of each part in :func:`parts`
PART_CALLS: Final = 400


def _p50_us(samples: list[int]) -> float:
    return sorted(samples)[len(samples) // 2] / 1000


async def _parts(upstream: str, scratch: Path) -> list[str]:
    """The proxy's parts one by one in one event loop: the guard's model call on
    entry and exit (same policy, SQLite store, default durability), on the loop as
    the proxy runs them on SQLite and through the async path (a worker thread), and
    the upstream POST by the proxy's client and by ``httpx.AsyncClient``."""
    import httpx
    import orjson

    from interlock import Guard
    from interlock.core.action import Context
    from interlock.ledger.usage import Usage

    policy = scratch / "parts.yaml"
    policy.write_text(POLICY)
    guard = Guard.from_file(policy, store=f"sqlite:///{scratch / 'parts.db'}")
    context = Context(tenant=TENANT, agent="bench-agent", runtime="llm-proxy")
    arguments = {"messages": MESSAGES, "max_tokens": 64}
    timed: dict[str, list[int]] = {"enter": [], "leave": [], "aenter": [], "aleave": []}
    try:
        for i in range(2 * PART_CALLS + 100):
            inline = i % 2 == 0
            call = guard.llm_call(MODEL, context=context, arguments=arguments)
            t0 = time.perf_counter_ns()
            if inline:
                call.__enter__()
            else:
                await call.__aenter__()
            t1 = time.perf_counter_ns()
            call.record(Usage(USAGE["prompt_tokens"], USAGE["completion_tokens"]))
            t2 = time.perf_counter_ns()
            if inline:
                call.__exit__(None, None, None)
            else:
                await call.__aexit__(None, None, None)
            if i >= 100:
                timed["enter" if inline else "aenter"].append(t1 - t0)
                timed["leave" if inline else "aleave"].append(time.perf_counter_ns() - t2)
    finally:
        guard.close()
    body = orjson.dumps({"model": MODEL, "messages": MESSAGES, "max_tokens": 64})
    from interlock.gateways.http1 import Http1Client, Target

    posts: list[int] = []
    lean: list[int] = []
    target = Target.of(upstream + "/chat/completions")
    headers = {"content-type": "application/json"}
    async with httpx.AsyncClient() as client, Http1Client() as ours:
        for i in range(2 * PART_CALLS + 100):
            t0 = time.perf_counter_ns()
            if i % 2:
                answer = await client.post(target_url(target), content=body, headers=headers)
                await answer.aread()
            else:
                reply = await ours.send("POST", target, headers.items(), body)
                await reply.aread()
            if i >= 100:
                (posts if i % 2 else lean).append(time.perf_counter_ns() - t0)
    return [
        f"guard.llm_call entry (decision, reservation, audit record committed): "
        f"p50 {_p50_us(timed['enter']):.0f} µs on the loop, "
        f"{_p50_us(timed['aenter']):.0f} µs async (a worker thread)",
        f"guard.llm_call exit (usage committed to the budget): p50 "
        f"{_p50_us(timed['leave']):.0f} µs on the loop, {_p50_us(timed['aleave']):.0f} µs async",
        f"the upstream POST, answer read: p50 {_p50_us(lean):.0f} µs by the proxy's client "
        f"(interlock.gateways.http1), {_p50_us(posts):.0f} µs by httpx.AsyncClient",
    ]


def target_url(target: Any) -> str:
    return f"{target.scheme}://{target.host_header.decode()}{target.path}"


def profile() -> str:
    """The proxy's parts timed one by one (:func:`_parts`), then the proxy process
    under cProfile (its event loop's thread) while the openai client makes
    ``PROFILE_CALLS`` through it: the top 40 of Interlock's and httpx's functions,
    cumulative."""
    import asyncio
    import io
    import pstats

    import openai

    problems: list[str] = []
    with tempfile.TemporaryDirectory(prefix="interlock-bench-proxy-") as tmp:
        scratch = Path(tmp)
        database = f"sqlite:///{scratch / 'interlock.db'}"
        token = _agent_key(database)
        out = scratch / "proxy.prof"
        with ExitStack() as up:
            upstream = up.enter_context(_standin())
            try:
                import uvloop

                parts = uvloop.run(_parts(upstream, scratch))
            except ImportError:
                parts = asyncio.run(_parts(upstream, scratch))
            url, _ = up.enter_context(_proxy(scratch, database, upstream, profile_to=out))
            client = up.enter_context(openai.OpenAI(base_url=url, api_key=token, max_retries=0))
            for _ in range(PROFILE_CALLS[0]):
                _create(client, problems)
            for _ in range(PROFILE_CALLS[1]):
                _stream(client, problems)
        text = io.StringIO()
        stats = pstats.Stats(str(out), stream=text)
        # Interlock's and the upstream client's own functions, not the start-up imports
        # (a coroutine's ncalls counts its resumptions, not its calls)
        stats.sort_stats("cumulative").print_stats(r"(interlock|httpx|httpcore)/(?!.*<module>)", 40)
    head = "\n".join(["the parts, in one event loop:", *(f"  {p}" for p in parts)])
    head += f"\n\n{PROFILE_CALLS[0]} calls and {PROFILE_CALLS[1]} streams through the proxy"
    if problems:
        head += f"; PROBLEMS: {sorted(set(problems))}"
    return f"{head}\n{text.getvalue()}"
