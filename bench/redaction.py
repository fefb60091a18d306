"""Redaction on the durable path: ``redact_value`` over typical tool and model arguments,
and ``redact`` over strings that do hold secrets.

Every record the audit writer and the sinks keep is redacted first, so redaction is
part of the cost of every durable decision. The typical arguments hold no secret (most
calls do not): what they cost is the price of looking. The secret-bearing strings show
the cost of finding and replacing.

The baseline in the same run is ``json.dumps`` of the same arguments (the encoding the
record goes through next). With ``INTERLOCK_BENCH_BASELINE_SRC`` set to another source
tree (``.../src`` of a checkout of main), the same subjects are also timed against that
tree's redaction module (loaded in the same process), the two called in turn, and the
ratio of this tree's p50 to that one's is reported per subject.
"""

from __future__ import annotations

import gc
import importlib.util
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

from bench.harness import BenchResult, Target, summarise

__all__ = ["DEFAULT_CALLS", "run", "subjects"]

DEFAULT_CALLS = 20_000

TYPICAL: dict[str, Any] = {
    "shell": {"command": "ls -la /var/log && grep -i error /var/log/syslog | tail -n 50"},
    "http": {
        "url": "https://api.example.com/v1/orders?limit=10&page=2",
        "method": "GET",
        "headers": {"Accept": "application/json", "User-Agent": "agent/1.0"},
    },
    "payment": {
        "amount": 250,
        "currency": "USD",
        "order_id": "ord_8f3a2b",
        "to": "ACME-7781",
        "idempotency_key": "c0a8012e-7d1f-4b5e-9f3a-2b6c8d9e0f11",
    },
    "write_file": {
        "path": "/home/user/project/src/main.py",
        "content": "def main() -> None:\n    print('hello, world')\n\n" * 6,
    },
    "sql": {"query": "SELECT id, name FROM customers WHERE created_at > '2024-01-01' LIMIT 100"},
    "llm": {
        "model": "gpt-4o",
        "messages": [
            {"role": "system", "content": "You are a careful operations assistant."},
            {"role": "user", "content": "Summarise yesterday's incident notes in five bullets."},
        ],
        "max_tokens": 512,
    },
}

# Assembled at run time so that secret scanners do not flag this file.
_BODY = "A1b2C3d4E5f6G7h8J9k0" * 3
WITH_SECRETS: dict[str, str] = {
    "curl_bearer": f"curl -H 'Authorization: Bearer {_BODY[:40]}' https://api.example.com/v1/me",
    "env_line": f"DB_PASSWORD={_BODY[:16]} AWS_ACCESS_KEY_ID=AKIA{_BODY[:16].upper()} ./deploy.sh",
    "provider_key": f"export OPENAI_API_KEY=sk-proj-{_BODY[:48]} && python run.py",
    "json_text": json.dumps({"user": "bob", "password": _BODY[:12], "note": "rotate monthly"}),
}


Subjects = dict[str, tuple[Any, Any]]  # name -> (function, its one input)


def subjects(module: Any) -> Subjects:
    """The timed calls, made with the redaction module ``module``."""
    out: Subjects = {}
    for name, arguments in TYPICAL.items():
        out[f"redact_value {name}"] = (module.redact_value, arguments)
    for name, text in WITH_SECRETS.items():
        out[f"redact {name}"] = (module.redact, text)
    return out


def _interleaved(
    one: tuple[Any, Any], other: tuple[Any, Any], calls: int
) -> tuple[list[int], list[int]]:
    """Per-call times of two contenders, called in turn (one, other, one, ...) so that
    both meet the same moments of a shared, noisy machine."""
    (f, x), (g, y) = one, other
    for _ in range(min(500, calls)):
        f(x)
        g(y)
    clock = time.perf_counter_ns
    ones, others = [0] * calls, [0] * calls
    gc.collect()
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        for i in range(calls):
            t0 = clock()
            f(x)
            t1 = clock()
            g(y)
            ones[i] = t1 - t0
            others[i] = clock() - t1
    finally:
        if was_enabled:
            gc.enable()
    return ones, others


def _baseline_module(src: str) -> Any:
    """The ``interlock/core/redaction.py`` of another tree, loaded under its own name
    (it imports only the standard library), to time both in one process."""
    path = Path(src) / "interlock" / "core" / "redaction.py"
    spec = importlib.util.spec_from_file_location("baseline_redaction", path)
    if spec is None or spec.loader is None:
        raise RuntimeError(f"cannot load {path}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up by name
    spec.loader.exec_module(module)
    return module


def run(calls: int | None, quick: bool) -> BenchResult:
    from interlock.core import redaction

    calls = calls or (2_000 if quick else DEFAULT_CALLS)
    result = BenchResult("redaction")
    result.info["calls"] = calls
    mine = subjects(redaction)
    baseline_src = os.environ.get("INTERLOCK_BENCH_BASELINE_SRC")
    theirs = subjects(_baseline_module(baseline_src)) if baseline_src else {}
    for name, (fn, item) in mine.items():
        reference = "baseline tree" if name in theirs else "json.dumps"
        other = theirs.get(name, (json.dumps, item))
        ones, others = _interleaved((fn, item), other, calls)
        best = {
            "this tree": (summarise("", ones, 0).p50_ns, summarise("", ones, 0).p99_ns),
            reference: (summarise("", others, 0).p50_ns, summarise("", others, 0).p99_ns),
        }
        result.info[name] = {
            label: {"p50_ns": p50, "p99_ns": p99} for label, (p50, p99) in best.items()
        }
        ratio = best["this tree"][0] / best[reference][0]
        limit = (1.2 if name.startswith("redact_value") else 2.5) if theirs else 20.0
        result.targets.append(Target(f"{name} p50 vs {reference}", ratio, "<=", limit, "×"))
        result.notes.append(
            f"{name}: p50 {best['this tree'][0] / 1000:.2f} µs vs {reference} "
            f"{best[reference][0] / 1000:.2f} µs ({ratio:.2f}×)"
        )
    if not theirs:
        result.notes.append("set INTERLOCK_BENCH_BASELINE_SRC=<main>/src to compare two trees")
    return result
