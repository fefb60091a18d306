"""The official ``openai`` client through the proxy: sync, async, streamed; the
model call judged, reserved, and committed from the real usage exactly once."""

from __future__ import annotations

import openai
import pytest

from .conftest import Proxy
from .standin import OPENAI_USAGE

MESSAGES = [{"role": "user", "content": "Say hello."}]
TOTAL = OPENAI_USAGE["total_tokens"]


def client(proxy: Proxy, key: str = "agent") -> openai.OpenAI:
    return openai.OpenAI(base_url=proxy.url + "/v1", api_key=proxy.tokens[key], max_retries=0)


def aclient(proxy: Proxy) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(
        base_url=proxy.url + "/v1", api_key=proxy.tokens["agent"], max_retries=0
    )


def test_an_allowed_call_is_relayed_and_charged_its_real_usage(proxy: Proxy) -> None:
    reply = client(proxy).chat.completions.create(model="gpt-4o-mini", messages=MESSAGES)
    assert reply.choices[0].message.content == "Hello there, agent."
    assert reply.usage is not None and reply.usage.total_tokens == TOTAL
    assert proxy.standin.calls == 1
    seen = proxy.standin.seen[0]
    assert seen.headers["authorization"] == "Bearer sk-upstream-openai"
    assert proxy.tokens["agent"] not in str(seen.headers)
    proxy.settled.wait_for(1)  # the commit follows the answer
    assert proxy.spent() == (TOTAL, 0)


async def test_the_async_client_is_relayed_and_charged(proxy: Proxy) -> None:
    async with aclient(proxy) as api:
        reply = await api.chat.completions.create(model="gpt-4o-mini", messages=MESSAGES)
    assert reply.choices[0].message.content == "Hello there, agent."
    proxy.settled.wait_for(1)  # the commit follows the answer
    assert proxy.spent() == (TOTAL, 0)


def test_a_stream_is_charged_once_from_its_last_usage_chunk(proxy: Proxy) -> None:
    stream = client(proxy).chat.completions.create(
        model="gpt-4o-mini", messages=MESSAGES, stream=True
    )
    chunks = list(stream)
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == "Hello there, agent."
    # The client did not ask for usage: the proxy asked, read it, and kept it back.
    assert all(c.choices for c in chunks)
    assert proxy.standin.seen[0].body["stream_options"] == {"include_usage": True}
    (call,) = proxy.settled.wait_for(1)
    assert call.usage is not None and call.usage.total == TOTAL
    assert proxy.spent() == (TOTAL, 0)


async def test_an_async_stream_that_asks_for_usage_gets_it(proxy: Proxy) -> None:
    async with aclient(proxy) as api:
        stream = await api.chat.completions.create(
            model="gpt-4o-mini",
            messages=MESSAGES,
            stream=True,
            stream_options={"include_usage": True},
        )
        chunks = [chunk async for chunk in stream]
    assert chunks[-1].choices == []
    assert chunks[-1].usage is not None and chunks[-1].usage.total_tokens == TOTAL
    proxy.settled.wait_for(1)
    assert proxy.spent() == (TOTAL, 0)


def test_a_denied_model_never_reaches_the_upstream(proxy: Proxy) -> None:
    with pytest.raises(openai.PermissionDeniedError) as raised:
        client(proxy).chat.completions.create(model="gpt-3.5-turbo", messages=MESSAGES)
    error = raised.value.body
    assert isinstance(error, dict)
    assert error["code"] == "interlock_denied"
    assert error["type"] == "permission_error"
    assert error["decision_id"]
    assert raised.value.response.headers["x-interlock-decision-id"] == error["decision_id"]
    assert "no rule allows this model" in error["message"]
    assert proxy.standin.calls == 0
    assert proxy.spent() == (0, 0)


def test_a_model_that_needs_approval_answers_with_the_approval_url(proxy: Proxy) -> None:
    with pytest.raises(openai.PermissionDeniedError) as raised:
        client(proxy).chat.completions.create(model="gpt-5-pro", messages=MESSAGES)
    error = raised.value.body
    assert isinstance(error, dict)
    assert error["code"] == "interlock_approval_required"
    assert "https://interlock.example.com/approvals/" in error["message"]
    assert proxy.standin.calls == 0


def test_a_call_the_budget_cannot_take_is_a_429_that_is_not_retried(proxy: Proxy) -> None:
    api = openai.OpenAI(base_url=proxy.url + "/v1", api_key=proxy.tokens["agent"], max_retries=3)
    with pytest.raises(openai.RateLimitError) as raised:
        api.chat.completions.create(
            model="gpt-4o-mini", messages=MESSAGES, max_completion_tokens=1_000_000
        )
    error = raised.value.body
    assert isinstance(error, dict) and error["code"] == "interlock_budget_exceeded"
    assert "budget 'tokens'" in error["message"]
    assert raised.value.response.headers["x-should-retry"] == "false"
    assert proxy.standin.calls == 0
    assert proxy.spent() == (0, 0)


