"""Streams that try to slip a tool call past the judge, next to benign look-alikes
that must pass. Each case streams through the official client's stream helper (what
the agent reads) and through a raw reader (every byte the proxy sent): a refused
call's arguments appear in no byte, a released one arrives exactly as judged, and
the stream is settled once."""

from __future__ import annotations

import itertools
import json
from dataclasses import dataclass, field
from typing import Any

import anthropic
import openai
import pytest

from .clients import anthropic_client, openai_client, raw_stream
from .conftest import SMALL_CAP, Proxy
from .standin import (
    CUT,
    Step,
    anthropic_end,
    anthropic_event,
    anthropic_start,
    anthropic_text_block,
    openai_chunk,
    openai_usage_chunk,
    sse,
)

SECRET = "acct-4242-do-not-leak"
S_ARGS = json.dumps({"city": SECRET})
OSLO = '{"city": "Oslo"}'


@dataclass(frozen=True)
class Case:
    script: list[Step]
    released: list[tuple[str, str]] = field(default_factory=list)  # (name, arguments)
    refusal: str | None = None  # in what the agent reads instead of the call
    hidden: str | None = SECRET  # in no byte the proxy sends


# -- OpenAI -----------------------------------------------------------------------------


def around(*middle: Step, finish: str | None = "tool_calls") -> list[Step]:
    head = [openai_chunk({"role": "assistant", "content": ""}), openai_chunk({"content": "Hi."})]
    tail = [openai_chunk({}, finish)] if finish else []
    return [*head, *middle, *tail, openai_usage_chunk(), "data: [DONE]\n\n"]


def tc(*entries: Any) -> str:
    return openai_chunk({"tool_calls": list(entries)})


def start(i: int, name: str, arguments: str = "", call_id: str | None = None) -> dict[str, Any]:
    function = {"name": name, "arguments": arguments}
    return {"index": i, "id": call_id or f"call_{i}", "type": "function", "function": function}


def frag(i: int, arguments: str) -> dict[str, Any]:
    return {"index": i, "function": {"arguments": arguments}}


def split_utf8(frame: str, *characters: str) -> list[Step]:
    """``frame`` as network writes cut inside each of ``characters``' UTF-8 bytes."""
    data = frame.encode()
    cuts = [data.index(character.encode()) + 1 for character in characters]
    bounds = [0, *cuts, len(data)]
    return [data[a:b] for a, b in itertools.pairwise(bounds)]


UNICODE = {"city": "Zürich", "sky": "🌦"}
UNICODE_TEXT = json.dumps(UNICODE, ensure_ascii=False)
OPENAI_UNICODE = sse(
    {
        "id": "chatcmpl-standin",
        "object": "chat.completion.chunk",
        "created": 1764800000,
        "model": "gpt-4o-mini",
        "choices": [{"index": 0, "delta": {"tool_calls": [start(0, "get_weather", UNICODE_TEXT)]}}],
    },
    ascii=False,
)

