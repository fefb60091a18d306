"""Start-up: ``import interlock``, ``interlock check`` and loading a 1,000-rule policy,
each beside its floor measured in the same run.

Subjects, each in a fresh process, run round-robin so that every round sees the same
machine (absolute times drift with the load; the ratios are what this reports):

- ``python -c pass`` — the floor every Python command pays (the baseline);
- ``import interlock`` and ``from interlock import Action, Guard`` (what a program
  embedding the guard imports);
- ``interlock check`` on the example policy (a shell call): as a hook runs it, with
  its policy cache holding the file (every round after the first), and with the cache
  off (``INTERLOCK_POLICY_CACHE=off``: the file parsed every time); beside them the
  third-party floor of the typer command line: importing typer (with the pydantic
  adapters it builds for each option), rich's console, pydantic and PyYAML, nothing of
  Interlock (a plain ``interlock check`` skips typer, rich and pydantic: ADR 0014);
- loading the check benchmark's 100 rules repeated ten times (1,000 rules, ids made
  unique) with :func:`interlock.load_policy_text`, timed inside a fresh process after
  its imports (the loader, the YAML reader and the CEL partial evaluator; the first
  load: no cache of this process has seen the policy, and no file cache is used), beside
  ``yaml.load`` of the same text with PyYAML's fastest safe loader in the same process
  (the floor: reading the file at all).

Each process also reports whether ``import interlock`` pulled in pydantic, yaml, the
store, the server or a framework: that is a correctness problem, not a figure.

With ``INTERLOCK_BENCH_BASELINE_SRC`` set to another source tree (``.../src`` of a
checkout of main), ``import interlock``, ``interlock check`` and the policy load are
also run from that tree (on ``PYTHONPATH``, ahead of this one), in the same rounds, and
the ratio of each to its baseline-tree twin is reported. ``interlock check`` is run as
``python -c "from interlock.cli import main; main()" check ...`` for both trees: the
console script's own code, without the wrapper that names one tree. Before the rounds,
the ``.pyc`` files of both trees are written (``compileall``), as an install writes
them; otherwise ``PYTHONDONTWRITEBYTECODE`` would make every process compile Interlock
from source.
"""

from __future__ import annotations

import compileall
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import yaml

from bench.harness import BenchResult, Stats, Target, summarise

__all__ = ["DEFAULT_ROUNDS", "policy_text", "run"]

DEFAULT_ROUNDS = 30
QUICK_ROUNDS = 8
RULE_COPIES = 10  # x the check benchmark's 100 rules

# Targets of issue 13, expressed against the bare interpreter it measured (12 ms):
# import ≤ 60 ms (5x), `interlock check` ≤ 150 ms (12.5x); policy load ≤ 0.1 ms a rule.
IMPORT_RATIO = 60 / 12
CHECK_RATIO = 150 / 12
LOAD_MS_PER_RULE = 0.1

SOURCE = Path(__file__).resolve().parents[1] / "src"
EXAMPLE_POLICY = SOURCE / "interlock/examples/interlock.yaml"

#: Modules `import interlock` must not load (tests/test_startup.py pins a longer list).
HEAVY_MODULES = (
    "pydantic",
    "yaml",
    "cel",
    "re2",
    "tree_sitter",
    "ada_url",
    "typer",
    "rich",
    "interlock.store",
    "interlock.server",
    "interlock.policy.schema",
)

_IMPORT_PROBE = (
    "import sys, interlock\n"
    f"heavy = [m for m in {HEAVY_MODULES!r} if m in sys.modules]\n"
    "if heavy: print('HEAVY', *heavy)\n"
)

# The loader, and what a load of this policy imports on first use since ADR 0014's
# fourth pass (the YAML reader and the CEL partial evaluator), which the loader's own
# import pulled in before it: the figure is the load's, comparable across trees.
_LOAD_PROBE = """
import json, sys, time
import yaml
from interlock.policy.loader import load_policy_text
import interlock.policy.source, interlock.policy.celpartial
text = open(sys.argv[1], encoding="utf-8").read()
loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
clock = time.perf_counter_ns
first_yaml = sys.argv[2] == "yaml-first"
if first_yaml:
    t0 = clock(); yaml.load(text, Loader=loader); parse = clock() - t0
t0 = clock(); policy = load_policy_text(text); load = clock() - t0
if not first_yaml:
    t0 = clock(); yaml.load(text, Loader=loader); parse = clock() - t0
print(json.dumps({"load_ns": load, "yaml_ns": parse, "rules": len(policy.rules)}))
"""


def policy_text(copies: int = RULE_COPIES) -> str:
    """The check benchmark's policy with its rules repeated ``copies`` times."""
    from bench.check import policy_yaml, rules

    document = yaml.safe_load(policy_yaml(rules()))
    base = document["rules"]
    document["rules"] = [
        {**rule, "id": f"{rule['id']}-{copy}"} for copy in range(copies) for rule in base
    ]
    document["description"] = f"Benchmark policy: {len(document['rules'])} rules."
    return yaml.safe_dump(document, sort_keys=False, width=100, allow_unicode=True)


