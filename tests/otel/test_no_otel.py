"""Without the extra, nothing of OpenTelemetry is imported — by ``import interlock``,
by a check, by a guarded body or a model call — and asking for telemetry says which
extra to install. Each case runs in a fresh interpreter."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest

#: Makes ``opentelemetry`` unimportable, as in an environment without the extra.
HIDE = """
import importlib.abc, sys
class Hidden(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name == "opentelemetry" or name.startswith("opentelemetry."):
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None
sys.meta_path.insert(0, Hidden())
"""

WORK = """
import asyncio, json, sys
import interlock
from interlock import Action, Guard, Usage, load_policy_text
policy = load_policy_text('''
version: 1
default: deny
rules:
  - {id: read, decision: allow, reason: ok, name: read_file}
  - {id: llm, decision: allow, reason: ok, kind: llm}
budgets:
  - {id: tokens, limit: 1000, unit: tokens, kind: llm}
''')
guard = Guard(policy)
assert guard.check(Action.tool("read_file", {"path": "a"})).allowed
assert not guard.check(Action.tool("rm", {})).allowed
@guard.protect
def read_file(path):
    return path
assert read_file("x") == "x"
with guard.llm_call("m", estimate=Usage(1, 1)) as call:
    call.record(Usage(1, 1))
async def twice():
    return await guard.acheck(Action.tool("read_file", {"path": "b"}))
assert asyncio.run(twice()).allowed
loaded = sorted(m for m in sys.modules if m.startswith("opentelemetry") or m == "interlock.otel")
"""


def run(code: str) -> dict[str, object]:
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


def test_without_the_extra_a_guard_imports_no_opentelemetry() -> None:
    found = run(HIDE + WORK + "print(json.dumps({'loaded': loaded}))")
    assert found["loaded"] == []


def test_with_the_extra_installed_a_guard_without_telemetry_imports_none() -> None:
    pytest.importorskip("opentelemetry")
    found = run(WORK + "print(json.dumps({'loaded': loaded}))")
    assert found["loaded"] == []


def test_asking_for_telemetry_without_the_extra_names_it() -> None:
    found = run(
        HIDE
        + WORK
        + """
try:
    Guard(policy, telemetry=True)
    error = None
except ImportError as exc:
    error = str(exc)
print(json.dumps({"error": error}))
"""
    )
    assert found["error"] is not None
    assert "pip install 'interlock[otel]'" in str(found["error"])


def test_telemetry_true_uses_an_sdk_configured_after_the_guard() -> None:
    pytest.importorskip("opentelemetry.sdk")
    found = run(
        """
import json
from interlock import Action, Guard, load_policy_text
policy = load_policy_text('''
version: 1
default: deny
rules:
  - {id: read, decision: allow, reason: ok, name: read_file}
''')
guard = Guard(policy, telemetry=True)      # before any SDK: the API's placeholders
assert guard.check(Action.tool("read_file", {})).allowed   # a no-op span, not kept

from opentelemetry import metrics, trace
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
exporter = InMemorySpanExporter()
provider = TracerProvider()
provider.add_span_processor(SimpleSpanProcessor(exporter))
trace.set_tracer_provider(provider)
reader = InMemoryMetricReader()
metrics.set_meter_provider(MeterProvider(metric_readers=[reader]))

assert not guard.check(Action.tool("rm", {})).allowed
counted = [
    (p.attributes["interlock.verdict"], p.value)
    for r in reader.get_metrics_data().resource_metrics
    for s in r.scope_metrics
    for m in s.metrics if m.name == "interlock.decisions"
    for p in m.data.data_points
]
print(json.dumps({"spans": [s.name for s in exporter.get_finished_spans()], "counted": counted}))
"""
    )
    assert found["spans"] == ["interlock.check", "execute_tool rm"]
    assert found["counted"] == [["deny", 1]]


def test_the_api_alone_is_enough_and_decides_the_same() -> None:
    pytest.importorskip("opentelemetry")
    hide_sdk = HIDE.replace(
        'name == "opentelemetry" or name.startswith("opentelemetry.")',
        ('name == "opentelemetry.sdk" or name.startswith("opentelemetry.sdk.")'),
    )
    found = run(
        hide_sdk
        + WORK.replace("guard = Guard(policy)", "guard = Guard(policy, telemetry=True)")
        + "print(json.dumps({'loaded': loaded}))"
    )
    loaded = found["loaded"]
    assert isinstance(loaded, list)
    assert "interlock.otel" in loaded and "opentelemetry.trace" in loaded
    assert not any(name.startswith("opentelemetry.sdk") for name in loaded)
