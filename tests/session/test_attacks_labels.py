"""Attacks on labels: a secret read the label rule does not see (a relative path), a
label cleared by the agent itself, label names that look alike — each next to the
benign look-alikes that must not be labelled or refused."""

from __future__ import annotations

import pytest

from interlock import Action, Context, Guard, Verdict
from interlock.errors import PolicyError
from interlock.policy import load_policy_text
from interlock.session.history import MemoryHistory, NewStep

POLICY = """\
version: 1
default: allow
labels:
  - id: secrets-read
    attach: [secret]
    name: read_file
    params:
      path: {glob: ["**/.ssh/**", "**/.env", "**/*.pem"]}
  - id: reviewed
    clear: [untrusted]
    name: mark_reviewed
tools:
  fetch_url:
    labels: [untrusted]
rules:
  - id: no-mail-after-secret
    decision: deny
    reason: a session that read a secret sends no mail
    name: send_mail
    session:
      labels: [secret]
  - id: shell-after-untrusted
    decision: require_approval
    reason: a shell command after untrusted content needs a human
    name: shell
    session:
      labels: [untrusted]
"""
REVIEW_BY_A_HUMAN = """\
  - id: review-needs-a-human
    decision: require_approval
    reason: only a human marks fetched content reviewed
    name: mark_reviewed
"""


def _guard(policy: str = POLICY) -> tuple[Guard, MemoryHistory]:
    history = MemoryHistory()
    guard = Guard(load_policy_text(policy), context=Context(session_id="s"), sessions=history)
    return guard, history


@pytest.mark.parametrize(
    "path",
    [
        ".env",  # the agent's working directory: the usual place of a .env
        "./.env",
        ".ssh/id_rsa",  # run from the home directory
        "./.ssh/id_ed25519",
        "key.pem",
        "config/.env",
        "/srv/app/.env",
        "/srv/app/x/../.env",
        "/srv/app/.ENV",  # a file system that ignores case
        "~/.ssh/id_rsa",
        "file:///srv/app/.env",
    ],
)
def test_a_secret_read_by_any_path_form_is_labelled(path: str) -> None:
    guard, history = _guard()
    assert guard.check(Action.tool("read_file", {"path": path})).verdict is Verdict.ALLOW
    assert history.view("default", "s").labels == {"secret"}
    mail = Action.tool("send_mail", {"to": "bob@corp.example", "body": "hi"})
    assert guard.check(mail).verdict is Verdict.DENY


@pytest.mark.parametrize(
    "path",
    [".envrc", "env.md", "docs/.env.example", "notes/ssh.txt", "ssh/config", "pem.txt", "README"],
)
def test_a_look_alike_path_is_not_labelled(path: str) -> None:
    guard, history = _guard()
    guard.check(Action.tool("read_file", {"path": path}))
    assert history.view("default", "s").labels == frozenset()
    mail = Action.tool("send_mail", {"to": "bob@corp.example", "body": "hi"})
    assert guard.check(mail).verdict is Verdict.ALLOW


def test_a_relative_path_is_refused_by_a_deny_path_rule_too() -> None:
    policy = load_policy_text(
        "version: 1\ndefault: allow\nrules:\n  - id: no-env\n    decision: deny\n"
        "    reason: no .env\n    name: read_file\n"
        '    params:\n      path: {glob: ["**/.env"]}\n'
        "  - id: tmp-only\n    decision: allow\n    reason: tmp\n    name: write_file\n"
        '    params:\n      path: {glob: ["**/tmp/*"]}\n'
    )
    guard = Guard(policy)
    for path in (".env", "./.env", "app/.env"):
        assert guard.check(Action.tool("read_file", {"path": path})).verdict is Verdict.DENY
    assert guard.check(Action.tool("read_file", {"path": ".envrc"})).verdict is Verdict.ALLOW
    # an allow's glob is not widened: the stricter reading only
    assert guard.check(Action.tool("write_file", {"path": "/x/tmp/a"})).verdict is Verdict.ALLOW


def test_the_agent_cannot_clear_a_label_when_the_clear_needs_a_human() -> None:
    # the attack: with a clear the agent may call itself, it launders its own session
    guard, history = _guard()
    guard.check(Action.tool("fetch_url", {"url": "https://evil.example"}))
    guard.check(Action.tool("mark_reviewed", {}))
    assert guard.check(Action.tool("shell", {"command": "ls"})).verdict is Verdict.ALLOW
    # the fix the docs give: the clearing call itself needs a human
    guard, history = _guard(POLICY + REVIEW_BY_A_HUMAN)
    guard.check(Action.tool("fetch_url", {"url": "https://evil.example"}))
    decided = guard.check(Action.tool("mark_reviewed", {}))
    assert decided.verdict is Verdict.REQUIRE_APPROVAL
    assert history.view("default", "s").labels == {"untrusted"}
    shell = guard.check(Action.tool("shell", {"command": "ls"}))
    assert shell.verdict is Verdict.REQUIRE_APPROVAL


@pytest.mark.parametrize("label", ["ѕecret", "secret ", "se\u200bcret", "secret\n", ""])
def test_a_look_alike_label_name_is_refused_at_load(label: str) -> None:
    with pytest.raises(PolicyError, match="attach"):
        load_policy_text(POLICY.replace("attach: [secret]", f"attach: [{label!r}]"))


def test_a_label_differing_only_in_case_is_refused_at_load() -> None:
    # label names are lower case: `attach: [Secret]` next to `labels: [secret]` would
    # be two labels, and the rule would silently never hold
    with pytest.raises(PolicyError, match="attach"):
        load_policy_text(POLICY.replace("attach: [secret]", "attach: [Secret]"))
    load_policy_text(POLICY)  # the lower-case look-alike loads


@pytest.mark.parametrize(
    "labels", [("Secret",), ("secret ",), ("ѕecret",), "secret", ("",), ("x" * 65,)]
)
def test_record_input_refuses_what_is_not_a_label_name(labels: object) -> None:
    guard = Guard(
        load_policy_text(POLICY), context=Context(session_id="s"), sessions=MemoryHistory()
    )
    with pytest.raises(ValueError, match="label"):
        guard.record_input("a mail", trusted=False, labels=labels)  # type: ignore[arg-type]
    assert guard.record_input("a mail", trusted=False, labels=("untrusted",)) is not None


def test_a_session_pushed_out_of_memory_keeps_its_labels() -> None:
    """The in-memory history keeps the steps of at most ``max_sessions`` sessions:
    opening more must not wash a ``secret`` off an older one (its steps may go)."""
    history = MemoryHistory(max_sessions=2)
    guard = Guard(load_policy_text(POLICY), context=Context(session_id="a"), sessions=history)
    guard.check(Action.tool("read_file", {"path": "/home/u/.ssh/id_rsa"}))
    assert "secret" in history.view("default", "a").labels
    for other in ("b", "c", "d"):  # three more sessions: "a" loses its steps
        history.append("default", other, NewStep(kind="tool", name="ls", verdict="allow"))
    kept = history.view("default", "a")
    assert kept.steps == () and kept.labels == {"secret"}
    seq = history.append("default", "a", NewStep(kind="tool", name="ls", verdict="allow")).seq
    assert seq == 2  # numbering goes on
    assert history.view("default", "a").labels == {"secret"}
    # and a session that carried no label leaves nothing behind
    assert history.view("default", "b").labels == frozenset()
