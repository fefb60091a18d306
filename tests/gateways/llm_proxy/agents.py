"""A two-turn agent loop over the official clients, for each API the proxy serves,
streamed and not: the agent asks, runs the tools the model calls (their results are
given), and sends the whole conversation back — as an agent whose code the proxy
cannot change does.

    agent = AGENTS["chat"](proxy, streamed=False)
    calls, _ = agent.ask(SYSTEM, "summarise the page")
    calls, text = agent.answer({calls[0].call_id: "<page>"})
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

import anthropic
import openai

from .conftest import Proxy

__all__ = ["AGENTS", "Agent", "Called"]

TOOLS_CHAT = [
    {
        "type": "function",
        "function": {"name": name, "parameters": {"type": "object", "properties": {}}},
    }
    for name in ("fetch_url", "read_file", "send_email")
]
TOOLS_RESPONSES = [
    {"type": "function", "name": name, "parameters": {"type": "object", "properties": {}}}
    for name in ("fetch_url", "read_file", "send_email")
]
TOOLS_ANTHROPIC = [
    {"name": name, "input_schema": {"type": "object", "properties": {}}}
    for name in ("fetch_url", "read_file", "send_email")
]


@dataclass(frozen=True)
class Called:
    call_id: str
    name: str
    arguments: dict[str, Any]


@dataclass
class Agent:
    proxy: Proxy
    streamed: bool
    key: str = "agent"
    #: sent as ``x-interlock-session`` on each turn, when set (a test may change it)
    session: str | None = None
    conversation: list[dict[str, Any]] = field(default_factory=list)
    system: str = ""

    def headers(self) -> dict[str, str]:
        return {} if self.session is None else {"x-interlock-session": self.session}

    def ask(self, system: str, user: str) -> tuple[list[Called], str]:
        self.system = system
        self.conversation = [{"role": "user", "content": user}]
        return self.turn()

    def answer(self, results: dict[str, str]) -> tuple[list[Called], str]:
        self.conversation += self.results(results)
        return self.turn()

    def turn(self) -> tuple[list[Called], str]:
        raise NotImplementedError

    def results(self, results: dict[str, str]) -> list[dict[str, Any]]:
        raise NotImplementedError


class ChatAgent(Agent):
    def turn(self) -> tuple[list[Called], str]:
        client = openai.OpenAI(
            base_url=self.proxy.url + "/v1", api_key=self.proxy.tokens[self.key], max_retries=0
        )
        messages = [{"role": "system", "content": self.system}, *self.conversation]
        asked: dict[str, Any] = {
            "model": "gpt-4o-mini",
            "messages": messages,
            "tools": TOOLS_CHAT,
            "extra_headers": self.headers(),
        }
        if self.streamed:
            with client.chat.completions.stream(**asked) as stream:
                reply = stream.get_final_completion()
        else:
            reply = client.chat.completions.create(**asked)
        message = reply.choices[0].message
        self.conversation.append(message.model_dump(exclude_none=True, exclude={"parsed"}))
        calls = [
            Called(c.id, c.function.name, json.loads(c.function.arguments))
            for c in message.tool_calls or []
            if c.type == "function"
        ]
        return calls, message.content or ""

    def results(self, results: dict[str, str]) -> list[dict[str, Any]]:
        return [
            {"role": "tool", "tool_call_id": call_id, "content": text}
            for call_id, text in results.items()
        ]


class ResponsesAgent(Agent):
    #: continue the upstream's stored conversation (previous_response_id) instead of
    #: sending it whole
    chained: bool = False
    last_id: str | None = None
    new_items: list[dict[str, Any]] | None = None

    def turn(self) -> tuple[list[Called], str]:
        client = openai.OpenAI(
            base_url=self.proxy.url + "/v1", api_key=self.proxy.tokens[self.key], max_retries=0
        )
        asked: dict[str, Any] = {
            "model": "gpt-4o-mini",
            "instructions": self.system,
            "input": self.conversation,
            "tools": TOOLS_RESPONSES,
            "extra_headers": self.headers(),
        }
        if self.chained and self.last_id is not None and self.new_items is not None:
            asked["input"] = self.new_items
            asked["previous_response_id"] = self.last_id
        if self.streamed:
            with client.responses.stream(**asked) as stream:
                reply = stream.get_final_response()
        else:
            reply = client.responses.create(**asked)
        self.last_id = reply.id
        self.conversation += [item.model_dump(exclude_none=True) for item in reply.output]
        calls = [
            Called(item.call_id, item.name, json.loads(item.arguments))
            for item in reply.output
            if item.type == "function_call"
        ]
        return calls, reply.output_text

    def results(self, results: dict[str, str]) -> list[dict[str, Any]]:
        self.new_items = [
            {"type": "function_call_output", "call_id": call_id, "output": text}
            for call_id, text in results.items()
        ]
        return list(self.new_items)


class MessagesAgent(Agent):
    def turn(self) -> tuple[list[Called], str]:
        client = anthropic.Anthropic(
            base_url=self.proxy.url, api_key=self.proxy.tokens[self.key], max_retries=0
        )
        asked: dict[str, Any] = {
            "model": "claude-sonnet-4-5",
            "max_tokens": 256,
            "system": self.system,
            "messages": self.conversation,
            "tools": TOOLS_ANTHROPIC,
            "extra_headers": self.headers(),
        }
        if self.streamed:
            with client.messages.stream(**asked) as stream:
                reply = stream.get_final_message()
        else:
            reply = client.messages.create(**asked)
        blocks = [block.model_dump(exclude_none=True) for block in reply.content]
        self.conversation.append({"role": "assistant", "content": blocks})
        calls = [
            Called(b.id, b.name, dict(b.input))  # type: ignore[arg-type]
            for b in reply.content
            if b.type == "tool_use"
        ]
        text = "".join(b.text for b in reply.content if b.type == "text")
        return calls, text

    def results(self, results: dict[str, str]) -> list[dict[str, Any]]:
        blocks = [
            {"type": "tool_result", "tool_use_id": call_id, "content": text}
            for call_id, text in results.items()
        ]
        return [{"role": "user", "content": blocks}]


AGENTS: dict[str, type[Agent]] = {
    "chat": ChatAgent,
    "responses": ResponsesAgent,
    "messages": MessagesAgent,
}
