"""Benchmark ``adapter-smolagents``: what the guard adds to a real smolagents loop.

The same ``ToolCallingAgent``, the same scripted ``smolagents.Model`` and the same
tool, with and without the guard: the model asks for one tool call per step,
``TURNS`` steps and a ``final_answer`` per run, and a run is timed whole
(``agent.run``; smolagents is synchronous). Figures are per tool call (the run's time
divided by ``TURNS``). Subjects:

* **unguarded** — the agent as it is: the baseline;
* **guarded** — ``guard.attach(agent)`` with ``Guard(policy)``, no store: each call
  judged once in ``execute_tool_call`` (the tool's ``forward`` sees it judged);
* **guarded, store** — on an embedded SQLite store: each tool call audited, and each
  model call (``GuardedModel``) checked, reserved on a token budget and committed.

Subjects run round-robin so drift in the machine's load hits each alike. The overhead
per tool call is the guarded median minus the unguarded median; the ratio is guarded /
unguarded.
"""

from __future__ import annotations

import tempfile
import time
from pathlib import Path
from typing import Any, Final

from bench.agent_loops import check_settled, interleave, lookup_policy, loop_stats, note_overheads
from bench.harness import BenchResult, Stats, summarise
from interlock import Guard, Usage, load_policy_text

__all__ = ["run"]

TURNS: Final = 20
#: timed runs per subject (default, quick)
RUNS: Final = (40, 6)
WARMUP: Final = 2

POLICY: Final = lookup_policy(250)


def _lookup_tool() -> Any:
    from smolagents import Tool

    class Lookup(Tool):
        name = "lookup"
        description = "Look a key up."
        inputs = {"key": {"type": "string", "description": "The key."}}  # noqa: RUF012
        output_type = "string"

        def forward(self, key: str) -> str:
            return f"value of {key}"

    return Lookup()


def _hook_costs(policy: Any, calls: int) -> list[Stats]:
    """A tool call alone (``tool(key=...)``): a guarded tool vs a plain one — the
    guard's own share, free of the loop's noise."""
    from bench.harness import time_calls
    from interlock.adapters.smolagents import guard_tool

    out = []
    for label, tool in (
        ("hook: plain tool(...)", _lookup_tool()),
        ("hook: guarded tool(...)", guard_tool(_lookup_tool(), Guard(policy))),
    ):
        samples, wall = time_calls(lambda key, tool=tool: tool(key=key), ["k1"], calls, 2_000)
        out.append(summarise(label, samples, wall))
    return out


def _agent(guard: Guard | None) -> Any:
    from smolagents import Model, ToolCallingAgent
    from smolagents.models import (
        ChatMessage,
        ChatMessageToolCall,
        ChatMessageToolCallFunction,
        MessageRole,
    )
    from smolagents.monitoring import LogLevel, TokenUsage

    from interlock.adapters.smolagents import guard_agent

    class Scripted(Model):
        def generate(self, messages: list[Any], *args: Any, **kwargs: Any) -> ChatMessage:
            # The step is the number of tool results so far: each run starts over.
            done = sum(1 for m in messages if str(m.role.value) == "tool-response")
            name, args_ = ("final_answer", {"answer": "done"})
            if done < TURNS:
                name, args_ = ("lookup", {"key": f"k{done}"})
            call = ChatMessageToolCall(
                function=ChatMessageToolCallFunction(name=name, arguments=args_),
                id=f"c{done}",
                type="function",
            )
            return ChatMessage(
                role=MessageRole.ASSISTANT,
                tool_calls=[call],
                token_usage=TokenUsage(input_tokens=200, output_tokens=20),
            )

    agent = ToolCallingAgent(
        tools=[_lookup_tool()],
        model=Scripted(model_id="scripted"),
        max_steps=TURNS + 2,
        verbosity_level=LogLevel.OFF,
    )
    if guard is not None:
        estimate = (lambda *_: Usage(200, 20)) if guard.store is not None else None
        guard_agent(agent, guard, estimate=estimate)
    return agent


def _one_run(agent: Any) -> int:
    t0 = time.perf_counter_ns()
    output = agent.run("go")
    elapsed = time.perf_counter_ns() - t0
    if output != "done":
        raise AssertionError("the agent loop did not finish")
    return elapsed // TURNS


def run(calls: int | None, quick: bool) -> BenchResult:
    """``calls``: timed runs per subject (each ``TURNS`` tool calls)."""
    runs = calls or RUNS[1 if quick else 0]
    policy = load_policy_text(POLICY, file="bench/adapter_smolagents.py")
    result = BenchResult("adapter-smolagents")
    with tempfile.TemporaryDirectory(prefix="interlock-bench-") as scratch:
        stored = Guard(policy, store=f"sqlite:///{Path(scratch) / 'bench.db'}")
        agents = {
            "unguarded": _agent(None),
            "guarded": _agent(Guard(policy)),
            "guarded, store": _agent(stored),
        }
        try:
            samples, walls = interleave(
                [(label, lambda a=agent: _one_run(a)) for label, agent in agents.items()],
                rounds=runs,
                warmup=WARMUP,
                turns=TURNS,
            )
            check_settled(result, stored, "model-tokens", (WARMUP + runs) * (TURNS + 1) * 220)
        finally:
            stored.close()
    medians = loop_stats(result, samples, walls, turns=TURNS)
    hooks = _hook_costs(policy, 2_000 if quick else 20_000)
    result.stats.extend(hooks)
    added = hooks[1].p50_ns - hooks[0].p50_ns
    result.info["hook_added_us"] = round(added / 1000, 2)
    result.notes.append(f"the guard adds {added / 1000:.1f} µs per tool call at the hook")
    labels = list(agents)
    note_overheads(result, medians, [(label, "unguarded") for label in labels[1:]], show_base=True)
    result.info.update({"turns_per_run": TURNS, "runs": runs})
    return result
