"""Benchmark ``adapter-google-adk``: what the guard adds to a Google ADK agent loop.

The same ``LlmAgent``, the same scripted ``BaseLlm`` and the same tool, run through a
real ``InMemoryRunner`` (``run_async``), with and without the guard: the model asks
for one tool call per turn, ``TURNS`` turns and a final answer per run, and a run is
timed whole. Figures are per tool call: the run's time divided by ``TURNS``, so each
sample holds one model turn, one tool call and ADK's own bookkeeping (sessions,
events). Subjects:

* **unguarded** — no plugin: the baseline;
* **no-op plugin** — a ``BasePlugin`` whose tool and model callbacks return ``None``:
  what ADK's plugin machinery costs by itself;
* **plugin, tools** — ``InterlockPlugin(guard, models=False)``, no store: one check
  per tool call;
* **plugin, tools + models, store** — ``InterlockPlugin(guard)`` on an embedded SQLite
  store: each tool call audited, and each model call checked, reserved on a token
  budget and committed from its ``usage_metadata``;
* **agent callbacks, tools** — ``guard_agent(agent, guard, models=False)``.

The overhead per tool call is the subject's median minus the unguarded median; the
ratio is subject / unguarded. The gate alone (``before_tool_callback`` of the plugin
vs the no-op one, called directly) is the **hook** pair: what the guard adds to a tool
call, free of the loop's noise.
"""

from __future__ import annotations

import asyncio
import gc
import os
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Final

from bench.agent_loops import check_settled, interleave, lookup_policy, loop_stats, note_overheads
from bench.harness import BenchResult, Stats, summarise
from interlock import Guard, load_policy_text

__all__ = ["run"]

TURNS: Final = 20
#: timed runs per subject (default, quick)
RUNS: Final = (30, 5)
WARMUP: Final = 2
TOKENS: Final = (200, 20)

POLICY: Final = lookup_policy(1000)


def _agent() -> Any:
    from google.adk.agents import LlmAgent
    from google.adk.models.base_llm import BaseLlm
    from google.adk.models.llm_response import LlmResponse
    from google.genai import types
    from pydantic import Field

    usage = types.GenerateContentResponseUsageMetadata(
        prompt_token_count=TOKENS[0], candidates_token_count=TOKENS[1]
    )

    def turn(i: int) -> LlmResponse:
        if i == TURNS:
            part = types.Part(text="done")
        else:
            call = types.FunctionCall(id=f"c{i}", name="lookup", args={"key": f"k{i}"})
            part = types.Part(function_call=call)
        content = types.Content(role="model", parts=[part])
        return LlmResponse(content=content, usage_metadata=usage)

    class ScriptedLlm(BaseLlm):
        """Starts over every run: answers by how many model turns the request holds."""

        script: list[Any] = Field(default_factory=list)

        async def generate_content_async(self, llm_request: Any, stream: bool = False) -> Any:
            asked = sum(1 for c in llm_request.contents if c.role == "model")
            yield self.script[asked % (TURNS + 1)]

    def lookup(key: str) -> str:
        """Look a key up."""
        return f"value of {key}"

    model = ScriptedLlm(model="scripted", script=[turn(i) for i in range(TURNS + 1)])
    return LlmAgent(name="bot", model=model, tools=[lookup])


def _noop() -> Any:
    from google.adk.plugins.base_plugin import BasePlugin

    class Noop(BasePlugin):
        async def before_tool_callback(self, **_: Any) -> None:
            return None

        async def after_tool_callback(self, **_: Any) -> None:
            return None

        async def before_model_callback(self, **_: Any) -> None:
            return None

        async def after_model_callback(self, **_: Any) -> None:
            return None

    return Noop(name="noop")


def _runner(agent: Any, plugins: list[Any]) -> Any:
    from google.adk.apps import App
    from google.adk.runners import InMemoryRunner

    return InMemoryRunner(app=App(name="bench", root_agent=agent, plugins=plugins))


