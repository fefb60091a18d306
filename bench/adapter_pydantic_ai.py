"""Benchmark ``adapter-pydantic-ai``: what the guard adds to a real PydanticAI loop.

The same ``Agent``, the same scripted ``FunctionModel`` and the same tool, with and
without :class:`~interlock.adapters.pydantic_ai.InterlockCapability`: the model asks
for one tool call per turn, ``TURNS`` turns and a final answer per run, and a run is
timed whole (``agent.run``, async). Figures are per tool call (the run's time divided
by ``TURNS``). Subjects:

* **unguarded** — no capability: the baseline;
* **no-op capability** — a capability whose ``wrap_tool_execute`` only calls the
  handler: what PydanticAI's capability machinery costs by itself;
* **guarded** — ``InterlockCapability(Guard(policy))``, no store: one check per call;
* **guarded, store** — on an embedded SQLite store: each tool call audited, each model
  request checked, reserved on a token budget and committed.

Subjects run round-robin so drift in the machine's load hits each alike. The overhead
per tool call is the guarded median minus the unguarded median; the ratio is guarded /
unguarded.
"""

from __future__ import annotations

import asyncio
import tempfile
import time
from pathlib import Path
from typing import Any, Final

from bench.agent_loops import check_settled, interleave, lookup_policy, loop_stats, note_overheads
from bench.harness import BenchResult, Stats, summarise
from interlock import Guard, load_policy_text

__all__ = ["run"]

TURNS: Final = 20
#: timed runs per subject (default, quick)
RUNS: Final = (40, 6)
WARMUP: Final = 2

POLICY: Final = lookup_policy(250)


def _agent(capabilities: list[Any]) -> Any:
    from pydantic_ai import Agent
    from pydantic_ai.messages import ModelResponse, TextPart, ToolCallPart
    from pydantic_ai.models.function import FunctionModel
    from pydantic_ai.usage import RequestUsage

    usage = RequestUsage(input_tokens=200, output_tokens=20)

    def script(messages: list[Any], info: Any) -> ModelResponse:
        # The turn is the number of tool results so far: each run starts over.
        done = sum(1 for m in messages for p in m.parts if p.part_kind == "tool-return")
        if done >= TURNS:
            return ModelResponse(parts=[TextPart("done")], usage=usage)
        call = ToolCallPart("lookup", {"key": f"k{done}"}, tool_call_id=f"c{done}")
        return ModelResponse(parts=[call], usage=usage)

    def lookup(key: str) -> str:
        """Look a key up."""
        return f"value of {key}"

    return Agent(
        FunctionModel(script, model_name="scripted"), tools=[lookup], capabilities=capabilities
    )


def _noop() -> Any:
    from pydantic_ai.capabilities import AbstractCapability

    class Noop(AbstractCapability[Any]):
        async def wrap_tool_execute(
            self, ctx: Any, *, call: Any, tool_def: Any, args: Any, handler: Any
        ) -> Any:
            return await handler(args)

    return Noop()


def _hook_costs(policy: Any, calls: int) -> list[Stats]:
    """``wrap_tool_execute`` alone: the guarded capability vs the no-op one, same call,
    a handler that returns at once — the guard's own share, free of the loop's noise."""
    from pydantic_ai import RunContext
    from pydantic_ai.messages import ToolCallPart
    from pydantic_ai.models.test import TestModel
    from pydantic_ai.tools import ToolDefinition
    from pydantic_ai.usage import RunUsage

    from bench.harness import atime_calls
    from interlock.adapters.pydantic_ai import InterlockCapability

    ctx = RunContext(deps=None, model=TestModel(), usage=RunUsage())
    schema = {"type": "object", "properties": {"key": {"type": "string"}}, "required": ["key"]}
    tool_def = ToolDefinition(name="lookup", parameters_json_schema=schema)
    call = ToolCallPart("lookup", {"key": "k1"}, tool_call_id="c1")

    async def handler(args: dict[str, Any]) -> str:
        return "ok"

    out = []
    for label, capability in (
        ("hook: no-op wrap_tool_execute", _noop()),
        ("hook: guarded wrap_tool_execute", InterlockCapability(Guard(policy))),
    ):

        async def one(args: dict[str, Any], capability: Any = capability) -> Any:
            return await capability.wrap_tool_execute(
                ctx, call=call, tool_def=tool_def, args=args, handler=handler
            )

        samples, wall = asyncio.run(atime_calls(one, [{"key": "k1"}], calls, 2_000))
        out.append(summarise(label, samples, wall))
    return out


def _one_run(agent: Any, loop: asyncio.Runner) -> int:
    t0 = time.perf_counter_ns()
    result = loop.run(agent.run("go"))
    elapsed = time.perf_counter_ns() - t0
    if result.output != "done":
        raise AssertionError("the agent loop did not finish")
    return elapsed // TURNS


def run(calls: int | None, quick: bool) -> BenchResult:
    """``calls``: timed runs per subject (each ``TURNS`` tool calls)."""
    from interlock.adapters.pydantic_ai import InterlockCapability

    runs = calls or RUNS[1 if quick else 0]
    policy = load_policy_text(POLICY, file="bench/adapter_pydantic_ai.py")
    result = BenchResult("adapter-pydantic-ai")
    with tempfile.TemporaryDirectory(prefix="interlock-bench-") as scratch:
        stored = Guard(policy, store=f"sqlite:///{Path(scratch) / 'bench.db'}")
        agents = {
            "unguarded": _agent([]),
            "no-op capability": _agent([_noop()]),
            "guarded": _agent([InterlockCapability(Guard(policy))]),
            "guarded, store": _agent([InterlockCapability(stored)]),
        }
        try:
            with asyncio.Runner() as loop:
                samples, walls = interleave(
                    [(label, lambda a=agent: _one_run(a, loop)) for label, agent in agents.items()],
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
