"""A local stand-in for the OpenAI and Anthropic APIs (a fake model on a real port):
it counts the calls it gets, keeps what it was sent, and answers realistic JSON or
SSE — with the usage events where the real APIs put them.

``mode`` picks the answer: ``text`` (default), ``tools`` (tool calls; streamed, as
the real APIs stream them: text first, each call's name in one delta and its
arguments in several, parallel calls interleaved, text after), ``script`` (a stream
of exactly ``script``'s steps), ``error`` (a 500 in the provider's format), ``hold``
(a stream that sends a few events and then waits until ``release`` is set: the client
drops it mid-way), ``hold-answer`` (an OpenAI chat answer, not streamed, written
once ``release`` is set), ``break`` (an OpenAI stream whose connection is cut after a
few events), ``garbage`` (an OpenAI 200 that is not JSON).

A script is a list of SSE frames (``str`` or ``bytes``, written as they are: a
``bytes`` step may end mid-UTF-8 sequence) and two controls: :data:`WAIT` (wait until
``release`` is set; ``gave_up`` records a wait that ran out) and :data:`CUT` (the
connection is cut). :func:`openai_tool_stream` and :func:`anthropic_tool_stream`
write the realistic ones.

Responses (``/v1/responses``, see :mod:`.standin_responses`): ``output`` is what the
model writes (default: one message; in ``tools`` mode the ``tool_calls`` as
``function_call`` items), ``cut_at`` where a ``hold`` or ``break`` stream stops (after
the n-th event of a kind: ``("text", 2)``, ``("call", 1)``...), ``terminal`` the last
event (and ``terminal_usage`` its usage), ``chunk_bytes`` cuts the stream's bytes into
pieces that small (splitting UTF-8 characters), ``raw_events`` replaces the stream
and ``raw_response`` the unstreamed answer.
"""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any, Final

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from .standin_responses import RESPONSES_USAGE, Events, function_call, message, response

OPENAI_USAGE = {"prompt_tokens": 11, "completion_tokens": 7, "total_tokens": 18}
ANTHROPIC_USAGE = {"input_tokens": 12, "output_tokens": 15}
TEXT = ["Hel", "lo", " there", ", agent", "."]
AFTER = [" One", " moment."]  # text a stream sends after its tool calls
WAIT: Final = "<wait for release>"
CUT: Final = "<cut the connection>"
Step = str | bytes


@dataclass
class Seen:
    path: str
    headers: dict[str, str]
    body: dict[str, Any]


