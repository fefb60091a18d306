"""The verdict-fixture table every adapter is driven through (DESIGN §2).

A row is one tool call, the guard it meets, and what must happen: the verdict, whether
the tool body runs, the error a raise-style adapter raises and a fragment of the text a
message-style adapter hands the model. Adapters differ only in how they drive a row.
"""

from __future__ import annotations

import asyncio
import contextlib
import tempfile
import threading
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from interlock import (
    Action,
    ActionDenied,
    ActionUndetermined,
    ApprovalRequired,
    Blocked,
    CancelToken,
    Decision,
    Guard,
    Verdict,
    load_policy_text,
)
from support import SlowDecider

__all__ = [
    "CANCELLATION",
    "POLICY",
    "POLICY_TEXT",
    "POLICY_YAML",
    "ROWS",
    "STATEFUL_POLICY",
    "STORE_UNREACHABLE",
    "GateDecider",
    "Row",
    "SlowDecider",
    "assert_cancellation_never_runs",
    "make_guard",
]

#: The table's policy as text, for the guards that load a file (the MCP gateway, the
#: LLM proxy's server).
POLICY_YAML = """
version: 1
default: deny
rules:
  - id: allow-shell
    decision: allow
    reason: shell is allowed
    name: shell
  - id: no-rm
    decision: deny
    reason: no recursive deletes
    name: shell
    when: "args.command.startsWith('rm')"
  - id: pay-small
    decision: allow
    reason: small payments
    name: pay
    when: "args.amount <= 100"
  - id: pay-big
    decision: require_approval
    reason: big payments need a human
    name: pay
    when: "args.amount > 100"
"""
POLICY = load_policy_text(POLICY_YAML, file="conformance.yaml")
POLICY_TEXT = POLICY_YAML


def _explode(*_: Any) -> None:
    raise RuntimeError("observer exploded")


def _garbage(*_: Any) -> Any:
    return {"name": "shell"}


def _throws(*_: Any) -> Any:
    return 1 / 0


def _not_ours(*_: Any) -> Any:
    return None


@dataclass(frozen=True)
class Row:
    behaviour: str
    tool: str
    args: dict[str, Any]
    verdict: Verdict | None  # None: passed through unjudged
    runs: bool
    says: str = ""  # a fragment of the refusal the model reads
    guard_options: dict[str, Any] = field(default_factory=dict)
    mapper: Callable[..., Any] | None = None
    store_gone: bool = False  # the guard's store is closed before the call: unreachable

    @property
    def error(self) -> type[Blocked] | None:
        return (
            {
                Verdict.DENY: ActionDenied,
                Verdict.REQUIRE_APPROVAL: ApprovalRequired,
                Verdict.UNDETERMINED: ActionUndetermined,
            }.get(self.verdict)
            if self.verdict is not None
            else None
        )


ROWS = [
    Row("allow runs the body", "shell", {"command": "ls"}, Verdict.ALLOW, True),
    Row(
        "deny never runs the body",
        "shell",
        {"command": "rm -rf /"},
        Verdict.DENY,
        False,
        "no recursive deletes",
    ),
    Row(
        "require_approval holds the body",
        "pay",
        {"amount": 500},
        Verdict.REQUIRE_APPROVAL,
        False,
        "requires approval",
    ),
    Row(
        "a policy whose CEL fails is undetermined",
        "pay",
        {"amount": "lots"},
        Verdict.UNDETERMINED,
        False,
        "could not decide",
    ),
    Row(
        "a mapper that throws is undetermined",
        "shell",
        {"command": "ls"},
        Verdict.UNDETERMINED,
        False,
        "could not map",
        mapper=_throws,
    ),
    Row(
        "a mapper that returns garbage is undetermined",
        "shell",
        {"command": "ls"},
        Verdict.UNDETERMINED,
        False,
        "could not map",
        mapper=_garbage,
    ),
    Row(
        "a mapper that returns None passes the call through",
        "shell",
        {"command": "rm -rf /"},
        None,
        True,
        mapper=_not_ours,
    ),
    Row(
        "a timeout is undetermined",
        "shell",
        {"command": "ls"},
        Verdict.UNDETERMINED,
        False,
        "timeout",
        guard_options={"decider": SlowDecider(0.3), "timeout": 0.02},
    ),
    Row(
        "an observer that throws keeps allow an allow",
        "shell",
        {"command": "ls"},
        Verdict.ALLOW,
        True,
        guard_options={"on_decision": _explode, "on_blocked": _explode},
    ),
    Row(
        "an observer that throws keeps deny a deny",
        "shell",
        {"command": "rm -rf /"},
        Verdict.DENY,
        False,
        "no recursive deletes",
        guard_options={"on_decision": _explode, "on_blocked": _explode},
    ),
]

