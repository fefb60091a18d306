"""Tool calls in a Responses answer are judged before the agent sees them, streamed
or not: an allowed call arrives exactly as the model wrote it, a refused one is
replaced at its place by a message carrying the refusal — never a byte of it in the
stream — with the same text as the chat flavour's."""

from __future__ import annotations

import json
import re
from typing import Any

import httpx
import openai
import pytest

from .conftest import Proxy
from .standin_responses import Events, function_call, message, response

TOOLS: list[Any] = [
    {"type": "function", "name": "get_weather", "parameters": {"type": "object"}},
    {"type": "function", "name": "delete_account", "parameters": {"type": "object"}},
]
SECRET = "zz-only-in-the-refused-call-zz"


def client(proxy: Proxy) -> openai.OpenAI:
    return openai.OpenAI(base_url=proxy.url + "/v1", api_key=proxy.tokens["agent"], max_retries=0)


def aclient(proxy: Proxy) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(
        base_url=proxy.url + "/v1", api_key=proxy.tokens["agent"], max_retries=0
    )


def sse(proxy: Proxy, **body: Any) -> tuple[bytes, list[dict[str, Any]]]:
    """The proxy's SSE bytes for a streamed request, and its events' data."""
    request = {"model": "gpt-4o-mini", "input": "Help me.", "tools": TOOLS, **body, "stream": True}
    headers = {"authorization": f"Bearer {proxy.tokens['agent']}"}
    with httpx.stream(
        "POST", proxy.url + "/v1/responses", json=request, headers=headers, timeout=30
    ) as answer:
        assert answer.status_code == 200
        raw = answer.read()
    events = []
    for block in raw.decode().split("\n\n"):
        data = [line[6:] for line in block.split("\n") if line.startswith("data: ")]
        if data:
            events.append(json.loads("\n".join(data)))
    return raw, events


def calls_and_notes(output: list[Any]) -> tuple[list[tuple[str, str]], list[str]]:
    """(name, arguments) of the function calls, and the texts of the messages."""
    calls = [(i["name"], i["arguments"]) for i in output if i["type"] == "function_call"]
    notes = [
        part["text"]
        for item in output
        if item["type"] == "message"
        for part in item["content"]
        if part["type"] == "output_text"
    ]
    return calls, notes


def streamed_output(events: list[dict[str, Any]]) -> list[Any]:
    """The items as the stream finished them (``output_item.done``), by index."""
    done = {
        e["output_index"]: e["item"] for e in events if e["type"] == "response.output_item.done"
    }
    return [done[i] for i in sorted(done)]


def assert_consistent(events: list[dict[str, Any]]) -> None:
    """Sequence numbers one more per event; the completed response agrees with the
    items the stream finished."""
    assert [e["sequence_number"] for e in events] == list(range(len(events)))
    (final,) = [e for e in events if e["type"] == "response.completed"]
    assert final["response"]["output"] == streamed_output(events)


def without_decision(text: str) -> str:
    return re.sub(r"dec_[0-9a-z]+", "dec_…", text)


# -- non-streamed -------------------------------------------------------------------------


def test_a_refused_call_is_replaced_in_place_and_an_allowed_one_kept(proxy: Proxy) -> None:
    proxy.standin.mode = "tools"
    proxy.standin.tool_calls = [
        ("get_weather", {"city": "Paris"}),
        ("delete_account", {"id": 7, "why": SECRET}),
    ]
    reply = client(proxy).responses.create(model="gpt-4o-mini", input="Help me.", tools=TOOLS)
    assert [item.type for item in reply.output] == ["function_call", "message"]
    kept = reply.output[0]
    assert kept.type == "function_call" and kept.call_id == "call_0"
    assert json.loads(kept.arguments) == {"city": "Paris"}
    refusal = reply.output_text
    assert refusal.startswith("Interlock denied tool 'delete_account': nothing is deleted")
    assert "[tool call call_1; decision dec_" in refusal
    assert reply.output[1].id.startswith("msg_")
    assert SECRET not in reply.model_dump_json()