@dataclass
class StandIn:
    mode: str = "text"
    tool_calls: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    raw_tool_calls: list[dict[str, Any]] | None = None  # OpenAI calls as given
    script: list[Step] = field(default_factory=list)
    seen: list[Seen] = field(default_factory=list)
    release: threading.Event = field(default_factory=threading.Event)
    holding: threading.Event = field(default_factory=threading.Event)
    output: list[dict[str, Any]] | None = None  # Responses output items
    cut_at: tuple[str, int] = ("text", 2)
    terminal: str = "response.completed"
    terminal_usage: dict[str, Any] | None = field(default_factory=lambda: dict(RESPONSES_USAGE))
    chunk_bytes: int | None = None
    raw_events: list[str] | None = None
    raw_response: dict[str, Any] | None = None
    gave_up: bool = False

    @property
    def calls(self) -> int:
        return len(self.seen)

    def app(self) -> Starlette:
        return Starlette(
            routes=[
                Route("/v1/chat/completions", self._openai, methods=["POST"]),
                Route("/v1/responses", self._responses, methods=["POST"]),
                Route("/v1/messages", self._anthropic, methods=["POST"]),
            ]
        )

    async def _hold(self, limit: float = 30.0) -> None:
        self.holding.set()
        loop = asyncio.get_running_loop()
        deadline = loop.time() + limit
        while not self.release.is_set():
            if loop.time() > deadline:  # a test that never released: it fails on gave_up
                self.gave_up = True
                return
            await asyncio.sleep(0.01)

    async def _play(self, steps: list[Step]) -> AsyncIterator[Step]:
        for step in steps:
            if step == WAIT:
                await self._hold()
            elif step == CUT:
                raise RuntimeError("the upstream is cut mid-stream")
            else:
                yield step

    def _streamed(self, provider: str, model: str) -> list[Step] | None:
        if self.mode == "script":
            return self.script
        if self.mode != "tools":
            return None
        if provider == "openai":
            return openai_tool_stream(self.tool_calls, model=model)
        return anthropic_tool_stream(self.tool_calls, model=model)

    # -- OpenAI -------------------------------------------------------------------------

    async def _openai(self, request: Request) -> Response:
        body = await request.json()
        self.seen.append(Seen("/v1/chat/completions", dict(request.headers), body))
        if self.mode == "error":
            error = {"message": "upstream broke", "type": "server_error", "code": None}
            return JSONResponse({"error": error}, status_code=500)
        if self.mode == "garbage":
            return Response("<html>a proxy's error page</html>", media_type="text/html")
        if self.mode == "hold-answer":
            await self._hold()
        model = body["model"]
        if body.get("stream"):
            steps = self._streamed("openai", model)
            if steps is not None:
                return StreamingResponse(self._play(steps), media_type="text/event-stream")
            usage = (body.get("stream_options") or {}).get("include_usage") is True
            return StreamingResponse(
                self._openai_chunks(model, usage), media_type="text/event-stream"
            )
        message: dict[str, Any] = {
            "role": "assistant",
            "content": "Hello there, agent.",
            "refusal": None,
        }
        finish = "stop"
        if self.mode == "tools":
            message["content"] = None
            message["tool_calls"] = [
                {
                    "id": f"call_{i}",
                    "type": "function",
                    "function": {"name": name, "arguments": json.dumps(args)},
                }
                for i, (name, args) in enumerate(self.tool_calls)
            ]
            if self.raw_tool_calls is not None:
                message["tool_calls"] = self.raw_tool_calls
            finish = "tool_calls"
        return JSONResponse(
            {
                "id": "chatcmpl-standin",
                "object": "chat.completion",
                "created": 1764800000,
                "model": model,
                "choices": [
                    {"index": 0, "message": message, "finish_reason": finish, "logprobs": None}
                ],
                "usage": OPENAI_USAGE,
            }
        )

    async def _openai_chunks(self, model: str, usage: bool) -> AsyncIterator[str]:
        def chunk(delta: dict[str, Any], finish: str | None = None, **extra: Any) -> str:
            choices = [{"index": 0, "delta": delta, "finish_reason": finish, "logprobs": None}]
            data = {
                "id": "chatcmpl-standin",
                "object": "chat.completion.chunk",
                "created": 1764800000,
                "model": model,
                "choices": choices,
                "usage": None,
                **extra,
            }
            return f"data: {json.dumps(data)}\n\n"

        yield chunk({"role": "assistant", "content": ""})
        for i, piece in enumerate(TEXT):
            yield chunk({"content": piece})
            if self.mode == "hold" and i == 1:
                await self._hold()
            if self.mode == "break" and i == 1:
                raise RuntimeError("the upstream fails mid-stream")
        yield chunk({}, "stop")
        if usage:
            last = {
                "id": "chatcmpl-standin",
                "object": "chat.completion.chunk",
                "created": 1764800000,
                "model": model,
                "choices": [],
                "usage": {
                    **OPENAI_USAGE,
                    "prompt_tokens_details": {"cached_tokens": 4},
                    "completion_tokens_details": {"reasoning_tokens": 0},
                },
            }
            yield f"data: {json.dumps(last)}\n\n"
        yield "data: [DONE]\n\n"

    # -- OpenAI Responses ---------------------------------------------------------------

    def responses_output(self) -> list[dict[str, Any]]:
        if self.output is not None:
            return self.output
        if self.mode == "tools":
            return [
                function_call(name, json.dumps(args), i)
                for i, (name, args) in enumerate(self.tool_calls)
            ]
        return [message("Hello there, agent.")]

    async def _responses(self, request: Request) -> Response:
        body = await request.json()
        self.seen.append(Seen("/v1/responses", dict(request.headers), body))
        if self.mode == "error":
            error = {"message": "upstream broke", "type": "server_error", "code": None}
            return JSONResponse({"error": error}, status_code=500)
        if self.mode == "garbage":
            return Response("<html>a proxy's error page</html>", media_type="text/html")
        model = body["model"]
        if body.get("stream"):
            return StreamingResponse(self._responses_bytes(model), media_type="text/event-stream")
        if self.raw_response is not None:
            return JSONResponse(self.raw_response)
        status = {"response.incomplete": "incomplete", "response.failed": "failed"}
        return JSONResponse(
            response(
                model,
                self.responses_output(),
                status=status.get(self.terminal, "completed"),
                usage=self.terminal_usage,
            )
        )

    async def _responses_bytes(self, model: str) -> AsyncIterator[bytes]:
        async for text in self._responses_events(model):
            data = text.encode()
            size = self.chunk_bytes or len(data)
            for start in range(0, len(data), size):
                yield data[start : start + size]

    async def _responses_events(self, model: str) -> AsyncIterator[str]:
        if self.raw_events is not None:
            for text in self.raw_events:
                yield text
            return
        output = self.responses_output()
        events = Events(model, output)
        for text in events.opening():
            yield text
        seen: dict[str, int] = {}
        for index, item in enumerate(output):
            for what, text in events.item(index, item):
                yield text
                seen[what] = seen.get(what, 0) + 1
                if (what, seen[what]) == self.cut_at:
                    if self.mode == "hold":
                        await self._hold()
                    if self.mode == "break":
                        raise RuntimeError("the upstream fails mid-stream")
        if self.terminal:
            yield events.terminal(self.terminal, usage=self.terminal_usage)

    # -- Anthropic ----------------------------------------------------------------------

    async def _anthropic(self, request: Request) -> Response:
        body = await request.json()
        self.seen.append(Seen("/v1/messages", dict(request.headers), body))
        if self.mode == "error":
            error = {"type": "api_error", "message": "upstream broke"}
            return JSONResponse({"type": "error", "error": error}, status_code=500)
        model = body["model"]
        if body.get("stream"):
            steps = self._streamed("anthropic", model)
            if steps is not None:
                return StreamingResponse(self._play(steps), media_type="text/event-stream")
            return StreamingResponse(self._anthropic_events(model), media_type="text/event-stream")
        content: list[dict[str, Any]] = [{"type": "text", "text": "Hello there, agent."}]
        stop = "end_turn"
        if self.mode == "tools":
            content = [{"type": "text", "text": "Let me look."}] + [
                {"type": "tool_use", "id": f"toolu_{i}", "name": name, "input": args}
                for i, (name, args) in enumerate(self.tool_calls)
            ]
            stop = "tool_use"
        return JSONResponse(
            {
                "id": "msg_standin",
                "type": "message",
                "role": "assistant",
                "model": model,
                "content": content,
                "stop_reason": stop,
                "stop_sequence": None,
                "usage": ANTHROPIC_USAGE,
            }
        )

    async def _anthropic_events(self, model: str) -> AsyncIterator[str]:
        def event(kind: str, data: dict[str, Any]) -> str:
            return f"event: {kind}\ndata: {json.dumps({'type': kind, **data})}\n\n"

        start_usage = {
            "input_tokens": ANTHROPIC_USAGE["input_tokens"],
            "cache_creation_input_tokens": 0,
            "cache_read_input_tokens": 0,
            "output_tokens": 1,
        }
        message = {
            "id": "msg_standin",
            "type": "message",
            "role": "assistant",
            "model": model,
            "content": [],
            "stop_reason": None,
            "stop_sequence": None,
            "usage": start_usage,
        }
        yield event("message_start", {"message": message})
        yield event(
            "content_block_start", {"index": 0, "content_block": {"type": "text", "text": ""}}
        )
        yield event("ping", {})
        for i, piece in enumerate(TEXT):
            yield event(
                "content_block_delta", {"index": 0, "delta": {"type": "text_delta", "text": piece}}
            )
            if self.mode == "hold" and i == 1:
                await self._hold()
        yield event("content_block_stop", {"index": 0})
        yield event(
            "message_delta",
            {
                "delta": {"stop_reason": "end_turn", "stop_sequence": None},
                "usage": {"output_tokens": ANTHROPIC_USAGE["output_tokens"]},
            },
        )
        yield event("message_stop", {})


