"""Benchmark ``adapter-llama-index``: what the guard adds to a real LlamaIndex agent loop.

The same ``FunctionAgent`` workflow, the same scripted ``MockFunctionCallingLLM`` and
the same tool, with and without the guard: the model asks for one tool call per turn,
``TURNS`` turns and a final answer per run, and a run is timed whole
(``await agent.run(...)``). Figures are per tool call (the run's time / ``TURNS``).
Subjects:

* **unguarded** — the baseline;
* **guarded, message** — ``guard_agent(agent, Guard(policy))``: the tool gate, no store;
* **guarded, raise** — the same in raise style: each call judged when the model asks
  for it, the decision held for the tool gate;
* **guarded, store** — message style on an embedded SQLite store, with the LLM
  attached (each model call checked, reserved on a token budget and committed from the
  usage it reports).

The overhead per tool call is the guarded median minus the unguarded median; the ratio
is guarded / unguarded. A fresh agent is built (untimed) for every run: the scripted
model is consumed by a run.
"""

from __future__ import annotations

import asyncio
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Final

from bench.agent_loops import check_settled, interleave, lookup_policy, loop_stats, note_overheads
from bench.harness import BenchResult
from interlock import Guard, load_policy_text

__all__ = ["run"]

TURNS: Final = 10
#: timed runs per subject (default, quick)
RUNS: Final = (30, 5)
WARMUP: Final = 2
USAGE: Final = (200, 20)

POLICY: Final = lookup_policy(200)


def _llm() -> Any:
    from llama_index.core.base.llms.types import ChatMessage, ChatResponse, ToolCallBlock
    from llama_index.core.llms.mock import MockFunctionCallingLLM

    class ReportingLLM(MockFunctionCallingLLM):
        def chat(self, messages: Any, **kwargs: Any) -> ChatResponse:
            response = super().chat(messages, **kwargs)
            response.additional_kwargs.update(prompt_tokens=USAGE[0], completion_tokens=USAGE[1])
            return response

    turns = [
        ChatMessage(
            role="assistant",
            blocks=[
                ToolCallBlock(
                    tool_call_id=f"c{i}", tool_name="lookup", tool_kwargs={"key": f"k{i}"}
                )
            ],
        )
        for i in range(TURNS)
    ]
    turns.append(ChatMessage(role="assistant", content="done"))
    return ReportingLLM(response_generator=lambda messages, **kw: turns.pop(0))


def _agent(guard: Guard | None, refusal: str, guard_model: bool) -> Any:
    from llama_index.core.agent.workflow import FunctionAgent
    from llama_index.core.tools import FunctionTool

    from interlock.adapters.llama_index import guard_agent

    def lookup(key: str) -> str:
        """Look a key up."""
        return f"value of {key}"

    llm = _llm()
    if guard is not None and guard_model:
        guard.attach(llm)
    agent = FunctionAgent(tools=[FunctionTool.from_defaults(lookup)], llm=llm, streaming=False)
    if guard is not None:
        guard_agent(agent, guard, refusal=refusal)  # type: ignore[arg-type]
    return agent


def _one_run(agent: Any, loop: asyncio.Runner) -> int:
    async def go() -> Any:
        return await agent.run("go", max_iterations=4 * TURNS)

    t0 = time.perf_counter_ns()
    result = loop.run(go())
    elapsed = time.perf_counter_ns() - t0
    if str(result) != "done":
        raise AssertionError("the agent loop did not finish")
    return elapsed // TURNS


def run(calls: int | None, quick: bool) -> BenchResult:
    """``calls``: timed runs per subject (each ``TURNS`` tool calls)."""
    runs = calls or RUNS[1 if quick else 0]
    policy = load_policy_text(POLICY, file="bench/adapter_llama_index.py")
    result = BenchResult("adapter-llama-index")
    with tempfile.TemporaryDirectory(prefix="interlock-bench-") as scratch:
        stored = Guard(policy, store=f"sqlite:///{Path(scratch) / 'bench.db'}")
        plain = Guard(policy)
        subjects: dict[str, Callable[[], Any]] = {
            "unguarded": lambda: _agent(None, "message", False),
            "guarded, message": lambda: _agent(plain, "message", False),
            "guarded, raise": lambda: _agent(plain, "raise", False),
            "guarded, store": lambda: _agent(stored, "message", True),
        }
        try:
            with asyncio.Runner() as loop:
                samples, walls = interleave(
                    [
                        (label, lambda make=make: _one_run(make(), loop))
                        for label, make in subjects.items()
                    ],
                    rounds=runs,
                    warmup=WARMUP,
                    turns=TURNS,
                )
            check_settled(
                result, stored, "model-tokens", (WARMUP + runs) * (TURNS + 1) * sum(USAGE)
            )
        finally:
            stored.close()
    medians = loop_stats(result, samples, walls, turns=TURNS)
    labels = list(subjects)
    note_overheads(result, medians, [(label, "unguarded") for label in labels[1:]], show_base=True)
    result.info.update({"turns_per_run": TURNS, "runs": runs})
    return result
