"""Streamed Chat Completions tool calls, through the official ``openai`` client:
held until their choice finishes, judged like non-streamed ones, then released
whole or replaced by the refusal; text is never held; the stream is settled once."""

from __future__ import annotations

import json
from typing import Any

import pytest
from openai.types.chat import ChatCompletionChunk

from .clients import openai_async, openai_client, raw_stream, without_decision
from .conftest import Proxy
from .standin import (
    AFTER,
    OPENAI_USAGE,
    TEXT,
    WAIT,
    openai_call_deltas,
    openai_chunk,
    openai_usage_chunk,
)

MODEL = "gpt-4o-mini"
MESSAGES = [{"role": "user", "content": "Help me."}]
WEATHER_SCHEMA = {
    "type": "object",
    "properties": {"city": {"type": "string"}},
    "required": ["city"],
    "additionalProperties": False,
}
TOOLS: list[Any] = [
    {"type": "function", "function": {"name": "get_weather", "parameters": WEATHER_SCHEMA}},
    {"type": "function", "function": {"name": "delete_account", "parameters": {}}},
]
SECRET = "acct-4242-do-not-leak"
BODY = {"model": MODEL, "messages": MESSAGES, "tools": TOOLS}
DENIED = ("delete_account", {"id": SECRET})


def calls_of(chunks: list[ChatCompletionChunk], choice: int = 0) -> list[dict[str, Any]]:
    """The tool-call deltas the client received for a choice, as dicts."""
    found = []
    for chunk in chunks:
        for entry in chunk.choices:
            if entry.index == choice and entry.delta.tool_calls:
                found += [call.to_dict() for call in entry.delta.tool_calls]
    return found


def text_of(chunks: list[ChatCompletionChunk], choice: int = 0) -> str:
    return "".join(
        entry.delta.content or ""
        for chunk in chunks
        for entry in chunk.choices
        if entry.index == choice
    )


def finish_of(chunks: list[ChatCompletionChunk], choice: int = 0) -> list[str]:
    return [
        entry.finish_reason
        for chunk in chunks
        for entry in chunk.choices
        if entry.index == choice and entry.finish_reason
    ]


def test_an_allowed_call_arrives_whole_with_its_exact_arguments(proxy: Proxy) -> None:
    arguments = {"city": "Paris", "units": "metric", "note": "ünïcode ☔"}
    proxy.standin.mode = "tools"
    proxy.standin.tool_calls = [("get_weather", arguments)]
    chunks = list(openai_client(proxy).chat.completions.create(**BODY, stream=True))
    assert calls_of(chunks) == [
        {
            "index": 0,
            "id": "call_0",
            "type": "function",
            "function": {"name": "get_weather", "arguments": json.dumps(arguments)},
        }
    ]
    assert text_of(chunks) == "".join(TEXT + AFTER)
    assert finish_of(chunks) == ["tool_calls"]
    (call,) = proxy.settled.wait_for(1)
    assert call.usage is not None and call.usage.total == OPENAI_USAGE["total_tokens"]
    assert proxy.spent() == (OPENAI_USAGE["total_tokens"], 0)


def test_a_denied_call_never_reaches_the_client_in_any_chunk(proxy: Proxy) -> None:
    proxy.standin.mode = "tools"
    proxy.standin.tool_calls = [
        ("get_weather", {"city": "Oslo"}),
        ("delete_account", {"id": SECRET}),
    ]
    chunks = list(openai_client(proxy).chat.completions.create(**BODY, stream=True))
    (allowed,) = calls_of(chunks)
    assert allowed["function"] == {"name": "get_weather", "arguments": '{"city": "Oslo"}'}
    assert allowed["index"] == 0 and allowed["id"] == "call_0"
    text = text_of(chunks)
    assert text.startswith("".join(TEXT + AFTER) + "\n\nInterlock denied tool 'delete_account'")
    assert "nothing is deleted by a model [tool call call_1; decision " in text
    assert finish_of(chunks) == ["tool_calls"]  # get_weather is still to run
    raw = raw_stream(proxy, "/v1/chat/completions", BODY)
    assert SECRET.encode() not in raw
    assert b'"name":"delete_account"' not in raw and b'"name": "delete_account"' not in raw
    assert b"call_1" in raw  # only inside the refusal text
    assert len(proxy.settled.wait_for(2)) == 2


