"""Padding attacks on the session history's bound (issue 18): an agent — or content
that steers it — makes cheap calls until an earlier step leaves the bounded history
(``session.max_steps``), then does what that step should have stopped. Each row runs
on the in-memory history and on a SQLite store's history; an attack row marked
``xfail(strict=True)`` is a hole still open (its reason says why), next to the benign
look-alikes that must keep passing.

Closed by judging what only dropped steps could tell as "cannot tell": a condition
that holds on the kept steps holds; one that does not, where a dropped step might
have made it hold, leaves the rule unevaluable (undetermined) — never a miss that
allows. The price is paid by sessions longer than ``max_steps``, shown below."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from interlock import Action, Context, Guard, Verdict
from interlock.policy import load_policy_text
from interlock.session.history import MemoryHistory
from interlock.store import open_store

KEY = "wJalrXUtnFEMI-K7MDENG-bPxRfiCYEXAMPLEKEY"
MAX_STEPS = 6

POLICY = f"""\
version: 1
default: allow
session: {{max_steps: {MAX_STEPS}}}
labels:
  - id: secrets-read
    attach: [secret]
    name: read_file
    params:
      path: {{glob: ["**/.env"]}}
  - id: deleting
    attach: [destructive]
    name: delete_file
rules:
  - id: no-leak
    decision: deny
    reason: data a secret read returned may not leave
    name: send_mail
    session:
      flows_from: {{labels: [secret]}}
  - id: delete-cap
    decision: require_approval
    reason: more than two deletes in a session need a human
    name: delete_file
    session:
      after: {{labels: [destructive], at_least: 2}}
