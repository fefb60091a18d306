"""Streamed Messages ``tool_use`` blocks, through the official ``anthropic`` client:
held from start to stop, judged like non-streamed ones, then released whole or
replaced in place by a text block; text and thinking blocks are never held."""

from __future__ import annotations

import json
from typing import Any

import httpx
from anthropic.types import RawMessageStreamEvent

from .clients import anthropic_async, anthropic_client, raw_stream, without_decision
from .conftest import Proxy
from .standin import (
    AFTER,
    ANTHROPIC_USAGE,
    WAIT,
    anthropic_end,
    anthropic_event,
    anthropic_start,
    anthropic_text_block,
    anthropic_tool_block,
)

MODEL = "claude-sonnet-4-5"
MESSAGES = [{"role": "user", "content": "Help me."}]
TOOLS: list[Any] = [
    {"name": "get_weather", "input_schema": {"type": "object"}},
    {"name": "delete_account", "input_schema": {"type": "object"}},
]
SECRET = "acct-4242-do-not-leak"
DENIED = ("delete_account", {"id": SECRET})
BODY = {"model": MODEL, "max_tokens": 100, "messages": MESSAGES, "tools": TOOLS}
TOTAL = ANTHROPIC_USAGE["input_tokens"] + ANTHROPIC_USAGE["output_tokens"]


def final(proxy: Proxy, **body: Any) -> Any:
    with anthropic_client(proxy).messages.stream(**{**BODY, **body}) as stream:
        return stream.get_final_message()


def test_an_allowed_tool_use_arrives_whole_with_its_exact_input(proxy: Proxy) -> None:
    arguments = {"city": "Paris", "days": [1, 2], "note": "ünïcode ☔"}
    proxy.standin.mode = "tools"
    proxy.standin.tool_calls = [("get_weather", arguments)]
    message = final(proxy)
    assert [block.type for block in message.content] == ["text", "tool_use", "text"]
    tool = message.content[1]
    assert tool.type == "tool_use"
    assert (tool.id, tool.name, tool.input) == ("toolu_0", "get_weather", arguments)
    assert message.stop_reason == "tool_use"
    assert len(proxy.settled.wait_for(1)) == 1
    assert proxy.spent() == (TOTAL, 0)


def test_a_denied_tool_use_becomes_a_text_block_at_its_index(proxy: Proxy) -> None:
    proxy.standin.mode = "tools"
    proxy.standin.tool_calls = [("get_weather", {"city": "Oslo"}), DENIED]
    message = final(proxy)
    assert [block.type for block in message.content] == ["text", "tool_use", "text", "text"]
    refusal = message.content[2]
    assert refusal.type == "text"
    assert refusal.text.startswith("Interlock denied tool 'delete_account'")
    assert "[tool call toolu_1; decision " in refusal.text
    assert message.content[3].type == "text" and message.content[3].text == "".join(AFTER)
    assert message.stop_reason == "tool_use"  # get_weather is still to run
    raw = raw_stream(proxy, "/v1/messages", BODY)
    assert SECRET.encode() not in raw
    assert b'"name":"delete_account"' not in raw and b'"name": "delete_account"' not in raw
    assert len(proxy.settled.wait_for(2)) == 2


def test_the_refusal_reads_as_the_non_streamed_one(proxy: Proxy) -> None:
    proxy.standin.mode = "tools"
    proxy.standin.tool_calls = [("refund", {"amount": 5000})]
    whole = anthropic_client(proxy).messages.create(**BODY)
    streamed = final(proxy)
    (_, refusal) = whole.content
    assert refusal.type == "text"
    streamed_refusal = streamed.content[1]
    assert streamed_refusal.type == "text"
    assert without_decision(streamed_refusal.text) == without_decision(refusal.text)


def test_when_no_tool_use_is_left_the_turn_ends(proxy: Proxy) -> None:
    proxy.standin.mode = "tools"
    proxy.standin.tool_calls = [DENIED]
    message = final(proxy)
    assert [block.type for block in message.content] == ["text", "text", "text"]
    assert message.stop_reason == "end_turn"


def test_text_is_relayed_while_a_tool_use_is_held(proxy: Proxy) -> None:
    start = {"type": "tool_use", "id": "toolu_0", "name": "get_weather", "input": {}}
    first = {"type": "input_json_delta", "partial_json": '{"city": '}
    rest = {"type": "input_json_delta", "partial_json": '"Rome"}'}
    proxy.standin.mode = "script"
    proxy.standin.script = [
        anthropic_start(),
        *anthropic_text_block(0, ["Let me ", "check."]),
        anthropic_event("content_block_start", index=1, content_block=start),
        anthropic_event("content_block_delta", index=1, delta=first),
        anthropic_event("ping"),
        WAIT,  # the upstream pauses mid-call: the text before it must be with the client
        anthropic_event("content_block_delta", index=1, delta=rest),
        anthropic_event("content_block_stop", index=1),
        *anthropic_end("tool_use"),
    ]
    with anthropic_client(proxy).messages.stream(**BODY) as stream:
        text = ""
        for event in stream:
            assert event.type != "content_block_start" or event.content_block.type == "text"
            if event.type == "text":
                text += event.text
            if text == "Let me check.":
                break
        proxy.standin.release.set()
        message = stream.get_final_message()
    assert not proxy.standin.gave_up  # the text came while the upstream still waited
    tool = message.content[1]
    assert tool.type == "tool_use" and tool.input == {"city": "Rome"}


