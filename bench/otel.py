"""Telemetry's cost per check: ``python -m bench otel``.

One run, one process, the same actions through four guards: the plain guard (the
baseline: no telemetry, which is also what a guard costs with the extra absent);
``telemetry=True`` with the OpenTelemetry API installed but no SDK configured (the
API's no-op providers); and ``telemetry=`` an SDK with an in-memory span exporter and
metric reader (every decision a recorded span and metric points). A guarded body
(``protect``) is timed plain and with the SDK too. The extra-absent case also runs in a
fresh interpreter with ``opentelemetry`` hidden, against its own plain baseline.

Figures are ratios to the same run's plain check; CPU time per call is reported too
(it does not drift with the machine's load).
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Callable
from typing import Any

from bench.harness import BenchResult, Stats, summarise, time_calls

DEFAULT_CALLS = 20_000

POLICY_TEXT = """
version: 1
default: deny
rules:
  - id: read
    decision: allow
    reason: reading is fine
    name: read_file
  - id: no-rm
    decision: deny
    reason: no recursive deletes
    name: shell
    when: "args.command.startsWith('rm')"
  - id: shell
    decision: allow
    reason: shell is allowed
    name: shell
"""

_HIDDEN_RUN = """
import importlib.abc, json, sys, time
class Hidden(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name == "opentelemetry" or name.startswith("opentelemetry."):
            raise ModuleNotFoundError(name)
sys.meta_path.insert(0, Hidden())
from bench.otel import plain_guard, workload
from bench.harness import time_calls, summarise
guard = plain_guard()
inputs = workload()
calls = int(sys.argv[1])
cpu = time.process_time_ns()
samples, wall = time_calls(guard.check, inputs, calls, calls // 10)
cpu = time.process_time_ns() - cpu
stats = summarise("absent", samples, wall)
loaded = [m for m in sys.modules if m.startswith("opentelemetry")]
print(json.dumps({"p50": stats.p50_ns, "cpu": cpu / (calls * 1.1), "loaded": loaded}))
"""


def workload() -> list[Any]:
    from interlock import Action

    return [
        Action.tool("read_file", {"path": "notes.txt"}),
        Action.tool("shell", {"command": "ls -la"}),
        Action.tool("shell", {"command": "rm -rf /"}),
        Action.tool("read_file", {"path": "report.md"}),
    ]


def plain_guard() -> Any:
    from interlock import Guard, load_policy_text

    return Guard(load_policy_text(POLICY_TEXT))


def _sdk_telemetry() -> tuple[Any, Callable[[], None]]:
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import InMemoryMetricReader
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    from interlock.otel import Telemetry

    exporter = InMemorySpanExporter()
    tracer_provider = TracerProvider()
    tracer_provider.add_span_processor(SimpleSpanProcessor(exporter))
    meter_provider = MeterProvider(metric_readers=[InMemoryMetricReader()])
    telemetry = Telemetry(tracer_provider=tracer_provider, meter_provider=meter_provider)
    return telemetry, exporter.clear


def _sdk_floor(telemetry: Any) -> Callable[[Any], object]:
    """The SDK's own cost for what a check reports, without a guard: one span with
    the attributes of a decision span, and the two metric points."""
    tracer, decisions, duration = telemetry.tracer, telemetry.decisions, telemetry.duration
    attributes = {
        "interlock.action.kind": "tool",
        "gen_ai.tool.name": "read_file",
        "interlock.tenant": "default",
        "interlock.verdict": "allow",
        "interlock.decision_id": "dec_0123456789ab00000001",
        "interlock.rule_ids": ["read"],
    }
    labels = {"interlock.verdict": "allow", "interlock.action.kind": "tool"}

    def floor(_: Any) -> None:
        span = tracer.start_span("interlock.check", attributes=attributes)
        span.end()
        decisions.add(1, labels)
        duration.record(0.00001, labels)

    return floor


def _timed(
    label: str, fn: Callable[[Any], object], inputs: list[Any], calls: int
) -> tuple[Stats, float]:
    cpu = time.process_time_ns()
    samples, wall = time_calls(fn, inputs, calls, calls // 10)
    cpu = time.process_time_ns() - cpu
    return summarise(label, samples, wall), cpu / (calls + calls // 10)


def run(calls: int = DEFAULT_CALLS) -> BenchResult:
    from interlock import Guard, load_policy_text

    result = BenchResult("otel")
    inputs = workload()
    policy = load_policy_text(POLICY_TEXT)
    try:
        import opentelemetry.sdk  # noqa: F401
    except ImportError:
        result.notes.append("opentelemetry-sdk is not installed: pip install opentelemetry-sdk")
        return result
    from interlock.otel import Telemetry

    sdk, clear = _sdk_telemetry()
    guards = {
        "check, plain (baseline)": Guard(policy),
        "check, telemetry, API only (no SDK)": Guard(policy, telemetry=Telemetry()),
        "check, telemetry, SDK + in-memory exporter": Guard(policy, telemetry=sdk),
    }
    cpu: dict[str, float] = {}
    p50: dict[str, int] = {}
    for label, guard in guards.items():
        stats, per_call = _timed(label, guard.check, inputs, calls)
        clear()
        result.stats.append(stats)
        cpu[label], p50[label] = per_call, stats.p50_ns

    stats, per_call = _timed(
        "SDK floor: one span + 2 metric points, no guard", _sdk_floor(sdk), inputs, calls
    )
    clear()
    result.stats.append(stats)
    cpu[stats.label], p50[stats.label] = per_call, stats.p50_ns

    def body(path: str) -> str:
        return path

    plain_body = Guard(policy).protect(name="read_file")(body)
    sdk_body = Guard(policy, telemetry=sdk).protect(name="read_file")(body)
    for label, fn in (
        ("protect, plain (baseline)", plain_body),
        ("protect, telemetry, SDK + in-memory exporter", sdk_body),
    ):
        stats, per_call = _timed(label, fn, ["notes.txt"], calls)
        clear()
        result.stats.append(stats)
        cpu[label], p50[label] = per_call, stats.p50_ns

    hidden = subprocess.run(
        [sys.executable, "-c", _HIDDEN_RUN, str(calls)],
        capture_output=True,
        text=True,
        check=False,
    )
    baseline = "check, plain (baseline)"
    if hidden.returncode == 0:
        absent = json.loads(hidden.stdout.strip().splitlines()[-1])
        result.info["absent (fresh interpreter, opentelemetry hidden)"] = {
            "p50_ns": absent["p50"],
            "cpu_ns_per_call": round(absent["cpu"], 1),
            "opentelemetry_modules_loaded": absent["loaded"],
        }
        if absent["loaded"]:
            result.problems.append(f"a plain guard imported {absent['loaded']}")
    else:
        result.problems.append(f"the extra-absent run failed: {hidden.stderr[-500:]}")
    for label, median in p50.items():
        base = "protect, plain (baseline)" if label.startswith("protect") else baseline
        result.info[label] = {
            "p50_ratio": round(median / p50[base], 2),
            "cpu_ns_per_call": round(cpu[label], 1),
            "cpu_ratio": round(cpu[label] / cpu[base], 2),
        }
    result.notes.append(
        "ratios are to the same run's plain guard; 'absent' is the plain guard in a fresh "
        "interpreter where opentelemetry cannot be imported"
    )
    return result


if __name__ == "__main__":
    print(json.dumps(run(2_000).to_json(), indent=2))