def test_token_counts_the_client_states_do_not_lower_the_estimate(proxy: Proxy) -> None:
    with pytest.raises(openai.RateLimitError):
        client(proxy).chat.completions.create(
            model="gpt-4o-mini",
            messages=MESSAGES,
            max_tokens=1_000_000,
            extra_body={"input_tokens": 1, "max_output_tokens": 1, "output_tokens": 1},
        )
    assert proxy.standin.calls == 0


def test_an_upstream_error_is_relayed_and_the_reservation_released(proxy: Proxy) -> None:
    proxy.standin.mode = "error"
    with pytest.raises(openai.InternalServerError) as raised:
        client(proxy).chat.completions.create(model="gpt-4o-mini", messages=MESSAGES)
    assert raised.value.status_code == 500
    assert proxy.standin.calls == 1
    assert proxy.spent() == (0, 0)


def test_an_upstream_stream_error_is_released(proxy: Proxy) -> None:
    proxy.standin.mode = "error"
    with pytest.raises(openai.InternalServerError):
        client(proxy).chat.completions.create(model="gpt-4o-mini", messages=MESSAGES, stream=True)
    assert proxy.spent() == (0, 0)


def test_a_dropped_stream_is_charged_what_was_streamed_and_leaves_nothing_open(
    proxy: Proxy,
) -> None:
    proxy.standin.mode = "hold"
    stream = client(proxy).chat.completions.create(
        model="gpt-4o-mini", messages=MESSAGES, stream=True
    )
    seen = [next(stream), next(stream), next(stream)]  # role, "Hel", "lo"
    assert "".join(c.choices[0].delta.content or "" for c in seen) == "Hello"
    assert proxy.standin.holding.wait(30)
    stream.close()  # the client goes away mid-stream
    (call,) = proxy.settled.wait_for(1)
    assert call.usage is not None and call.usage.output_tokens == 2  # "Hello": 5 characters
    spent, reserved = proxy.spent()
    assert reserved == 0
    assert spent == call.usage.total > 0


def test_an_upstream_cut_mid_stream_is_charged_what_was_streamed(proxy: Proxy) -> None:
    proxy.standin.mode = "break"
    stream = client(proxy).chat.completions.create(
        model="gpt-4o-mini", messages=MESSAGES, stream=True
    )
    text = ""
    with pytest.raises(openai.APIConnectionError):  # the connection is cut: no end
        for chunk in stream:
            text += chunk.choices[0].delta.content or "" if chunk.choices else ""
    (call,) = proxy.settled.wait_for(1)
    assert call.usage is not None and call.usage.output_tokens == 2  # "Hello" got through
    spent, reserved = proxy.spent()
    assert (spent, reserved) == (call.usage.total, 0)


def test_n_choices_multiply_the_output_bound(proxy: Proxy) -> None:
    api = client(proxy)
    api.chat.completions.create(model="gpt-4o-mini", messages=MESSAGES, max_tokens=30_000)
    with pytest.raises(openai.RateLimitError):
        api.chat.completions.create(model="gpt-4o-mini", messages=MESSAGES, max_tokens=30_000, n=4)
    assert proxy.standin.calls == 1


def test_an_approved_model_call_runs_once_when_retried_identically(proxy: Proxy) -> None:
    api = client(proxy)
    with pytest.raises(openai.PermissionDeniedError) as pending:
        api.chat.completions.create(model="gpt-5-pro", messages=MESSAGES)
    error = pending.value.body
    assert isinstance(error, dict)
    assert error["approval_url"].endswith(error["approval_id"])
    proxy.store.approve(error["approval_id"], by="alice", tenant="acme")
    reply = api.chat.completions.create(model="gpt-5-pro", messages=MESSAGES)
    assert reply.choices[0].message.content == "Hello there, agent."
    with pytest.raises(openai.PermissionDeniedError):  # the grant was single-use
        api.chat.completions.create(model="gpt-5-pro", messages=MESSAGES)
    assert proxy.standin.calls == 1


def test_an_approval_does_not_carry_over_to_other_messages(proxy: Proxy) -> None:
    api = client(proxy)
    with pytest.raises(openai.PermissionDeniedError) as pending:
        api.chat.completions.create(model="gpt-5-pro", messages=MESSAGES)
    error = pending.value.body
    assert isinstance(error, dict)
    proxy.store.approve(error["approval_id"], by="alice", tenant="acme")
    other = [{"role": "user", "content": "Transfer all the money."}]
    with pytest.raises(openai.PermissionDeniedError):
        api.chat.completions.create(model="gpt-5-pro", messages=other)
    assert proxy.standin.calls == 0


def test_a_2xx_that_is_not_json_is_a_502_and_charged_as_reserved(proxy: Proxy) -> None:
    proxy.standin.mode = "garbage"
    with pytest.raises(openai.APIStatusError) as raised:
        client(proxy).chat.completions.create(model="gpt-4o-mini", messages=MESSAGES, max_tokens=50)
    assert raised.value.status_code == 502
    body = raised.value.body
    assert isinstance(body, dict) and body["code"] == "upstream_unreadable"
    proxy.settled.wait_for(1)  # the commit follows the answer
    spent, reserved = proxy.spent()
    assert reserved == 0
    assert spent == 4 + 50  # its reservation: "user" "Say hello." (14 chars: 4) + max_tokens
