"""Benchmark ``adapter-browser-use``: what the guard adds to browser-use's action
dispatch and to a model call.

browser-use's own ``Tools.act(action, browser_session=None)`` — the call its agent
loop makes for every action — on the same ``Tools``, with and without the guard; no
browser is needed: the actions measured need none (a custom ``lookup`` action, and
the built-in ``navigate`` with its browser step replaced by a stub, so that the
guard's URL reading is in the measure). Subjects, each per action:

* **unguarded** — the ``Tools`` as browser-use builds it;
* **guarded** — ``guard_tools(tools, Guard(policy))``, no store: one check per action;
* **guarded, store** — the same on an embedded SQLite store (durability ``process``):
  each action audited;

and a model call: ``ainvoke`` of a fake chat model, bare and as a ``GuardedChatModel``
reserving on a token budget and committing the reported usage (no store, and SQLite).
The overhead is the guarded median minus the unguarded one; the ratio is guarded /
unguarded. Subjects run round-robin in blocks, so drift in the machine's load hits
each alike. Runs in browser-use's own environment (``.venv-browser-use``).
"""

from __future__ import annotations

import asyncio
import os
import tempfile
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, Final

from bench.harness import BenchResult, atime_calls, summarise
from interlock import Guard, Usage, load_policy_text

__all__ = ["run"]

#: timed calls per subject (default, quick), and the blocks they are run in
CALLS: Final = (20_000, 1_000)
BLOCKS: Final = 5
WARMUP: Final = 200

POLICY: Final = """
version: 1
default: deny
budgets:
  - id: model-tokens
    limit: 1000000000000
    unit: tokens
    scope: agent
    kind: llm
rules:
  - id: models
    decision: allow
    reason: the model may think
    kind: llm
  - id: lookups
    decision: allow
    reason: lookups are fine
    name: lookup
  - id: docs
    decision: allow
    reason: the documentation site
    kind: browser
    name: navigate
    params: {scheme: https, site: example.com}
"""

Call = Callable[[Any], Awaitable[object]]


def _tools() -> tuple[Any, Any, Any]:
    """A fresh ``Tools`` with a ``lookup`` action and a browserless ``navigate``; the
    two action models the dispatch is timed with."""
    from browser_use import ActionResult, Tools

    tools: Any = Tools()

    @tools.action("Look a key up.")
    async def lookup(key: str) -> ActionResult:
        return ActionResult(extracted_content=f"value of {key}")

    async def navigate(params: Any, **_: Any) -> ActionResult:
        return ActionResult(extracted_content=f"navigated to {params.url}")

    tools.registry.registry.actions["navigate"].function = navigate
    model = tools.registry.create_action_model()
    return (
        tools,
        model(lookup={"key": "k1"}),
        model(navigate={"url": "https://docs.example.com/guide?page=2"}),
    )


class _FakeChatModel:
    model = "bench-model"
    provider = "bench"
    name = "bench"
    max_completion_tokens = 100
    _verified_api_keys = True

    def __init__(self) -> None:
        from browser_use.llm.views import ChatInvokeCompletion, ChatInvokeUsage

        usage = ChatInvokeUsage(
            prompt_tokens=200,
            prompt_cached_tokens=None,
            prompt_cache_creation_tokens=None,
            prompt_image_tokens=None,
            completion_tokens=20,
            total_tokens=220,
        )
        self.answer = ChatInvokeCompletion(completion="done", usage=usage)

    async def ainvoke(self, messages: Any, output_format: Any = None, **kwargs: Any) -> Any:
        return self.answer


def _subjects(policy: Any, stored: Guard) -> dict[str, Call]:
    from browser_use.llm.messages import UserMessage

    from interlock.adapters.browser_use import GuardedChatModel, guard_tools

    subjects: dict[str, Call] = {}
    for label, guard in (
        ("unguarded", None),
        ("guarded", Guard(policy)),
        ("guarded, store", stored),
    ):
        tools, lookup, navigate = _tools()
        if guard is not None:
            guard_tools(tools, guard)
        for action_label, action in (("lookup", lookup), ("navigate", navigate)):
            subjects[f"{action_label}: {label}"] = lambda _, t=tools, a=action: t.act(a, None)
    messages = [UserMessage(content="find the release notes")]
    bare = _FakeChatModel()
    subjects["model call: unguarded"] = lambda _: bare.ainvoke(messages)
    for label, guard in (("guarded", Guard(policy)), ("guarded, store", stored)):
        # The reservation covers the call (200 in, 20 out): no overage closes the budget.
        estimate = lambda *_: Usage(200, 100)  # noqa: E731
        guarded = GuardedChatModel(_FakeChatModel(), guard, estimate=estimate)
        subjects[f"model call: {label}"] = lambda _, m=guarded: m.ainvoke(messages)
    return subjects


def run(calls: int | None, quick: bool) -> BenchResult:
    """``calls``: timed calls per subject."""
    os.environ.setdefault("ANONYMIZED_TELEMETRY", "false")
    os.environ.setdefault("BROWSER_USE_CLOUD_SYNC", "false")
    import logging

    logging.getLogger("browser_use").setLevel(logging.WARNING)
    total = calls or CALLS[1 if quick else 0]
    block = max(1, total // BLOCKS)
    policy = load_policy_text(POLICY, file="bench/adapter_browser_use.py")
    result = BenchResult("adapter-browser-use")
    with tempfile.TemporaryDirectory(prefix="interlock-bench-") as scratch:
        stored = Guard(policy, store=f"sqlite:///{Path(scratch) / 'bench.db'}")
        try:
            subjects = _subjects(policy, stored)
            samples: dict[str, list[int]] = {label: [] for label in subjects}
            walls: dict[str, int] = dict.fromkeys(subjects, 0)

            async def measure() -> None:
                labels = list(subjects)
                for round_ in range(BLOCKS):
                    for k in range(len(labels)):
                        label = labels[(round_ + k) % len(labels)]
                        taken, wall = await atime_calls(
                            subjects[label], [None], block, WARMUP if round_ == 0 else 0
                        )
                        samples[label].extend(taken)
                        walls[label] += wall

            asyncio.run(measure())
            assert stored.store is not None
            (tokens,) = stored.store.budget_rows(budget_id="model-tokens")
            expected = (BLOCKS * block + WARMUP) * 220
            if (tokens.spent, tokens.reserved) != (expected, 0):
                result.problems.append(
                    f"token budget spent {tokens.spent} reserved {tokens.reserved}, "
                    f"expected {expected} and 0"
                )
        finally:
            stored.close()
    medians: dict[str, int] = {}
    for label in subjects:
        stats = summarise(label, samples[label], walls[label])
        medians[label] = stats.p50_ns
        result.stats.append(stats)
    for what in ("lookup", "navigate", "model call"):
        base = medians[f"{what}: unguarded"]
        for name in ("guarded", "guarded, store"):
            label = f"{what}: {name}"
            over = medians[label] - base
            result.info[f"overhead_us {label}"] = round(over / 1000, 2)
            result.info[f"ratio {label}"] = round(medians[label] / base, 3)
            result.notes.append(
                f"{label}: {over / 1000:+.1f} µs per call over unguarded "
                f"({medians[label] / base:.3f}×, unguarded {base / 1000:.1f} µs)"
            )
    result.info["calls_per_subject"] = BLOCKS * block
    return result