OPENAI_REFUSED = {
    "the first delta has no id": Case(
        around(
            tc({"index": 0, "type": "function", "function": {"name": "get_weather"}}),
            tc(frag(0, S_ARGS)),
        ),
        refusal="a delta came for a call that never started (no id)",
    ),
    "the name changes mid-stream": Case(
        around(
            tc(start(0, "get_weather")),
            tc(frag(0, S_ARGS)),
            tc({"index": 0, "function": {"name": "delete_account"}}),
        ),
        refusal="its name changed mid-stream (to 'delete_account')",
    ),
    "a name in two pieces is a changed name": Case(
        around(tc(start(0, "get_")), tc({"index": 0, "function": {"name": "weather"}})),
        refusal="its name changed mid-stream",
        hidden=None,
    ),
    "an index reused for another id": Case(
        around(tc(start(0, "get_weather", OSLO)), tc(start(0, "get_weather", S_ARGS, "call_9"))),
        refusal="its index was reused for another call ('call_9')",
    ),
    "a fragment for an index never started": Case(
        around(tc(start(0, "get_weather", OSLO)), tc(frag(1, S_ARGS))),
        released=[("get_weather", OSLO)],
        refusal="a delta came for a call that never started (no id) [tool call ?]",
    ),
    "arguments that are not an object": Case(
        around(tc(start(0, "get_weather", json.dumps([SECRET])))),
        refusal="the tool call 'get_weather': its arguments are not an object [tool call call_0]",
    ),
    "arguments cut short": Case(
        around(tc(start(0, "get_weather", S_ARGS[:-2]))),
        refusal="its arguments are not an object",
    ),
    "a second object after the arguments": Case(
        around(tc(start(0, "get_weather", OSLO)), tc(frag(0, S_ARGS))),
        refusal="its arguments are not an object",
    ),
    "a call with no name": Case(
        around(
            tc({"index": 0, "id": "call_0", "type": "function", "function": {"arguments": S_ARGS}})
        ),
        refusal="Interlock refused a tool call with no name [tool call call_0]",
    ),
    "a call that is not a function call": Case(
        around(tc({**start(0, "get_weather", S_ARGS), "type": "custom"})),
        refusal="its type 'custom' is not a function call",
    ),
    "arguments that are not text": Case(
        around(
            tc({**start(0, "get_weather"), "function": {"name": "x", "arguments": {"a": SECRET}}})
        ),
        refusal="its arguments are not text",
    ),
    "one id on two calls": Case(
        around(tc(start(0, "get_weather", OSLO)), tc(start(1, "get_weather", S_ARGS, "call_0"))),
        released=[("get_weather", OSLO)],
        refusal="its id is already another call's",
    ),
    "tool-call deltas that are not a list": Case(
        around(openai_chunk({"tool_calls": start(0, "get_weather", S_ARGS)})),
        refusal="its deltas are not a list",
    ),
    "an unreadable event mid-call": Case(
        around(
            tc(start(0, "get_weather", '{"city": ')),
            'data: {"choices": [oops\n\n',
            tc(frag(0, json.dumps(SECRET) + "}")),
        ),
        refusal="the stream carried an event the proxy could not read",
    ),
    "a lone surrogate in a fragment": Case(
        around(
            tc(start(0, "get_weather", '{"city": "')),
            tc(frag(0, "\ud83d")),
            tc(frag(0, "\ude00" + SECRET + '"}')),
        ),
        refusal="the stream carried an event the proxy could not read",
    ),
    "the choice never finishes": Case(
        around(tc(start(0, "get_weather", S_ARGS)), finish=None),
        refusal="the stream ended before its choice finished",
    ),
    "a fragment after the choice finished": Case(
        [
            *around(tc(start(0, "get_weather", OSLO)))[:-2],
            tc(frag(0, S_ARGS)),
            openai_usage_chunk(),
            "data: [DONE]\n\n",
        ],
        released=[("get_weather", OSLO)],
        refusal="a delta came for a call that never started",
    ),
    "a second function_call on the choice": Case(
        [
            *around(openai_chunk({"function_call": {"name": "get_weather", "arguments": OSLO}}))[
                :-2
            ],
            openai_chunk({"function_call": {"name": "get_weather", "arguments": S_ARGS}}),
            openai_chunk({}, "function_call"),
            "data: [DONE]\n\n",
        ],
        refusal="the tool call 'get_weather': a second function call [tool call function_call]",
    ),
    "a refund amount split across fragments": Case(
        around(tc(start(0, "refund", '{"amount": 50')), tc(frag(0, "00}"))),
        refusal="Interlock denied tool 'refund'",
        hidden=None,
    ),
    "look-alike: a trailing space": Case(
        around(tc(start(0, "delete_account ", S_ARGS))),
        refusal="Interlock denied tool 'delete_account '",
    ),
    "look-alike: a Cyrillic o": Case(
        around(tc(start(0, "delete_acc\u043eunt", S_ARGS))),
        refusal="Interlock denied tool 'delete_acc\u043eunt'",
    ),
    "look-alike: a zero-width space": Case(
        around(tc(start(0, "get_weather\u200b", S_ARGS))),
        refusal="Interlock denied tool 'get_weather\\u200b'",  # repr: the space shows
    ),
    "look-alike: another case": Case(
        around(tc(start(0, "Get_Weather", S_ARGS))),
        refusal="Interlock denied tool 'Get_Weather'",
    ),
}

