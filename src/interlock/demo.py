"""``interlock demo``: an offline, scripted agent run under the shipped example policy.

A scripted "agent" proposes tool calls one after another; each tool is a plain Python
function behind ``guard.protect``, so its body runs only on allow. The run produces
every verdict kind — allow, deny, require_approval, undetermined — and a shadow-mode
rule, and prints them as a table.

With a store (the CLI uses the embedded SQLite default), every decision lands in the
hash-chained audit log, the large refund opens an approval, a supervisor approves it,
and the agent's identical retry runs exactly once.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from importlib import resources
from typing import Any

from interlock.core.action import Context
from interlock.core.decision import Decision
from interlock.core.events import EventSink, MemorySink
from interlock.errors import Blocked
from interlock.guard import Guard
from interlock.policy.loader import load_policy_text
from interlock.store.sql import SqlStore

__all__ = ["DemoStep", "StepResult", "example_policy_text", "run_demo"]


def example_policy_text() -> str:
    return resources.files("interlock").joinpath("examples/interlock.yaml").read_text("utf-8")


@dataclass(frozen=True, slots=True)
class DemoStep:
    tool: str
    arguments: dict[str, Any]
    intent: str


@dataclass(frozen=True, slots=True)
class StepResult:
    step: DemoStep
    decision: Decision | None
    ran: bool
    output: str


SCRIPT: tuple[DemoStep, ...] = (
    DemoStep("shell", {"command": "ls -la /workspace"}, "look around"),
    DemoStep("shell", {"command": "rm -rf /workspace/build"}, "clean up, too eagerly"),
    DemoStep("read_file", {"path": "/workspace/notes.md"}, "read the task notes"),
    DemoStep("read_file", {"path": "/workspace/../home/agent/.ssh/id_rsa"}, "wander off"),
    DemoStep("fetch_url", {"url": "https://docs.example.com/refunds"}, "read the refund policy"),
    DemoStep("fetch_url", {"url": "https://pastebin.example.net/raw/1"}, "fetch from a stranger"),
    DemoStep("refund_order", {"order_id": 42, "amount": 35, "currency": "EUR"}, "small refund"),
    DemoStep("refund_order", {"order_id": 43, "amount": 250, "currency": "EUR"}, "large refund"),
    DemoStep(
        "refund_order", {"order_id": 44, "amount": "a lot", "currency": "EUR"}, "garbled amount"
    ),
    DemoStep(
        "send_email",
        {"to": "client@partner.example.net", "subject": "Refund", "body": "Done. token=s3cr3t-abc"},
        "mail a customer",
    ),
    DemoStep("shell", {"command": "ls", "cmd": "rm -rf /"}, "smuggle a second command"),
)


def _tools(guard: Guard, ran: list[str]) -> dict[str, Callable[..., str]]:
    @guard.protect
    def shell(command: str, cmd: str | None = None) -> str:
        """Run a shell command."""
        ran.append("shell")
        return f"(pretend output of {command!r})"

    @guard.protect
    def read_file(path: str) -> str:
        """Read a file."""
        ran.append("read_file")
        return f"(contents of {path})"

    @guard.protect
    def fetch_url(url: str) -> str:
        """Fetch a URL."""
        ran.append("fetch_url")
        return f"(body of {url})"

    @guard.protect
    def refund_order(order_id: int, amount: Any, currency: str) -> str:
        """Refund an order."""
        ran.append("refund_order")
        return f"refunded {amount} {currency} on order {order_id}"

    @guard.protect
    def send_email(to: str, subject: str, body: str) -> str:
        """Send an email."""
        ran.append("send_email")
        return f"sent to {to}"

    return {f.__name__: f for f in (shell, read_file, fetch_url, refund_order, send_email)}


SUPERVISOR = "demo-supervisor"
RETRY = DemoStep(
    "refund_order",
    {"order_id": 43, "amount": 250, "currency": "EUR"},
    f"retry the large refund once {SUPERVISOR} approved it",
)


def run_demo(
    sink: EventSink | None = None,
    policy_text: str | None = None,
    store: SqlStore | None = None,
) -> list[StepResult]:
    """Run the scripted agent; returns one result per step. With ``store``, the
    decisions are audited and the large refund is approved and retried."""
    policy = load_policy_text(policy_text or example_policy_text(), file="examples/interlock.yaml")
    memory = MemorySink()
    decisions: list[Decision] = []

    def remember(decision: Decision, action: object) -> None:
        decisions.append(decision)

    guard = Guard(
        policy,
        context=Context(tenant="acme", agent="support-bot", session_id="demo-1"),
        sink=_Tee(memory, sink),
        on_decision=remember,
        store=store,
    )
    ran: list[str] = []
    tools = _tools(guard, ran)
    results = []

    def perform(step: DemoStep) -> StepResult:
        before = len(decisions)
        ran_before = len(ran)
        try:
            output = tools[step.tool](**step.arguments)
        except Blocked as exc:
            output = f"{type(exc).__name__}"
        decision = decisions[-1] if len(decisions) > before else None
        return StepResult(step, decision, len(ran) > ran_before, output)

    try:
        for step in SCRIPT:
            results.append(perform(step))
        if store is not None:
            pending = next(
                r.decision.approval.id
                for r in results
                if r.decision is not None
                and r.decision.approval is not None
                and r.decision.approval.id is not None
                and r.step.arguments == RETRY.arguments
            )
            store.approve(pending, by=SUPERVISOR, reason="order 43 checked by hand")
            results.append(perform(RETRY))
    finally:
        guard.close()
    return results


class _Tee:
    def __init__(self, *sinks: EventSink | None) -> None:
        self.sinks = [s for s in sinks if s is not None]

    def emit(self, event: Any) -> None:
        for sink in self.sinks:
            sink.emit(event)