_CLI = "from interlock.cli import main; main()"
# What the typer command line imports before Interlock runs a line (typer builds a
# pydantic adapter for each option it parses), the console, the validator and YAML; a
# plain `interlock check` skips typer and rich (ADR 0014), so it is no longer its floor.
_FLOOR = "import typer, typer._adapters, rich.console, pydantic, yaml"

Subject = tuple[list[str], dict[str, str] | None]


def _timed(argv: Sequence[str], env: dict[str, str] | None = None) -> tuple[int, str]:
    t0 = time.perf_counter_ns()
    done = subprocess.run(argv, capture_output=True, text=True, timeout=120, check=False, env=env)
    elapsed = time.perf_counter_ns() - t0
    if done.returncode != 0:
        raise RuntimeError(f"{argv!r} exited {done.returncode}: {done.stderr.strip()[-500:]}")
    return elapsed, done.stdout


def _compile_bytecode(trees: Sequence[Path]) -> None:
    """Write the ``.pyc`` files of each tree's ``interlock`` package, as installing it
    does: with ``PYTHONDONTWRITEBYTECODE`` set, no subject would write them, and every
    process would compile Interlock's ~50 modules from source (~170 ms here)."""
    for tree in trees:
        compileall.compile_dir(str(tree / "interlock"), quiet=1)


def _stats(label: str, samples: list[int]) -> Stats:
    return summarise(label, samples, sum(samples))