def test_the_refusal_reads_as_the_non_streamed_one(proxy: Proxy) -> None:
    proxy.standin.mode = "tools"
    proxy.standin.tool_calls = [("refund", {"amount": 5000})]
    api = openai_client(proxy)
    whole = api.chat.completions.create(**BODY)
    chunks = list(api.chat.completions.create(**BODY, stream=True))
    refusal = without_decision(whole.choices[0].message.content or "")
    assert refusal.startswith("Interlock denied tool 'refund'")
    streamed = text_of(chunks)
    assert streamed.startswith("".join(TEXT + AFTER) + "\n\n")
    assert without_decision(streamed.split("\n\n", 1)[1]) == refusal


def test_when_no_call_is_left_the_choice_finishes_with_stop(proxy: Proxy) -> None:
    proxy.standin.mode = "tools"
    proxy.standin.tool_calls = [("delete_account", {"id": 1}), ("refund", {"amount": 101})]
    chunks = list(openai_client(proxy).chat.completions.create(**BODY, stream=True))
    assert calls_of(chunks) == []
    assert finish_of(chunks) == ["stop"]
    text = text_of(chunks)
    assert "Interlock denied tool 'delete_account'" in text
    assert "Interlock denied tool 'refund'" in text


def test_text_is_relayed_while_a_call_is_held(proxy: Proxy) -> None:
    start = {"index": 0, "id": "call_0", "type": "function"}
    first = {**start, "function": {"name": "get_weather", "arguments": '{"ci'}}
    rest = {"index": 0, "function": {"arguments": 'ty": "Rome"}'}}
    proxy.standin.mode = "script"
    proxy.standin.script = [
        openai_chunk({"role": "assistant", "content": ""}),
        openai_chunk({"content": "Let me "}),
        openai_chunk({"tool_calls": [first]}),
        openai_chunk({"content": "check."}),
        WAIT,  # the upstream pauses mid-call until the client has read the text
        openai_chunk({"tool_calls": [rest]}),
        openai_chunk({}, "tool_calls"),
        openai_usage_chunk(),
        "data: [DONE]\n\n",
    ]
    stream = openai_client(proxy).chat.completions.create(**BODY, stream=True)
    before: list[ChatCompletionChunk] = []
    for chunk in stream:
        before.append(chunk)
        if text_of(before) == "Let me check.":
            break
    assert calls_of(before) == []  # the call is held: its first fragment did not pass
    proxy.standin.release.set()
    after = list(stream)
    assert not proxy.standin.gave_up  # the text came while the upstream still waited
    (call,) = calls_of(after)
    assert call["function"] == {"name": "get_weather", "arguments": '{"city": "Rome"}'}


def test_the_stream_helper_reads_parallel_calls_and_parses_strict_ones(proxy: Proxy) -> None:
    strict = {**TOOLS[0]["function"], "strict": True}
    tools = [{"type": "function", "function": strict}, TOOLS[1]]
    proxy.standin.mode = "tools"
    proxy.standin.tool_calls = [
        ("get_weather", {"city": "Paris"}),
        ("delete_account", {"id": SECRET}),
        ("get_weather", {"city": "Lima"}),
    ]
    api = openai_client(proxy)
    with api.chat.completions.stream(model=MODEL, messages=MESSAGES, tools=tools) as stream:
        kinds = [event.type for event in stream]
        final = stream.get_final_completion()
    message = final.choices[0].message
    calls = message.tool_calls or []
    assert [call.id for call in calls] == ["call_0", "call_2"]
    assert [call.function.parsed_arguments for call in calls] == [
        {"city": "Paris"},
        {"city": "Lima"},
    ]
    assert "Interlock denied tool 'delete_account'" in (message.content or "")
    assert final.choices[0].finish_reason == "tool_calls"
    assert "tool_calls.function.arguments.done" in kinds


