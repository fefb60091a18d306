"""Benchmark ``adapter-autogen``: what the guard adds to a real AutoGen agent loop.

The same ``AssistantAgent``, the same replayed model (``ReplayChatCompletionClient``)
and the same tool, with and without the guard: the model asks for one tool call per
turn, ``TURNS`` turns and a final answer per run (``max_tool_iterations``), and a run
is timed whole (``agent.run``). Figures are per tool call (the run's time / ``TURNS``).
Subjects:

* **unguarded** — the baseline;
* **guarded, message** — ``guard_agent(agent, Guard(policy), refusal="message")``:
  the workbench gate, no store;
* **guarded, raise** — the same in raise style: each call judged when the model asks
  for it, the decision held for the workbench;
* **guarded, store** — message style on an embedded SQLite store, with the model
  behind ``GuardedChatCompletionClient`` (each model call checked, reserved on a
  token budget and committed from the usage it reports).

The overhead per tool call is the guarded median minus the unguarded median; the ratio
is guarded / unguarded. A fresh agent is built (untimed) for every run: the replayed
model is consumed by a run.
"""

from __future__ import annotations

import asyncio
import json
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Final

from bench.agent_loops import check_settled, interleave, lookup_policy, loop_stats, note_overheads
from bench.harness import BenchResult
from interlock import Guard, load_policy_text

__all__ = ["run"]

TURNS: Final = 20
#: timed runs per subject (default, quick)
RUNS: Final = (40, 6)
WARMUP: Final = 2
USAGE: Final = (200, 20)

POLICY: Final = lookup_policy(200)


def _client() -> Any:
    from autogen_core import FunctionCall
    from autogen_core.models import CreateResult, ModelFamily, ModelInfo, RequestUsage
    from autogen_ext.models.replay import ReplayChatCompletionClient

    info = ModelInfo(
        vision=False,
        function_calling=True,
        json_output=False,
        family=ModelFamily.UNKNOWN,
        structured_output=False,
    )
    turns: list[Any] = [
        CreateResult(
            finish_reason="function_calls",
            content=[
                FunctionCall(id=f"c{i}", name="lookup", arguments=json.dumps({"key": f"k{i}"}))
            ],
            usage=RequestUsage(*USAGE),
            cached=False,
        )
        for i in range(TURNS)
    ]
    turns.append(
        CreateResult(finish_reason="stop", content="done", usage=RequestUsage(*USAGE), cached=False)
    )
    return ReplayChatCompletionClient(turns, model_info=info)


def _agent(guard: Guard | None, refusal: str, guard_model: bool) -> Any:
    from autogen_agentchat.agents import AssistantAgent

    from interlock.adapters.autogen import GuardedChatCompletionClient, guard_agent

    async def lookup(key: str) -> str:
        """Look a key up."""
        return f"value of {key}"

    client = _client()
    if guard is not None and guard_model:
        client = GuardedChatCompletionClient(client, guard, name="replayed")
    agent = AssistantAgent(
        "bench", client, tools=[lookup], max_tool_iterations=TURNS + 1, system_message=None
    )
    if guard is not None:
        guard_agent(agent, guard, refusal=refusal)  # type: ignore[arg-type]
    return agent


def _one_run(agent: Any, loop: asyncio.Runner) -> int:
    t0 = time.perf_counter_ns()
    result = loop.run(agent.run(task="go"))
    elapsed = time.perf_counter_ns() - t0
    if result.messages[-1].content != "done":
        raise AssertionError("the agent loop did not finish")
    return elapsed // TURNS


def run(calls: int | None, quick: bool) -> BenchResult:
    """``calls``: timed runs per subject (each ``TURNS`` tool calls)."""
    import logging

    logging.getLogger("autogen_core").setLevel(logging.ERROR)  # replay's token notices
    logging.getLogger("autogen_ext").setLevel(logging.ERROR)
    runs = calls or RUNS[1 if quick else 0]
    policy = load_policy_text(POLICY, file="bench/adapter_autogen.py")
    result = BenchResult("adapter-autogen")
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
