"""The official clients pointed at the proxy, and a raw reader of its SSE bytes."""

from __future__ import annotations

import re
from typing import Any

import anthropic
import httpx
import openai

from .conftest import Proxy

__all__ = [
    "anthropic_async",
    "anthropic_client",
    "openai_async",
    "openai_client",
    "raw_stream",
    "without_decision",
]


def openai_client(proxy: Proxy) -> openai.OpenAI:
    return openai.OpenAI(base_url=proxy.url + "/v1", api_key=proxy.tokens["agent"], max_retries=0)


def openai_async(proxy: Proxy) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(
        base_url=proxy.url + "/v1", api_key=proxy.tokens["agent"], max_retries=0
    )


def anthropic_client(proxy: Proxy) -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=proxy.url, api_key=proxy.tokens["agent"], max_retries=0)


def anthropic_async(proxy: Proxy) -> anthropic.AsyncAnthropic:
    return anthropic.AsyncAnthropic(
        base_url=proxy.url, api_key=proxy.tokens["agent"], max_retries=0
    )


def raw_stream(proxy: Proxy, path: str, body: dict[str, Any]) -> bytes:
    """Every byte the proxy sends for a streamed request (a cut stream: what came)."""
    headers = {"authorization": f"Bearer {proxy.tokens['agent']}"}
    if path == "/v1/messages":
        headers["anthropic-version"] = "2023-06-01"
    received = b""
    try:
        with httpx.stream(
            "POST", proxy.url + path, json={**body, "stream": True}, headers=headers, timeout=60
        ) as answer:
            assert answer.status_code == 200, answer.read()
            for chunk in answer.iter_raw():
                received += chunk
    except httpx.RemoteProtocolError:
        pass  # the proxy cut the stream: what came before is what the client saw
    return received


def without_decision(text: str) -> str:
    """A refusal without its decision id (each decision has its own)."""
    return re.sub(r"decision [^\]\s]+\]", "decision <id>]", text)
