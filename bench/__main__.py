"""``python -m bench [name ...] [--calls N] [--quick] [--profile]``.

Runs the named benchmarks (all of them without names), prints a summary table and
writes ``bench/results/<name>.json``. Exits 2 if a benchmark found a correctness
problem (for instance Cedar and Interlock disagreeing); a missed latency target is
reported, never turned into a failure.

Each benchmark is a module with a ``run(...)`` returning a
:class:`bench.harness.BenchResult`, added to :data:`BENCHMARKS`. ``--calls`` sets the
main timed count of a benchmark (``check``: calls per subject; the ``store-*``
benchmarks say in ``--list`` what it counts); ``--quick`` is a short smoke run.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from dataclasses import dataclass

from bench.harness import BenchResult, format_table, machine_info, write_result


@dataclass(frozen=True, slots=True)
class Benchmark:
    description: str
    #: ``run(calls, quick)``; calls None: the benchmark's default.
    run: Callable[[int | None, bool], BenchResult]
    profile: Callable[[], str] | None = None


def _check(calls: int | None, quick: bool) -> BenchResult:
    from bench import check

    return check.run(calls or (QUICK_CALLS if quick else check.DEFAULT_CALLS))


def _verify(calls: int | None, quick: bool) -> BenchResult:
    from bench import verify

    return verify.run(calls, quick)


def _effects(calls: int | None, quick: bool) -> BenchResult:
    from bench import effects

    return effects.run(calls, quick)


def _check_profile() -> str:
    from bench import check

    return check.profile()


def _store_budget(calls: int | None, quick: bool) -> BenchResult:
    from bench import store_budget

    return store_budget.run(calls, quick)


def _store_budget_profile() -> str:
    from bench import store_budget

    return store_budget.profile()


def _store_audit(calls: int | None, quick: bool) -> BenchResult:
    from bench import store_audit

    return store_audit.run(calls, quick)


def _store_audit_profile() -> str:
    from bench import store_audit

    return store_audit.profile()


def _store_approval(calls: int | None, quick: bool) -> BenchResult:
    from bench import store_approval

    return store_approval.run(calls, quick)


def _store_check(calls: int | None, quick: bool) -> BenchResult:
    from bench import store_check

    return store_check.run(calls, quick)


def _adapter_clients(calls: int | None, quick: bool) -> BenchResult:
    from bench import adapter_clients

    return adapter_clients.run(calls, quick)


def _adapters(calls: int | None, quick: bool) -> BenchResult:
    from bench import adapters

    return adapters.run(calls, quick)


def _adapter_google_adk(calls: int | None, quick: bool) -> BenchResult:
    from bench import adapter_google_adk

    return adapter_google_adk.run(calls, quick)


def _adapter_pydantic_ai(calls: int | None, quick: bool) -> BenchResult:
    from bench import adapter_pydantic_ai

    return adapter_pydantic_ai.run(calls, quick)


def _adapter_smolagents(calls: int | None, quick: bool) -> BenchResult:
    from bench import adapter_smolagents

    return adapter_smolagents.run(calls, quick)


def _adapter_autogen(calls: int | None, quick: bool) -> BenchResult:
    from bench import adapter_autogen

    return adapter_autogen.run(calls, quick)


def _adapter_llama_index(calls: int | None, quick: bool) -> BenchResult:
    from bench import adapter_llama_index

    return adapter_llama_index.run(calls, quick)


def _adapter_crewai(calls: int | None, quick: bool) -> BenchResult:
    from bench import adapter_crewai

    return adapter_crewai.run(calls, quick)


def _adapter_browser_use(calls: int | None, quick: bool) -> BenchResult:
    from bench import adapter_browser_use

    return adapter_browser_use.run(calls, quick)


def _grants(calls: int | None, quick: bool) -> BenchResult:
    from bench import grants

    return grants.run(calls, quick)


def _redaction(calls: int | None, quick: bool) -> BenchResult:
    from bench import redaction

    return redaction.run(calls, quick)


def _server(calls: int | None, quick: bool) -> BenchResult:
    from bench import server

    return server.run(calls, quick)


def _facts(calls: int | None, quick: bool) -> BenchResult:
    from bench import facts

    return facts.run(calls, quick)


def _startup(calls: int | None, quick: bool) -> BenchResult:
    from bench import startup

    return startup.run(calls, quick)


def _peer(calls: int | None, quick: bool) -> BenchResult:
    from bench.peer import benchmark

    return benchmark.run(calls, quick)


def _peer_profile() -> str:
    from bench.peer import benchmark

    return benchmark.profile()


def _scaling(calls: int | None, quick: bool) -> BenchResult:
    from bench import scaling

    return scaling.run(calls, quick)


def _mcp_gateway(calls: int | None, quick: bool) -> BenchResult:
    from bench import mcp_gateway

    return mcp_gateway.run(calls, quick)


def _mcp_gateway_http(calls: int | None, quick: bool) -> BenchResult:
    from bench import mcp_gateway_http

    return mcp_gateway_http.run(calls, quick)


def _llm_proxy(calls: int | None, quick: bool) -> BenchResult:
    from bench import llm_proxy

    return llm_proxy.run(calls, quick)


def _llm_proxy_profile() -> str:
    from bench import llm_proxy

    return llm_proxy.profile()


def _replay(calls: int | None, quick: bool) -> BenchResult:
    from bench import replay

    return replay.run(calls, quick)


def _session(calls: int | None, quick: bool) -> BenchResult:
    from bench import session

    return session.run(calls, quick)


def _otel(calls: int | None, quick: bool) -> BenchResult:
    from bench import otel

    return otel.run(calls or (2_000 if quick else otel.DEFAULT_CALLS))


#: name -> benchmark.
BENCHMARKS: dict[str, Benchmark] = {
    "check": Benchmark(
        "one decision: guard.check / evaluate vs a dict+regex floor and cedarpy, 100 rules",
        _check,
        _check_profile,
    ),
    "facts": Benchmark(
        "shell and URL facts vs shlex.split / urlsplit, and evaluate with shell, URL and "
        "file calls in the 100-rule workload (--calls: calls per subject)",
        _facts,
    ),
    "verify": Benchmark(
        "a provider's grant check (Verifier.verify, memory and SQLite nonces) vs a bare "
        "Ed25519 verify, and an ASGI request behind GrantMiddleware (with and without a "
        "receipt) vs the bare app (--calls: calls per subject)",
        _verify,
    ),
    "effects": Benchmark(
        "run_effect (check, reservation, grant issued and claimed, attempt recorded, "
        "request, receipt checked, outcome recorded and audited) vs the bare request to "
        "the same provider on a loopback socket (--calls: effects per subject)",
        _effects,
    ),
    "store-budget": Benchmark(
        "reserve+commit vs the raw conditional UPDATE, SQLite and PostgreSQL, and a hot "
        "PostgreSQL budget (--calls: SQLite pairs)",
        _store_budget,
        _store_budget_profile,
    ),
    "store-audit": Benchmark(
        "durable audit with group commit (16 threads) vs one fsync per record "
        "(--calls: records per subject)",
        _store_audit,
        _store_audit_profile,
    ),
    "store-approval": Benchmark(
        "approval-to-resume latency from another process vs a bare NOTIFY→LISTEN "
        "(--calls: approvals per back end)",
        _store_approval,
    ),
    "store-check": Benchmark(
        "guard.check with a durable SQLite store vs durability none vs no store, 1 and 8 "
        "threads (--calls: no-store checks)",
        _store_check,
    ),
    "adapter-clients": Benchmark(
        "one call of the official openai / anthropic clients (chat, messages, streamed "
        "or not) on a fake transport, guarded vs unguarded (--calls: calls per subject)",
        _adapter_clients,
    ),
    "adapters": Benchmark(
        "the same LangChain agent loop and fake model with and without the guard, per tool "
        "call (--calls: runs of 40 tool calls per subject)",
        _adapters,
    ),
    "adapter-google-adk": Benchmark(
        "the same Google ADK runner loop and scripted model with and without the guard "
        "(plugin, agent callbacks), per tool call (--calls: runs of 20 tool calls per subject)",
        _adapter_google_adk,
    ),
    "adapter-pydantic-ai": Benchmark(
        "the same PydanticAI agent loop and FunctionModel with and without "
        "InterlockCapability, per tool call (--calls: runs of 20 tool calls per subject)",
        _adapter_pydantic_ai,
    ),
    "adapter-smolagents": Benchmark(
        "the same smolagents ToolCallingAgent loop and fake model with and without the "
        "guard, per tool call (--calls: runs of 20 tool calls per subject)",
        _adapter_smolagents,
    ),
    "adapter-autogen": Benchmark(
        "the same AutoGen AssistantAgent loop and replayed model with and without the "
        "guard, per tool call (--calls: runs of 20 tool calls per subject)",
        _adapter_autogen,
    ),
    "adapter-llama-index": Benchmark(
        "the same LlamaIndex FunctionAgent loop and scripted model with and without the "
        "guard, per tool call (--calls: runs of 10 tool calls per subject)",
        _adapter_llama_index,
    ),
    "adapter-crewai": Benchmark(
        "the same CrewAI crew and fake model with and without the guard, per tool call; "
        "runs in .venv-crewai only (--calls: runs of 10 tool calls per subject)",
        _adapter_crewai,
    ),
    "adapter-browser-use": Benchmark(
        "browser-use's Tools.act (a custom action, navigate) and a model call, with and "
        "without the guard, no browser; runs in .venv-browser-use (--calls: calls per "
        "subject)",
        _adapter_browser_use,
    ),
    "grants": Benchmark(
        "grant sign+read vs a bare Ed25519 sign+verify; issue_grant+claim_grant on SQLite "
        "vs guard.check (--calls: token pairs; a tenth as many store pairs)",
        _grants,
    ),
    "redaction": Benchmark(
        "redact_value over typical arguments (vs json.dumps, and vs another tree with "
        "INTERLOCK_BENCH_BASELINE_SRC) and redact over secret-bearing strings "
        "(--calls: calls per subject)",
        _redaction,
    ),
    "server": Benchmark(
        "a remote check through interlock serve vs a fixed-JSON Starlette endpoint, same "
        "client and uvicorn (--calls: sequential requests per subject)",
        _server,
    ),
    "startup": Benchmark(
        "import interlock, interlock check and a 1,000-rule policy load, each in a fresh "
        "process vs bare python / yaml.load in the same run (--calls: rounds)",
        _startup,
    ),
    "peer": Benchmark(
        "guard.check vs the peer toolkit's evaluator (own process and environment, "
        "interleaved rounds), 100 rules of the peer's shape, 6 calls (--calls: per subject)",
        _peer,
        _peer_profile,
    ),
    "scaling": Benchmark(
        "guard.check vs policy size (10-5,000 rules on one tool) and vs argument size "
        "(short-1 MB, 40 regexes), each with a same-run floor; writes a PNG chart "
        "(--calls: calls per point)",
        _scaling,
    ),
    "mcp-gateway": Benchmark(
        "an MCP tools/call round trip through interlock mcp-gateway vs straight to the same "
        "stdio upstream, raw JSON-RPC client, interleaved (--calls: calls per subject)",
        _mcp_gateway,
    ),
    "mcp-gateway-http": Benchmark(
        "an MCP tools/call over streamable HTTP through interlock mcp-gateway --http (key, "
        "judge, HTTP upstream) vs straight to the same HTTP upstream, raw httpx client, "
        "interleaved (--calls: calls per subject)",
        _mcp_gateway_http,
    ),
    "replay": Benchmark(
        "interlock audit replay over a recorded log of the demo's agents (SQLite), "
        "re-decisions/s vs the plain engine on the same calls (--calls: records, "
        "default 100,000)",
        _replay,
    ),
    "llm-proxy": Benchmark(
        "the openai client through interlock llm-proxy (SQLite store, default durability), "
        "through llm-proxy --server and through LiteLLM's proxy (its own pinned environment) "
        "vs direct to the same local stand-in and vs a bare Starlette + httpx relay: a call, "
        "and a stream's first chunk and end (chat completions, with and without tools, and "
        "responses), and each side's CPU per call (--calls: non-streamed chat calls per side)",
        _llm_proxy,
        _llm_proxy_profile,
    ),
    "session": Benchmark(
        "guard.check with session rules (labels, flows, provenance; MemoryHistory, 20- and "
        "200-step sessions) and on the durable SQLite path vs the stateless check in the "
        "same run; fingerprint cost per KB; history memory per session (--calls: checks "
        "per subject)",
        _session,
    ),
    "otel": Benchmark(
        "guard.check and a protected call with OpenTelemetry telemetry off (the baseline), "
        "on with the API only (no SDK), and on with the SDK and in-memory exporter/reader; "
        "the extra absent in a fresh interpreter; p50 and CPU ratios (--calls: per subject)",
        _otel,
    ),
}

QUICK_CALLS = 20_000


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__.splitlines()[0])
    parser.add_argument("names", nargs="*", metavar="name", help=f"one of: {', '.join(BENCHMARKS)}")
    parser.add_argument(
        "--calls", type=int, default=None, help="timed calls per subject (see --list)"
    )
    parser.add_argument(
        "--quick",
        action="store_true",
        help=f"a short smoke run (check: {QUICK_CALLS:,} calls per subject)",
    )
    parser.add_argument(
        "--profile",
        action="store_true",
        help="print a cProfile of the benchmark's hot loop instead of timing it",
    )
    parser.add_argument("--list", action="store_true", help="list the benchmarks and exit")
    options = parser.parse_args(argv)

    if options.list:
        for name, bench in BENCHMARKS.items():
            print(f"{name:15} {bench.description}")
        return 0
    unknown = [n for n in options.names if n not in BENCHMARKS]
    if unknown:
        parser.error(f"unknown benchmark(s): {', '.join(unknown)}; known: {', '.join(BENCHMARKS)}")
    names = options.names or list(BENCHMARKS)

    if options.profile:
        for name in names:
            profiler = BENCHMARKS[name].profile
            print(f"== {name} ==")
            print(profiler() if profiler else "(no profile for this benchmark)")
        return 0

    machine = machine_info()
    print(
        f"python {machine['python']} on {machine['cpu_model']} × {machine['cpu_count']}, "
        f"load {machine['loadavg']}"
    )
    results = []
    for name in names:
        print(f"running {name} ...", flush=True)
        result = BENCHMARKS[name].run(options.calls, options.quick)
        path = write_result(result, machine)
        for note in result.notes:
            print(f"  {note}")
        print(f"  results: {path}")
        results.append(result)
    print()
    print(format_table(results))
    problems = [(r.name, p) for r in results for p in r.problems]
    if problems:
        print()
        print("!" * 78)
        print(f"!!! {len(problems)} CORRECTNESS PROBLEM(S):")
        for name, problem in problems:
            print(f"!!! [{name}] {problem}")
        print("!" * 78)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