#: The store went away after the guard started: no decision can be recorded, so none
#: stands (undetermined), and model calls an adapter judges are refused the same way —
#: drive it through a whole loop and assert the body never ran and the loop ended or
#: read the refusal.
STORE_UNREACHABLE = Row(
    "an unreachable store is undetermined",
    "shell",
    {"command": "ls"},
    Verdict.UNDETERMINED,
    False,
    "could not be recorded",
    store_gone=True,
)


def make_guard(row: Row, **extra: Any) -> Guard:
    options = {**row.guard_options, **extra}
    if not row.store_gone:
        return Guard(POLICY, **options)
    # A store that went away after the guard started: every decision must be recorded
    # before it stands, so none can.
    folder = tempfile.mkdtemp(prefix="interlock-gone-")
    options.setdefault("reap_interval", None)  # no reaper to complain of the closed store
    guard = Guard(POLICY, store=f"sqlite:///{folder}/state.db", **options)
    assert guard.store is not None
    guard.store.close()
    return guard


# -- cancellation: a call cancelled while it is judged never runs -----------------------


class GateDecider:
    """A decider that holds every decision until :meth:`release` (then allows), and
    says when one has started: a test cancels the call in between, deterministically."""

    def __init__(self) -> None:
        self.entered = threading.Event()
        self.released = threading.Event()

    def release(self) -> None:
        self.released.set()

    def decide(
        self, action: Action, *, deadline: float | None, cancel: CancelToken | None
    ) -> Decision:
        self.entered.set()
        self.released.wait(10)
        return Decision(verdict=Verdict.ALLOW, reason="gate opened")

    async def adecide(
        self, action: Action, *, deadline: float | None, cancel: CancelToken | None
    ) -> Decision:
        self.entered.set()
        while not self.released.is_set():
            await asyncio.sleep(0.005)
        return Decision(verdict=Verdict.ALLOW, reason="gate opened")


#: The cancellation row: the call is cancelled while its decision is pending; the
#: decision then arrives as ``allow``, and the body must still never run.
CANCELLATION = Row(
    "a call cancelled while it is judged never runs the body",
    "shell",
    {"command": "ls"},
    Verdict.ALLOW,
    False,
)


async def assert_cancellation_never_runs(
    call: Callable[[Guard], Awaitable[Any]], runs: Callable[[], int]
) -> None:
    """Drive one call (``call(guard)``: the adapter's async path, a whole agent loop or
    one tool invocation) with a guard whose decision is held, cancel it while held, let
    the decision come out ``allow``, and assert the body never ran (``runs()``: how
    many times it has)."""
    gate = GateDecider()
    guard = Guard(POLICY, decider=gate)
    task = asyncio.ensure_future(call(guard))
    try:
        for _ in range(2000):
            if gate.entered.is_set() or task.done():
                break
            await asyncio.sleep(0.005)
        assert gate.entered.is_set(), "the call never reached the guard"
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await task
        assert task.done()
    finally:
        gate.release()
    await asyncio.sleep(0.05)  # a decision that outlived its call must not run it now
    assert runs() == 0, "a cancelled call ran its body"


#: The stateful side of the table: budgets on tools and model calls, an approval.
STATEFUL_POLICY = """
version: 1
default: deny
approvals:
  url: "https://approvals.example.com/a/{id}"
budgets:
  - id: tool-spend
    limit: 1
    unit: USD
    scope: agent
    kind: tool
    name: paid_lookup
    max_overage: 0        # the declared cost is what is charged
  - id: model-tokens
    limit: 1000
    unit: tokens
    scope: agent
    kind: llm
    default_estimate: 200 # the fake models name no max_tokens
rules:
  - id: models-ok
    decision: allow
    reason: the model may think
    kind: llm
  - id: lookups-ok
    decision: allow
    reason: lookups are fine
    name: paid_lookup
  - id: wires-need-a-human
    decision: require_approval
    reason: wires need a human
    name: wire
"""


def approve_when_pending(guard: Guard, approve: bool = True) -> threading.Thread:
    """A supervisor in another thread: approves (or denies) the first pending request
    on the guard's store."""
    assert guard.store is not None
    store = guard.store

    def supervise() -> None:
        for _ in range(2000):
            pending = store.list_approvals(status="pending")
            if pending:
                decide = store.approve if approve else store.deny
                decide(pending[0].id, by="supervisor", reason="checked")
                return
            threading.Event().wait(0.005)

    thread = threading.Thread(target=supervise, daemon=True)
    thread.start()
    return thread
