"""The ``openai`` client guarded: what is particular to it — every public way to a
model endpoint (the bypass table), the stream helpers, the usage chunk a stream did
not ask for, the raw-response wrappers, both HTTP libraries the SDK takes. The rows,
budgets, failures and derived clients every kit shares are in
``test_model_clients.py``."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import httpx2
import pytest

pytest.importorskip("openai")

from openai import OpenAI
from openai.types.chat import ChatCompletion

from interlock import ActionDenied, Context, Guard, load_policy_text
from interlock.core.events import MemorySink

from .model_endpoint import OPENAI_USAGE, RESPONSES_USAGE, FakeModel
from .test_model_clients import BUDGET_POLICY, MESSAGES, MODEL_POLICY, budget

CHAT_TOTAL = OPENAI_USAGE["prompt_tokens"] + OPENAI_USAGE["completion_tokens"]
RESPONSES_TOTAL = RESPONSES_USAGE["input_tokens"] + RESPONSES_USAGE["output_tokens"]
BIG = "big-model"
CHAT: dict[str, Any] = {"model": BIG, "messages": MESSAGES}
RESPONSE: dict[str, Any] = {"model": BIG, "input": "Say hello."}


@pytest.fixture
def budget_guard(tmp_path: Path) -> Any:
    with Guard(
        load_policy_text(BUDGET_POLICY),
        store=f"sqlite:///{tmp_path / 'state.db'}",
        context=Context(agent="bot"),
    ) as guard:
        yield guard


def _drain(answer: Any) -> Any:
    if hasattr(answer, "__enter__") and not hasattr(answer, "choices"):
        with answer as opened:
            for _ in getattr(opened, "iter_lines", lambda: opened)():
                pass
    return answer


# Every public way to a model endpoint: (name, call). Each must be refused before sending.
SYNC_ENTRIES: list[tuple[str, Callable[[OpenAI], Any]]] = [
    ("chat.completions.create", lambda c: c.chat.completions.create(**CHAT)),
    ("chat.completions.create stream", lambda c: c.chat.completions.create(**CHAT, stream=True)),
    ("chat.completions.parse", lambda c: c.chat.completions.parse(**CHAT)),
    ("chat.completions.stream", lambda c: _drain(c.chat.completions.stream(**CHAT))),
    (
        "chat.completions.with_raw_response.create",
        lambda c: c.chat.completions.with_raw_response.create(**CHAT),
    ),
    (
        "chat.completions.with_streaming_response.create",
        lambda c: _drain(c.chat.completions.with_streaming_response.create(**CHAT)),
    ),
    ("responses.create", lambda c: c.responses.create(**RESPONSE)),
    ("responses.create stream", lambda c: c.responses.create(**RESPONSE, stream=True)),
    ("responses.parse", lambda c: c.responses.parse(**RESPONSE)),
    ("responses.stream", lambda c: _drain(c.responses.stream(**RESPONSE))),
    (
        "responses.with_raw_response.create",
        lambda c: c.responses.with_raw_response.create(**RESPONSE),
    ),
    ("beta.responses.create", lambda c: c.beta.responses.create(**RESPONSE)),
    ("client.post", lambda c: c.post("/chat/completions", body=CHAT, cast_to=ChatCompletion)),
    (
        "client.post absolute URL",
        lambda c: c.post(
            "http://model.test/v1/chat/completions", body=CHAT, cast_to=ChatCompletion
        ),
    ),
    (
        "extra_body names the model",
        lambda c: c.chat.completions.create(
            model="ok-model", messages=MESSAGES, extra_body={"model": BIG}
        ),
    ),
    ("with_options", lambda c: c.with_options(timeout=5).chat.completions.create(**CHAT)),
    ("copy", lambda c: c.copy(max_retries=1).responses.create(**RESPONSE)),
]


@pytest.mark.parametrize(("name", "call"), SYNC_ENTRIES, ids=[n for n, _ in SYNC_ENTRIES])
def test_bypass_table_sync(name: str, call: Callable[[OpenAI], Any]) -> None:
    fake = FakeModel()
    client = Guard(MODEL_POLICY).attach(fake.openai())
    with pytest.raises(ActionDenied):
        call(client)
    assert fake.requests == [], f"{name} reached the model"


async def _adrain(answer: Any) -> None:
    async with answer as opened:
        async for _ in getattr(opened, "iter_lines", lambda: opened)():
            pass


ASYNC_ENTRIES: list[tuple[str, Callable[[Any], Any]]] = [
    ("chat.completions.create", lambda c: c.chat.completions.create(**CHAT)),
    ("chat.completions.create stream", lambda c: c.chat.completions.create(**CHAT, stream=True)),
    ("chat.completions.stream", lambda c: _adrain(c.chat.completions.stream(**CHAT))),
    (
        "chat.completions.with_streaming_response.create",
        lambda c: _adrain(c.chat.completions.with_streaming_response.create(**CHAT)),
    ),
    ("responses.create stream", lambda c: c.responses.create(**RESPONSE, stream=True)),
    ("responses.stream", lambda c: _adrain(c.responses.stream(**RESPONSE))),
    ("client.post", lambda c: c.post("/chat/completions", body=CHAT, cast_to=ChatCompletion)),
    ("with_options", lambda c: c.with_options(timeout=5).chat.completions.create(**CHAT)),
]


@pytest.mark.parametrize(("name", "call"), ASYNC_ENTRIES, ids=[n for n, _ in ASYNC_ENTRIES])
async def test_bypass_table_async(name: str, call: Callable[[Any], Any]) -> None:
    fake = FakeModel()
    client = Guard(MODEL_POLICY).attach(fake.async_openai())
    with pytest.raises(ActionDenied):
        await call(client)
    assert fake.requests == [], f"{name} reached the model"


def test_the_batch_api_is_a_side_door_sent_unjudged_and_named_in_coverage() -> None:
    fake = FakeModel()
    guard = Guard(MODEL_POLICY)
    client = guard.attach(fake.openai())
    client.post("/batches", body={"input_file_id": "file-1"}, cast_to=object)
    assert len(fake.requests) == 1  # the documented boundary: not a model request here
    assert "model:batches" in guard.coverage(client).unguarded


# -- streamed usage --------------------------------------------------------------------------


def test_a_chat_stream_that_did_not_ask_for_usage_is_asked_and_the_chunk_hidden(
    budget_guard: Guard,
) -> None:
    fake = FakeModel()
    client = budget_guard.attach(fake.openai())
    chunks = list(client.chat.completions.create(model="m", messages=MESSAGES, stream=True))
    assert fake.bodies[0]["stream_options"] == {"include_usage": True}
    assert all(chunk.choices for chunk in chunks)  # the stream the caller asked for
    assert all(chunk.usage is None for chunk in chunks)
    assert budget(budget_guard) == (CHAT_TOTAL, 0)


def test_a_chat_stream_that_asked_for_usage_gets_it(budget_guard: Guard) -> None:
    fake = FakeModel()
    client = budget_guard.attach(fake.openai())
    chunks = list(
        client.chat.completions.create(
            model="m", messages=MESSAGES, stream=True, stream_options={"include_usage": True}
        )
    )
    assert chunks[-1].usage is not None and chunks[-1].usage.total_tokens == CHAT_TOTAL
    assert budget(budget_guard) == (CHAT_TOTAL, 0)


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_the_stream_helpers_commit_the_final_usage_once(budget_guard: Guard, mode: str) -> None:
    fake = FakeModel()
    if mode == "sync":
        client = budget_guard.attach(fake.openai())
        with client.chat.completions.stream(model="m", messages=MESSAGES) as stream:
            completion = stream.get_final_completion()
        with client.responses.stream(model="m", input="Say hello.") as events:
            final = events.get_final_response()
    else:
        client = budget_guard.attach(fake.async_openai())

        async def go() -> tuple[Any, Any]:
            async with client.chat.completions.stream(model="m", messages=MESSAGES) as stream:
                done = await stream.get_final_completion()
            async with client.responses.stream(model="m", input="Say hello.") as events:
                return done, await events.get_final_response()

        completion, final = asyncio.run(go())
    assert completion.choices[0].message.content == "Hello there, agent."
    assert final.usage is not None and final.usage.total_tokens == RESPONSES_TOTAL
    assert budget(budget_guard) == (CHAT_TOTAL + RESPONSES_TOTAL, 0)


def test_a_stream_helper_left_early_is_settled_when_it_closes(budget_guard: Guard) -> None:
    fake = FakeModel()
    client = budget_guard.attach(fake.openai())
    with client.chat.completions.stream(model="m", messages=MESSAGES) as stream:
        for _ in stream:
            break
        assert budget(budget_guard)[1] > 0  # still held while open
    spent, reserved = budget(budget_guard)
    assert reserved == 0 and spent > 0


def test_raw_responses_commit_their_usage(budget_guard: Guard) -> None:
    fake = FakeModel()
    client = budget_guard.attach(fake.openai())
    raw = client.chat.completions.with_raw_response.create(model="m", messages=MESSAGES)
    assert raw.parse().usage.total_tokens == CHAT_TOTAL
    assert budget(budget_guard) == (CHAT_TOTAL, 0)
    with client.chat.completions.with_streaming_response.create(
        model="m", messages=MESSAGES
    ) as answer:
        answer.read()
    assert budget(budget_guard) == (2 * CHAT_TOTAL, 0)
    with client.chat.completions.with_streaming_response.create(
        model="m", messages=MESSAGES, stream=True
    ) as answer:
        lines = list(answer.iter_lines())
    assert not any('"choices": []' in line for line in lines)  # the hidden usage chunk
    assert budget(budget_guard) == (3 * CHAT_TOTAL, 0)
    raw_stream = client.chat.completions.with_raw_response.create(
        model="m", messages=MESSAGES, stream=True
    )
    assert len(list(raw_stream.parse())) > 1
    assert budget(budget_guard) == (4 * CHAT_TOTAL, 0)


@pytest.mark.parametrize("library", [httpx, httpx2], ids=["httpx", "httpx2"])
def test_either_http_library_is_metered(budget_guard: Guard, library: Any) -> None:
    fake = FakeModel(library=library)
    client = budget_guard.attach(fake.openai())
    list(client.chat.completions.create(model="m", messages=MESSAGES, stream=True))
    list(client.responses.create(model="m", input="Say hello.", stream=True))
    assert budget(budget_guard) == (CHAT_TOTAL + RESPONSES_TOTAL, 0)


def test_the_action_is_the_llm_proxys(budget_guard: Guard) -> None:
    sink = MemorySink()
    budget_guard.sink = sink
    fake = FakeModel()
    client = budget_guard.attach(fake.openai())
    client.chat.completions.create(model="gpt-x", messages=MESSAGES, max_tokens=50, n=2)
    decision, started, finished = sink.records()
    assert decision["kind"] == "decision" and decision["action"]["name"] == "gpt-x"
    arguments = decision["action"]["arguments"]
    assert arguments["provider"] == "openai" and arguments["max_tokens"] == 100  # 50 x n
    assert started["kind"] == "llm_input" and finished["kind"] == "llm_output"
    assert decision["decision_id"] == started["decision_id"] == finished["decision_id"]
    assert finished["usage"] == {"input_tokens": 11, "output_tokens": 7}
    assert json.loads(fake.requests[0].content)["n"] == 2  # sent as it was asked


def test_an_azure_client_is_guarded_too(budget_guard: Guard) -> None:
    from openai import AzureOpenAI

    fake = FakeModel()
    client = AzureOpenAI(
        api_key="k",
        api_version="2024-10-21",
        azure_endpoint="http://model.test",
        http_client=httpx.Client(transport=fake.transport()),
        max_retries=0,
    )
    budget_guard.attach(client)
    list(client.chat.completions.create(model="my-deployment", messages=MESSAGES, stream=True))
    assert "/deployments/my-deployment/chat/completions" in str(fake.requests[0].url)
    assert budget(budget_guard) == (CHAT_TOTAL, 0)