OPENAI_BENIGN = {
    "arguments that name a denied tool": Case(
        around(tc(start(0, "get_weather", '{"city": "delete_account"}'))),
        released=[("get_weather", '{"city": "delete_account"}')],
    ),
    "a refund at the limit": Case(
        around(tc(start(0, "refund")), tc(frag(0, '{"amount": ')), tc(frag(0, "100}"))),
        released=[("refund", '{"amount": 100}')],
    ),
    "no arguments at all": Case(
        around(tc(start(0, "get_weather", ""))),
        released=[("get_weather", "")],
    ),
    "whitespace around the object": Case(
        around(tc(start(0, "get_weather", " ")), tc(frag(0, OSLO + "\n"))),
        released=[("get_weather", " " + OSLO + "\n")],
    ),
    "a key twice: the judge and the agent both read the last": Case(
        around(tc(start(0, "refund", '{"amount": 5000, "amount": 5}'))),
        released=[("refund", '{"amount": 5000, "amount": 5}')],
    ),
    "the id and name sent again on every fragment": Case(
        around(
            tc(start(0, "get_weather", '{"city": ')),
            tc({**start(0, "get_weather", '"Oslo"}')}),
        ),
        released=[("get_weather", OSLO)],
    ),
    "a character split across network writes": Case(
        around(*split_utf8(OPENAI_UNICODE, "ü", "🌦")),
        released=[("get_weather", UNICODE_TEXT)],
    ),
    "calls after the choice finished once: numbered on, never merged": Case(
        [
            *around(tc(start(0, "get_weather", OSLO)))[:-2],
            tc(start(0, "get_weather", '{"city": "Lima"}', "call_5")),
            openai_chunk({}, "tool_calls"),
            "data: [DONE]\n\n",
        ],
        released=[("get_weather", OSLO), ("get_weather", '{"city": "Lima"}')],
    ),
    "a surrogate pair kept whole": Case(
        around(tc(start(0, "get_weather", '{"city": "')), tc(frag(0, '\ud83d\ude00"}'))),
        released=[("get_weather", '{"city": "😀"}')],
    ),
}


def _openai_case(proxy: Proxy, case: Case) -> None:
    proxy.standin.mode = "script"
    proxy.standin.script = case.script
    api = openai_client(proxy)
    with api.chat.completions.stream(model="gpt-4o-mini", messages=[]) as stream:
        final = stream.get_final_completion()
    message = final.choices[0].message
    calls = [(c.function.name, c.function.arguments) for c in message.tool_calls or []]
    assert calls == case.released
    content = message.content or ""
    if case.refusal is None:
        assert content == "Hi."
    else:
        assert content.startswith("Hi.\n\nInterlock ")
        assert case.refusal in content
    raw = raw_stream(proxy, "/v1/chat/completions", {"model": "gpt-4o-mini", "messages": []})
    if case.hidden is not None:
        assert case.hidden.encode() not in raw
    assert len(proxy.settled.wait_for(2)) == 2
    assert proxy.spent()[1] == 0


@pytest.mark.parametrize("case", OPENAI_REFUSED.values(), ids=OPENAI_REFUSED.keys())
def test_openai_a_malformed_or_forbidden_call_is_refused(proxy: Proxy, case: Case) -> None:
    _openai_case(proxy, case)


@pytest.mark.parametrize("case", OPENAI_BENIGN.values(), ids=OPENAI_BENIGN.keys())
def test_openai_a_benign_look_alike_is_released(proxy: Proxy, case: Case) -> None:
    _openai_case(proxy, case)


