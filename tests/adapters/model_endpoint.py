"""A fake MODEL endpoint for the official ``openai`` and ``anthropic`` clients: an
``httpx`` (or ``httpx2``) ``MockTransport`` handler that keeps every request it gets
and answers as the real APIs do — JSON, or SSE streamed frame by frame with the usage
where the real APIs put it (the LLM proxy's stand-in writes the frames). The clients
are real; only the model behind them is fake.

``mode``: ``ok``; ``error`` (a 500 in the provider's format); ``connect`` (the
connection fails); ``timeout`` (the read times out); ``cut`` (a stream whose
connection breaks after ``cut_after`` frames).
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Iterator
from types import ModuleType
from typing import Any

import httpx
import httpx2

from gateways.llm_proxy.standin import (
    ANTHROPIC_USAGE,
    OPENAI_USAGE,
    TEXT,
    anthropic_end,
    anthropic_start,
    anthropic_text_block,
    openai_chunk,
    openai_usage_chunk,
)
from gateways.llm_proxy.standin_responses import RESPONSES_USAGE, Events, message, response

__all__ = ["ANTHROPIC_USAGE", "OPENAI_USAGE", "RESPONSES_USAGE", "FakeModel"]

_STREAM_TYPES: dict[str, type] = {}


def _frames_type(library: ModuleType) -> type:
    """A byte stream both sync and async clients read (frame by frame: not pre-read)."""
    found = _STREAM_TYPES.get(library.__name__)
    if found is not None:
        return found

    class Frames(library.SyncByteStream, library.AsyncByteStream):  # type: ignore[name-defined,misc]
        def __init__(self, frames: list[bytes], cut_after: int | None) -> None:
            self.frames = frames
            self.cut_after = cut_after
            self.closed = False

        def _cut(self, sent: int) -> bool:
            return self.cut_after is not None and sent >= self.cut_after

        def __iter__(self) -> Iterator[bytes]:
            for sent, frame in enumerate(self.frames):
                if self._cut(sent):
                    raise library.ReadError("the connection was cut")
                yield frame

        async def __aiter__(self) -> AsyncIterator[bytes]:
            for sent, frame in enumerate(self.frames):
                if self._cut(sent):
                    raise library.ReadError("the connection was cut")
                yield frame

        def close(self) -> None:
            self.closed = True

        async def aclose(self) -> None:
            self.closed = True

    _STREAM_TYPES[library.__name__] = Frames
    return Frames


class FakeModel:
    """The handler (``transport()`` wraps it); ``requests`` is what reached it."""

    def __init__(
        self, mode: str = "ok", *, cut_after: int = 3, library: ModuleType = httpx
    ) -> None:
        self.mode = mode
        self.cut_after = cut_after
        self.library = library  # the OpenAI client's (anthropic 2 takes httpx2 only)
        self.requests: list[Any] = []
        self.streams: list[Any] = []

    @property
    def bodies(self) -> list[dict[str, Any]]:
        return [json.loads(r.content) if r.content else {} for r in self.requests]

    def transport(self, library: ModuleType | None = None) -> Any:
        return (library or self.library).MockTransport(self)

    # -- clients, pointed at the fake ------------------------------------------------------

    def openai(self, **options: Any) -> Any:
        from openai import OpenAI

        http = self.library.Client(transport=self.transport())
        return OpenAI(
            api_key="sk-fake",
            base_url="http://model.test/v1",
            http_client=http,
            **{"max_retries": 0, **options},
        )

    def async_openai(self, **options: Any) -> Any:
        from openai import AsyncOpenAI

        http = self.library.AsyncClient(transport=self.transport())
        return AsyncOpenAI(
            api_key="sk-fake",
            base_url="http://model.test/v1",
            http_client=http,
            **{"max_retries": 0, **options},
        )

    def anthropic(self, **options: Any) -> Any:
        from anthropic import Anthropic

        http = httpx2.Client(transport=self.transport(httpx2))
        return Anthropic(
            api_key="sk-fake",
            base_url="http://model.test",
            http_client=http,
            **{"max_retries": 0, **options},
        )

    def async_anthropic(self, **options: Any) -> Any:
        from anthropic import AsyncAnthropic

        http = httpx2.AsyncClient(transport=self.transport(httpx2))
        return AsyncAnthropic(
            api_key="sk-fake",
            base_url="http://model.test",
            http_client=http,
            **{"max_retries": 0, **options},
        )

    # -- answers -----------------------------------------------------------------------------

    def __call__(self, request: Any) -> Any:
        self.requests.append(request)
        lib = httpx2 if type(request).__module__.startswith("httpx2") else httpx
        if self.mode == "connect":
            raise lib.ConnectError("no route to the model", request=request)
        if self.mode == "timeout":
            raise lib.ReadTimeout("the model took too long", request=request)
        path = request.url.path
        body = json.loads(request.content) if request.content else {}
        if self.mode == "error":
            error = {"type": "error", "error": {"type": "api_error", "message": "boom"}}
            return lib.Response(500, json=error)
        model = body.get("model", "m")
        if path.endswith("/chat/completions"):
            if body.get("stream"):
                return self._sse(lib, self._chat_frames(model, body))
            return lib.Response(200, json=_chat_completion(model))
        if path.endswith("/responses"):
            if body.get("stream"):
                return self._sse(lib, _responses_frames(model))
            return lib.Response(200, json=response(model, [message("Hello there.")]))
        if path.endswith("/v1/messages"):
            if body.get("stream"):
                frames = [anthropic_start(model), *anthropic_text_block(0, TEXT)]
                return self._sse(lib, [*frames, *anthropic_end("end_turn")])
            return lib.Response(200, json=_message(model))
        return lib.Response(200, json={"id": "other", "object": "list", "data": []})

    def _chat_frames(self, model: str, body: dict[str, Any]) -> list[str]:
        frames = [openai_chunk({"role": "assistant", "content": ""}, model=model)]
        frames += [openai_chunk({"content": piece}, model=model) for piece in TEXT]
        frames.append(openai_chunk({}, "stop", model=model))
        if (body.get("stream_options") or {}).get("include_usage"):
            frames.append(openai_usage_chunk(model))
        return [*frames, "data: [DONE]\n\n"]

    def _sse(self, lib: ModuleType, frames: list[str]) -> Any:
        cut = self.cut_after if self.mode == "cut" else None
        stream = _frames_type(lib)([f.encode() for f in frames], cut)
        self.streams.append(stream)
        headers = {"content-type": "text/event-stream"}
        return lib.Response(200, headers=headers, stream=stream)


def _chat_completion(model: str) -> dict[str, Any]:
    return {
        "id": "chatcmpl-fake",
        "object": "chat.completion",
        "created": 1764800000,
        "model": model,
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": "Hello there."},
                "finish_reason": "stop",
                "logprobs": None,
            }
        ],
        "usage": OPENAI_USAGE,
    }


def _message(model: str) -> dict[str, Any]:
    return {
        "id": "msg_fake",
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": [{"type": "text", "text": "Hello there."}],
        "stop_reason": "end_turn",
        "stop_sequence": None,
        "usage": ANTHROPIC_USAGE,
    }


def _responses_frames(model: str) -> list[str]:
    output = [message("Hello there.")]
    events = Events(model, output)
    frames = list(events.opening())
    for index, item in enumerate(output):
        frames += [text for _, text in events.item(index, item)]
    return [*frames, events.terminal()]
