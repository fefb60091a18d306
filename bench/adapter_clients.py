"""Benchmark ``adapter-clients``: what the guard adds to one call of the official
``openai`` and ``anthropic`` clients.

The same client class, the same fake model endpoint (an ``httpx`` / ``httpx2``
``MockTransport`` answering canned JSON, or SSE frame by frame) and the same request,
with and without the guard, in the same run. Subjects, for OpenAI chat completions and
Anthropic messages, each not streamed and streamed (the stream read to its end):

* **unguarded** — a plain client: the SDK's own cost (building the request, the mock
  transport, parsing the answer) is the baseline;
* **guarded** — ``guard.attach(client)``, a guard without a store: one ``llm`` check
  per call, and a streamed answer metered as it passes;
* **guarded, store** — the same on an embedded SQLite store with a token budget: each
  call judged, reserved, audited and committed from the reported usage;
* **guard.llm_call alone** — the guard's model-call path by itself (check, reserve,
  commit; no client, no store): what any in-process model gate pays. The adapter's own
  share is the guarded overhead minus this.

Calls are timed one by one, round-robin over the subjects (a different one first each
round), so drift in the machine's load hits every subject alike. The overhead per call
is the guarded median minus the unguarded median; the ratio is guarded / unguarded.
"""

from __future__ import annotations

import gc
import json
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, Final

from bench.harness import BenchResult, summarise
from interlock import Guard, load_policy_text

__all__ = ["run"]

#: timed calls per subject (default, quick)
CALLS: Final = (1_000, 100)
WARMUP: Final = 20

POLICY: Final = """
version: 1
default: deny
budgets:
  - id: model-tokens
    limit: 1000000000
    unit: tokens
    scope: agent
    kind: llm
    default_estimate: 100
rules:
  - id: models
    decision: allow
    reason: the model may think
    kind: llm
"""

MESSAGES: Final = [{"role": "user", "content": "Say hello to the agent, please."}]
_CHAT_USAGE: Final = {"prompt_tokens": 11, "completion_tokens": 7, "total_tokens": 18}
_MESSAGE_USAGE: Final = {"input_tokens": 12, "output_tokens": 15}


def _chunk(delta: dict[str, Any], finish: str | None = None, usage: Any = None) -> bytes:
    choices = [] if usage else [{"index": 0, "delta": delta, "finish_reason": finish}]
    data = {
        "id": "c1",
        "object": "chat.completion.chunk",
        "created": 0,
        "model": "gpt-5-mini",
        "choices": choices,
        "usage": usage,
    }
    return f"data: {json.dumps(data)}\n\n".encode()


def _event(kind: str, **data: Any) -> bytes:
    return f"event: {kind}\ndata: {json.dumps({'type': kind, **data})}\n\n".encode()


_CHAT: Final = json.dumps(
    {
        "id": "c1",
        "object": "chat.completion",
        "created": 0,
        "model": "gpt-5-mini",
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": "Hello."},
                "finish_reason": "stop",
            }
        ],
        "usage": _CHAT_USAGE,
    }
).encode()
_MESSAGE: Final = json.dumps(
    {
        "id": "m1",
        "type": "message",
        "role": "assistant",
        "model": "claude-haiku-4-5",
        "content": [{"type": "text", "text": "Hello."}],
        "stop_reason": "end_turn",
        "stop_sequence": None,
        "usage": _MESSAGE_USAGE,
    }
).encode()
_START: Final = {
    "id": "m1",
    "type": "message",
    "role": "assistant",
    "model": "claude-haiku-4-5",
    "content": [],
    "stop_reason": None,
    "stop_sequence": None,
    "usage": {"input_tokens": 12, "output_tokens": 1},
}


def _chat_frames(with_usage: bool) -> list[bytes]:
    frames = [_chunk({"role": "assistant", "content": ""})]
    frames += [_chunk({"content": piece}) for piece in ("Hel", "lo", " there", ".")]
    frames.append(_chunk({}, "stop"))
    if with_usage:
        frames.append(_chunk({}, usage=_CHAT_USAGE))
    return [*frames, b"data: [DONE]\n\n"]


_MESSAGE_FRAMES: Final = [
    _event("message_start", message=_START),
    _event("content_block_start", index=0, content_block={"type": "text", "text": ""}),
    *[
        _event("content_block_delta", index=0, delta={"type": "text_delta", "text": piece})
        for piece in ("Hel", "lo", " there", ".")
    ],
    _event("content_block_stop", index=0),
    _event(
        "message_delta",
        delta={"stop_reason": "end_turn", "stop_sequence": None},
        usage={"output_tokens": 15},
    ),
    _event("message_stop"),
]


