"""Benchmark ``adapters``: what the guard adds to a real agent loop, per tool call.

The same LangChain ``create_agent`` loop, the same scripted fake model and the same
tool, with and without the guard: the model asks for one tool call per turn, ``TURNS``
turns and a final answer per run, and a run is timed whole (``agent.invoke``). Figures
are per tool call: the run's time divided by ``TURNS``, so each sample holds one model
turn, one tool call and the graph's own bookkeeping. Subjects:

* **unguarded** — no middleware: the baseline;
* **no-op middleware** — an ``AgentMiddleware`` whose ``wrap_tool_call`` only calls
  the handler: what LangChain's middleware machinery costs by itself;
* **guarded** — ``InterlockMiddleware(Guard(policy))``, no store: one check per call;
* **guarded, store** — the same on an embedded SQLite store (durability ``process``):
  each tool call audited, and each model call checked, reserved on a token budget and
  committed, before the next turn;

each sync (``invoke``) and async (``ainvoke``). The overhead per tool call is the
guarded median minus the unguarded median; the ratio is guarded / unguarded.

Whole agent runs take milliseconds and swing with the machine's load, so the guard's
own share is also measured directly: ``wrap_tool_call`` of the guarded middleware and
of the no-op one, called 20,000 times each with the same request and a handler that
returns at once (the **hook** subjects). Their difference is what the guard adds to a
tool call, free of the loop's noise.
"""

from __future__ import annotations

import asyncio
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Final

from bench.agent_loops import check_settled, interleave, lookup_policy, loop_stats, note_overheads
from bench.harness import BenchResult, Stats, summarise
from interlock import Guard, load_policy_text

__all__ = ["run"]

TURNS: Final = 40
#: timed runs per subject (default, quick)
RUNS: Final = (60, 8)
WARMUP: Final = 3

POLICY: Final = lookup_policy(200)


def _agent(middleware: list[Any]) -> Any:
    from langchain.agents import create_agent
    from langchain_core.language_models.fake_chat_models import FakeMessagesListChatModel
    from langchain_core.messages import AIMessage
    from langchain_core.tools import tool

    class ScriptedModel(FakeMessagesListChatModel):
        def bind_tools(self, tools: Any, **kwargs: Any) -> Any:
            return self

    @tool
    def lookup(key: str) -> str:
        """Look a key up."""
        return f"value of {key}"

    usage = {"input_tokens": 200, "output_tokens": 20, "total_tokens": 220}
    turns: list[Any] = [
        AIMessage(
            content="",
            tool_calls=[{"name": "lookup", "args": {"key": f"k{i}"}, "id": f"c{i}"}],
            usage_metadata=usage,
        )
        for i in range(TURNS)
    ]
    turns.append(AIMessage(content="done", usage_metadata=usage))
    # A run consumes every scripted response, so the fake model starts over each run.
    return create_agent(ScriptedModel(responses=turns), [lookup], middleware=middleware)


def _noop() -> Any:
    from langchain.agents.middleware import AgentMiddleware

    class Noop(AgentMiddleware):
        def wrap_tool_call(self, request: Any, handler: Callable[[Any], Any]) -> Any:
            return handler(request)

        async def awrap_tool_call(self, request: Any, handler: Callable[[Any], Any]) -> Any:
            return await handler(request)

    return Noop()


def _one_run(agent: Any, mode: str, loop: asyncio.Runner) -> int:
    """One whole run; its time per tool call (ns)."""
    inputs = {"messages": [("user", "go")]}
    t0 = time.perf_counter_ns()
    result = loop.run(agent.ainvoke(inputs)) if mode == "async" else agent.invoke(inputs)
    elapsed = time.perf_counter_ns() - t0
    if result["messages"][-1].content != "done":
        raise AssertionError("the agent loop did not finish")
    return elapsed // TURNS


def _hook_costs(policy: Any, calls: int) -> list[Stats]:
    """``wrap_tool_call`` alone: the guarded middleware vs the no-op one."""
    from langchain_core.messages import ToolMessage
    from langchain_core.tools import tool
    from langgraph.prebuilt.tool_node import ToolCallRequest

    from bench.harness import time_calls
    from interlock.adapters.langchain import InterlockMiddleware

    @tool
    def lookup(key: str) -> str:
        """Look a key up."""
        return key

    answer = ToolMessage(content="ok", tool_call_id="c1", name="lookup")
    request = ToolCallRequest(
        tool_call={"name": "lookup", "args": {"key": "k1"}, "id": "c1", "type": "tool_call"},
        tool=lookup,
        state={},
        runtime=None,  # type: ignore[arg-type]
    )
    out = []
    for label, middleware in (
        ("hook: no-op wrap_tool_call", _noop()),
        ("hook: guarded wrap_tool_call", InterlockMiddleware(Guard(policy))),
    ):
        wrap = middleware.wrap_tool_call
        samples, wall = time_calls(
            lambda req, wrap=wrap: wrap(req, lambda _: answer), [request], calls, 2_000
        )
        out.append(summarise(label, samples, wall))
    return out


def run(calls: int | None, quick: bool) -> BenchResult:
    """``calls``: timed runs per subject (each ``TURNS`` tool calls)."""
    from interlock.adapters.langchain import InterlockMiddleware

    runs = calls or RUNS[1 if quick else 0]
    policy = load_policy_text(POLICY, file="bench/adapters.py")
    result = BenchResult("adapters")
    with tempfile.TemporaryDirectory(prefix="interlock-bench-") as scratch:
        stored = Guard(policy, store=f"sqlite:///{Path(scratch) / 'bench.db'}")
        subjects: dict[str, Callable[[], list[Any]]] = {
            "unguarded": lambda: [],
            "no-op middleware": lambda: [_noop()],
            "guarded": lambda: [InterlockMiddleware(Guard(policy))],
            "guarded, store": lambda: [InterlockMiddleware(stored)],
        }
        agents = [
            (f"{name} ({mode})", mode, _agent(make()))
            for mode in ("sync", "async")
            for name, make in subjects.items()
        ]
        try:
            with asyncio.Runner() as loop:
                samples, walls = interleave(
                    [
                        (label, lambda a=agent, m=mode: _one_run(a, m, loop))
                        for label, mode, agent in agents
                    ],
                    rounds=runs,
                    warmup=WARMUP,
                    turns=TURNS,
                )
            medians = loop_stats(result, samples, walls, turns=TURNS)
            check_settled(result, stored, "model-tokens", (WARMUP + runs) * 2 * (TURNS + 1) * 220)
        finally:
            stored.close()
    hooks = _hook_costs(policy, 2_000 if quick else 20_000)
    result.stats.extend(hooks)
    added = hooks[1].p50_ns - hooks[0].p50_ns
    result.info["hook_added_us"] = round(added / 1000, 2)
    loop = medians["unguarded (sync)"]
    result.notes.append(
        f"the guard adds {added / 1000:.1f} µs per tool call at the hook "
        f"({added / loop:.2%} of an unguarded loop's {loop / 1000:.0f} µs per tool call)"
    )
    note_overheads(
        result,
        medians,
        [
            (f"{name} ({mode})", f"unguarded ({mode})")
            for mode in ("sync", "async")
            for name in ("no-op middleware", "guarded", "guarded, store")
        ],
    )
    result.info.update({"turns_per_run": TURNS, "runs": runs})
    return result
