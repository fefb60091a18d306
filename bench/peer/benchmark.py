"""Benchmark ``peer``: ``guard.check`` against the peer toolkit's policy evaluator.

One policy of 100 single-condition rules, written in the peer's shape and translated
rule for rule into ``interlock.yaml`` (:mod:`bench.peer.policy`), over a 6-call mix
(3 allowed, 2 denied by rules, 1 denied by the default).

The peer runs in its **own process and environment** (``bench/.peer-venv``, created on
first use from the pinned ``bench/peer/requirements.txt``), driven over a JSON-lines
pipe (:mod:`bench.peer.runner`); it times its own calls with the same loop
(:func:`bench.harness.time_calls`) Interlock's side uses. The two are **interleaved**:
each round times Interlock, then the peer, then a floor (a dict lookup and one regex
search, as in ``check``), so drift in the machine hits all of them; the samples of all
rounds are pooled per subject.

Before timing, both engines decide every call of the mix and the answers are compared:
the verdict, and the set of matching rules of the deciding tier (the peer reports its
first match, and also answers which rules' conditions hold, by its own matcher). Any
disagreement is a correctness problem: ``python -m bench peer`` exits 2.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import re
import subprocess
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from bench.harness import BenchResult, Stats, Target, dict_regex_floor, summarise, time_calls
from bench.peer.policy import (
    CALLS,
    Call,
    PeerRule,
    interlock_yaml,
    peer_context,
    peer_document,
    reference_decision,
    rules,
)

__all__ = ["PeerProcess", "Setup", "build", "compare", "ensure_peer_python", "profile", "run"]

ROOT: Final = Path(__file__).resolve().parents[2]
REQUIREMENTS: Final = Path(__file__).resolve().parent / "requirements.txt"
#: Where the peer's environment lives; ``INTERLOCK_BENCH_PEER_VENV`` moves it.
DEFAULT_VENV: Final = ROOT / "bench" / ".peer-venv"

DEFAULT_CALLS: Final = 120_000
QUICK_CALLS: Final = 12_000
DEFAULT_ROUNDS: Final = 10
QUICK_ROUNDS: Final = 4
WARMUP: Final = 3_000
TARGET_MEAN_RATIO: Final = 5.0


def venv_dir() -> Path:
    return Path(os.environ.get("INTERLOCK_BENCH_PEER_VENV") or DEFAULT_VENV)


def _requirements_digest() -> str:
    return hashlib.sha256(REQUIREMENTS.read_bytes()).hexdigest()


def peer_python(venv: Path | None = None) -> Path | None:
    """The peer environment's interpreter if it is installed from the current pins."""
    venv = venv or venv_dir()
    python = venv / "bin" / "python"
    marker = venv / ".installed"
    installed = marker.read_text(encoding="utf-8").strip() if marker.exists() else None
    return python if python.exists() and installed == _requirements_digest() else None


def ensure_peer_python(venv: Path | None = None) -> Path:
    """The peer environment's interpreter, creating the environment first if needed."""
    venv = venv or venv_dir()
    python = peer_python(venv)
    if python is not None:
        return python
    print(f"  creating the peer environment in {venv} (once) ...", flush=True)
    subprocess.run([sys.executable, "-m", "venv", "--clear", str(venv)], check=True)
    subprocess.run(
        [str(venv / "bin" / "python"), "-m", "pip", "install", "--quiet", "-r", str(REQUIREMENTS)],
        check=True,
    )
    (venv / ".installed").write_text(_requirements_digest() + "\n", encoding="utf-8")
    return venv / "bin" / "python"


class PeerProcess:
    """The peer's evaluator in its own process, one JSON line each way."""

    def __init__(self, python: Path) -> None:
        env = {**os.environ, "PYTHONPATH": str(ROOT), "PYTHONDONTWRITEBYTECODE": "1"}
        self._proc = subprocess.Popen(
            [str(python), "-m", "bench.peer.runner"],
            cwd=ROOT,
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )

    def request(self, **request: Any) -> dict[str, Any]:
        stdin, stdout = self._proc.stdin, self._proc.stdout
        assert stdin is not None and stdout is not None
        stdin.write(json.dumps(request) + "\n")
        stdin.flush()
        line = stdout.readline()
        if not line:
            raise RuntimeError(f"the peer process ended (exit {self._proc.wait()})")
        answer: dict[str, Any] = json.loads(line)
        if not answer.get("ok"):
            raise RuntimeError(f"the peer failed on {request['op']!r}: {answer.get('error')}")
        return answer

    def close(self) -> None:
        if self._proc.stdin is not None:
            self._proc.stdin.close()
        try:
            self._proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            self._proc.wait()

    def __enter__(self) -> PeerProcess:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


