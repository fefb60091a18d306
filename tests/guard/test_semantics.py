"""DESIGN §2, the decision semantics, as one table: a row per behaviour.

Each row builds a guard, drives one protected tool body through it, and states the
verdict it expects and whether the body may run.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest

from interlock import (
    Action,
    ActionDenied,
    ActionUndetermined,
    ApprovalRequired,
    CancelToken,
    Decision,
    Guard,
    Verdict,
    load_policy_text,
)
from interlock.core.events import MemorySink
from interlock.errors import DecisionTimeout, EvaluationError, MappingError, PolicyError
from support import SlowDecider

POLICY = load_policy_text(
    """
version: 1
default: deny
rules:
  - id: allow-shell
    decision: allow
    reason: shell is allowed
    scope: shell
  - id: no-rm
    decision: deny
    reason: no recursive deletes
    scope: shell
    params: {command: "rm -rf *"}
  - id: files-ok
    decision: allow
    reason: files are fine
    scope: filesystem
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
""",
    file="semantics.yaml",
)


def _raise(*_: Any) -> None:
    raise RuntimeError("observer exploded")


async def _async_raise(*_: Any) -> None:
    raise RuntimeError("async observer exploded")


@dataclass(frozen=True)
class Row:
    behaviour: str
    action: Action | None  # None: the mapper decides
    verdict: Verdict | None  # None: passes through, no verdict
    runs: bool
    rule_ids: tuple[str, ...] | None = None
    guard_options: dict[str, Any] | None = None
    mapper: Callable[..., Any] | None = None
    check_options: dict[str, Any] | None = None
    cause: type[BaseException] | None = None


shell = Action.tool  # readability in the table


ROWS = [
    Row(
        "deny overrides allow, whatever the rule order",
        shell("shell", {"command": "rm -rf /"}),
        Verdict.DENY,
        runs=False,
        rule_ids=("no-rm",),
    ),
    Row(
        "an allow rule lets the body run",
        shell("shell", {"command": "ls"}),
        Verdict.ALLOW,
        True,
        ("allow-shell",),
    ),
    Row(
        "no rule matches: the default (deny) applies",
        Action(kind="mcp", name="x", scope="data"),
        Verdict.DENY,
        False,
        (),
    ),
    Row(
        "require_approval holds the body",
        shell("pay", {"amount": 500}),
        Verdict.REQUIRE_APPROVAL,
        False,
        ("pay-big",),
    ),
    Row(
        "conflicting aliases are denied without evaluating policy",
        shell("shell", {"command": "ls", "cmd": "rm -rf /"}),
        Verdict.DENY,
        False,
        ("interlock:conflicting-aliases",),
    ),
    Row(
        "conflicting path aliases are denied",
        shell("read_file", {"path": "/tmp/a", "file_path": "/etc/shadow"}),
        Verdict.DENY,
        False,
        ("interlock:conflicting-aliases",),
    ),
    Row(
        "an undeclared key cannot steer scope (path would make it filesystem)",
        Action(
            kind="tool",
            name="run",
            arguments={"command": "rm -rf /", "path": "/tmp"},
            schema={"type": "object", "properties": {"command": {"type": "string"}}},
        ),
        Verdict.DENY,
        False,
        ("no-rm",),
    ),
    Row(
        "a declared path key adds the filesystem scope, and never removes the shell one",
        Action(
            kind="tool",
            name="run",
            arguments={"command": "rm -rf /", "path": "/tmp"},
            schema={"type": "object", "properties": {"command": {}, "path": {}}},
        ),
        Verdict.DENY,
        False,
        ("no-rm",),
    ),
    Row(
        "an undeclared key cannot take the shell scope away either",
        Action(kind="tool", name="run", arguments={"command": "rm -rf /", "url": "https://x.io"}),
        Verdict.DENY,
        False,
        ("no-rm",),
    ),
    Row(
        "a hook that throws changes nothing (allow stays allow)",
        shell("shell", {"command": "ls"}),
        Verdict.ALLOW,
        True,
        guard_options={"on_decision": _raise, "on_blocked": _raise},
    ),
    Row(
        "a hook that throws changes nothing (deny stays deny)",
        shell("shell", {"command": "rm -rf /"}),
        Verdict.DENY,
        False,
        guard_options={"on_decision": _raise, "on_blocked": _raise},
    ),
    Row(
        "an async hook that fails changes nothing",
        shell("shell", {"command": "rm -rf /"}),
        Verdict.DENY,
        False,
        guard_options={"on_decision": _async_raise, "on_blocked": _async_raise},
    ),
    Row(
        "a timeout is undetermined",
        shell("shell", {"command": "ls"}),
        Verdict.UNDETERMINED,
        False,
        guard_options={"decider": SlowDecider(0.2)},
        check_options={"timeout": 0.02},
        cause=DecisionTimeout,
    ),
    Row(
        "a cancellation is undetermined",
        shell("shell", {"command": "ls"}),
        Verdict.UNDETERMINED,
        False,
        check_options={"cancel": "pre-cancelled"},
    ),
    Row(
        "a runtime evaluation error is undetermined",
        shell("pay", {"amount": "lots"}),
        Verdict.UNDETERMINED,
        False,
        cause=EvaluationError,
    ),
    Row(
        "a mapper that throws is undetermined",
        None,
        Verdict.UNDETERMINED,
        False,
        mapper=lambda *a, **k: 1 / 0,
        cause=MappingError,
    ),
    Row(
        "a mapper that returns a malformed value is undetermined",
        None,
        Verdict.UNDETERMINED,
        False,
        mapper=lambda *a, **k: {"name": "shell"},
        cause=MappingError,
    ),
    Row(
        "a mapper that returns None passes the call through untouched",
        None,
        None,
        True,
        mapper=lambda *a, **k: None,
    ),
    Row(
        "a mapper that returns [] passes the call through untouched",
        None,
        None,
        True,
        mapper=lambda *a, **k: [],
    ),
    Row(
        "a batch halts on its first non-allow",
        None,
        Verdict.DENY,
        False,
        ("no-rm",),
        mapper=lambda *a, **k: [
            shell("shell", {"command": "ls"}),
            shell("shell", {"command": "rm -rf /x"}),
        ],
    ),
    Row(
        "fail_mode='open' turns undetermined into a logged allow",
        shell("pay", {"amount": "lots"}),
        Verdict.ALLOW,
        True,
        guard_options={"fail_mode": "open"},
    ),
]


def _guard(row: Row, sink: MemorySink) -> Guard:
    options = dict(row.guard_options or {})
    options.setdefault("hook_logger", logging.getLogger("test.hooks"))
    return Guard(POLICY, sink=sink, **options)


def _check_options(row: Row) -> dict[str, Any]:
    options = dict(row.check_options or {})
    if options.get("cancel") == "pre-cancelled":
        token = CancelToken()
        token.cancel("the run was stopped")
        options["cancel"] = token
    return options


def _mapper(row: Row) -> Callable[..., Any]:
    if row.mapper is not None:
        return row.mapper
    action = row.action
    return lambda *a, **k: action


def _expected_error(verdict: Verdict | None) -> type[BaseException] | None:
    return {
        Verdict.DENY: ActionDenied,
        Verdict.REQUIRE_APPROVAL: ApprovalRequired,
        Verdict.UNDETERMINED: ActionUndetermined,
    }.get(verdict)  # type: ignore[arg-type]


def _assert_decision(row: Row, decision: Decision | None) -> None:
    if row.verdict is None:
        assert decision is None
        return
    assert decision is not None
    assert decision.verdict is row.verdict, decision.reason
    if row.rule_ids is not None:
        assert decision.rule_ids == row.rule_ids
    if row.cause is not None:
        assert isinstance(decision.cause, row.cause), repr(decision.cause)


@pytest.mark.parametrize("row", ROWS, ids=[r.behaviour for r in ROWS])
def test_sync_semantics(row: Row) -> None:
    sink = MemorySink()
    guard = _guard(row, sink)
    decision = guard.check_mapped(_mapper(row), **_check_options(row))
    _assert_decision(row, decision)

    ran: list[str] = []

    @guard.protect(
        mapper=_mapper(row),
        **(
            {"timeout": row.check_options["timeout"]}
            if row.check_options and "timeout" in row.check_options
            else {}
        ),
    )
    def body() -> str:
        ran.append("ran")
        return "done"

    error = _expected_error(row.verdict)
    if row.check_options and "cancel" in row.check_options:
        return  # protect has no cancel token; the check above covers the row
    if row.runs:
        assert body() == "done"
        assert ran == ["ran"]
    else:
        assert error is not None
        with pytest.raises(error):
            body()
        assert ran == []


@pytest.mark.parametrize("row", ROWS, ids=[r.behaviour for r in ROWS])
async def test_async_semantics(row: Row) -> None:
    sink = MemorySink()
    guard = _guard(row, sink)
    decision = await guard.acheck_mapped(_mapper(row), **_check_options(row))
    _assert_decision(row, decision)

    ran: list[str] = []
    timeout = (row.check_options or {}).get("timeout")

    @guard.protect(mapper=_mapper(row), timeout=timeout)
    async def body() -> str:
        ran.append("ran")
        return "done"

    if row.check_options and "cancel" in row.check_options:
        return
    error = _expected_error(row.verdict)
    if row.runs:
        assert await body() == "done"
        assert ran == ["ran"]
    else:
        assert error is not None
        with pytest.raises(error):
            await body()
        assert ran == []
    await asyncio.sleep(0)  # let detached async hooks finish before the loop closes


def test_every_decision_and_pass_through_is_recorded() -> None:
    sink = MemorySink()
    guard = Guard(POLICY, sink=sink)
    guard.check(shell("shell", {"command": "ls"}))
    guard.check_mapped(lambda: None)
    kinds = [event.kind for event in sink.events]
    assert kinds == ["decision", "pass_through"]
    record = sink.records()[0]
    assert record["decision"] == "allow"
    assert record["rule_ids"] == ["allow-shell"]
    assert record["latency_us"] >= 0


ALLOW_ALL = load_policy_text("version: 1\ndefault: allow\n")


@pytest.mark.parametrize("twin", ["sync", "async"])
async def test_an_unreadable_call_is_recorded_as_its_callers_and_never_judged(twin: str) -> None:
    """``unreadable``: undetermined under a policy that allows everything (the
    decider is never asked), the record the caller's — not the guard's."""
    from interlock import Context

    sink = MemorySink()
    guard = Guard(ALLOW_ALL, sink=sink, context=Context(tenant="gateway", runtime="gw"))
    known = Action(kind="mcp", name="echo", context=Context(tenant="acme", agent="bot"))
    if twin == "sync":
        decision = guard.unreadable(known, "the params are not an object")
    else:
        decision = await guard.aunreadable(known, "the params are not an object")
    assert decision.verdict is Verdict.UNDETERMINED
    assert isinstance(decision.cause, MappingError)
    assert decision.reason == "could not map the call: the params are not an object"
    (record,) = sink.records()
    assert (record["tenant"], record["agent"], record["decision"]) == (
        "acme",
        "bot",
        "undetermined",
    )
    assert record["action"]["name"] == "echo"
    # the look-alike: a mapper that raises has no action; the record is the guard's
    guard.check_mapped(_raises)
    assert "tenant" not in sink.records()[-1]


def _raises() -> None:
    raise MappingError("unreadable")


async def test_asyncio_cancellation_is_recorded_undetermined_and_reraised() -> None:
    sink = MemorySink()
    guard = Guard(POLICY, decider=SlowDecider(5), sink=sink)
    ran: list[str] = []

    @guard.protect(mapper=lambda: shell("shell", {"command": "ls"}))
    async def body() -> None:
        ran.append("ran")

    task = asyncio.create_task(body())
    await asyncio.sleep(0.01)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert ran == []
    assert [e.decision.verdict for e in sink.events if e.decision] == [Verdict.UNDETERMINED]


def test_a_token_cancelled_during_the_check_is_undetermined() -> None:
    token = CancelToken()

    class CancellingDecider(SlowDecider):
        def decide(
            self, action: Action, *, deadline: float | None, cancel: CancelToken | None
        ) -> Decision:
            token.cancel("user pressed stop")
            return super().decide(action, deadline=deadline, cancel=cancel)

    guard = Guard(POLICY, decider=CancellingDecider(0))
    decision = guard.check(shell("shell", {"command": "ls"}), cancel=token)
    assert decision.verdict is Verdict.UNDETERMINED
    assert "user pressed stop" in decision.reason


def test_a_decider_returning_garbage_is_undetermined() -> None:
    class Garbage(SlowDecider):
        def decide(
            self, action: Action, *, deadline: float | None, cancel: CancelToken | None
        ) -> Any:
            return "allow"

    decision = Guard(POLICY, decider=Garbage(0)).check(shell("shell", {"command": "ls"}))
    assert decision.verdict is Verdict.UNDETERMINED


def test_failing_hooks_are_reported_to_the_logger(caplog: pytest.LogCaptureFixture) -> None:
    guard = Guard(POLICY, on_blocked=_raise, hook_logger=logging.getLogger("test.hooks"))
    with caplog.at_level(logging.WARNING, logger="test.hooks"):
        decision = guard.check(shell("shell", {"command": "rm -rf /"}))
    assert decision.verdict is Verdict.DENY
    assert "observer exploded" in caplog.text


def test_an_async_hook_from_a_thread_without_a_loop_still_runs() -> None:
    seen = threading.Event()

    async def hook(decision: Decision, action: Action | None) -> None:
        seen.set()

    guard = Guard(POLICY, on_decision=hook)
    guard.check(shell("shell", {"command": "ls"}))
    assert seen.wait(5)


def test_a_slow_hook_is_not_awaited() -> None:
    release = threading.Event()
    started = threading.Event()

    async def hook(decision: Decision, action: Action | None) -> None:
        started.set()
        await asyncio.get_running_loop().run_in_executor(None, release.wait, 5)

    guard = Guard(POLICY, on_decision=hook)
    decision = guard.check(shell("shell", {"command": "ls"}))
    assert decision.allowed  # returned while the hook is still blocked
    assert started.wait(5)
    assert not release.is_set()
    release.set()


def test_fail_open_is_logged(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="interlock"):
        guard = Guard(POLICY, fail_mode="open")
        decision = guard.check(shell("pay", {"amount": "lots"}))
    assert decision.allowed and decision.fail_open
    assert "fail-open" in caplog.text


# -- what a Guard takes as its policy ------------------------------------------------------


def test_a_policy_given_as_a_mapping_is_validated_and_used() -> None:
    guard = Guard(
        {
            "version": 1,
            "default": "deny",
            "rules": [{"id": "shell-ok", "decision": "allow", "reason": "ok", "name": "shell"}],
        }
    )
    assert guard.check(Action.tool("shell", {"command": "ls"})).verdict is Verdict.ALLOW
    assert guard.check(Action.tool("wire", {})).verdict is Verdict.DENY
    with pytest.raises(PolicyError, match="decision"):
        Guard({"version": 1, "rules": [{"id": "r", "decision": "perhaps", "name": "x"}]})


@pytest.mark.parametrize("wrong", [42, ["version: 1"], b"version: 1"])
def test_a_policy_of_another_type_is_a_type_error_naming_what_is_accepted(wrong: Any) -> None:
    with pytest.raises(TypeError, match="a file path, a mapping of policy data or a compiled"):
        Guard(wrong)


def test_a_model_call_the_default_denies_says_how_to_allow_models() -> None:
    guard = Guard(
        {
            "version": 1,
            "default": "deny",
            "rules": [
                {"id": "shell-ok", "decision": "allow", "reason": "ok", "name": "shell"},
                {"id": "no-big", "decision": "deny", "reason": "too big", "name": "big-*"},
            ],
        }
    )
    with pytest.raises(ActionDenied) as refused, guard.llm_call("gpt-4.1-mini"):
        pass
    assert "no rule allows this model: add one with kind: llm" in str(refused.value)
    assert refused.value.rule_ids == ()
    # a rule that denies a model says its own reason, and a tool gets no such hint
    with pytest.raises(ActionDenied) as by_rule, guard.llm_call("big-model"):
        pass
    assert str(by_rule.value).endswith("too big")
    with pytest.raises(ActionDenied) as tool:
        guard.enforce(Action.tool("wire", {}))
    assert "kind: llm" not in str(tool.value)
