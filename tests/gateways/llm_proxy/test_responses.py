"""``POST /v1/responses`` through the proxy with the official ``openai`` client
(``responses.create`` sync and async, ``stream=True``, the ``responses.stream``
helper): the model call judged, reserved, and committed from the real usage exactly
once; refusals in OpenAI's error format; nothing refused reaches the stand-in."""

from __future__ import annotations

from typing import Any

import httpx
import openai
import pytest

from interlock.gateways.llm_proxy.responses import RESPONSES

from .conftest import Proxy
from .standin_responses import RESPONSE_ID, RESPONSES_USAGE, Events, message, response
from .test_estimate import IMAGE

TOTAL = RESPONSES_USAGE["total_tokens"]


def client(proxy: Proxy, key: str = "agent", retries: int = 0) -> openai.OpenAI:
    return openai.OpenAI(base_url=proxy.url + "/v1", api_key=proxy.tokens[key], max_retries=retries)


def aclient(proxy: Proxy) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(
        base_url=proxy.url + "/v1", api_key=proxy.tokens["agent"], max_retries=0
    )


# -- the model call is relayed and charged once -------------------------------------------


def test_a_response_is_relayed_and_charged_its_real_usage(proxy: Proxy) -> None:
    raw = client(proxy).responses.with_raw_response.create(model="gpt-4o-mini", input="Say hello.")
    reply = raw.parse()
    decision_id = raw.headers["x-interlock-decision-id"]
    assert reply.output_text == "Hello there, agent."
    assert reply.usage is not None and reply.usage.total_tokens == TOTAL
    assert decision_id.startswith("dec_")
    (seen,) = proxy.standin.seen
    assert seen.path == "/v1/responses"
    assert seen.body == {"model": "gpt-4o-mini", "input": "Say hello."}  # as the client sent it
    assert seen.headers["authorization"] == "Bearer sk-upstream-openai"
    assert proxy.tokens["agent"] not in str(seen.headers)
    (call,) = proxy.settled.wait_for(1)
    assert call.usage is not None and call.usage.total == TOTAL
    assert proxy.spent() == (TOTAL, 0)


async def test_the_async_client_is_relayed_and_charged(proxy: Proxy) -> None:
    async with aclient(proxy) as api:
        reply = await api.responses.create(model="gpt-4o-mini", input="Say hello.")
    assert reply.output_text == "Hello there, agent."
    proxy.settled.wait_for(1)  # the commit follows the answer
    assert proxy.spent() == (TOTAL, 0)


def test_a_stream_is_charged_once_from_its_completed_event(proxy: Proxy) -> None:
    stream = client(proxy).responses.create(model="gpt-4o-mini", input="Say hello.", stream=True)
    events = list(stream)
    text = "".join(e.delta for e in events if e.type == "response.output_text.delta")
    assert text == "Hello there, agent."
    assert [e.sequence_number for e in events] == list(range(len(events)))
    assert events[-1].type == "response.completed"
    assert proxy.standin.seen[0].body["stream"] is True
    assert "stream_options" not in proxy.standin.seen[0].body  # nothing added upstream
    (call,) = proxy.settled.wait_for(1)
    assert call.usage is not None and call.usage.total == TOTAL
    assert proxy.spent() == (TOTAL, 0)


def test_two_streams_are_two_settlements_each_charged_once(proxy: Proxy) -> None:
    api = client(proxy)
    for _ in range(2):
        list(api.responses.create(model="gpt-4o-mini", input="Say hello.", stream=True))
    first, second = proxy.settled.wait_for(2)
    assert first is not second
    assert proxy.spent() == (2 * TOTAL, 0)


async def test_the_stream_helper_gets_the_final_response(proxy: Proxy) -> None:
    async with (
        aclient(proxy) as api,
        api.responses.stream(model="gpt-4o-mini", input="Say hello.") as stream,
    ):
        async for _ in stream:
            pass
        final = await stream.get_final_response()
    assert final.id == RESPONSE_ID
    assert final.output_text == "Hello there, agent."
    proxy.settled.wait_for(1)
    assert proxy.spent() == (TOTAL, 0)


