"""Benchmark ``adapter-crewai``: what the guard adds to a real CrewAI loop, per tool call.

Runs only in the CrewAI environment (crewai needs mcp<2, so it cannot share the main
one): ``make .venv-crewai/.installed``, then ``.venv-crewai/bin/python -m bench
adapter-crewai``.

The same ``Crew(agents=[agent], tasks=[task]).kickoff()``, the same scripted fake model
(a ``crewai.BaseLLM`` asking for one tool call per turn, ``TURNS`` turns and a final
answer per run) and the same tool, with and without the guard. Figures are per tool
call: the run's time divided by ``TURNS``. Subjects:

* **unguarded** — the baseline;
* **guarded** — the tool guarded (``guard_tools``), no store: one check per call;
* **guarded, store** — the whole crew guarded (``guard_crew``) on an embedded SQLite
  store: each tool call audited, and each model call checked, reserved on a token
  budget and committed from the usage the model counted;

each with ``kickoff`` (sync) and ``akickoff`` (async). The overhead per tool call is the
guarded median minus the unguarded median; the ratio is guarded / unguarded. A crew's
own bookkeeping costs milliseconds per turn and swings with the machine's load, so the
guard's share is also measured directly: ``tool.run`` of a guarded and of an unguarded
copy of the tool, called many times (the **direct** subjects).
"""

from __future__ import annotations

import asyncio
import json
import os
import tempfile
import time
from pathlib import Path
from typing import Any, Final

from bench.agent_loops import check_settled, interleave, lookup_policy, loop_stats, note_overheads
from bench.harness import BenchResult, Stats, summarise, time_calls
from interlock import Guard, load_policy_text

__all__ = ["run"]

TURNS: Final = 10
#: timed runs per subject (default, quick)
RUNS: Final = (20, 3)
WARMUP: Final = 1

POLICY: Final = lookup_policy(300)  # the fake model names no max_tokens


def _quiet_crewai() -> None:
    for name, value in (
        ("CREWAI_DISABLE_TELEMETRY", "true"),
        ("OTEL_SDK_DISABLED", "true"),
        ("CREWAI_TRACING_ENABLED", "false"),
    ):
        os.environ.setdefault(name, value)


def _llm() -> Any:
    from crewai import BaseLLM
    from pydantic import Field

    class ScriptedLLM(BaseLLM):
        turns: list[Any] = Field(default_factory=list)

        def call(self, messages: Any, *args: Any, **kwargs: Any) -> Any:
            self._track_token_usage_internal(
                {"prompt_tokens": 200, "completion_tokens": 20, "total_tokens": 220}
            )
            return self.turns.pop(0)

        async def acall(self, messages: Any, *args: Any, **kwargs: Any) -> Any:
            return self.call(messages, *args, **kwargs)

        def supports_function_calling(self) -> bool:
            return True

    turns: list[Any] = [
        [
            {
                "id": f"c{i}",
                "type": "function",
                "function": {"name": "lookup", "arguments": json.dumps({"key": f"k{i}"})},
            }
        ]
        for i in range(TURNS)
    ]
    return ScriptedLLM(model="scripted-model", turns=[*turns, "done"])


def _lookup() -> Any:
    from crewai.tools import tool

    @tool("lookup")
    def lookup(key: str) -> str:
        """Look a key up."""
        return f"value of {key}"

    return lookup


def _crew(tools: list[Any]) -> Any:
    from crewai import Agent, Crew, Task

    agent = Agent(
        role="ops", goal="look up", backstory="quick", llm=_llm(), tools=tools, verbose=False
    )
    task = Task(description="look up", expected_output="a word", agent=agent)
    # cache=False: every call reaches the tool (a guarded tool is never cached anyway).
    return Crew(agents=[agent], tasks=[task], verbose=False, cache=False)


def _one_run(crew: Any, mode: str) -> int:
    """One whole run; its time per tool call (ns)."""
    t0 = time.perf_counter_ns()
    result = asyncio.run(crew.akickoff()) if mode == "async" else crew.kickoff()
    elapsed = time.perf_counter_ns() - t0
    if result.raw != "done":
        raise AssertionError("the crew did not finish")
    return elapsed // TURNS


def _direct_costs(policy: Any, calls: int) -> list[Stats]:
    """``tool.run`` alone: a guarded copy of the tool vs the tool itself."""
    from interlock.adapters.crewai import guard_tool

    plain = _lookup()
    guarded = guard_tool(plain, Guard(policy))
    out = []
    for label, subject in (("direct: tool.run", plain), ("direct: guarded tool.run", guarded)):
        samples, wall = time_calls(
            lambda key, t=subject: t.run(key=key), [f"k{i}" for i in range(16)], calls, 500
        )
        out.append(summarise(label, samples, wall))
    return out


def run(calls: int | None, quick: bool) -> BenchResult:
    """``calls``: timed runs per subject (each ``TURNS`` tool calls)."""
    _quiet_crewai()
    from interlock.adapters.crewai import guard_crew, guard_tools

    runs = calls or RUNS[1 if quick else 0]
    policy = load_policy_text(POLICY, file="bench/adapter_crewai.py")
    result = BenchResult("adapter-crewai")
    subjects = ("unguarded", "guarded", "guarded, store")
    with tempfile.TemporaryDirectory(prefix="interlock-bench-") as scratch:
        stored = Guard(policy, store=f"sqlite:///{Path(scratch) / 'bench.db'}")

        def fresh(name: str) -> Any:
            if name == "unguarded":
                return _crew([_lookup()])
            if name == "guarded":
                return _crew(guard_tools([_lookup()], Guard(policy)))
            return guard_crew(_crew([_lookup()]), stored)

        labels = [
            (f"{name} ({mode})", name, mode) for mode in ("sync", "async") for name in subjects
        ]
        try:
            # A crew's fake model is used up by a run, so each run gets a fresh crew
            # (built outside the timing).
            samples, walls = interleave(
                [
                    (label, lambda n=name, m=mode: _one_run(fresh(n), m))
                    for label, name, mode in labels
                ],
                rounds=runs,
                warmup=WARMUP,
                turns=TURNS,
            )
            medians = loop_stats(result, samples, walls, turns=TURNS)
            check_settled(result, stored, "model-tokens", (WARMUP + runs) * 2 * (TURNS + 1) * 220)
        finally:
            stored.close()
    direct = _direct_costs(policy, 2_000 if quick else 20_000)
    result.stats.extend(direct)
    added = direct[1].p50_ns - direct[0].p50_ns
    result.info["direct_added_us"] = round(added / 1000, 2)
    loop = medians["unguarded (sync)"]
    result.notes.append(
        f"the guard adds {added / 1000:.1f} µs to a direct tool.run "
        f"({added / loop:.2%} of an unguarded crew's {loop / 1000:.0f} µs per tool call)"
    )
    note_overheads(
        result,
        medians,
        [
            (f"{name} ({mode})", f"unguarded ({mode})")
            for mode in ("sync", "async")
            for name in subjects[1:]
        ],
    )
    result.info.update({"turns_per_run": TURNS, "runs": runs})
    return result