def test_openai_a_call_over_the_held_cap_is_refused_and_the_next_one_judged(
    capped_proxy: Proxy,
) -> None:
    huge = json.dumps({"city": SECRET + "x" * SMALL_CAP})
    case = Case(
        around(
            tc(start(0, "get_weather", huge[:100])),
            *[tc(frag(0, huge[i : i + 500])) for i in range(100, len(huge), 500)],
            tc(start(1, "get_weather", OSLO)),
        ),
        released=[("get_weather", OSLO)],
        refusal=f"it is larger than the {SMALL_CAP} bytes the proxy holds for a stream",
    )
    _openai_case(capped_proxy, case)


def test_openai_a_stream_cut_mid_call_never_releases_it(proxy: Proxy) -> None:
    proxy.standin.mode = "script"
    head = around(tc(start(0, "get_weather", '{"city": ')), tc(frag(0, SECRET)))[:4]
    proxy.standin.script = [*head, CUT]
    stream = openai_client(proxy).chat.completions.create(
        model="gpt-4o-mini", messages=[], stream=True
    )
    seen = []
    with pytest.raises(openai.APIConnectionError):
        seen.extend(stream)
    assert all(not entry.delta.tool_calls for chunk in seen for entry in chunk.choices)
    raw = raw_stream(proxy, "/v1/chat/completions", {"model": "gpt-4o-mini", "messages": []})
    assert SECRET.encode() not in raw and b"get_weather" not in raw
    calls = proxy.settled.wait_for(2)
    assert len(calls) == 2
    assert all(call.usage is not None and call.usage.output_tokens > 0 for call in calls)
    assert proxy.spent()[1] == 0


# -- Anthropic --------------------------------------------------------------------------


def a_around(*middle: Step, stop: str | None = "tool_use") -> list[Step]:
    head = [anthropic_start(), *anthropic_text_block(0, ["Hi."])]
    return [*head, *middle, *(anthropic_end(stop) if stop else [])]


def t_start(i: int, name: str | None = "get_weather", **block: Any) -> str:
    content = {"type": "tool_use", "id": f"toolu_{i}", "input": {}, **block}
    if name is not None:
        content["name"] = name
    return anthropic_event("content_block_start", index=i, content_block=content)


def t_input(i: int, partial: Any) -> str:
    delta = {"type": "input_json_delta", "partial_json": partial}
    return anthropic_event("content_block_delta", index=i, delta=delta)


def t_stop(i: int) -> str:
    return anthropic_event("content_block_stop", index=i)


def tool(i: int, text: str, name: str = "get_weather") -> list[Step]:
    return [t_start(i, name), t_input(i, ""), t_input(i, text[:7]), t_input(i, text[7:]), t_stop(i)]


PREFILLED = {
    "id": "msg_standin",
    "type": "message",
    "role": "assistant",
    "model": "claude-sonnet-4-5",
    "content": [
        {"type": "tool_use", "id": "toolu_p", "name": "delete_account", "input": {"id": SECRET}}
    ],
    "stop_reason": None,
    "stop_sequence": None,
    "usage": {"input_tokens": 12, "output_tokens": 1},
}
ANTHROPIC_UNICODE = sse(
    {
        "type": "content_block_delta",
        "index": 1,
        "delta": {"type": "input_json_delta", "partial_json": UNICODE_TEXT},
    },
    "content_block_delta",
    ascii=False,
)

