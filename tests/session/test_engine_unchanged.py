"""A policy without session features decides exactly as before: no session facts are
read or kept, whatever the session holds, and the guard records nothing."""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from interlock import Action, Context, Guard
from interlock.policy import evaluate, load_policy_text
from interlock.policy.sessionrules import SessionFacts, session_scope
from interlock.session.history import SessionView, Step

PLAIN = """\
version: 1
default: deny
rules:
  - {id: read-any, decision: allow, reason: reads, name: "read_*"}
  - {id: shell-ls, decision: allow, reason: ls, scope: shell, shell: {programs: [ls, cat]}}
  - {id: no-secrets, decision: deny, reason: secrets, params: {path: {glob: "**/.env"}}}
  - {id: big, decision: require_approval, reason: big, name: pay, params: {args.amount: {gt: 100}}}
  - id: pay
    decision: allow
    reason: pay
    name: pay
    when: 'has(args.to) && args.to.endsWith("@corp.com") && context.session_id != "blocked"'
"""
POLICY = load_policy_text(PLAIN)

names = st.sampled_from(["read_file", "read_mail", "shell", "pay", "send", "fetch_url"])
values = st.one_of(
    st.text(max_size=30),
    st.integers(-1000, 1000),
    st.sampled_from(["/home/me/.env", "ls -la", "cat /etc/passwd", "bob@corp.com", "x@evil"]),
)
arguments = st.dictionaries(st.sampled_from(["path", "command", "to", "amount", "body"]), values)
sessions = st.one_of(st.none(), st.sampled_from(["s-1", "blocked"]))


def _full_view() -> SessionView:
    step = Step(
        1,
        0.0,
        "tool",
        "read_file",
        "allow",
        "d",
        frozenset({"secret"}),
        frozenset({1, 2, 3}),
        False,
        True,
    )
    return SessionView("default", "s-1", (step,), frozenset({"secret", "untrusted"}), 2)


def test_a_plain_policy_keeps_no_sessions_and_its_guard_records_nothing() -> None:
    assert POLICY.sessions is None
    guard = Guard(POLICY, context=Context(session_id="s-1"))
    guard.check(Action.tool("read_file", {"path": "/tmp/x"}))
    assert guard.sessions is None and guard._sessions is None
    assert guard.record_input("hello", trusted=True) is None


@settings(max_examples=300, suppress_health_check=[HealthCheck.too_slow], deadline=None)
@given(name=names, args=arguments, session=sessions)
def test_a_plain_policy_decides_the_same_with_or_without_session_facts(
    name: str, args: dict[str, object], session: str | None
) -> None:
    action = Action.tool(name, args, context=Context(session_id=session))
    plain = evaluate(action, POLICY)
    with session_scope(SessionFacts.of(_full_view())):
        with_facts = evaluate(action, POLICY)
    with session_scope(SessionFacts.unavailable("s-1", "down")):
        history_down = evaluate(action, POLICY)
    for other in (with_facts, history_down):
        assert (other.verdict, other.rule_ids, other.reason) == (
            plain.verdict,
            plain.rule_ids,
            plain.reason,
        )
