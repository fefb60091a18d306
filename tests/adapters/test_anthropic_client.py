"""The ``anthropic`` client guarded: what is particular to it — every public way to
``POST /v1/messages`` (the bypass table), ``messages.stream(...)``, usage from
``message_start`` and the last (cumulative) ``message_delta``, a body read once. The
rows, budgets, failures and derived clients every kit shares are in
``test_model_clients.py``."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("anthropic")

from anthropic import Anthropic
from anthropic.types import Message

from interlock import ActionDenied, Context, Guard, load_policy_text

from .model_endpoint import ANTHROPIC_USAGE, FakeModel
from .test_model_clients import BUDGET_POLICY, MESSAGES, MODEL_POLICY, budget

TOTAL = ANTHROPIC_USAGE["input_tokens"] + ANTHROPIC_USAGE["output_tokens"]
MESSAGE: dict[str, Any] = {"model": "big-model", "max_tokens": 64, "messages": MESSAGES}


@pytest.fixture
def budget_guard(tmp_path: Path) -> Any:
    with Guard(
        load_policy_text(BUDGET_POLICY),
        store=f"sqlite:///{tmp_path / 'state.db'}",
        context=Context(agent="bot"),
    ) as guard:
        yield guard


def _drain(manager: Any) -> None:
    with manager as opened:
        for _ in getattr(opened, "iter_lines", lambda: opened)():
            pass


SYNC_ENTRIES: list[tuple[str, Callable[[Anthropic], Any]]] = [
    ("messages.create", lambda c: c.messages.create(**MESSAGE)),
    ("messages.create stream", lambda c: c.messages.create(**MESSAGE, stream=True)),
    ("messages.stream", lambda c: _drain(c.messages.stream(**MESSAGE))),
    ("messages.parse", lambda c: c.messages.parse(**MESSAGE)),
    ("messages.with_raw_response.create", lambda c: c.messages.with_raw_response.create(**MESSAGE)),
    (
        "messages.with_streaming_response.create",
        lambda c: _drain(c.messages.with_streaming_response.create(**MESSAGE)),
    ),
    ("beta.messages.create", lambda c: c.beta.messages.create(**MESSAGE)),
    ("beta.messages.stream", lambda c: _drain(c.beta.messages.stream(**MESSAGE))),
    ("client.post", lambda c: c.post("/v1/messages", body=MESSAGE, cast_to=Message)),
    ("with_options", lambda c: c.with_options(timeout=5).messages.create(**MESSAGE)),
    ("copy", lambda c: c.copy(max_retries=1).messages.create(**MESSAGE)),
]


@pytest.mark.parametrize(("name", "call"), SYNC_ENTRIES, ids=[n for n, _ in SYNC_ENTRIES])
def test_bypass_table_sync(name: str, call: Callable[[Anthropic], Any]) -> None:
    fake = FakeModel()
    client = Guard(MODEL_POLICY).attach(fake.anthropic())
    with pytest.raises(ActionDenied):
        call(client)
    assert fake.requests == [], f"{name} reached the model"


async def _adrain(manager: Any) -> None:
    async with manager as opened:
        async for _ in getattr(opened, "iter_lines", lambda: opened)():
            pass


ASYNC_ENTRIES: list[tuple[str, Callable[[Any], Any]]] = [
    ("messages.create", lambda c: c.messages.create(**MESSAGE)),
    ("messages.create stream", lambda c: c.messages.create(**MESSAGE, stream=True)),
    ("messages.stream", lambda c: _adrain(c.messages.stream(**MESSAGE))),
    (
        "messages.with_streaming_response.create",
        lambda c: _adrain(c.messages.with_streaming_response.create(**MESSAGE)),
    ),
    ("beta.messages.create", lambda c: c.beta.messages.create(**MESSAGE)),
    ("client.post", lambda c: c.post("/v1/messages", body=MESSAGE, cast_to=Message)),
]


@pytest.mark.parametrize(("name", "call"), ASYNC_ENTRIES, ids=[n for n, _ in ASYNC_ENTRIES])
async def test_bypass_table_async(name: str, call: Callable[[Any], Any]) -> None:
    fake = FakeModel()
    client = Guard(MODEL_POLICY).attach(fake.async_anthropic())
    with pytest.raises(ActionDenied):
        await call(client)
    assert fake.requests == [], f"{name} reached the model"


def test_batches_are_a_side_door_and_count_tokens_is_not_a_model_call() -> None:
    fake = FakeModel()
    guard = Guard(MODEL_POLICY)
    client = guard.attach(fake.anthropic())
    client.post("/v1/messages/batches", body={"requests": []}, cast_to=object)
    client.post("/v1/messages/count_tokens", body=MESSAGE, cast_to=object)
    assert len(fake.requests) == 2  # the documented boundary: sent unjudged
    assert "model:messages.batches" in guard.coverage(client).unguarded


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_messages_stream_commits_the_final_message_usage_once(
    budget_guard: Guard, mode: str
) -> None:
    fake = FakeModel()
    if mode == "sync":
        client = budget_guard.attach(fake.anthropic())
        with client.messages.stream(model="m", max_tokens=64, messages=MESSAGES) as stream:
            final = stream.get_final_message()
    else:
        client = budget_guard.attach(fake.async_anthropic())

        async def go() -> Any:
            async with client.messages.stream(
                model="m", max_tokens=64, messages=MESSAGES
            ) as stream:
                return await stream.get_final_message()

        final = asyncio.run(go())
    assert final.usage.input_tokens + final.usage.output_tokens == TOTAL
    assert budget(budget_guard) == (TOTAL, 0)


def test_output_tokens_are_the_last_delta_not_the_sum(budget_guard: Guard) -> None:
    """``message_delta`` usage is cumulative: 5 then 15 is 15, not 20."""
    from gateways.llm_proxy.standin import anthropic_event, anthropic_start, anthropic_text_block

    fake = FakeModel()
    original = fake.__call__

    def answer(request: Any) -> Any:
        sent = original(request)
        delta = {"stop_reason": None, "stop_sequence": None}
        frames = [anthropic_start("m"), *anthropic_text_block(0, ["Hi"])]
        frames.append(anthropic_event("message_delta", delta=delta, usage={"output_tokens": 5}))
        frames.append(anthropic_event("message_delta", delta=delta, usage={"output_tokens": 15}))
        frames.append(anthropic_event("message_stop"))
        body = "".join(frames).encode()
        return type(sent)(200, headers={"content-type": "text/event-stream"}, content=body)

    client = fake.anthropic()
    import httpx2

    client._client._transport = httpx2.MockTransport(answer)
    budget_guard.attach(client)
    list(client.messages.create(model="m", max_tokens=64, messages=MESSAGES, stream=True))
    assert budget(budget_guard) == (ANTHROPIC_USAGE["input_tokens"] + 15, 0)


def test_a_one_shot_iterable_of_messages_is_judged_and_sent_intact() -> None:
    fake = FakeModel()
    guard = Guard(MODEL_POLICY)
    client = guard.attach(fake.anthropic())

    def messages() -> Iterator[dict[str, str]]:
        yield {"role": "user", "content": "Say hello to the agent, please."}

    client.messages.create(model="ok-model", max_tokens=64, messages=messages())
    assert fake.bodies[0]["messages"] == MESSAGES