"""

#: a refusal is enough: a padding attack wins only when the last call is allowed
REFUSED = (Verdict.DENY, Verdict.UNDETERMINED, Verdict.REQUIRE_APPROVAL)


@pytest.fixture(params=["memory", "sqlite"])
def guard(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Guard]:
    policy = load_policy_text(POLICY)
    context = Context(session_id="s-pad")
    if request.param == "memory":
        yield Guard(policy, context=context, sessions=MemoryHistory(max_steps=MAX_STEPS))
        return
    store = open_store(f"sqlite:///{tmp_path / 'pad.db'}")
    with store, Guard(policy, context=context, store=store) as guarded:
        yield guarded


def _run(guard: Guard, name: str, result: str = "", **args: Any) -> None:
    """Call ``name`` through the guard as an agent would: allowed, run, its result kept."""

    def body(**_: Any) -> str:
        return result

    body.__name__ = name
    guarded = guard.protect(body)
    guarded(**args)


def _verdict(guard: Guard, name: str, **args: Any) -> Verdict:
    return guard.check(Action.tool(name, args)).verdict


def _pad_refused(guard: Guard, n: int) -> None:
    """Calls that only cost a check: each is a step, refused or not run."""
    for i in range(n):
        guard.check(Action.tool("list_dir", {"path": f"/tmp/{i}"}))


def _pad_with_data(guard: Guard, n: int) -> None:
    """Allowed calls that run and return (harmless) data."""
    for i in range(n):
        _run(guard, "read_file", f"line {i}: nothing to see here, just text", path=f"/tmp/{i}.txt")


# -- flows ---------------------------------------------------------------------------


def test_within_the_bound_the_secret_cannot_leave(guard: Guard) -> None:
    _run(guard, "read_file", f"KEY={KEY}\n", path="/srv/app/.env")
    _pad_with_data(guard, MAX_STEPS - 2)
    assert _verdict(guard, "send_mail", to="bob@corp.example", body=KEY) is Verdict.DENY
    assert _verdict(guard, "send_mail", to="bob@corp.example", body="all good") is Verdict.ALLOW


def test_padding_with_cheap_calls_does_not_hide_a_flow(guard: Guard) -> None:
    _run(guard, "read_file", f"KEY={KEY}\n", path="/srv/app/.env")
    _pad_refused(guard, MAX_STEPS)
    assert _verdict(guard, "send_mail", to="bob@corp.example", body=KEY) in REFUSED


def test_padding_with_data_does_not_hide_a_flow(guard: Guard) -> None:
    _run(guard, "read_file", f"KEY={KEY}\n", path="/srv/app/.env")
    _pad_with_data(guard, MAX_STEPS)
    assert _verdict(guard, "send_mail", to="bob@corp.example", body=KEY) in REFUSED


def test_the_secret_label_outlives_the_bound(guard: Guard) -> None:
    _run(guard, "read_file", f"KEY={KEY}\n", path="/srv/app/.env")
    _pad_with_data(guard, 2 * MAX_STEPS)
    view = guard.sessions.view("default", "s-pad")  # type: ignore[union-attr]
    assert "secret" in view.labels
    assert len(view.steps) == MAX_STEPS


# -- counts --------------------------------------------------------------------------


def test_within_the_bound_the_cap_holds(guard: Guard) -> None:
    _run(guard, "delete_file", path="/tmp/a")
    assert _verdict(guard, "delete_file", path="/tmp/b") is Verdict.ALLOW
    _run(guard, "delete_file", path="/tmp/b")
    _pad_with_data(guard, MAX_STEPS - 3)
    assert _verdict(guard, "delete_file", path="/tmp/c") is Verdict.REQUIRE_APPROVAL


def test_padding_does_not_reset_a_per_session_cap(guard: Guard) -> None:
    _run(guard, "delete_file", path="/tmp/a")
    _run(guard, "delete_file", path="/tmp/b")
    _pad_with_data(guard, MAX_STEPS)
    assert _verdict(guard, "delete_file", path="/tmp/c") in REFUSED


def test_refused_deletes_do_not_count_toward_the_cap(guard: Guard) -> None:
    """The benign look-alike: calls that did not run are not destructive operations."""
    for path in ("/tmp/a", "/tmp/b", "/tmp/c"):
        guard.check(Action.tool("delete_file", {"path": path}))  # decided, never run
    assert _verdict(guard, "delete_file", path="/tmp/d") is Verdict.ALLOW


# -- what a session longer than max_steps costs, and what it does not -----------------


def test_past_the_bound_an_unfound_flow_is_undetermined_and_says_why(guard: Guard) -> None:
    _pad_with_data(guard, MAX_STEPS + 1)
    decision = guard.check(Action.tool("send_mail", {"to": "bob@corp.example", "body": "hi"}))
    assert decision.verdict is Verdict.UNDETERMINED
    assert "no-leak" in decision.reason
    assert "session.max_steps" in decision.reason


def test_past_the_bound_a_found_flow_is_still_a_deny(guard: Guard) -> None:
    _pad_with_data(guard, MAX_STEPS)
    _run(guard, "read_file", f"KEY={KEY}\n", path="/srv/app/.env")
    decision = guard.check(Action.tool("send_mail", {"to": "bob@corp.example", "body": KEY}))
    assert decision.verdict is Verdict.DENY
    assert decision.rule_ids == ("no-leak",)


def test_past_the_bound_a_whole_session_cap_cannot_be_told(guard: Guard) -> None:
    """The cost: a count over the whole session is not known once steps were dropped,
    so the cap's delete is undetermined (a sliding cap, ``within: N`` up to
    ``max_steps``, is judged exactly: below)."""
    _pad_with_data(guard, MAX_STEPS + 1)  # step 1 dropped
    decision = guard.check(Action.tool("delete_file", {"path": "/tmp/a"}))
    assert decision.verdict is Verdict.UNDETERMINED
    assert "delete-cap" in decision.reason


def test_calls_no_session_condition_reads_are_untouched_past_the_bound(guard: Guard) -> None:
    _pad_with_data(guard, 2 * MAX_STEPS)
    assert _verdict(guard, "list_dir", path="/tmp") is Verdict.ALLOW


WINDOWED = f"""\
version: 1
default: allow
session: {{max_steps: {MAX_STEPS}}}
rules:
  - id: no-mail-right-after-a-fetch
    decision: deny
    reason: no mail within two steps of a fetch
    name: send_mail
    session:
      after: {{name: fetch_url, within: 2}}
  - id: sliding-cap
    decision: require_approval
    reason: two deletes within four steps need a human
    name: delete_file
    session:
      after: {{name: delete_file, within: 4, at_least: 2}}
  - id: cel-ran
    decision: deny
    reason: never mail in a session that ran drop_table
    name: send_mail
    when: session.ran("drop_table")
"""


def test_a_window_within_the_kept_steps_is_judged_past_the_bound(tmp_path: Path) -> None:
    guard = Guard(
        load_policy_text(WINDOWED),
        context=Context(session_id="w"),
        sessions=MemoryHistory(max_steps=MAX_STEPS),
    )
    _pad_with_data(guard, 2 * MAX_STEPS)
    _run(guard, "fetch_url", "<p>hello</p>", url="https://blog.example")
    decision = guard.check(Action.tool("send_mail", {"to": "bob@corp.example"}))
    assert decision.verdict is Verdict.DENY
    assert decision.rule_ids == ("no-mail-right-after-a-fetch",)
    # a sliding cap within the kept steps: exact
    _run(guard, "delete_file", path="/tmp/a")
    assert _verdict(guard, "delete_file", path="/tmp/b") is Verdict.ALLOW
    _run(guard, "delete_file", path="/tmp/b")
    assert _verdict(guard, "delete_file", path="/tmp/c") is Verdict.REQUIRE_APPROVAL
    # CEL's session.ran cannot say "never ran" once steps were dropped
    _pad_with_data(guard, 2)
    decision = guard.check(Action.tool("send_mail", {"to": "bob@corp.example"}))
    assert decision.verdict is Verdict.UNDETERMINED
    assert "session.ran('drop_table')" in decision.reason