async def test_the_async_client_gets_the_same_judgement(proxy: Proxy) -> None:
    proxy.standin.mode = "tools"
    proxy.standin.tool_calls = [("refund", {"amount": 5000}), ("refund", {"amount": 50})]
    async with aclient(proxy) as api:
        reply = await api.responses.create(model="gpt-4o-mini", input="Help me.", tools=TOOLS)
    calls, notes = calls_and_notes(reply.model_dump()["output"])
    assert calls == [("refund", '{"amount": 50}')]
    assert len(notes) == 1 and notes[0].startswith("Interlock denied tool 'refund'")


def test_an_output_text_field_is_written_anew(proxy: Proxy) -> None:
    output = [message("Let me see. "), function_call("delete_account", '{"id": 1}', 1)]
    proxy.standin.raw_response = {**response("gpt-4o-mini", output), "output_text": "Let me see. "}
    answer = httpx.post(
        proxy.url + "/v1/responses",
        headers={"authorization": f"Bearer {proxy.tokens['agent']}"},
        json={"model": "gpt-4o-mini", "input": "x"},
    )
    body = answer.json()
    (refusal,) = body["output"][1]["content"]
    assert refusal["text"].startswith("Interlock denied tool 'delete_account'")
    assert body["output_text"] == "Let me see. " + refusal["text"]


def test_the_refusal_reads_as_the_chat_flavours_for_the_same_call(proxy: Proxy) -> None:
    proxy.standin.mode = "tools"
    proxy.standin.tool_calls = [("delete_account", {"id": 7})]
    api = client(proxy)
    chat = api.chat.completions.create(
        model="gpt-4o-mini",
        messages=[{"role": "user", "content": "Help me."}],
        tools=[{"type": "function", "function": {"name": "delete_account"}}],
    )
    responses = api.responses.create(model="gpt-4o-mini", input="Help me.", tools=TOOLS)
    streamed = "".join(
        e.delta
        for e in api.responses.create(
            model="gpt-4o-mini", input="Help me.", tools=TOOLS, stream=True
        )
        if e.type == "response.output_text.delta"
    )
    # The chat stand-in names its call call_0 too.
    expected = without_decision(chat.choices[0].message.content or "")
    assert expected.startswith("Interlock denied tool 'delete_account'")
    assert without_decision(responses.output_text) == expected
    assert without_decision(streamed) == expected


# -- streamed -----------------------------------------------------------------------------


def test_a_refused_streamed_call_never_appears_in_any_byte(proxy: Proxy) -> None:
    proxy.standin.mode = "tools"
    proxy.standin.tool_calls = [
        ("get_weather", {"city": "Paris"}),
        ("delete_account", {"id": 7, "why": SECRET}),
        ("get_weather", {"city": "Oslo"}),
    ]
    raw, events = sse(proxy)
    assert SECRET.encode() not in raw
    assert b"fc_standin1" not in raw and b'"call_1"' not in raw.replace(b"call call_1", b"")
    kinds = [(e["type"], e.get("output_index")) for e in events]
    assert ("response.function_call_arguments.delta", 1) not in kinds
    calls, notes = calls_and_notes(streamed_output(events))
    assert calls == [("get_weather", '{"city": "Paris"}'), ("get_weather", '{"city": "Oslo"}')]
    assert len(notes) == 1 and "Interlock denied tool 'delete_account'" in notes[0]
    # the replacement is a whole message at the refused call's place
    at_one = [e["type"] for e in events if e.get("output_index") == 1]
    assert at_one == [
        "response.output_item.added",
        "response.content_part.added",
        "response.output_text.delta",
        "response.output_text.done",
        "response.content_part.done",
        "response.output_item.done",
    ]
    assert_consistent(events)
    proxy.settled.wait_for(1)
    assert proxy.spent() == (22, 0)


def test_allowed_streamed_calls_arrive_with_their_exact_arguments(proxy: Proxy) -> None:
    arguments = '{"city":  "Zürich 東京 🌧", "days": [1, 2]}'  # spacing kept, not re-encoded
    proxy.standin.output = [function_call("get_weather", arguments, 0)]
    proxy.standin.chunk_bytes = 1  # every multi-byte character split across reads
    _, events = sse(proxy)
    deltas = "".join(
        e["delta"] for e in events if e["type"] == "response.function_call_arguments.delta"
    )
    assert deltas == arguments
    (item,) = streamed_output(events)
    assert item["arguments"] == arguments
    assert_consistent(events)


