"""What differs between the OpenAI and the Anthropic wire: the request's facts, the
upstream's address and headers, and where usage is written. Pure.

The ``llm`` action of a request carries only what the proxy reads itself —
``provider``, ``messages``, ``system``, ``tools`` and the output bound
(``max_tokens``, from OpenAI's ``max_completion_tokens`` too, times OpenAI's ``n``)
— never an input token count the client states: the estimate is the proxy's, from
the prompt. Inline binary data (``data:`` URLs, base64 image and document sources,
raw base64 in a ``file_data`` field or in the ``result`` of a Responses
``image_generation_call`` sent back) is replaced by a placeholder that says its size:
its characters are not tokens (an image costs the provider's own count, charged from
the real usage), and the audit log does not keep megabytes of base64.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

from interlock.ledger.estimate import CHARS_PER_TOKEN
from interlock.ledger.usage import Usage

from .config import Upstream
from .refusals import Provider

__all__ = ["Flavour", "StreamMeter", "flavour_of", "without_blobs"]

# An inline data: URL or base64 source longer than this is left out of the action.
_BLOB_CHARS: Final = 256

# Fields that hold raw base64 (no ``data:`` prefix), by the type of their object:
# a file part's ``file_data`` (any type), and the image a Responses
# ``image_generation_call`` sent back as input carries.
_BLOB_FIELDS: Final[dict[object, tuple[str, ...]]] = {
    "image_generation_call": ("result", "file_data"),
}

# Request headers the client may send that reach the upstream (all others stay here).
_ANTHROPIC_PASSED: Final = ("anthropic-version", "anthropic-beta")
_ANTHROPIC_VERSION: Final = "2023-06-01"


@dataclass(frozen=True, slots=True)
class Flavour:
    provider: Provider
    path: str  # appended to the upstream's base URL

    def arguments(self, body: Mapping[str, Any]) -> dict[str, Any]:
        """The ``llm`` action's arguments (see the module docstring)."""
        args: dict[str, Any] = {"provider": self.provider}
        for key in ("messages", "system", "tools"):
            if key in body:
                args[key] = without_blobs(body[key])
        bound = body.get("max_completion_tokens") if self.provider == "openai" else None
        if bound is None:
            bound = body.get("max_tokens")
        choices = body.get("n") if self.provider == "openai" else None
        if isinstance(bound, int) and isinstance(choices, int) and 1 < choices <= 128:
            bound *= choices  # n choices: each may write max_tokens
        if bound is not None:
            args["max_tokens"] = bound
        return args

    def upstream_body(self, body: dict[str, Any]) -> tuple[dict[str, Any], bool]:
        """The body sent upstream, and whether the client asked for streamed usage
        itself. An OpenAI stream is asked for its usage (its last chunk)."""
        if self.provider != "openai" or not body.get("stream"):
            return body, True
        options = body.get("stream_options")
        options = dict(options) if isinstance(options, Mapping) else {}
        asked = options.get("include_usage") is True
        options["include_usage"] = True
        return {**body, "stream_options": options}, asked

    def upstream_headers(self, upstream: Upstream, client: Mapping[str, str]) -> dict[str, str]:
        headers = {"content-type": "application/json", "accept": client.get("accept", "*/*")}
        if self.provider == "openai":
            if upstream.api_key:
                headers["authorization"] = f"Bearer {upstream.api_key}"
            return headers
        if upstream.api_key:
            headers["x-api-key"] = upstream.api_key
        for name in _ANTHROPIC_PASSED:
            if name in client:
                headers[name] = client[name]
        headers.setdefault("anthropic-version", _ANTHROPIC_VERSION)
        return headers

    def usage(self, body: Mapping[str, Any]) -> Usage | None:
        """The usage a non-streamed response states, or ``None``."""
        found = body.get("usage")
        if not isinstance(found, Mapping):
            return None
        try:
            return Usage.of(found)
        except ValueError:
            return None

    def meter(self, estimated_input: int) -> StreamMeter:
        return StreamMeter(self.provider, estimated_input)


_FLAVOURS: Final = {
    "openai": Flavour("openai", "/chat/completions"),
    "anthropic": Flavour("anthropic", "/v1/messages"),
}


def flavour_of(provider: Provider) -> Flavour:
    return _FLAVOURS[provider]


