"""OpenAI's Responses API (``POST /v1/responses``): the request's facts and the usage
of its answer. Pure.

The ``llm`` action's arguments: ``provider`` ``openai``, ``api`` ``responses``;
``messages`` — the ``input`` (a string is one user message; a list of items is kept
as it came: messages with their content parts, ``function_call`` /
``function_call_output`` items of earlier turns, ``item_reference`` ...); ``system``
— the ``instructions``; ``tools``; ``max_tokens`` — the ``max_output_tokens`` (else
the policy's ``pricing.default_max_tokens`` applies). ``previous_response_id``,
``conversation`` and ``prompt`` are kept when present: each makes the upstream add
context the proxy never sees (so the estimate undercounts; the real usage is still
charged), and a rule can refuse such requests (``has(args.previous_response_id)``).
Inline binary data is replaced as for the other flavours; a token count the client
writes is never read.

A stream's usage is the ``usage`` of its ``response.completed`` (or
``response.incomplete`` / ``response.failed``, when they carry one); until then, the
estimated input and the streamed deltas' characters / 4.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

from interlock.ledger.estimate import CHARS_PER_TOKEN
from interlock.ledger.usage import Usage

from .config import Upstream
from .flavours import without_blobs
from .refusals import Provider, Refusal

__all__ = ["RESPONSES", "ResponsesFlavour", "ResponsesMeter"]

#: the events that end a response and carry it (with its usage, where known)
TERMINAL: Final = frozenset({"response.completed", "response.incomplete", "response.failed"})
# Request fields that make the upstream add context the proxy cannot see.
_HIDDEN_CONTEXT: Final = ("previous_response_id", "conversation", "prompt")
# Delta events that are not text (their characters are not output tokens).
_NOT_TEXT: Final = frozenset({"response.audio.delta"})


@dataclass(frozen=True, slots=True)
class ResponsesFlavour:
    """The Responses wire, beside :class:`~interlock.gateways.llm_proxy.flavours.Flavour`
    (the same methods; its tool calls are judged by
    :mod:`~interlock.gateways.llm_proxy.response_items`, streamed ones too)."""

    provider: Provider = "openai"
    path: str = "/responses"

    def arguments(self, body: Mapping[str, Any]) -> dict[str, Any]:
        """The ``llm`` action's arguments (see the module docstring)."""
        args: dict[str, Any] = {"provider": self.provider, "api": "responses"}
        given = body.get("input")
        if isinstance(given, str):
            args["messages"] = [{"role": "user", "content": given}]
        elif given is not None:
            args["messages"] = without_blobs(given)
        if body.get("instructions") is not None:
            args["system"] = without_blobs(body["instructions"])
        if "tools" in body:
            args["tools"] = without_blobs(body["tools"])
        bound = body.get("max_output_tokens")
        if bound is not None:
            args["max_tokens"] = bound
        for key in _HIDDEN_CONTEXT:
            if body.get(key) is not None:
                args[key] = without_blobs(body[key])
        return args

    def unfit(self, body: Mapping[str, Any]) -> Refusal | None:
        """A request this proxy must not send: ``background: true`` (its answer is
        fetched later from ``GET /v1/responses/{id}``, which this proxy does not
        serve, so its tool calls could never be judged)."""
        if body.get("background") is True:
            return Refusal(
                400,
                "interlock_background_not_supported",
                "this proxy does not relay background responses (background: true): "
                "send the request without it",
            )
        return None

    def upstream_body(self, body: dict[str, Any]) -> tuple[dict[str, Any], bool]:
        """The body as the client sent it (a Responses stream always ends with its
        usage)."""
        return body, True

    def upstream_headers(self, upstream: Upstream, client: Mapping[str, str]) -> dict[str, str]:
        headers = {"content-type": "application/json", "accept": client.get("accept", "*/*")}
        if upstream.api_key:
            headers["authorization"] = f"Bearer {upstream.api_key}"
        return headers

    def usage(self, body: Mapping[str, Any]) -> Usage | None:
        """The usage a non-streamed response states, or ``None``."""
        return _usage(body.get("usage"))

    def meter(self, estimated_input: int) -> ResponsesMeter:
        return ResponsesMeter(estimated_input)


RESPONSES: Final = ResponsesFlavour()


def _usage(found: object) -> Usage | None:
    if not isinstance(found, Mapping):
        return None
    try:
        return Usage.of(found)
    except ValueError:
        return None


class ResponsesMeter:
    """What a Responses stream has used so far (see the module docstring)."""

    __slots__ = ("_chars", "_estimated_input", "_usage", "outputs")

    def __init__(self, estimated_input: int) -> None:
        self._estimated_input = estimated_input
        self._usage: Usage | None = None
        self._chars = 0
        #: events about an output item seen (0: the model produced nothing yet)
        self.outputs = 0

    def feed(self, event: Mapping[str, Any]) -> None:
        """Read one SSE event's JSON data."""
        kind = event.get("type")
        if not isinstance(kind, str):
            return
        if kind in TERMINAL:
            response = event.get("response")
            if isinstance(response, Mapping):
                self._usage = _usage(response.get("usage")) or self._usage
            return
        if "output_index" in event:
            self.outputs += 1
        if kind.endswith(".delta") and kind not in _NOT_TEXT:
            delta = event.get("delta")
            if isinstance(delta, str):
                self._chars += len(delta)

    @property
    def final(self) -> bool:
        """Whether the upstream's own usage has arrived."""
        return self._usage is not None

    def usage(self) -> Usage:
        if self._usage is not None:
            return self._usage
        return Usage(self._estimated_input, math.ceil(self._chars / CHARS_PER_TOKEN))