@dataclass(slots=True)
class Setup:
    spec: list[PeerRule]
    calls: tuple[Call, ...]
    document: dict[str, Any]
    yaml_text: str
    policy: Any
    actions: list[Any]
    contexts: list[dict[str, Any]]
    rows: list[dict[str, Any]] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)


def build(spec: Sequence[PeerRule] | None = None, calls: Sequence[Call] = CALLS) -> Setup:
    """Both renderings of the policy, Interlock's compiled policy and the mix, and
    Interlock's decisions checked against the calls' intended ones and against this
    package's reading of the peer's semantics."""
    from interlock import Action, Guard, load_policy_text
    from interlock.policy import evaluate

    spec = list(spec if spec is not None else rules())
    yaml_text = interlock_yaml(spec)
    policy = load_policy_text(yaml_text, file="bench/peer-policy.yaml")
    setup = Setup(
        spec=spec,
        calls=tuple(calls),
        document=peer_document(spec),
        yaml_text=yaml_text,
        policy=policy,
        actions=[Action(kind="tool", name=c.tool, arguments=dict(c.args)) for c in calls],
        contexts=[peer_context(c) for c in calls],
    )
    guard = Guard(policy)
    for call, action, context in zip(calls, setup.actions, setup.contexts, strict=True):
        ours = evaluate(action, policy)
        checked = guard.check(action)
        verdict, ids = ours.verdict.value, tuple(ours.rule_ids)
        ref_verdict, ref_ids = reference_decision(spec, context)
        if checked.verdict is not ours.verdict or tuple(checked.rule_ids) != ids:
            setup.problems.append(f"guard.check and evaluate disagree on {call.tool}")
        if (verdict, ids) != (call.expect, call.expect_rules):
            setup.problems.append(
                f"{call.tool} {dict(call.args)} is meant to be {call.expect} "
                f"{list(call.expect_rules)}; interlock says {verdict} {list(ids)}"
            )
        if (verdict, ids) != (ref_verdict, ref_ids):
            setup.problems.append(
                f"translation disagrees on {call.tool} {dict(call.args)}: interlock {verdict} "
                f"{list(ids)}, the peer's semantics {ref_verdict} {list(ref_ids)}"
            )
        setup.rows.append(
            {"tool": call.tool, "args": dict(call.args), "interlock": verdict, "rule_ids": ids}
        )
    return setup


def _peer_verdict(answer: dict[str, Any]) -> tuple[str, tuple[str, ...]]:
    """The peer's answer read as Interlock reports one: the verdict, and every matching
    rule of the deciding rule's action (none when the default decided)."""
    verdict = "allow" if answer["allowed"] else "deny"
    if answer["matched_rule"] is None:
        return verdict, ()
    tier = sorted(m["name"] for m in answer["matching"] if m["action"] == answer["action"])
    return verdict, tuple(tier)


def compare(setup: Setup, answers: Sequence[dict[str, Any]]) -> list[str]:
    """Interlock's decisions against the peer's; one problem per disagreement."""
    problems = []
    for call, row, answer in zip(setup.calls, setup.rows, answers, strict=True):
        theirs, their_ids = _peer_verdict(answer)
        row["peer"] = theirs
        row["peer_rule"] = answer["matched_rule"]
        row["peer_rule_ids"] = their_ids
        if answer["matched_rule"] is not None and answer["matched_rule"] not in their_ids:
            problems.append(f"the peer's deciding rule on {call.tool} is not among its matches")
        if theirs != row["interlock"]:
            problems.append(
                f"VERDICT MISMATCH on {call.tool} {dict(call.args)}: interlock "
                f"{row['interlock']} {list(row['rule_ids'])}, the peer {answer['action']} "
                f"({answer['matched_rule']}: {answer['reason']})"
            )
        elif their_ids != row["rule_ids"]:
            problems.append(
                f"rule mismatch on {call.tool} {dict(call.args)}: interlock "
                f"{list(row['rule_ids'])}, the peer {list(their_ids)}"
            )
    return problems


