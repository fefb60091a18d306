"""A policy without session rules does not load them: `interlock check` on such a policy
(what a hook runs before every tool call) imports neither the session rules nor the
session history and fingerprints (≈ 16 ms of its start-up); a policy with any session
condition — `session:`, `labels:`, a tool's labels, or a session function in CEL —
loads them and is judged as before."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from interlock import Action, Context, Guard, load_policy_text
from interlock.policy.celexpr import SESSION_WORDS, session_rewrite
from interlock.policy.sessionrules import SESSION_FIELDS, SESSION_FUNCTIONS, SESSION_METHODS

SESSION_MODULES = (
    "interlock.policy.sessionrules",
    "interlock.session.history",
    "interlock.session.fingerprints",
)

PLAIN = """\
version: 1
default: deny
rules:
  - id: shell-read
    decision: allow
    reason: read-only
    name: shell
    params:
      command: ["ls *"]
  - id: big-refund
    decision: require_approval
    reason: a human decides
    name: refund
    when: "has(args.amount) && args.amount > 100 && context.tenant == 'acme'"
  - id: fetch-needs-a-session
    decision: deny
    reason: network calls need a session
    name: fetch
    when: context.session_id == null
"""

#: each a policy that reads or labels sessions, one way each
WITH_SESSIONS = {
    "session condition": """\
version: 1
default: allow
rules:
  - id: no-send-after-secret
    decision: deny
    reason: a session that read a secret sends nothing
    name: send_email
    session: {labels: [secret]}
""",
    "CEL session function": """\
version: 1
default: allow
rules:
  - id: no-send-after-secret
    decision: deny
    reason: a session that read a secret sends nothing
    name: send_email
    when: "'secret' in session.labels"
""",
    "CEL flows_from": """\
version: 1
default: allow
rules:
  - id: no-flow
    decision: deny
    reason: no vault data out
    name: send_email
    when: "flows_from('vault_get')"
""",
    "label rule": """\
version: 1
default: allow
labels:
  - id: secret-files
    attach: [secret]
    name: read_file
    params:
      path: ["*/.env"]
rules: []
""",
    "tool labels": """\
version: 1
default: allow
tools:
  vault_get: {labels: [secret]}
rules: []
""",
}


def _loaded_after(script: str) -> list[str]:
    code = script + textwrap.dedent(
        f"""
        import sys
        print(sorted(m for m in {SESSION_MODULES!r} if m in sys.modules))
        """
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return list(eval(done.stdout.strip().splitlines()[-1]))


def test_a_plain_policy_loads_and_checks_without_the_session_modules(tmp_path: Path) -> None:
    policy = tmp_path / "plain.yaml"
    policy.write_text(PLAIN)
    script = textwrap.dedent(
        f"""
        from interlock import Action, Context, Guard
        guard = Guard({str(policy)!r})
        assert guard.policy.sessions is None
        print(guard.check(Action.tool("shell", {{"command": "ls -la"}})).verdict.value)
        ctx = Context(tenant="acme", session_id="s1")
        print(guard.check(Action.tool("refund", {{"amount": 500}}, context=ctx)).verdict.value)
        """
    )
    assert _loaded_after(script) == []


def test_interlock_check_on_a_plain_policy_loads_none_of_them(tmp_path: Path) -> None:
    policy = tmp_path / "plain.yaml"
    policy.write_text(PLAIN)
    script = textwrap.dedent(
        f"""
        import sys
        sys.argv = ["interlock", "check", "--policy", {str(policy)!r}, "--name", "shell",
                    "--arg", "command=ls -la"]
        from interlock.cli import main
        try:
            main()
        except SystemExit as exc:
            assert exc.code in (0, None), exc.code
        """
    )
    assert _loaded_after(script) == []


@pytest.mark.parametrize("kind", sorted(WITH_SESSIONS))
def test_a_policy_with_sessions_loads_them_and_judges_by_them(kind: str) -> None:
    policy = load_policy_text(WITH_SESSIONS[kind], file=f"{kind}.yaml")
    assert policy.sessions is not None
    if kind in ("label rule", "tool labels", "CEL flows_from"):
        return  # attaching labels, or a flow that needs a result: other tests judge those
    guard = Guard(policy)
    context = Context(tenant="t", session_id="s")
    mail = Action.tool("send_email", {"to": "a@b.example", "body": "hello"}, context=context)
    assert guard.check(mail).verdict.value == "allow"  # nothing secret read yet
    guard.record_input("the vault said hi", trusted=False, context=context, labels=["secret"])
    assert guard.check(mail).verdict.value == "deny"


def test_the_words_are_the_session_identifiers() -> None:
    assert {"session", *SESSION_FUNCTIONS} == SESSION_WORDS
    # the fields and methods are reached through ``session.`` only
    assert SESSION_FIELDS and SESSION_METHODS


@pytest.mark.parametrize(
    "source",
    [
        "args.amount > 100",
        "context.tenant == 'acme' && args.to.endsWith('.example')",
        "'x' in args.tags",
        "context.session_id == null",  # a longer name: not a session function
        "args.session_key != '' && has(args.provenance_note)",
        "'session' in args.words",  # a string
    ],
)
def test_an_expression_without_session_words_is_left_as_it_is(source: str) -> None:
    assert session_rewrite(source) == (source, ())


@pytest.mark.parametrize(
    "source",
    [
        "'secret' in session.labels",
        'session.ran("read_file")',
        'flows_from("vault_get") || flows_from_label("secret")',
        'provenance("to") == "untrusted"',
        '!(session.count("shell") > 3)',
        "args.n > 1 &&session.labels.size() > 0",
    ],
)
def test_an_expression_with_them_is_still_rewritten(source: str) -> None:
    text, calls = session_rewrite(source)
    assert calls and text != source