def test_the_sdk_stream_helper_sees_the_replacement_and_a_consistent_final_response(
    proxy: Proxy,
) -> None:
    proxy.standin.mode = "tools"
    proxy.standin.tool_calls = [("delete_account", {"id": 7}), ("get_weather", {"city": "Oslo"})]
    with client(proxy).responses.stream(
        model="gpt-4o-mini", input="Help me.", tools=TOOLS
    ) as stream:
        kinds = [event.type for event in stream]
        final = stream.get_final_response()
    assert "response.function_call_arguments.delta" in kinds  # get_weather's
    assert [item.type for item in final.output] == ["message", "function_call"]
    assert final.output_text.startswith("Interlock denied tool 'delete_account'")
    proxy.settled.wait_for(1)
    assert proxy.spent() == (22, 0)


async def test_the_async_stream_helper_holds_and_judges_too(proxy: Proxy) -> None:
    proxy.standin.mode = "tools"
    proxy.standin.tool_calls = [("refund", {"amount": 50})]
    async with (
        aclient(proxy) as api,
        api.responses.stream(model="gpt-4o-mini", input="Help me.", tools=TOOLS) as stream,
    ):
        async for _ in stream:
            pass
        final = await stream.get_final_response()
    (call,) = final.output
    assert call.type == "function_call" and json.loads(call.arguments) == {"amount": 50}


def test_text_before_a_held_call_is_not_held(proxy: Proxy) -> None:
    proxy.standin.mode = "hold"
    proxy.standin.cut_at = ("call", 1)  # the upstream stalls inside the call
    proxy.standin.output = [
        message("Let me look that up."),
        function_call("get_weather", '{"city": "Oslo"}', 1),
    ]
    stream = client(proxy).responses.create(
        model="gpt-4o-mini", input="Help me.", tools=TOOLS, stream=True
    )
    seen = []
    for event in stream:
        seen.append(event.type)
        if event.type == "response.output_item.done":  # the message, whole
            break
    assert "response.output_text.delta" in seen
    assert proxy.standin.holding.wait(30)
    stream.close()
    proxy.settled.wait_for(1)
    assert proxy.spent()[1] == 0


def test_a_client_that_leaves_while_a_call_is_held_never_gets_it(proxy: Proxy) -> None:
    proxy.standin.mode = "hold"
    proxy.standin.cut_at = ("call", 1)
    proxy.standin.output = [function_call("get_weather", '{"city": "' + SECRET + '"}', 0)]
    headers = {"authorization": f"Bearer {proxy.tokens['agent']}"}
    request = {"model": "gpt-4o-mini", "input": "x", "tools": TOOLS, "stream": True}
    received = b""
    with httpx.stream("POST", proxy.url + "/v1/responses", json=request, headers=headers) as answer:
        for chunk in answer.iter_raw():
            received += chunk
            if b"response.in_progress" in received and proxy.standin.holding.is_set():
                break
    (call,) = proxy.settled.wait_for(1)
    assert SECRET.encode() not in received
    assert b"function_call" not in received
    spent, reserved = proxy.spent()
    assert reserved == 0 and spent == call.usage.total > 0  # type: ignore[union-attr]


def test_a_stream_cut_mid_call_never_releases_it_and_is_charged(proxy: Proxy) -> None:
    proxy.standin.mode = "break"
    proxy.standin.cut_at = ("call", 2)
    proxy.standin.output = [function_call("get_weather", '{"city": "' + SECRET + '"}', 0)]
    headers = {"authorization": f"Bearer {proxy.tokens['agent']}"}
    request = {"model": "gpt-4o-mini", "input": "x", "tools": TOOLS, "stream": True}
    received = b""
    with (
        pytest.raises(httpx.RemoteProtocolError),
        httpx.stream("POST", proxy.url + "/v1/responses", json=request, headers=headers) as answer,
    ):
        for chunk in answer.iter_raw():
            received += chunk
    (call,) = proxy.settled.wait_for(1)
    assert b"function_call" not in received
    assert call.usage is not None and call.usage.output_tokens > 0  # what was generated
    assert proxy.spent() == (call.usage.total, 0)