async def test_the_async_client_and_its_stream_helper_read_the_judged_stream(
    proxy: Proxy,
) -> None:
    proxy.standin.mode = "tools"
    proxy.standin.tool_calls = [
        ("get_weather", {"city": "Oslo"}),
        ("delete_account", {"id": SECRET}),
    ]
    async with openai_async(proxy) as api:
        stream = await api.chat.completions.create(**BODY, stream=True)
        chunks = [chunk async for chunk in stream]
        async with api.chat.completions.stream(**BODY) as helper:
            final = await helper.get_final_completion()
    (call,) = calls_of(chunks)
    assert call["function"]["name"] == "get_weather"
    message = final.choices[0].message
    assert [c.function.name for c in message.tool_calls or []] == ["get_weather"]
    assert message.tool_calls and message.tool_calls[0].function.arguments == '{"city": "Oslo"}'
    assert "Interlock denied tool 'delete_account'" in (message.content or "")
    assert len(proxy.settled.wait_for(2)) == 2
    assert proxy.spent()[1] == 0


def test_each_of_n_choices_is_held_and_judged_on_its_own(proxy: Proxy) -> None:
    zero = openai_call_deltas([("get_weather", {"city": "Kyiv"})], choice=0)
    one = openai_call_deltas([("delete_account", {"id": SECRET})], choice=1)
    proxy.standin.mode = "script"
    proxy.standin.script = [
        openai_chunk({"role": "assistant", "content": ""}, choice=0),
        openai_chunk({"role": "assistant", "content": ""}, choice=1),
        openai_chunk({"content": "Sure."}, choice=1),
        *[frame for pair in zip(zero, one, strict=True) for frame in pair],
        openai_chunk({}, "tool_calls", choice=1),
        openai_chunk({"content": " Done."}, choice=0),
        openai_chunk({}, "tool_calls", choice=0),
        openai_usage_chunk(),
        "data: [DONE]\n\n",
    ]
    api = openai_client(proxy)
    with api.chat.completions.stream(model=MODEL, messages=MESSAGES, tools=TOOLS, n=2) as stream:
        final = stream.get_final_completion()
    first, second = final.choices
    assert [c.function.name for c in first.message.tool_calls or []] == ["get_weather"]
    assert first.message.content == " Done."
    assert first.finish_reason == "tool_calls"
    assert second.message.tool_calls is None
    assert (second.message.content or "").startswith("Sure.\n\nInterlock denied tool")
    assert second.finish_reason == "stop"
    assert SECRET.encode() not in raw_stream(proxy, "/v1/chat/completions", {**BODY, "n": 2})


def test_a_legacy_function_call_is_held_and_judged(proxy: Proxy) -> None:
    def legacy(name: str, arguments: str) -> list[str]:
        return [
            openai_chunk({"role": "assistant", "content": None, "function_call": {"name": name}}),
            openai_chunk({"function_call": {"arguments": arguments[:5]}}),
            openai_chunk({"function_call": {"arguments": arguments[5:]}}),
            openai_chunk({}, "function_call"),
            "data: [DONE]\n\n",
        ]

    functions = [{"name": "get_weather", "parameters": WEATHER_SCHEMA}]
    body = {"model": MODEL, "messages": MESSAGES, "functions": functions}
    proxy.standin.mode = "script"
    proxy.standin.script = legacy("get_weather", '{"city": "Bern"}')
    chunks = list(openai_client(proxy).chat.completions.create(**body, stream=True))
    calls = [e.delta.function_call for c in chunks for e in c.choices if e.delta.function_call]
    assert [(c.name, c.arguments) for c in calls] == [("get_weather", '{"city": "Bern"}')]
    assert finish_of(chunks) == ["function_call"]
    proxy.standin.script = legacy("delete_account", json.dumps({"id": SECRET}))
    chunks = list(openai_client(proxy).chat.completions.create(**body, stream=True))
    assert not any(e.delta.function_call for c in chunks for e in c.choices)
    assert "Interlock denied tool 'delete_account'" in text_of(chunks)
    assert "[tool call function_call; decision " in text_of(chunks)
    assert finish_of(chunks) == ["stop"]