def test_an_incomplete_response_is_charged_its_usage(proxy: Proxy) -> None:
    proxy.standin.terminal = "response.incomplete"
    events = list(
        client(proxy).responses.create(model="gpt-4o-mini", input="Say hello.", stream=True)
    )
    assert events[-1].type == "response.incomplete"
    proxy.settled.wait_for(1)
    assert proxy.spent() == (TOTAL, 0)


def test_a_failed_response_with_usage_is_charged_it(proxy: Proxy) -> None:
    proxy.standin.terminal = "response.failed"
    events = list(
        client(proxy).responses.create(model="gpt-4o-mini", input="Say hello.", stream=True)
    )
    assert events[-1].type == "response.failed"
    proxy.settled.wait_for(1)
    assert proxy.spent() == (TOTAL, 0)


def test_a_failed_response_without_usage_or_output_is_released(proxy: Proxy) -> None:
    events = Events("gpt-4o-mini", [])
    proxy.standin.raw_events = [*events.opening(), events.terminal("response.failed", usage=None)]
    received = list(
        client(proxy).responses.create(model="gpt-4o-mini", input="Say hello.", stream=True)
    )
    assert [e.type for e in received][-1] == "response.failed"
    proxy.settled.wait_for(1)
    assert proxy.spent() == (0, 0)


def test_a_failed_response_without_usage_after_output_is_charged_what_was_streamed(
    proxy: Proxy,
) -> None:
    events = Events("gpt-4o-mini", [message("Hello there")])
    items = [text for _, text in events.item(0, events.output[0])]
    proxy.standin.raw_events = [
        *events.opening(),
        *items,
        events.terminal("response.failed", usage=None),
    ]
    list(client(proxy).responses.create(model="gpt-4o-mini", input="Say hello.", stream=True))
    (call,) = proxy.settled.wait_for(1)
    # the estimate of the input ("user" "Say hello.": 14 characters, 4 tokens) and
    # "Hello there" (11 characters: 3 tokens)
    assert call.usage is not None and (call.usage.input_tokens, call.usage.output_tokens) == (4, 3)
    assert proxy.spent() == (7, 0)


def test_a_stream_that_ends_before_any_output_is_released(proxy: Proxy) -> None:
    proxy.standin.raw_events = list(Events("gpt-4o-mini", []).opening())
    list(client(proxy).responses.create(model="gpt-4o-mini", input="Say hello.", stream=True))
    proxy.settled.wait_for(1)
    assert proxy.spent() == (0, 0)


def test_a_dropped_stream_is_charged_what_was_streamed_and_leaves_nothing_open(
    proxy: Proxy,
) -> None:
    proxy.standin.mode = "hold"
    proxy.standin.output = [message("Hello there, agent.")]
    stream = client(proxy).responses.create(model="gpt-4o-mini", input="Say hello.", stream=True)
    text = ""
    for event in stream:
        if event.type == "response.output_text.delta":
            text += event.delta
            if len(text) >= 14:  # two of the three pieces: "Hello there, a"
                break
    assert proxy.standin.holding.wait(30)
    stream.close()  # the client goes away mid-stream
    (call,) = proxy.settled.wait_for(1)
    assert call.usage is not None and call.usage.output_tokens == 4  # 14 characters
    spent, reserved = proxy.spent()
    assert reserved == 0
    assert spent == call.usage.total > 0


def test_an_upstream_cut_mid_stream_is_charged_what_was_streamed(proxy: Proxy) -> None:
    proxy.standin.mode = "break"
    stream = client(proxy).responses.create(model="gpt-4o-mini", input="Say hello.", stream=True)
    with pytest.raises(openai.APIConnectionError):  # the connection is cut: no end
        for _ in stream:
            pass
    (call,) = proxy.settled.wait_for(1)
    assert call.usage is not None and call.usage.output_tokens == 4  # "Hello there, a"
    assert proxy.spent() == (call.usage.total, 0)