# The floor: one dict lookup (tool name -> compiled regex) and one regex search on the
# call's first text argument — the cheapest in-process decision, as in ``check``.
_FLOOR_PATTERNS: Final = {
    "read_file": r"^/workspace/",
    "http_get": r"^https://docs\.example\.com/",
    "send_email": r"@example\.com$",
    "refund_order": r"^A-[0-9]+$",
}


def floor_input(call: Call) -> tuple[str, str]:
    text = next((v for v in call.args.values() if isinstance(v, str)), call.tool)
    return call.tool, text


def make_floor() -> Callable[[tuple[str, str]], bool]:
    table = {name: re.compile(p) for name, p in _FLOOR_PATTERNS.items()}
    return dict_regex_floor(table)


def _per_call_p50(samples: Sequence[int], calls: Sequence[Call]) -> list[dict[str, Any]]:
    out = []
    for index, call in enumerate(calls):
        mine = sorted(samples[index :: len(calls)])
        out.append({"tool": call.tool, "note": call.note, "p50_us": mine[len(mine) // 2] / 1000})
    return out


def run(calls: int | None = None, quick: bool = False, rounds: int | None = None) -> BenchResult:
    from interlock import Guard
    from interlock.core.events import MemorySink
    from interlock.policy import evaluate

    total = calls or (QUICK_CALLS if quick else DEFAULT_CALLS)
    rounds = rounds or (QUICK_ROUNDS if quick else DEFAULT_ROUNDS)
    setup = build()
    result = BenchResult(name="peer", problems=list(setup.problems))
    python = ensure_peer_python()
    width = len(setup.calls)
    per_round = max(width, total // rounds // width * width)  # whole cycles of the mix
    warmup = min(WARMUP, per_round)

    sink = MemorySink()
    guard = Guard(setup.policy, sink=sink)
    engine = functools.partial(evaluate, policy=setup.policy)
    floor, floor_inputs = make_floor(), [floor_input(c) for c in setup.calls]
    pooled: dict[str, list[int]] = {"check": [], "evaluate": [], "peer": [], "floor": []}
    walls = dict.fromkeys(pooled, 0)
    with PeerProcess(python) as peer:
        loaded = peer.request(op="load", document=setup.document)
        answers = peer.request(op="decide", contexts=setup.contexts)["decisions"]
        result.problems.extend(compare(setup, answers))
        for _ in range(rounds):
            # A: Interlock (the facade, then the bare engine); B: the peer; then the floor.
            samples, wall = time_calls(guard.check, setup.actions, per_round, warmup)
            pooled["check"] += samples
            walls["check"] += wall
            sink.events.clear()
            samples, wall = time_calls(engine, setup.actions, per_round, warmup)
            pooled["evaluate"] += samples
            walls["evaluate"] += wall
            timed = peer.request(op="time", contexts=setup.contexts, calls=per_round, warmup=warmup)
            pooled["peer"] += timed["samples"]
            walls["peer"] += timed["wall_ns"]
            samples, wall = time_calls(floor, floor_inputs, per_round, warmup)
            pooled["floor"] += samples
            walls["floor"] += wall

    labels = {
        "check": "interlock guard.check",
        "evaluate": "interlock evaluate",
        "peer": "peer toolkit evaluate",
        "floor": "floor (dict + regex)",
    }
    stats: dict[str, Stats] = {
        key: summarise(labels[key], pooled[key], walls[key]) for key in pooled
    }
    check, peer_stats = stats["check"], stats["peer"]
    result.stats = list(stats.values())
    ratios = {
        "peer_mean_over_check_mean": peer_stats.mean_ns / check.mean_ns,
        "peer_p50_over_check_p50": peer_stats.p50_ns / check.p50_ns,
        "peer_mean_over_evaluate_mean": peer_stats.mean_ns / stats["evaluate"].mean_ns,
        "check_p50_over_floor_p50": check.p50_ns / stats["floor"].p50_ns,
    }
    result.targets = [
        Target(
            "peer mean / guard.check mean",
            ratios["peer_mean_over_check_mean"],
            ">=",
            TARGET_MEAN_RATIO,
            "×",
        )
    ]
    counts = {a: sum(r.action == a for r in setup.spec) for a in ("deny", "allow")}
    result.info = {
        "peer_version": loaded["version"],
        "peer_python": str(python),
        "requirements_sha256": _requirements_digest()[:16],
        "policy": {"rules": len(setup.spec), **counts},
        "calls": {"per_subject": per_round * rounds, "rounds": rounds, "warmup": warmup},
        "ratios": {k: round(v, 2) for k, v in ratios.items()},
        "decisions": [
            {**row, "rule_ids": list(row["rule_ids"]), "peer_rule_ids": list(row["peer_rule_ids"])}
            for row in setup.rows
        ],
        "per_call_p50_us": {
            labels[key]: _per_call_p50(pooled[key], setup.calls) for key in ("check", "peer")
        },
    }
    agree = sum(
        r["interlock"] == r["peer"] and r["rule_ids"] == r["peer_rule_ids"] for r in setup.rows
    )
    result.notes = [
        f"policy: {len(setup.spec)} rules ({counts['deny']} deny, {counts['allow']} allow), "
        f"peer {loaded['version']}; {rounds} interleaved rounds of {per_round:,} calls each",
        f"agreement on the mix (verdict and rule ids): {agree}/{len(setup.rows)}",
        f"peer mean / guard.check mean = {ratios['peer_mean_over_check_mean']:.2f}×; "
        f"p50 ratio {ratios['peer_p50_over_check_p50']:.2f}×; guard.check p50 / floor p50 = "
        f"{ratios['check_p50_over_floor_p50']:.0f}×",
    ]
    return result


def profile(calls: int = 20_000, top: int = 20) -> str:
    """Where Interlock's time goes on this policy: ``evaluate`` p50 per call with the
    engine's prefilter on (the default: 41 candidate rules per tool) and off (every
    candidate tested in turn, as below the prefilter's threshold), then a cProfile of
    ``guard.check`` over the mix, by own time."""
    import cProfile
    import io
    import pstats

    import yaml

    from interlock import Guard
    from interlock.core.events import MemorySink
    from interlock.policy import compile_policy, evaluate
    from interlock.policy import compiled as compiled_module

    setup = build()
    data = yaml.safe_load(setup.yaml_text)
    out = io.StringIO()
    default = compiled_module.PREFILTER_MIN_RULES
    for label, threshold in (("prefilter on", default), ("prefilter off", 10**9)):
        compiled_module.PREFILTER_MIN_RULES = threshold
        try:
            policy = compile_policy(data)
            for action in setup.actions:  # a tool's candidates are built on first use
                evaluate(action, policy)
        finally:
            compiled_module.PREFILTER_MIN_RULES = default
        engine = functools.partial(evaluate, policy=policy)
        for call, action in zip(setup.calls, setup.actions, strict=True):
            samples, wall = time_calls(engine, [action], calls, WARMUP)
            p50 = summarise(call.tool, samples, wall).p50_ns / 1000
            print(f"evaluate, {label:13} {call.tool:14} p50 {p50:7.2f} µs", file=out)
    guard = Guard(setup.policy, sink=MemorySink())
    count = len(setup.actions)
    for i in range(WARMUP):
        guard.check(setup.actions[i % count])
    profiler = cProfile.Profile()
    profiler.enable()
    for i in range(calls):
        guard.check(setup.actions[i % count])
    profiler.disable()
    pstats.Stats(profiler, stream=out).sort_stats("tottime").print_stats(top)
    return out.getvalue()


if __name__ == "__main__":  # ``python -m bench.peer.benchmark --setup``: the environment only
    if sys.argv[1:] != ["--setup"]:
        raise SystemExit("usage: python -m bench.peer.benchmark --setup")
    print(ensure_peer_python())
