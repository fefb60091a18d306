"""Tool calls in a non-streamed response are judged like any tool call; a refused one
is replaced by a refusal the agent reads (streamed ones: test_stream_tools_*.py)."""

from __future__ import annotations

import json

import anthropic
import openai

from .conftest import Proxy

MESSAGES = [{"role": "user", "content": "Help me."}]
TOOLS = [
    {
        "type": "function",
        "function": {"name": "get_weather", "parameters": {"type": "object", "properties": {}}},
    }
]


def openai_client(proxy: Proxy) -> openai.OpenAI:
    return openai.OpenAI(base_url=proxy.url + "/v1", api_key=proxy.tokens["agent"], max_retries=0)


def anthropic_client(proxy: Proxy) -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=proxy.url, api_key=proxy.tokens["agent"], max_retries=0)


def test_openai_a_refused_call_is_replaced_and_an_allowed_one_kept(proxy: Proxy) -> None:
    proxy.standin.mode = "tools"
    proxy.standin.tool_calls = [("get_weather", {"city": "Paris"}), ("delete_account", {"id": 7})]
    reply = openai_client(proxy).chat.completions.create(
        model="gpt-4o-mini", messages=MESSAGES, tools=TOOLS
    )
    choice = reply.choices[0]
    calls = choice.message.tool_calls or []
    assert [c.function.name for c in calls if c.type == "function"] == ["get_weather"]
    assert choice.finish_reason == "tool_calls"
    content = choice.message.content or ""
    assert "Interlock denied tool 'delete_account'" in content
    assert "nothing is deleted by a model" in content
    assert "[tool call call_1; decision " in content


def test_openai_when_every_call_is_refused_the_turn_stops(proxy: Proxy) -> None:
    proxy.standin.mode = "tools"
    proxy.standin.tool_calls = [("refund", {"amount": 5000})]
    reply = openai_client(proxy).chat.completions.create(
        model="gpt-4o-mini", messages=MESSAGES, tools=TOOLS
    )
    choice = reply.choices[0]
    assert choice.message.tool_calls is None
    assert choice.finish_reason == "stop"
    assert "Interlock denied tool 'refund'" in (choice.message.content or "")


def test_openai_a_benign_look_alike_passes_untouched(proxy: Proxy) -> None:
    proxy.standin.mode = "tools"
    proxy.standin.tool_calls = [("refund", {"amount": 50})]
    reply = openai_client(proxy).chat.completions.create(
        model="gpt-4o-mini", messages=MESSAGES, tools=TOOLS
    )
    (call,) = reply.choices[0].message.tool_calls or []
    assert call.type == "function"
    assert json.loads(call.function.arguments) == {"amount": 50}
    assert reply.choices[0].message.content is None


def test_anthropic_a_refused_tool_use_becomes_text(proxy: Proxy) -> None:
    proxy.standin.mode = "tools"
    proxy.standin.tool_calls = [("get_weather", {"city": "Oslo"}), ("delete_account", {"id": 1})]
    reply = anthropic_client(proxy).messages.create(
        model="claude-sonnet-4-5", max_tokens=100, messages=MESSAGES
    )
    kinds = [block.type for block in reply.content]
    assert kinds == ["text", "tool_use", "text"]
    refusal = reply.content[2]
    assert refusal.type == "text"
    assert "Interlock denied tool 'delete_account'" in refusal.text
    assert "[tool call toolu_1; decision " in refusal.text
    assert reply.stop_reason == "tool_use"  # get_weather is still to run


def test_anthropic_when_every_tool_use_is_refused_the_turn_ends(proxy: Proxy) -> None:
    proxy.standin.mode = "tools"
    proxy.standin.tool_calls = [("delete_account", {"id": 1})]
    reply = anthropic_client(proxy).messages.create(
        model="claude-sonnet-4-5", max_tokens=100, messages=MESSAGES
    )
    assert [block.type for block in reply.content] == ["text", "text"]
    assert reply.stop_reason == "end_turn"


def test_a_tool_use_whose_input_is_not_an_object_is_refused(proxy: Proxy) -> None:
    proxy.standin.mode = "tools"
    proxy.standin.tool_calls = [("get_weather", ["Paris"])]  # type: ignore[list-item]
    reply = anthropic_client(proxy).messages.create(
        model="claude-sonnet-4-5", max_tokens=100, messages=MESSAGES
    )
    assert [block.type for block in reply.content] == ["text", "text"]
    assert "not an object" in getattr(reply.content[1], "text", "")


def test_openai_arguments_that_are_not_a_json_object_are_refused(proxy: Proxy) -> None:
    proxy.standin.mode = "tools"
    proxy.standin.raw_tool_calls = [
        {"id": "c0", "type": "function", "function": {"name": "get_weather", "arguments": "[1]"}},
        {"id": "c1", "type": "function", "function": {"name": "get_weather", "arguments": "{"}},
        {"id": "c2", "type": "function", "function": {"name": "get_weather", "arguments": ""}},
    ]
    reply = openai_client(proxy).chat.completions.create(
        model="gpt-4o-mini", messages=MESSAGES, tools=TOOLS
    )
    message = reply.choices[0].message
    assert [c.id for c in message.tool_calls or []] == ["c2"]  # empty text: no parameters
    content = message.content or ""
    assert "the tool call 'get_weather': its arguments are not an object [tool call c0]" in content
    assert "[tool call c1]" in content


def test_openai_custom_tool_calls_are_judged_and_unknown_kinds_refused(proxy: Proxy) -> None:
    from .standin import StandIn

    def custom_reply(calls: list[dict[str, object]]) -> None:
        proxy.standin.mode = "tools"
        proxy.standin.raw_tool_calls = calls

    assert isinstance(proxy.standin, StandIn)
    custom_reply(
        [
            {"id": "c0", "type": "custom", "custom": {"name": "delete_account", "input": "7"}},
            {"id": "c1", "type": "custom", "custom": {"name": "get_weather", "input": "Oslo"}},
            {"id": "c2", "type": "mystery", "mystery": {"name": "get_weather"}},
        ]
    )
    reply = openai_client(proxy).chat.completions.create(
        model="gpt-4o-mini", messages=MESSAGES, tools=TOOLS
    )
    message = reply.choices[0].message
    assert [c.id for c in message.tool_calls or []] == ["c1"]
    content = message.content or ""
    assert "Interlock denied tool 'delete_account'" in content
    assert "a tool call with no name [tool call c2]" in content