class StreamMeter:
    """What a stream has used so far: the upstream's own counts where it sent them
    (OpenAI: the last chunk's ``usage``; Anthropic: input from ``message_start``,
    output from the last ``message_delta``, which is cumulative), else the request's
    estimated input and the streamed text's characters divided by
    :data:`~interlock.ledger.estimate.CHARS_PER_TOKEN` (a client that drops the
    stream before the usage arrives is charged for what was streamed)."""

    __slots__ = ("_chars", "_estimated_input", "_input", "_output", "provider")

    def __init__(self, provider: Provider, estimated_input: int) -> None:
        self.provider = provider
        self._estimated_input = estimated_input
        self._input: int | None = None
        self._output: int | None = None
        self._chars = 0

    def feed(self, event: Mapping[str, Any]) -> None:
        """Read one SSE event's JSON data."""
        if self.provider == "openai":
            self._feed_openai(event)
        else:
            self._feed_anthropic(event)

    @property
    def final(self) -> bool:
        """Whether the upstream's own output count has arrived."""
        return self._output is not None

    def usage(self) -> Usage:
        tokens_in = self._input if self._input is not None else self._estimated_input
        if self._output is not None:
            tokens_out = self._output
        else:
            tokens_out = math.ceil(self._chars / CHARS_PER_TOKEN)
        return Usage(tokens_in, tokens_out)

    def _feed_openai(self, event: Mapping[str, Any]) -> None:
        usage = event.get("usage")
        if isinstance(usage, Mapping):
            self._input = _count(usage.get("prompt_tokens"), self._input)
            self._output = _count(usage.get("completion_tokens"), self._output)
        choices = event.get("choices")
        if not isinstance(choices, list):
            return
        for choice in choices:
            delta = choice.get("delta") if isinstance(choice, Mapping) else None
            if not isinstance(delta, Mapping):
                continue
            self._chars += _text_len(delta.get("content"))
            for call in delta.get("tool_calls") or ():
                if isinstance(call, Mapping) and isinstance(call.get("function"), Mapping):
                    self._chars += _text_len(call["function"].get("arguments"))

    def _feed_anthropic(self, event: Mapping[str, Any]) -> None:
        kind = event.get("type")
        if kind == "message_start":
            message = event.get("message")
            usage = message.get("usage") if isinstance(message, Mapping) else None
            if isinstance(usage, Mapping):
                self._input = _count(usage.get("input_tokens"), self._input)
        elif kind == "message_delta":
            usage = event.get("usage")
            if isinstance(usage, Mapping):  # cumulative: replaces, never adds
                self._output = _count(usage.get("output_tokens"), self._output)
        elif kind == "content_block_delta":
            delta = event.get("delta")
            if isinstance(delta, Mapping):
                for key in ("text", "partial_json", "thinking"):
                    self._chars += _text_len(delta.get(key))


def _count(value: object, previous: int | None) -> int | None:
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= 2**53:
        return previous  # not a count: keep what was known
    return value


def _text_len(value: object) -> int:
    return len(value) if isinstance(value, str) else 0


def without_blobs(value: Any) -> Any:
    """``value`` with each inline blob replaced by ``"<data: N characters>"`` (a copy
    where anything changed; iterative, so no depth limit is hit)."""
    root: list[Any] = [value]
    pending: list[tuple[Any, Any]] = [(root, 0)]  # (container, key) to rewrite
    while pending:
        container, key = pending.pop()
        item = container[key]
        if isinstance(item, str):
            if item.startswith("data:") and len(item) > _BLOB_CHARS:
                container[key] = f"<data: {len(item)} characters>"
        elif isinstance(item, Mapping):
            copied = dict(item)
            if copied.get("type") == "base64" and isinstance(copied.get("data"), str):
                copied["data"] = f"<data: {len(copied['data'])} characters>"
            for blob in _BLOB_FIELDS.get(copied.get("type"), ("file_data",)):
                found = copied.get(blob)
                if isinstance(found, str) and len(found) > _BLOB_CHARS:
                    copied[blob] = f"<data: {len(found)} characters>"
            container[key] = copied
            pending.extend((copied, k) for k in copied)
        elif isinstance(item, list):
            listed = list(item)
            container[key] = listed
            pending.extend((listed, i) for i in range(len(listed)))
    return root[0]