# -- realistic tool-call streams ------------------------------------------------------------

Call = tuple[str, Any]  # (name, arguments): arguments as an object, or the exact JSON text


def sse(data: Any, event: str | None = None, *, ascii: bool = True) -> str:
    head = f"event: {event}\n" if event else ""
    return f"{head}data: {json.dumps(data, ensure_ascii=ascii)}\n\n"


def pieces(text: str, count: int = 4) -> list[str]:
    """``text`` cut into ``count`` fragments (the last ones may be empty-free)."""
    size = max(1, -(-len(text) // count))
    return [text[i : i + size] for i in range(0, len(text), size)] or [""]


def arguments_text(arguments: Any) -> str:
    return arguments if isinstance(arguments, str) else json.dumps(arguments)


def openai_chunk(
    delta: dict[str, Any] | None = None,
    finish: str | None = None,
    *,
    choice: int = 0,
    model: str = "gpt-4o-mini",
) -> str:
    entry = {"index": choice, "delta": delta or {}, "finish_reason": finish, "logprobs": None}
    data = {
        "id": "chatcmpl-standin",
        "object": "chat.completion.chunk",
        "created": 1764800000,
        "model": model,
        "system_fingerprint": "fp_standin",
        "choices": [entry],
        "usage": None,
    }
    return sse(data)


def openai_usage_chunk(model: str = "gpt-4o-mini") -> str:
    data = {
        "id": "chatcmpl-standin",
        "object": "chat.completion.chunk",
        "created": 1764800000,
        "model": model,
        "choices": [],
        "usage": OPENAI_USAGE,
    }
    return sse(data)


def openai_call_deltas(
    calls: list[Call], *, choice: int = 0, model: str = "gpt-4o-mini"
) -> list[str]:
    """Each call's start (id, type, name, empty arguments) and its arguments in four
    fragments, the calls interleaved fragment by fragment (parallel tool calls)."""
    streams: list[list[str]] = []
    for i, (name, arguments) in enumerate(calls):
        start = {"index": i, "id": f"call_{i}", "type": "function"}
        first = {**start, "function": {"name": name, "arguments": ""}}
        frames = [openai_chunk({"tool_calls": [first]}, choice=choice, model=model)]
        for part in pieces(arguments_text(arguments)):
            fragment = {"index": i, "function": {"arguments": part}}
            frames.append(openai_chunk({"tool_calls": [fragment]}, choice=choice, model=model))
        streams.append(frames)
    interleaved: list[str] = []
    for round_ in range(max((len(frames) for frames in streams), default=0)):
        interleaved += [frames[round_] for frames in streams if round_ < len(frames)]
    return interleaved


def openai_tool_stream(
    calls: list[Call],
    *,
    before: list[str] = TEXT,
    after: list[str] = AFTER,
    model: str = "gpt-4o-mini",
) -> list[Step]:
    """A Chat Completions stream: text, the calls, more text, ``tool_calls``, usage."""
    steps: list[Step] = [openai_chunk({"role": "assistant", "content": "", "refusal": None})]
    steps += [openai_chunk({"content": piece}, model=model) for piece in before]
    steps += openai_call_deltas(calls, model=model)
    steps += [openai_chunk({"content": piece}, model=model) for piece in after]
    steps += [openai_chunk({}, "tool_calls" if calls else "stop", model=model)]
    return [*steps, openai_usage_chunk(model), "data: [DONE]\n\n"]


def anthropic_event(kind: str, **data: Any) -> str:
    return sse({"type": kind, **data}, kind)


def anthropic_start(model: str = "claude-sonnet-4-5") -> str:
    usage = {"input_tokens": ANTHROPIC_USAGE["input_tokens"], "output_tokens": 1}
    message = {
        "id": "msg_standin",
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": [],
        "stop_reason": None,
        "stop_sequence": None,
        "usage": usage,
    }
    return anthropic_event("message_start", message=message)


def anthropic_text_block(index: int, parts: list[str]) -> list[str]:
    start = {"type": "text", "text": ""}
    frames = [anthropic_event("content_block_start", index=index, content_block=start)]
    for part in parts:
        delta = {"type": "text_delta", "text": part}
        frames.append(anthropic_event("content_block_delta", index=index, delta=delta))
    return [*frames, anthropic_event("content_block_stop", index=index)]


def anthropic_tool_block(index: int, call_id: str, name: str, arguments: Any) -> list[str]:
    """A ``tool_use`` block: its start, an empty first input delta, the input JSON in
    four fragments (a ``ping`` among them, as the API sends), its stop."""
    start = {"type": "tool_use", "id": call_id, "name": name, "input": {}}
    frames = [anthropic_event("content_block_start", index=index, content_block=start)]
    texts = ["", *pieces(arguments_text(arguments))]
    for n, part in enumerate(texts):
        delta = {"type": "input_json_delta", "partial_json": part}
        frames.append(anthropic_event("content_block_delta", index=index, delta=delta))
        if n == 1:
            frames.append(anthropic_event("ping"))
    return [*frames, anthropic_event("content_block_stop", index=index)]


def anthropic_end(stop: str) -> list[str]:
    delta = {"stop_reason": stop, "stop_sequence": None}
    usage = {"output_tokens": ANTHROPIC_USAGE["output_tokens"]}
    return [
        anthropic_event("message_delta", delta=delta, usage=usage),
        anthropic_event("message_stop"),
    ]


def anthropic_tool_stream(
    calls: list[Call],
    *,
    before: list[str] = TEXT,
    after: list[str] = AFTER,
    model: str = "claude-sonnet-4-5",
) -> list[Step]:
    """A Messages stream: a text block, a ``tool_use`` block per call, a text block."""
    steps: list[Step] = [anthropic_start(model)]
    steps += anthropic_text_block(0, before)
    for i, (name, arguments) in enumerate(calls):
        steps += anthropic_tool_block(1 + i, f"toolu_{i}", name, arguments)
    if after:
        steps += anthropic_text_block(1 + len(calls), after)
    return [*steps, *anthropic_end("tool_use" if calls else "end_turn")]
