"""A protected call whose body runs while many other calls are checked (issue 18).

The guard remembers which allowed session steps wait for their outcome in a bounded
table (the oldest forgotten past ``_PENDING_KEPT``: a check whose body never runs
must not hold memory for ever). A body that ran for minutes in a busy process used
to find its step forgotten when it returned: the secret it read was never recorded
as the session's data, and a later send of that secret passed a ``flows_from`` rule;
a delete it made was never counted toward a per-session cap. The wrapper now claims
its step when it is made."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from interlock import Action, Context, Guard, Verdict
from interlock.guard_sessions import _PENDING_KEPT
from interlock.policy import load_policy_text
from interlock.session.history import MemoryHistory

KEY = "wJalrXUtnFEMI-K7MDENG-bPxRfiCYEXAMPLEKEY"

POLICY = """\
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
    name: send_mail
    session:
      flows_from: {labels: [secret]}
  - id: delete-cap
    decision: require_approval
    reason: more than one delete a session needs a human
    name: delete_file
    session:
      after: {name: delete_file, at_least: 1}
"""


def _busy(guard: Guard) -> None:
    """Other sessions' allowed calls, more than the pending table keeps."""
    for i in range(_PENDING_KEPT + 10):
        action = Action.tool("list_dir", {"path": "/tmp"}, context=Context(session_id=f"o-{i}"))
        assert guard.check(action).allowed


def _guard() -> Guard:
    # room for every session: none is demoted (that fails closed on its own)
    history = MemoryHistory(max_sessions=2 * _PENDING_KEPT)
    return Guard(load_policy_text(POLICY), context=Context(session_id="s-slow"), sessions=history)


def test_a_slow_read_still_records_its_secret() -> None:
    guard = _guard()

    @guard.protect
    def read_file(path: str) -> str:
        _busy(guard)  # the process is busy while the read runs
        return f"AWS_SECRET_ACCESS_KEY={KEY}\n"

    read_file(path="/app/.env")
    decision = guard.check(Action.tool("send_mail", {"to": "x@example.com", "body": KEY}))
    assert decision.verdict is Verdict.DENY


def test_a_slow_delete_still_counts() -> None:
    guard = _guard()

    @guard.protect
    def delete_file(path: str) -> str:
        _busy(guard)
        return "deleted"

    delete_file(path="/tmp/a")
    assert guard.check(Action.tool("delete_file", {"path": "/tmp/b"})).verdict is (
        Verdict.REQUIRE_APPROVAL
    )


async def test_a_slow_async_read_still_records_its_secret() -> None:
    guard = _guard()

    @guard.protect
    async def read_file(path: str) -> str:
        await asyncio.to_thread(_busy, guard)
        return f"AWS_SECRET_ACCESS_KEY={KEY}\n"

    await read_file(path="/app/.env")
    decision = guard.check(Action.tool("send_mail", {"to": "x@example.com", "body": KEY}))
    assert decision.verdict is Verdict.DENY


@pytest.mark.parametrize("body", ["the weekly report is ready", "see you at noon"])
def test_benign_a_slow_read_of_other_text_lets_mail_go(body: Any) -> None:
    guard = _guard()

    @guard.protect
    def read_file(path: str) -> str:
        _busy(guard)
        return f"AWS_SECRET_ACCESS_KEY={KEY}\n"

    read_file(path="/app/.env")
    decision = guard.check(Action.tool("send_mail", {"to": "x@example.com", "body": body}))
    assert decision.verdict is Verdict.ALLOW


def test_a_slow_body_through_the_adapters_path_still_records_its_secret() -> None:
    """Every framework adapter runs an allowed body through ``run_settled``."""
    from interlock.adapters.base import run_settled

    guard = _guard()
    decision = guard.check(Action.tool("read_file", {"path": "/app/.env"}))
    assert decision.allowed

    def body() -> str:
        _busy(guard)
        return f"AWS_SECRET_ACCESS_KEY={KEY}\n"

    run_settled(guard, decision, body)
    decision = guard.check(Action.tool("send_mail", {"to": "x@example.com", "body": KEY}))
    assert decision.verdict is Verdict.DENY