# -- the adversarial table, beside benign look-alikes ------------------------------------------

ITEM = {"status": "completed", "call_id": "call_9", "id": "fc_9"}
# (what, the output item, whether it reaches the agent as it is, a text in the refusal)
CASES: list[tuple[str, Any, bool, str]] = [
    (
        "allowed call",
        {**ITEM, "type": "function_call", "name": "get_weather", "arguments": '{"city": "Oslo"}'},
        True,
        "",
    ),
    (
        "arguments a JSON list",
        {**ITEM, "type": "function_call", "name": "get_weather", "arguments": '["Oslo"]'},
        False,
        "not an object",
    ),
    (
        "arguments not JSON",
        {**ITEM, "type": "function_call", "name": "get_weather", "arguments": '{"city": "Oslo"'},
        False,
        "not an object",
    ),
    (
        "arguments not text",
        {**ITEM, "type": "function_call", "name": "get_weather", "arguments": {"city": "Oslo"}},
        False,
        "not an object",
    ),
    ("no name", {**ITEM, "type": "function_call", "arguments": "{}"}, False, "no name"),
    (
        "a name that is not text",
        {**ITEM, "type": "function_call", "name": ["get_weather"], "arguments": "{}"},
        False,
        "no name",
    ),
    (
        "duplicate key, the last one large",
        {
            **ITEM,
            "type": "function_call",
            "name": "refund",
            "arguments": '{"amount": 5, "amount": 5000}',
        },
        False,
        "denied tool 'refund'",
    ),
    (
        "duplicate key, the last one small",
        {
            **ITEM,
            "type": "function_call",
            "name": "refund",
            "arguments": '{"amount": 5000, "amount": 5}',
        },
        True,
        "",
    ),
    (
        "look-alike: trailing space",
        {**ITEM, "type": "function_call", "name": "get_weather ", "arguments": "{}"},
        False,
        "denied tool 'get_weather '",
    ),
    (
        "look-alike: Cyrillic o",
        {**ITEM, "type": "function_call", "name": "delete_acc\u043eunt", "arguments": "{}"},
        False,
        "denied tool",
    ),
    (
        "look-alike: case",
        {**ITEM, "type": "function_call", "name": "Get_Weather", "arguments": "{}"},
        False,
        "denied tool",
    ),
    (
        "custom call refused",
        {**ITEM, "type": "custom_tool_call", "name": "delete_account", "input": "7"},
        False,
        "denied tool 'delete_account'",
    ),
    (
        "custom call allowed",
        {**ITEM, "type": "custom_tool_call", "name": "get_weather", "input": "Oslo"},
        True,
        "",
    ),
    (
        "custom call, input not text",
        {**ITEM, "type": "custom_tool_call", "name": "get_weather", "input": {"city": "Oslo"}},
        False,
        "not an object",
    ),
    (
        "unknown item type",
        {**ITEM, "type": "local_exec_call", "command": "rm -rf /"},
        False,
        "type 'local_exec_call'",
    ),
    ("an item with no type", {**ITEM, "name": "get_weather"}, False, "type None"),
    (
        "a type that is a list",
        {**ITEM, "type": ["function_call"], "name": "get_weather", "arguments": "{}"},
        False,
        "type ['function_call']",
    ),
    ("an item that is not an object", "get_weather", False, "malformed output item"),
    (
        "local shell",
        {
            **ITEM,
            "type": "local_shell_call",
            "action": {"type": "exec", "command": ["rm", "-rf", "/"], "env": {}},
        },
        False,
        "denied tool 'local_shell'",
    ),
    (
        "local shell, no argv",
        {**ITEM, "type": "local_shell_call", "action": {"type": "exec"}},
        False,
        "not an object",
    ),
    (
        "shell on the client",
        {
            **ITEM,
            "type": "shell_call",
            "environment": {"type": "local"},
            "action": {"commands": ["ls", "rm -rf /"]},
        },
        False,
        "denied tool 'shell'",
    ),
    (
        "shell in the provider's container",
        {
            **ITEM,
            "type": "shell_call",
            "environment": {"type": "container_reference", "container_id": "c"},
            "action": {"commands": ["ls"]},
        },
        True,
        "",
    ),
    (
        "computer use",
        {
            **ITEM,
            "type": "computer_call",
            "pending_safety_checks": [],
            "action": {"type": "click", "x": 1, "y": 2, "button": "left"},
        },
        False,
        "denied tool 'computer'",
    ),
    (
        "apply a patch",
        {
            **ITEM,
            "type": "apply_patch_call",
            "operation": {"type": "delete_file", "path": "/etc/passwd"},
        },
        False,
        "denied tool 'apply_patch'",
    ),
    (
        "MCP approval request",
        {
            "type": "mcp_approval_request",
            "id": "mcpr_1",
            "server_label": "crm",
            "name": "delete_account",
            "arguments": "{}",
        },
        False,
        "denied tool 'delete_account'",
    ),
    (
        "client-side tool search",
        {**ITEM, "type": "tool_search_call", "execution": "client", "arguments": {"query": "x"}},
        False,
        "denied tool 'tool_search'",
    ),
    (
        "server-side tool search",
        {**ITEM, "type": "tool_search_call", "execution": "server", "arguments": {"query": "x"}},
        True,
        "",
    ),
    (
        "MCP call the provider ran",
        {
            **ITEM,
            "type": "mcp_call",
            "server_label": "crm",
            "name": "delete_account",
            "arguments": "{}",
            "output": "done",
        },
        True,
        "",
    ),
    (
        "web search the provider ran",
        {
            "type": "web_search_call",
            "id": "ws_1",
            "status": "completed",
            "action": {"type": "search", "query": "x"},
        },
        True,
        "",
    ),
    ("reasoning", {"type": "reasoning", "id": "rs_1", "summary": []}, True, ""),
]