def test_an_allowed_streamed_call_commits_its_tool_budget_once(proxy: Proxy) -> None:
    proxy.standin.mode = "tools"
    proxy.standin.tool_calls = [("refund", {"amount": 50}), ("refund", {"amount": 5000})]
    chunks = list(openai_client(proxy).chat.completions.create(**BODY, stream=True))
    (call,) = calls_of(chunks)
    assert call["function"]["arguments"] == '{"amount": 50}'
    proxy.settled.wait_for(1)
    # the allowed refund, committed (1 USD, counted in micro-units); the denied one: nothing
    assert proxy.spent(budget="refunds") == (1_000_000, 0)
    assert proxy.spent() == (OPENAI_USAGE["total_tokens"], 0)


def test_usage_asked_for_still_arrives_after_the_released_calls(proxy: Proxy) -> None:
    proxy.standin.mode = "tools"
    proxy.standin.tool_calls = [("get_weather", {"city": "Oslo"})]
    stream = openai_client(proxy).chat.completions.create(
        **BODY, stream=True, stream_options={"include_usage": True}
    )
    chunks = list(stream)
    assert chunks[-1].choices == []
    assert chunks[-1].usage is not None
    assert chunks[-1].usage.total_tokens == OPENAI_USAGE["total_tokens"]
    assert len(calls_of(chunks)) == 1


def test_a_client_that_leaves_while_a_call_is_held_is_charged_once(proxy: Proxy) -> None:
    first = {"index": 0, "id": "call_0", "type": "function"}
    first["function"] = {"name": "delete_account", "arguments": '{"id": "' + SECRET}
    proxy.standin.mode = "script"
    proxy.standin.script = [
        openai_chunk({"role": "assistant", "content": ""}),
        openai_chunk({"content": "Deleting."}),
        openai_chunk({"tool_calls": [first]}),
        openai_chunk({"content": " Now."}),  # read: the proxy has had the call's fragment
        WAIT,
        openai_chunk({"tool_calls": [{"index": 0, "function": {"arguments": '"}'}}]}),
        openai_chunk({}, "tool_calls"),
        "data: [DONE]\n\n",
    ]
    stream = openai_client(proxy).chat.completions.create(**BODY, stream=True)
    seen = [next(stream), next(stream), next(stream)]
    assert text_of(seen) == "Deleting. Now."
    assert proxy.standin.holding.wait(30)
    stream.close()
    (call,) = proxy.settled.wait_for(1)
    assert call.usage is not None
    # the text and the held arguments were generated: 9 + 29 + 5 characters, / 4
    assert call.usage.output_tokens == 11
    spent, reserved = proxy.spent()
    assert reserved == 0 and spent == call.usage.total
    assert calls_of(seen) == []


@pytest.mark.parametrize("tools", [None, TOOLS], ids=["not offered", "offered"])
def test_a_call_is_judged_whether_or_not_the_request_offered_tools(
    proxy: Proxy, tools: list[Any] | None
) -> None:
    proxy.standin.mode = "tools"
    proxy.standin.tool_calls = [("delete_account", {"id": SECRET})]
    body: dict[str, Any] = {"model": MODEL, "messages": MESSAGES}
    if tools is not None:
        body["tools"] = tools
    raw = raw_stream(proxy, "/v1/chat/completions", body)
    assert SECRET.encode() not in raw
    assert b"Interlock denied tool 'delete_account'" in raw