ANTHROPIC_REFUSED = {
    "input that is not an object": Case(
        a_around(*tool(1, json.dumps([SECRET]))),
        refusal="its arguments are not an object [tool call toolu_1]",
    ),
    "input cut off": Case(
        a_around(*tool(1, S_ARGS[:-2])), refusal="its arguments are not an object"
    ),
    "a second object after the input (a partial parser would read the first)": Case(
        a_around(*tool(1, OSLO + S_ARGS)), refusal="its arguments are not an object"
    ),
    "a tool_use with no name": Case(
        a_around(t_start(1, None), t_input(1, S_ARGS), t_stop(1)),
        refusal="Interlock refused a tool call with no name [tool call toolu_1]",
    ),
    "a text delta inside the tool_use": Case(
        a_around(
            t_start(1),
            t_input(1, S_ARGS),
            anthropic_event(
                "content_block_delta", index=1, delta={"type": "text_delta", "text": "x"}
            ),
            t_stop(1),
        ),
        refusal="a delta that is not its input came for it",
    ),
    "input that is not text": Case(
        a_around(t_start(1), t_input(1, 7), t_input(1, S_ARGS), t_stop(1)),
        refusal="its input delta is not text",
    ),
    "another block starts before it stops": Case(
        a_around(t_start(1), t_input(1, S_ARGS), *anthropic_text_block(2, [" More."])),
        refusal="another block started before it ended",
    ),
    "an index out of order": Case(
        a_around(t_start(5), t_input(5, S_ARGS), t_stop(5)),
        refusal="its index 5 is out of order (expected 1)",
    ),
    "the message ends before the block": Case(
        a_around(t_start(1), t_input(1, S_ARGS)),
        refusal="the message ended before the tool call did",
    ),
    "the stream ends mid-block": Case(
        a_around(t_start(1), t_input(1, S_ARGS), stop=None),
        refusal="the stream ended before the tool call was complete",
    ),
    "an unreadable event mid-block": Case(
        a_around(
            t_start(1),
            t_input(1, '{"city": '),
            "event: content_block_delta\ndata: {oops\n\n",
            t_input(1, json.dumps(SECRET) + "}"),
            t_stop(1),
        ),
        refusal="the stream carried an event the proxy could not read",
    ),
    "a tool_use already in message_start": Case(
        [anthropic_event("message_start", message=PREFILLED), *anthropic_end("tool_use")],
        refusal="Interlock denied tool 'delete_account'",
    ),
    "input for a block never started": Case(
        a_around(t_start(1), t_input(1, OSLO), t_input(7, S_ARGS), t_stop(1)),
        released=[("get_weather", OSLO)],
    ),
    "input after a released block stopped": Case(
        a_around(*tool(1, OSLO), t_input(1, S_ARGS)),
        released=[("get_weather", OSLO)],
    ),
    "look-alike: a trailing space": Case(
        a_around(*tool(1, S_ARGS, "delete_account ")),
        refusal="Interlock denied tool 'delete_account '",
    ),
    "look-alike: a Cyrillic o": Case(
        a_around(*tool(1, S_ARGS, "delete_acc\u043eunt")),
        refusal="Interlock denied tool 'delete_acc\u043eunt'",
    ),
}

ANTHROPIC_BENIGN = {
    "input that names a denied tool": Case(
        a_around(*tool(1, '{"city": "delete_account"}')),
        released=[("get_weather", '{"city": "delete_account"}')],
    ),
    "a refund at the limit": Case(
        a_around(*tool(1, '{"amount": 100}', "refund")), released=[("refund", '{"amount": 100}')]
    ),
    "no input deltas at all": Case(
        a_around(t_start(1), t_stop(1)), released=[("get_weather", "{}")]
    ),
    "the input in the start block": Case(
        a_around(t_start(1, input={"city": "Oslo"}), t_stop(1)),
        released=[("get_weather", OSLO)],
    ),
    "a ping inside the block": Case(
        a_around(
            t_start(1),
            t_input(1, '{"city": '),
            anthropic_event("ping"),
            t_input(1, '"Oslo"}'),
            t_stop(1),
        ),
        released=[("get_weather", OSLO)],
    ),
    "a character split across network writes": Case(
        a_around(t_start(1), *split_utf8(ANTHROPIC_UNICODE, "🌦"), t_stop(1)),
        released=[("get_weather", UNICODE_TEXT)],
    ),
    "a key twice: the judge and the agent both read the last": Case(
        a_around(*tool(1, '{"amount": 5000, "amount": 5}', "refund")),
        released=[("refund", '{"amount": 5000, "amount": 5}')],
    ),
}