def _transport(library: Any) -> Any:
    class Frames(library.SyncByteStream):  # type: ignore[misc,name-defined]
        def __init__(self, frames: list[bytes]) -> None:
            self.frames = frames

        def __iter__(self) -> Iterator[bytes]:
            yield from self.frames

    sse = {"content-type": "text/event-stream"}
    plain = {"content-type": "application/json"}

    def answer(request: Any) -> Any:
        body = json.loads(request.content)
        chat = request.url.path.endswith("/chat/completions")
        if body.get("stream"):
            options = body.get("stream_options") or {}
            frames = _chat_frames(options.get("include_usage") is True) if chat else _MESSAGE_FRAMES
            return library.Response(200, headers=sse, stream=Frames(frames))
        return library.Response(200, headers=plain, content=_CHAT if chat else _MESSAGE)

    return library.MockTransport(answer)


def _clients() -> tuple[Any, Any]:
    import httpx
    import httpx2
    from anthropic import Anthropic
    from openai import OpenAI

    openai = OpenAI(
        api_key="sk-bench",
        base_url="http://model.test/v1",
        http_client=httpx.Client(transport=_transport(httpx)),
        max_retries=0,
    )
    anthropic = Anthropic(
        api_key="sk-bench",
        base_url="http://model.test",
        http_client=httpx2.Client(transport=_transport(httpx2)),
        max_retries=0,
    )
    return openai, anthropic


def _calls(openai: Any, anthropic: Any) -> dict[str, Callable[[], object]]:
    return {
        "openai chat": lambda: openai.chat.completions.create(
            model="gpt-5-mini", messages=MESSAGES, max_tokens=50
        ),
        "openai chat, streamed": lambda: list(
            openai.chat.completions.create(
                model="gpt-5-mini", messages=MESSAGES, max_tokens=50, stream=True
            )
        ),
        "anthropic messages": lambda: anthropic.messages.create(
            model="claude-haiku-4-5", messages=MESSAGES, max_tokens=50
        ),
        "anthropic messages, streamed": lambda: list(
            anthropic.messages.create(
                model="claude-haiku-4-5", messages=MESSAGES, max_tokens=50, stream=True
            )
        ),
    }


def run(calls: int | None, quick: bool) -> BenchResult:
    """``calls``: timed calls per subject."""
    count = calls or CALLS[1 if quick else 0]
    policy = load_policy_text(POLICY, file="bench/adapter_clients.py")
    result = BenchResult("adapter-clients")
    with tempfile.TemporaryDirectory(prefix="interlock-bench-") as scratch:
        stored = Guard(policy, store=f"sqlite:///{Path(scratch) / 'bench.db'}")
        try:
            guards: dict[str, Guard | None] = {
                "unguarded": None,
                "guarded": Guard(policy),
                "guarded, store": stored,
            }
            subjects: list[tuple[str, Callable[[], object]]] = []
            for name, guard in guards.items():
                openai, anthropic = _clients()
                if guard is not None:
                    guard.attach(openai)
                    guard.attach(anthropic)
                for call, fn in _calls(openai, anthropic).items():
                    subjects.append((f"{call}: {name}", fn))
            alone = Guard(policy)
            arguments = {"provider": "openai", "messages": MESSAGES, "max_tokens": 50}

            def llm_call_alone() -> None:
                with alone.llm_call("gpt-5-mini", arguments=arguments) as call:
                    call.record(_CHAT_USAGE)

            subjects.append(("guard.llm_call alone", llm_call_alone))
            samples: dict[str, list[int]] = {label: [] for label, _ in subjects}
            clock = time.perf_counter_ns
            for round_ in range(WARMUP + count):
                if round_ % 200 == 0:
                    gc.collect()
                for k in range(len(subjects)):
                    label, fn = subjects[(round_ + k) % len(subjects)]
                    began = clock()
                    fn()
                    elapsed = clock() - began
                    if round_ >= WARMUP:
                        samples[label].append(elapsed)
            medians: dict[str, int] = {}
            for label, _ in subjects:
                stats = summarise(label, samples[label], sum(samples[label]))
                medians[label] = stats.p50_ns
                result.stats.append(stats)
            assert stored.store is not None
            (tokens,) = stored.store.budget_rows(budget_id="model-tokens")
            per_round = 2 * (11 + 7) + 2 * (12 + 15)
            expected = (WARMUP + count) * per_round
            if (tokens.spent, tokens.reserved) != (expected, 0):
                result.problems.append(
                    f"token budget spent {tokens.spent} reserved {tokens.reserved}, "
                    f"expected {expected} and 0"
                )
        finally:
            stored.close()
    for call in _calls(None, None):
        base = medians[f"{call}: unguarded"]
        for name in ("guarded", "guarded, store"):
            label = f"{call}: {name}"
            over = medians[label] - base
            result.info[f"overhead_us {label}"] = round(over / 1000, 2)
            result.info[f"ratio {label}"] = round(medians[label] / base, 3)
            result.notes.append(
                f"{label}: {over / 1000:+.1f} µs per call over unguarded "
                f"({medians[label] / base:.3f}×, unguarded {base / 1000:.0f} µs)"
            )
    gate = medians["guard.llm_call alone"]
    result.info["llm_call_alone_us"] = round(gate / 1000, 2)
    result.notes.append(f"guard.llm_call alone (check, reserve, commit): {gate / 1000:.1f} µs")
    result.info["calls_per_subject"] = count
    return result