def _table_output(item: Any) -> list[Any]:
    return [message("Sure.", 0), item]


@pytest.mark.parametrize(("what", "item", "passes", "says"), CASES, ids=[c[0] for c in CASES])
def test_an_unstreamed_item_reaches_the_agent_only_when_judged_allowed(
    proxy: Proxy, what: str, item: Any, passes: bool, says: str
) -> None:
    proxy.standin.output = _table_output(item)
    answer = httpx.post(
        proxy.url + "/v1/responses",
        headers={"authorization": f"Bearer {proxy.tokens['agent']}"},
        json={"model": "gpt-4o-mini", "input": "x", "tools": TOOLS},
    )
    output = answer.json()["output"]
    assert len(output) == 2 and output[0] == message("Sure.", 0)
    if passes:
        assert output[1] == item
    else:
        assert output[1]["type"] == "message" and output[1]["id"].startswith("msg_")
        assert says in output[1]["content"][0]["text"]
    proxy.settled.wait_for(1)  # the commit follows the answer
    assert proxy.spent() == (22, 0)


@pytest.mark.parametrize(("what", "item", "passes", "says"), CASES, ids=[c[0] for c in CASES])
def test_a_streamed_item_reaches_the_agent_only_when_judged_allowed(
    proxy: Proxy, what: str, item: Any, passes: bool, says: str
) -> None:
    output = _table_output(item)
    events = Events("gpt-4o-mini", output)
    texts = [*events.opening()]
    texts += [text for _, text in events.item(0, output[0])]
    index = len(texts)
    texts += [events.event("response.output_item.added", output_index=1, item=item)]
    texts += [events.event("response.output_item.done", output_index=1, item=item)]
    texts.append(events.terminal())
    proxy.standin.raw_events = texts
    raw, received = sse(proxy)
    assert len(received) == len(texts) + (0 if passes else 4)
    assert_consistent(received)
    finished = streamed_output(received)
    assert finished[0] == message("Sure.", 0)
    if passes:
        assert finished[1] == item
        assert received[index]["item"] == item
    else:
        assert finished[1]["type"] == "message"
        assert says in finished[1]["content"][0]["text"]
        assert json.dumps(item).encode() not in raw
    proxy.settled.wait_for(1)
    assert proxy.spent() == (22, 0)