def _anthropic_case(proxy: Proxy, case: Case) -> None:
    proxy.standin.mode = "script"
    proxy.standin.script = case.script
    body: dict[str, Any] = {"model": "claude-sonnet-4-5", "max_tokens": 100, "messages": []}
    with anthropic_client(proxy).messages.stream(**body) as stream:
        message = stream.get_final_message()
    released = [(b.name, b.input) for b in message.content if b.type == "tool_use"]
    assert released == [(name, json.loads(text)) for name, text in case.released]
    texts = [b.text for b in message.content if b.type == "text"]
    refusals = [text for text in texts if text.startswith("Interlock ")]
    if case.refusal is None:
        assert refusals == [] and message.stop_reason == "tool_use"
    else:
        (refusal,) = refusals
        assert case.refusal in refusal
        assert message.stop_reason == ("tool_use" if case.released else "end_turn") or (
            message.stop_reason is None  # the stream that ended mid-block has no stop
        )
    raw = raw_stream(proxy, "/v1/messages", body)
    if case.hidden is not None:
        assert case.hidden.encode() not in raw
    assert len(proxy.settled.wait_for(2)) == 2
    assert proxy.spent()[1] == 0


@pytest.mark.parametrize("case", ANTHROPIC_REFUSED.values(), ids=ANTHROPIC_REFUSED.keys())
def test_anthropic_a_malformed_or_forbidden_tool_use_is_refused(proxy: Proxy, case: Case) -> None:
    _anthropic_case(proxy, case)


@pytest.mark.parametrize("case", ANTHROPIC_BENIGN.values(), ids=ANTHROPIC_BENIGN.keys())
def test_anthropic_a_benign_look_alike_is_released(proxy: Proxy, case: Case) -> None:
    _anthropic_case(proxy, case)


def test_anthropic_a_tool_use_over_the_held_cap_is_refused_and_the_next_one_judged(
    capped_proxy: Proxy,
) -> None:
    huge = json.dumps({"city": SECRET + "x" * SMALL_CAP})
    parts = [t_input(1, huge[i : i + 500]) for i in range(0, len(huge), 500)]
    case = Case(
        a_around(t_start(1), *parts, t_stop(1), *tool(2, OSLO)),
        released=[("get_weather", OSLO)],
        refusal=f"it is larger than the {SMALL_CAP} bytes the proxy holds for a stream",
    )
    _anthropic_case(capped_proxy, case)


def test_anthropic_a_stream_cut_mid_block_never_releases_it(proxy: Proxy) -> None:
    proxy.standin.mode = "script"
    proxy.standin.script = [*a_around(t_start(1), t_input(1, S_ARGS), stop=None), CUT]
    body: dict[str, Any] = {"model": "claude-sonnet-4-5", "max_tokens": 100, "messages": []}
    seen = []
    with pytest.raises(anthropic.APIConnectionError):
        for event in anthropic_client(proxy).messages.create(**body, stream=True):
            seen.append(event)
    assert all(e.type != "content_block_start" or e.content_block.type == "text" for e in seen)
    raw = raw_stream(proxy, "/v1/messages", body)
    assert SECRET.encode() not in raw and b"tool_use" not in raw
    calls = proxy.settled.wait_for(2)
    assert len(calls) == 2
    assert proxy.spent()[1] == 0


def test_anthropic_an_error_event_mid_block_refuses_the_held_tool_use(proxy: Proxy) -> None:
    error = {"type": "overloaded_error", "message": "Overloaded"}
    proxy.standin.mode = "script"
    proxy.standin.script = a_around(
        t_start(1), t_input(1, S_ARGS), anthropic_event("error", error=error), t_stop(1)
    )
    body: dict[str, Any] = {"model": "claude-sonnet-4-5", "max_tokens": 100, "messages": []}
    with pytest.raises(anthropic.APIStatusError, match="Overloaded"):
        for _ in anthropic_client(proxy).messages.create(**body, stream=True):
            pass
    raw = raw_stream(proxy, "/v1/messages", body)
    assert SECRET.encode() not in raw and b"tool_use" not in raw
    assert b"the message ended before the tool call did" in raw
    assert len(proxy.settled.wait_for(2)) == 2