async def _one_run(runner: Any) -> int:
    """One whole run (a fresh session); its time per tool call (ns)."""
    from google.genai import types

    session = await runner.session_service.create_session(app_name="bench", user_id="u")
    message = types.Content(role="user", parts=[types.Part(text="go")])
    t0 = time.perf_counter_ns()
    last = None
    async for event in runner.run_async(user_id="u", session_id=session.id, new_message=message):
        last = event
    elapsed = time.perf_counter_ns() - t0
    parts = last.content.parts if last is not None and last.content else []
    if not parts or parts[0].text != "done":
        raise AssertionError("the agent loop did not finish")
    return elapsed // TURNS


def _hook_costs(policy: Any, calls: int) -> list[Stats]:
    """``before_tool_callback`` alone: the guarded plugin vs the no-op one."""
    from google.adk.tools.function_tool import FunctionTool

    from interlock.adapters.google_adk import InterlockPlugin

    def lookup(key: str) -> str:
        """Look a key up."""
        return key

    tool = FunctionTool(lookup)
    out = []
    with asyncio.Runner() as loop:
        for label, plugin in (
            ("hook: no-op before_tool_callback", _noop()),
            ("hook: guarded before_tool_callback", InterlockPlugin(Guard(policy), models=False)),
        ):
            callback = plugin.before_tool_callback

            async def many(n: int, callback: Any = callback) -> list[int]:
                samples = []
                clock = time.perf_counter_ns
                for _ in range(n):
                    context = _Context()  # each call has its own ToolContext
                    t0 = clock()
                    await callback(tool=tool, tool_args={"key": "k1"}, tool_context=context)
                    samples.append(clock() - t0)
                return samples

            loop.run(many(500))
            gc.collect()
            t0 = time.perf_counter_ns()
            samples = loop.run(many(calls))
            out.append(summarise(label, samples, time.perf_counter_ns() - t0))
    return out


class _Context:
    """What the gate reads of a ``ToolContext`` (the hook pair calls it directly)."""

    function_call_id = "c1"
    invocation_id = "bench"
    tool_confirmation = None


def run(calls: int | None, quick: bool) -> BenchResult:
    """``calls``: timed runs per subject (each ``TURNS`` tool calls)."""
    os.environ.setdefault("GOOGLE_API_KEY", "offline-bench")  # never used: scripted model
    from interlock.adapters.google_adk import InterlockPlugin, guard_agent

    runs = calls or RUNS[1 if quick else 0]
    policy = load_policy_text(POLICY, file="bench/adapter_google_adk.py")
    result = BenchResult("adapter-google-adk")
    with tempfile.TemporaryDirectory(prefix="interlock-bench-") as scratch:
        stored = Guard(policy, store=f"sqlite:///{Path(scratch) / 'bench.db'}")
        subjects: dict[str, Callable[[], Any]] = {
            "unguarded": lambda: _runner(_agent(), []),
            "no-op plugin": lambda: _runner(_agent(), [_noop()]),
            "plugin, tools": lambda: _runner(
                _agent(), [InterlockPlugin(Guard(policy), models=False)]
            ),
            "plugin, tools + models, store": lambda: _runner(_agent(), [InterlockPlugin(stored)]),
            "agent callbacks, tools": lambda: _runner(
                guard_agent(_agent(), Guard(policy), models=False), []
            ),
        }
        runners = [(name, make()) for name, make in subjects.items()]
        try:
            with asyncio.Runner() as loop:
                samples, walls = interleave(
                    [(name, lambda r=runner: loop.run(_one_run(r))) for name, runner in runners],
                    rounds=runs,
                    warmup=WARMUP,
                    turns=TURNS,
                )
            medians = loop_stats(result, samples, walls, turns=TURNS)
            check_settled(
                result, stored, "model-tokens", (WARMUP + runs) * (TURNS + 1) * sum(TOKENS)
            )
        finally:
            stored.close()
    hooks = _hook_costs(policy, 2_000 if quick else 20_000)
    result.stats.extend(hooks)
    added = hooks[1].p50_ns - hooks[0].p50_ns
    base = medians["unguarded"]
    result.info["hook_added_us"] = round(added / 1000, 2)
    result.notes.append(
        f"the guard adds {added / 1000:.1f} µs per tool call at the hook "
        f"({added / base:.2%} of an unguarded ADK loop's {base / 1000:.0f} µs per tool call)"
    )
    note_overheads(result, medians, [(name, "unguarded") for name in list(subjects)[1:]])
    result.info.update({"turns_per_run": TURNS, "runs": runs})
    return result