def _call_events(deltas: list[str], done: str, finished: str) -> list[str]:
    item = function_call("get_weather", finished, 0)
    events = Events("gpt-4o-mini", [item])
    at = {"item_id": item["id"], "output_index": 0}
    return [
        *events.opening(),
        events.event("response.output_item.added", output_index=0, item={**item, "arguments": ""}),
        *[events.event("response.function_call_arguments.delta", **at, delta=d) for d in deltas],
        events.event("response.function_call_arguments.done", **at, arguments=done),
        events.event("response.output_item.done", output_index=0, item=item),
        events.terminal(),
    ]


@pytest.mark.parametrize(
    ("deltas", "done", "finished", "passes"),
    [
        (['{"city": ', '"Oslo"}'], '{"city": "Oslo"}', '{"city": "Oslo"}', True),
        (['{"city": ', '"Oslo"}'], '{"city": "Oslo"}', '{"city": "Paris"}', False),
        (['{"city": ', '"Paris"}'], '{"city": "Oslo"}', '{"city": "Oslo"}', False),
        (['{"city": ', '"Oslo"}'], '{"city": "Paris"}', '{"city": "Oslo"}', False),
    ],
    ids=["all agree", "the item differs", "the deltas differ", "the done event differs"],
)
def test_a_call_whose_streamed_parts_disagree_is_refused(
    proxy: Proxy, deltas: list[str], done: str, finished: str, passes: bool
) -> None:
    proxy.standin.raw_events = _call_events(deltas, done, finished)
    raw, received = sse(proxy)
    calls, notes = calls_and_notes(streamed_output(received))
    if passes:
        assert calls == [("get_weather", finished)] and notes == []
    else:
        assert calls == [] and b"Paris" not in raw
        assert "its streamed arguments and the finished call disagree" in notes[0]
    assert_consistent(received)


def test_a_call_with_no_output_index_is_never_relayed(proxy: Proxy) -> None:
    item = function_call("get_weather", '{"city": "Oslo"}', 0)
    events = Events("gpt-4o-mini", [])
    proxy.standin.raw_events = [
        *events.opening(),
        events.event("response.output_item.added", item=item),
        events.event("response.output_item.done", output_index="0", item=item),
        events.terminal(),
    ]
    raw, received = sse(proxy)
    assert b"function_call" not in raw
    assert [e["type"] for e in received] == [
        "response.created",
        "response.in_progress",
        "response.completed",
    ]
    assert_consistent(received)


def test_a_completed_response_naming_a_call_never_streamed_is_judged(proxy: Proxy) -> None:
    refused = function_call("delete_account", '{"why": "' + SECRET + '"}', 0)
    events = Events("gpt-4o-mini", [refused])
    proxy.standin.raw_events = [*events.opening(), events.terminal()]
    raw, received = sse(proxy)
    assert SECRET.encode() not in raw
    (final,) = received[-1]["response"]["output"]
    assert final["type"] == "message"
    assert "Interlock denied tool 'delete_account'" in final["content"][0]["text"]


@pytest.mark.parametrize(
    "data",
    [
        '{"type": "response.output_item.added", "output_index": 0, "item": {"type": '
        '"function_call", "name": "delete_account", "arguments": "{}", "call_id": "c", '
        '"x": NaN}}',
        '[{"type": "response.output_item.added"}]',
        '{"type": "response.output_item.added", "output_index": 0',
        None,  # the event's JSON written without "data:", as a non-streamed answer is
    ],
    ids=["NaN, which Python's json reads", "not an object", "cut JSON", "not SSE"],
)
def test_an_event_that_is_not_a_json_object_is_never_relayed(
    proxy: Proxy, data: str | None
) -> None:
    events = Events("gpt-4o-mini", [])
    opening = list(events.opening())
    call = '{"type": "function_call", "name": "delete_account", "arguments": "{}"}'
    line = f"data: {data}" if data is not None else call
    proxy.standin.raw_events = [
        *opening,
        f"event: response.output_item.added\n{line}\n\n",
        ": a keep-alive comment\n\n",
        events.terminal(),
    ]
    raw, received = sse(proxy)
    assert b"output_item.added" not in raw and b"delete_account" not in raw
    assert b": a keep-alive comment\n\n" in raw  # no data: relayed as it came
    assert [e["type"] for e in received] == [
        "response.created",
        "response.in_progress",
        "response.completed",
    ]
