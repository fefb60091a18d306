"""The official ``anthropic`` client through the proxy: sync, async, streamed; input
from ``message_start``, output from the last (cumulative) ``message_delta``."""

from __future__ import annotations

import json

import anthropic
import pytest

from .conftest import Proxy
from .standin import ANTHROPIC_USAGE

MESSAGES = [{"role": "user", "content": "Say hello."}]
TOTAL = ANTHROPIC_USAGE["input_tokens"] + ANTHROPIC_USAGE["output_tokens"]
MODEL = "claude-sonnet-4-5"


def client(proxy: Proxy, key: str = "agent") -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=proxy.url, api_key=proxy.tokens[key], max_retries=0)


def aclient(proxy: Proxy) -> anthropic.AsyncAnthropic:
    return anthropic.AsyncAnthropic(
        base_url=proxy.url, api_key=proxy.tokens["agent"], max_retries=0
    )


def test_an_allowed_message_is_relayed_and_charged_its_real_usage(proxy: Proxy) -> None:
    reply = client(proxy).messages.create(model=MODEL, max_tokens=100, messages=MESSAGES)
    assert reply.content[0].type == "text" and reply.content[0].text == "Hello there, agent."
    seen = proxy.standin.seen[0]
    assert seen.headers["x-api-key"] == "sk-upstream-anthropic"
    assert seen.headers["anthropic-version"]  # the client's own, passed on
    assert proxy.tokens["agent"] not in str(seen.headers)
    proxy.settled.wait_for(1)  # the commit follows the answer
    assert proxy.spent() == (TOTAL, 0)


async def test_the_async_client_is_relayed_and_charged(proxy: Proxy) -> None:
    async with aclient(proxy) as api:
        reply = await api.messages.create(model=MODEL, max_tokens=100, messages=MESSAGES)
    assert reply.usage.output_tokens == ANTHROPIC_USAGE["output_tokens"]
    proxy.settled.wait_for(1)  # the commit follows the answer
    assert proxy.spent() == (TOTAL, 0)


def test_a_stream_is_charged_once_with_the_last_cumulative_output(proxy: Proxy) -> None:
    with client(proxy).messages.stream(model=MODEL, max_tokens=100, messages=MESSAGES) as stream:
        text = "".join(stream.text_stream)
        final = stream.get_final_message()
    assert text == "Hello there, agent."
    assert final.usage.output_tokens == ANTHROPIC_USAGE["output_tokens"]
    (call,) = proxy.settled.wait_for(1)
    assert call.usage is not None
    assert (call.usage.input_tokens, call.usage.output_tokens) == (12, 15)  # not 1 + 15
    assert proxy.spent() == (TOTAL, 0)


async def test_an_async_raw_stream_is_charged_once(proxy: Proxy) -> None:
    async with aclient(proxy) as api:
        stream = await api.messages.create(
            model=MODEL, max_tokens=100, messages=MESSAGES, stream=True
        )
        kinds = [event.type async for event in stream]
    assert kinds[0] == "message_start" and kinds[-1] == "message_stop"
    proxy.settled.wait_for(1)
    assert proxy.spent() == (TOTAL, 0)


def test_a_denied_model_is_an_anthropic_error_before_any_upstream_call(proxy: Proxy) -> None:
    with pytest.raises(anthropic.PermissionDeniedError) as raised:
        client(proxy).messages.create(model="claude-opus-4", max_tokens=100, messages=MESSAGES)
    body = raised.value.body
    assert isinstance(body, dict) and body["type"] == "error"
    assert body["error"]["type"] == "permission_error"
    assert body["error"]["decision_id"]
    assert "Interlock denied llm 'claude-opus-4'" in body["error"]["message"]
    assert proxy.standin.calls == 0


def test_a_budget_refusal_is_a_rate_limit_error(proxy: Proxy) -> None:
    with pytest.raises(anthropic.RateLimitError) as raised:
        client(proxy).messages.create(
            model=MODEL, max_tokens=1_000_000, messages=MESSAGES, timeout=30
        )
    body = raised.value.body
    assert isinstance(body, dict) and body["error"]["type"] == "rate_limit_error"
    assert proxy.standin.calls == 0
    assert proxy.spent() == (0, 0)


def test_an_upstream_error_is_relayed_and_released(proxy: Proxy) -> None:
    proxy.standin.mode = "error"
    with pytest.raises(anthropic.InternalServerError):
        client(proxy).messages.create(model=MODEL, max_tokens=100, messages=MESSAGES)
    assert proxy.spent() == (0, 0)


def test_a_dropped_stream_is_charged_what_was_streamed(proxy: Proxy) -> None:
    proxy.standin.mode = "hold"
    stream = client(proxy).messages.create(
        model=MODEL, max_tokens=100, messages=MESSAGES, stream=True
    )
    events = iter(stream)
    kinds = [next(events).type for _ in range(4)]  # start, block start, ping?, deltas
    assert kinds[0] == "message_start"
    assert proxy.standin.holding.wait(30)
    stream.close()
    (call,) = proxy.settled.wait_for(1)
    assert call.usage is not None
    assert call.usage.input_tokens == 12  # from message_start: the upstream's own count
    assert call.usage.output_tokens == 2  # "Hello" streamed, no message_delta yet
    spent, reserved = proxy.spent()
    assert (spent, reserved) == (14, 0)


def test_each_stream_settles_its_reservation_exactly_once_in_the_audit_log(
    proxy: Proxy,
) -> None:
    api = client(proxy)
    for _ in range(3):
        with api.messages.stream(model=MODEL, max_tokens=100, messages=MESSAGES) as stream:
            stream.until_done()
    calls = proxy.settled.wait_for(3)
    assert proxy.guard.audit is not None and proxy.guard.audit.flush()
    rows = list(proxy.store.audit_rows(tenant="acme", kind="budget"))
    settled = [json.loads(row.body) for row in rows]
    ids = sorted(record["reservation_id"] for record in settled)
    expected = sorted(
        c.decision.reservation.id for c in calls if c.decision and c.decision.reservation
    )
    assert ids == expected and len(ids) == 3
    assert {record["status"] for record in settled} == {"committed"}
    assert proxy.spent() == (3 * TOTAL, 0)


def test_a_denied_stream_never_reaches_the_upstream(proxy: Proxy) -> None:
    with (
        pytest.raises(anthropic.PermissionDeniedError),
        client(proxy).messages.stream(
            model="claude-opus-4", max_tokens=100, messages=MESSAGES
        ) as stream,
    ):
        stream.until_done()
    assert proxy.standin.calls == 0
    assert proxy.settled.calls == []