async def test_the_async_raw_stream_shows_the_replacement_in_place(proxy: Proxy) -> None:
    proxy.standin.mode = "tools"
    proxy.standin.tool_calls = [DENIED, ("get_weather", {"city": "Oslo"})]
    async with anthropic_async(proxy) as api:
        stream = await api.messages.create(**BODY, stream=True)
        events: list[RawMessageStreamEvent] = [event async for event in stream]
        async with api.messages.stream(**BODY) as helper:
            message = await helper.get_final_message()
    starts = [(e.index, e.content_block.type) for e in events if e.type == "content_block_start"]
    assert starts == [(0, "text"), (1, "text"), (2, "tool_use"), (3, "text")]
    inputs = [
        e.delta.partial_json
        for e in events
        if e.type == "content_block_delta" and e.delta.type == "input_json_delta"
    ]
    assert inputs == ['{"city": "Oslo"}']  # the released call: its input in one delta
    assert [block.type for block in message.content] == ["text", "text", "tool_use", "text"]
    assert len(proxy.settled.wait_for(2)) == 2
    assert proxy.spent() == (2 * TOTAL, 0)


def test_thinking_and_server_tool_blocks_pass_as_they_came(proxy: Proxy) -> None:
    thinking = {"type": "thinking", "thinking": "", "signature": ""}
    server = {"type": "server_tool_use", "id": "srvtoolu_0", "name": "web_search", "input": {}}
    proxy.standin.mode = "script"
    proxy.standin.script = [
        anthropic_start(),
        anthropic_event("content_block_start", index=0, content_block=thinking),
        anthropic_event(
            "content_block_delta", index=0, delta={"type": "thinking_delta", "thinking": "Hmm."}
        ),
        anthropic_event(
            "content_block_delta", index=0, delta={"type": "signature_delta", "signature": "sig"}
        ),
        anthropic_event("content_block_stop", index=0),
        anthropic_event("content_block_start", index=1, content_block=server),
        anthropic_event(
            "content_block_delta",
            index=1,
            delta={"type": "input_json_delta", "partial_json": '{"query": "news"}'},
        ),
        anthropic_event("content_block_stop", index=1),
        *anthropic_tool_block(2, "toolu_0", "get_weather", {"city": "Oslo"}),
        *anthropic_end("tool_use"),
    ]
    message = final(proxy)
    kinds = [block.type for block in message.content]
    assert kinds == ["thinking", "server_tool_use", "tool_use"]
    first, second, third = message.content
    assert first.type == "thinking" and (first.thinking, first.signature) == ("Hmm.", "sig")
    assert second.type == "server_tool_use" and second.input == {"query": "news"}
    assert third.type == "tool_use" and third.input == {"city": "Oslo"}


def test_an_allowed_streamed_tool_use_commits_its_tool_budget_once(proxy: Proxy) -> None:
    proxy.standin.mode = "tools"
    proxy.standin.tool_calls = [("refund", {"amount": 50}), ("refund", {"amount": 5000})]
    message = final(proxy)
    assert [block.type for block in message.content] == ["text", "tool_use", "text", "text"]
    proxy.settled.wait_for(1)
    assert proxy.spent(budget="refunds") == (1_000_000, 0)  # 1 USD, in micro-units
    assert proxy.spent() == (TOTAL, 0)


def test_a_client_that_leaves_while_a_tool_use_is_held_is_charged_once(proxy: Proxy) -> None:
    start = {"type": "tool_use", "id": "toolu_0", "name": "delete_account", "input": {}}
    partial = {"type": "input_json_delta", "partial_json": json.dumps({"id": SECRET})[:-2]}
    proxy.standin.mode = "script"
    proxy.standin.script = [
        anthropic_start(),
        *anthropic_text_block(0, ["Deleting."]),
        anthropic_event("content_block_start", index=1, content_block=start),
        anthropic_event("content_block_delta", index=1, delta=partial),
        anthropic_event("ping"),  # relayed: once read, the proxy has had the delta
        WAIT,
        anthropic_event("content_block_stop", index=1),
        *anthropic_end("tool_use"),
    ]
    headers = {"x-api-key": proxy.tokens["agent"], "anthropic-version": "2023-06-01"}
    received = b""
    with httpx.stream(
        "POST", proxy.url + "/v1/messages", json={**BODY, "stream": True}, headers=headers
    ) as answer:
        for chunk in answer.iter_raw():
            received += chunk
            if b"event: ping" in received:
                break  # the client goes away while the call is held
    assert proxy.standin.holding.wait(30)
    assert b"tool_use" not in received and SECRET.encode() not in received
    (call,) = proxy.settled.wait_for(1)
    assert call.usage is not None
    # "Deleting." and the held input: 9 + 29 characters, / 4
    assert call.usage.output_tokens == 10
    spent, reserved = proxy.spent()
    assert reserved == 0 and spent == call.usage.total