# -- refusals -----------------------------------------------------------------------------


def test_a_denied_model_never_reaches_the_upstream(proxy: Proxy) -> None:
    with pytest.raises(openai.PermissionDeniedError) as raised:
        client(proxy).responses.create(model="gpt-3.5-turbo", input="hi")
    error = raised.value.body
    assert isinstance(error, dict)
    assert (error["code"], error["type"]) == ("interlock_denied", "permission_error")
    assert raised.value.response.headers["x-interlock-decision-id"] == error["decision_id"]
    assert "no rule allows this model" in error["message"]
    assert proxy.standin.calls == 0
    assert proxy.spent() == (0, 0)


def test_a_denied_stream_never_reaches_the_upstream(proxy: Proxy) -> None:
    with pytest.raises(openai.PermissionDeniedError):
        client(proxy).responses.create(model="gpt-3.5-turbo", input="hi", stream=True)
    assert proxy.standin.calls == 0


def test_a_model_that_needs_approval_answers_with_the_approval_url(proxy: Proxy) -> None:
    with pytest.raises(openai.PermissionDeniedError) as raised:
        client(proxy).responses.create(model="gpt-5-pro", input="hi")
    error = raised.value.body
    assert isinstance(error, dict) and error["code"] == "interlock_approval_required"
    assert error["approval_url"].endswith(error["approval_id"])
    assert proxy.standin.calls == 0


def test_the_output_bound_is_reserved_and_a_budget_that_cannot_take_it_is_a_429(
    proxy: Proxy,
) -> None:
    with pytest.raises(openai.RateLimitError) as raised:
        client(proxy, retries=3).responses.create(
            model="gpt-4o-mini", input="hi", max_output_tokens=1_000_000
        )
    error = raised.value.body
    assert isinstance(error, dict) and error["code"] == "interlock_budget_exceeded"
    assert raised.value.response.headers["x-should-retry"] == "false"
    assert proxy.standin.calls == 0


def test_token_counts_the_client_states_do_not_lower_the_estimate(proxy: Proxy) -> None:
    with pytest.raises(openai.RateLimitError):
        client(proxy).responses.create(
            model="gpt-4o-mini",
            input="hi",
            max_output_tokens=1_000_000,
            extra_body={"input_tokens": 1, "max_tokens": 1, "output_tokens": 1},
        )
    assert proxy.standin.calls == 0


def test_an_upstream_error_is_relayed_and_the_reservation_released(proxy: Proxy) -> None:
    proxy.standin.mode = "error"
    with pytest.raises(openai.InternalServerError):
        client(proxy).responses.create(model="gpt-4o-mini", input="hi")
    with pytest.raises(openai.InternalServerError):
        client(proxy).responses.create(model="gpt-4o-mini", input="hi", stream=True)
    assert proxy.standin.calls == 2
    proxy.settled.wait_for(2)
    assert proxy.spent() == (0, 0)


def test_a_2xx_that_is_not_json_is_a_502_and_charged_as_reserved(proxy: Proxy) -> None:
    proxy.standin.mode = "garbage"
    with pytest.raises(openai.APIStatusError) as raised:
        client(proxy).responses.create(
            model="gpt-4o-mini", input="Say hello.", max_output_tokens=50
        )
    assert raised.value.status_code == 502
    proxy.settled.wait_for(1)  # the commit follows the answer
    assert proxy.spent() == (4 + 50, 0)  # its reservation: 14 characters and the bound


def test_a_background_request_is_refused_before_the_upstream(proxy: Proxy) -> None:
    with pytest.raises(openai.BadRequestError) as raised:
        client(proxy).responses.create(model="gpt-4o-mini", input="hi", background=True)
    body = raised.value.body
    assert isinstance(body, dict) and body["code"] == "interlock_background_not_supported"
    assert proxy.standin.calls == 0
    assert proxy.spent() == (0, 0)