def run(calls: int | None = None, quick: bool = False) -> BenchResult:
    rounds = calls or (QUICK_ROUNDS if quick else DEFAULT_ROUNDS)
    python = sys.executable
    check_args = ["check", "--policy", str(EXAMPLE_POLICY), "--name", "shell"]
    check_args += ["--arg", "command=ls -la"]
    baseline_src = os.environ.get("INTERLOCK_BENCH_BASELINE_SRC")
    base_env = {**os.environ, "PYTHONPATH": baseline_src} if baseline_src else None
    scratch = tempfile.TemporaryDirectory(prefix="interlock-bench-startup-cache-")
    cached_env = {**os.environ, "INTERLOCK_POLICY_CACHE": os.path.join(scratch.name, "cache")}
    uncached_env = {**os.environ, "INTERLOCK_POLICY_CACHE": "off"}
    subjects: dict[str, Subject] = {
        "python -c pass (baseline)": ([python, "-c", "pass"], None),
        "import interlock": ([python, "-c", _IMPORT_PROBE], None),
        "from interlock import Action, Guard": (
            [python, "-c", "from interlock import Action, Guard"],
            None,
        ),
        "interlock check": ([python, "-c", _CLI, *check_args], cached_env),
        "interlock check, no cache": ([python, "-c", _CLI, *check_args], uncached_env),
        "third-party floor of check": ([python, "-c", _FLOOR], None),
    }
    if base_env is not None:
        subjects["import interlock (baseline tree)"] = (
            [python, "-c", "import interlock"],
            base_env,
        )
        subjects["from interlock import Action, Guard (baseline tree)"] = (
            [python, "-c", "from interlock import Action, Guard"],
            base_env,
        )
        subjects["interlock check (baseline tree)"] = ([python, "-c", _CLI, *check_args], base_env)
    samples: dict[str, list[int]] = {name: [] for name in subjects}
    problems: list[str] = []
    loads: dict[str, tuple[list[int], list[int]]] = {"this tree": ([], [])}
    if base_env is not None:
        loads["baseline tree"] = ([], [])
    rules = 0
    with scratch, tempfile.TemporaryDirectory(prefix="interlock-bench-startup-") as tmp:
        policy_file = Path(tmp) / "policy-1000.yaml"
        policy_file.write_text(policy_text(), encoding="utf-8")
        load = [python, "-c", _LOAD_PROBE, str(policy_file)]
        _compile_bytecode([SOURCE, *([Path(baseline_src)] if baseline_src else [])])
        for argv, env in subjects.values():  # warm the page cache
            _timed(argv, env)
        for i in range(rounds):
            for name, (argv, env) in subjects.items():
                elapsed, stdout = _timed(argv, env)
                samples[name].append(elapsed)
                if stdout.startswith("HEAVY") and stdout.strip() not in problems:
                    problems.append(f"import interlock loaded {stdout.split(None, 1)[1].strip()}")
            order = "yaml-first" if i % 2 else "load-first"
            for tree, (load_ns, yaml_ns) in loads.items():
                _, stdout = _timed([*load, order], base_env if tree == "baseline tree" else None)
                figures: dict[str, Any] = json.loads(stdout)
                load_ns.append(int(figures["load_ns"]))
                yaml_ns.append(int(figures["yaml_ns"]))
                rules = int(figures["rules"])

    stats = [_stats(name, values) for name, values in samples.items()]
    stats.append(_stats(f"load_policy_text, {rules} rules", loads["this tree"][0]))
    stats.append(_stats("yaml.load, same text (baseline of the load)", loads["this tree"][1]))
    if "baseline tree" in loads:
        stats.append(
            _stats(f"load_policy_text, {rules} rules (baseline tree)", loads["baseline tree"][0])
        )
    by_name = {s.label: s for s in stats}
    bare = by_name["python -c pass (baseline)"].p50_ns
    imported = by_name["import interlock"].p50_ns
    embedded = by_name["from interlock import Action, Guard"].p50_ns
    checked = by_name["interlock check"].p50_ns
    uncached = by_name["interlock check, no cache"].p50_ns
    floor = by_name["third-party floor of check"].p50_ns
    load_p50 = by_name[f"load_policy_text, {rules} rules"].p50_ns
    yaml_p50 = by_name["yaml.load, same text (baseline of the load)"].p50_ns
    per_rule_ms = load_p50 / max(rules, 1) / 1e6
    targets = [
        Target("import interlock / bare python (p50)", imported / bare, "<=", IMPORT_RATIO, "x"),
        Target("interlock check / bare python (p50)", checked / bare, "<=", CHECK_RATIO, "x"),
        Target(
            "interlock check, no cache / bare python (p50)",
            uncached / bare,
            "<=",
            CHECK_RATIO,
            "x",
        ),
        Target(
            "policy load per rule (p50, 1,000 rules)", per_rule_ms, "<=", LOAD_MS_PER_RULE, "ms"
        ),
    ]
    info = {
        "rounds": rounds,
        "rules": rules,
        "bare_python_p50_ms": round(bare / 1e6, 2),
        "import_interlock_p50_ms": round(imported / 1e6, 2),
        "import_interlock_minus_bare_ms": round((imported - bare) / 1e6, 2),
        "import_action_guard_p50_ms": round(embedded / 1e6, 2),
        "import_action_guard_minus_bare_ms": round((embedded - bare) / 1e6, 2),
        "interlock_check_p50_ms": round(checked / 1e6, 2),
        "interlock_check_minus_bare_ms": round((checked - bare) / 1e6, 2),
        "interlock_check_no_cache_p50_ms": round(uncached / 1e6, 2),
        "interlock_check_no_cache_over_bare": round(uncached / bare, 2),
        "third_party_floor_p50_ms": round(floor / 1e6, 2),
        "third_party_floor_over_bare": round(floor / bare, 2),
        "interlock_check_minus_floor_ms": round((checked - floor) / 1e6, 2),
        "policy_load_p50_ms": round(load_p50 / 1e6, 2),
        "policy_load_ms_per_rule": round(per_rule_ms, 4),
        "yaml_load_p50_ms": round(yaml_p50 / 1e6, 2),
        "policy_load_over_yaml": round(load_p50 / yaml_p50, 2),
    }
    if base_env is not None:
        for name in ("import interlock", "from interlock import Action, Guard", "interlock check"):
            theirs = by_name[f"{name} (baseline tree)"].p50_ns
            info[f"{name}: baseline tree / this tree"] = round(theirs / by_name[name].p50_ns, 2)
            info[f"{name} (baseline tree) p50_ms"] = round(theirs / 1e6, 2)
        theirs = by_name[f"load_policy_text, {rules} rules (baseline tree)"].p50_ns
        info["policy load: baseline tree / this tree"] = round(theirs / load_p50, 2)
        info["policy load (baseline tree) ms per rule"] = round(theirs / max(rules, 1) / 1e6, 4)
    notes = [
        f"bare python p50 {info['bare_python_p50_ms']} ms; import interlock "
        f"{imported / bare:.2f}x ({info['import_interlock_minus_bare_ms']:+} ms); "
        f"from interlock import Action, Guard {embedded / bare:.2f}x; "
        f"interlock check {checked / bare:.2f}x ({info['interlock_check_minus_bare_ms']:+} ms; "
        f"no cache {uncached / bare:.2f}x; the typer path's third-party floor alone "
        f"{floor / bare:.2f}x)",
        f"policy load, {rules} rules: p50 {info['policy_load_p50_ms']} ms = "
        f"{per_rule_ms:.3f} ms a rule, {info['policy_load_over_yaml']}x yaml.load of the "
        "same text",
    ]
    notes.extend(f"{key}: {value}" for key, value in info.items() if "baseline tree" in key)
    if base_env is None:
        notes.append("set INTERLOCK_BENCH_BASELINE_SRC=<main>/src to compare two trees")
    return BenchResult(
        name="startup", stats=stats, targets=targets, info=info, notes=notes, problems=problems
    )