@pytest.mark.parametrize(
    "hidden",
    [
        {"previous_response_id": "resp_earlier"},
        {"conversation": "conv_123"},
        {"prompt": {"id": "pmpt_1", "version": "2"}},
    ],
)
def test_a_rule_can_refuse_requests_with_context_the_proxy_cannot_see(
    proxy: Proxy, hidden: dict[str, Any]
) -> None:
    with pytest.raises(openai.PermissionDeniedError) as raised:
        client(proxy).responses.create(model="gpt-4.1-mini", input="hi", extra_body=hidden)
    body = raised.value.body
    assert isinstance(body, dict) and "must see the whole prompt" in body["message"]
    assert proxy.standin.calls == 0


def test_the_same_model_with_the_whole_conversation_passes(proxy: Proxy) -> None:
    earlier = [
        {"role": "user", "content": "Weather in Oslo?"},
        {
            "type": "function_call",
            "call_id": "call_0",
            "name": "get_weather",
            "arguments": '{"city": "Oslo"}',
        },
        {"type": "function_call_output", "call_id": "call_0", "output": "Sunny"},
    ]
    reply = client(proxy).responses.create(model="gpt-4.1-mini", input=earlier)  # type: ignore[arg-type]
    assert reply.output_text == "Hello there, agent."


# -- what the action carries ------------------------------------------------------------


def test_the_action_carries_the_input_instructions_tools_and_bound() -> None:
    tools = [{"type": "function", "name": "get_weather", "parameters": {"type": "object"}}]
    body = {
        "model": "gpt-4o-mini",
        "input": "Weather in Oslo?",
        "instructions": "Be brief.",
        "tools": tools,
        "max_output_tokens": 300,
        "previous_response_id": "resp_1",
        "input_tokens": 1,  # a count the client writes: never read
        "stream": True,
    }
    assert RESPONSES.arguments(body) == {
        "provider": "openai",
        "api": "responses",
        "messages": [{"role": "user", "content": "Weather in Oslo?"}],
        "system": "Be brief.",
        "tools": tools,
        "max_tokens": 300,
        "previous_response_id": "resp_1",
    }


def test_inline_files_and_images_are_replaced_in_the_action_and_sent_whole(
    proxy: Proxy,
) -> None:
    content = [
        {"type": "input_text", "text": "What is in these?"},
        {"type": "input_image", "image_url": "data:image/png;base64," + IMAGE},
        {"type": "input_file", "filename": "a.pdf", "file_data": IMAGE},  # raw base64
        {"type": "input_image", "image_url": "https://example.com/cat.png"},
    ]
    earlier = {
        "type": "image_generation_call",
        "id": "ig_1",
        "status": "completed",
        "result": IMAGE,
    }
    body = {"model": "gpt-4o-mini", "input": [earlier, {"role": "user", "content": content}]}
    shown = RESPONSES.arguments(body)["messages"]
    assert shown[0]["result"] == f"<data: {len(IMAGE)} characters>"
    parts = shown[1]["content"]
    assert parts[1]["image_url"].startswith("<data: ")
    assert parts[2]["file_data"] == f"<data: {len(IMAGE)} characters>"
    assert parts[3]["image_url"] == "https://example.com/cat.png"
    reply = client(proxy).responses.create(**body)  # type: ignore[call-overload]
    assert reply.output_text == "Hello there, agent."
    sent = proxy.standin.seen[0].body["input"]
    assert sent[1]["content"][2]["file_data"] == IMAGE  # the upstream gets it whole
    proxy.settled.wait_for(1)  # the commit follows the answer
    assert proxy.spent() == (TOTAL, 0)


def test_a_benign_request_through_raw_http_passes(proxy: Proxy) -> None:
    answer = httpx.post(
        proxy.url + "/v1/responses",
        headers={"authorization": f"Bearer {proxy.tokens['agent']}"},
        json={"model": "gpt-4o-mini", "input": [{"role": "user", "content": "hi"}]},
    )
    assert answer.status_code == 200
    assert answer.json() == response("gpt-4o-mini", [message("Hello there, agent.")])
