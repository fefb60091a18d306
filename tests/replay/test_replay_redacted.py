"""Redacted arguments and unrecorded context: a rule whose match reads what the record
lost is "cannot tell", never guessed — and a rule that reads only what the record
kept is judged as usual (the benign look-alikes of each case)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from interlock.core.action import Action, Context
from interlock.core.events import Event
from interlock.policy.engine import evaluate
from interlock.policy.loader import load_policy_text
from interlock.replay import replay_store
from interlock.replay.lossy import body_may_be_lossy, lossy_value
from interlock.store import SqlStore, open_store
from interlock.store.audit import AuditWriter

RECORDED_UNDER = "version: 1\ndefault: allow\nrules: []\n"
CONTEXT = Context(tenant="acme", agent="support-bot", session_id="s-1", run_id="r-1")

FETCH_WITH_KEY = Action.tool(
    "fetch_url", {"url": "https://docs.example.com/a", "api_key": "sk-live-123"}, context=CONTEXT
)
MAIL_WITH_TOKEN = Action.tool(
    "send_email",
    {"to": "a@partner.example.net", "body": "here: token=s3cr3t-abc"},
    context=CONTEXT,
)
SHELL_WITH_BEARER = Action.tool(
    "shell",
    {"command": "curl -H 'Authorization: Bearer abc.def-123' https://api.example.com"},
    context=CONTEXT,
)
PLAIN_FETCH = Action.tool("fetch_url", {"url": "https://docs.example.com/b"}, context=CONTEXT)


def _rules(*rules: str) -> str:
    return "version: 1\ndefault: allow\nrules:\n" + "".join(rules)


def _rule(rule_id: str, verdict: str, body: str) -> str:
    return f"  - id: {rule_id}\n    decision: {verdict}\n    reason: r\n{body}"


@pytest.fixture
def record(tmp_path: Path) -> Iterator[Any]:
    """Write calls to a fresh log as a guard records them; yields the writer function
    and then the store."""
    store = open_store(f"sqlite:///{tmp_path / 'r.db'}")
    policy = load_policy_text(RECORDED_UNDER)

    def write(*actions: Action) -> SqlStore:
        writer = AuditWriter(store, checkpoints=False)
        for action in actions:
            event = Event("decision", 1.0e9, action, evaluate(action, policy), 1000)
            writer.write_event(action.context.tenant, event)
        writer.close()
        return store

    yield write
    store.close()


# (case, calls recorded, draft rules, expected cannot_tell count)
CASES = [
    (
        "a deny rule reading a redacted argument",
        [FETCH_WITH_KEY],
        _rule(
            "live-keys",
            "deny",
            "    name: fetch_url\n    params:\n      args.api_key: {glob: 'sk-live-*'}\n",
        ),
        1,
    ),
    (
        "benign: a rule on the same call reading an argument kept whole",
        [FETCH_WITH_KEY],
        _rule(
            "docs-only",
            "deny",
            "    name: fetch_url\n    params:\n      args.url: {glob: '*evil*'}\n",
        ),
        0,
    ),
    (
        "a `when:` reading text with a redacted part",
        [MAIL_WITH_TOKEN],
        _rule(
            "no-tokens",
            "deny",
            "    name: send_email\n    when: \"args.body.contains('s3cr3t')\"\n",
        ),
        1,
    ),
    (
        "benign: a `when:` reading the recipient, kept whole",
        [MAIL_WITH_TOKEN],
        _rule(
            "partner",
            "deny",
            "    name: send_email\n    when: \"args.to.endsWith('@evil.example')\"\n",
        ),
        0,
    ),
    (
        "a shell rule reading a command with a redacted word",
        [SHELL_WITH_BEARER],
        _rule(
            "no-curl",
            "deny",
            "    scope: shell\n    shell:\n      commands:\n        - {program: curl}\n",
        ),
        1,
    ),
    (
        "benign: a rule on the tool's name alone",
        [SHELL_WITH_BEARER],
        _rule("no-shell", "deny", "    name: shell\n"),
        0,
    ),
    (
        "a rule reading context the record does not keep (run_id)",
        [PLAIN_FETCH],
        _rule("one-run", "deny", "    name: fetch_url\n    when: \"context.run_id == 'r-1'\"\n"),
        1,
    ),
    (
        "benign: a rule reading the agent, which the record keeps",
        [PLAIN_FETCH],
        _rule("bot", "deny", "    name: fetch_url\n    when: \"context.agent == 'support-bot'\"\n"),
        0,
    ),
    (
        "benign: the redacted rule is looser than a known deny (deny overrides)",
        [FETCH_WITH_KEY],
        _rule("all-fetch", "deny", "    name: fetch_url\n")
        + _rule(
            "key-ok",
            "allow",
            "    name: fetch_url\n    params:\n      args.api_key: {glob: 'sk-test-*'}\n",
        ),
        0,
    ),
    (
        "a redacted allow rule under a default deny decides whether the call runs",
        [FETCH_WITH_KEY],
        _rule(
            "key-ok",
            "allow",
            "    name: fetch_url\n    params:\n      args.api_key: {glob: 'sk-test-*'}\n",
        ),
        -1,  # with `default: deny` below
    ),
    (
        "benign: undetermined by a rule reading an argument kept whole",
        [FETCH_WITH_KEY],
        _rule("bad-cel", "deny", '    name: fetch_url\n    when: "args.url > 5"\n'),
        0,
    ),
    (
        "benign: a redacted rule of another tool",
        [PLAIN_FETCH, MAIL_WITH_TOKEN],
        _rule(
            "fetch-keys",
            "deny",
            "    name: fetch_url\n    params:\n      args.api_key: {exists: true}\n",
        ),
        0,
    ),
]


@pytest.mark.parametrize(("case", "calls", "rules", "expected"), CASES, ids=[c[0] for c in CASES])
def test_cannot_tell_only_when_the_verdict_depends_on_what_was_lost(
    record: Any, case: str, calls: list[Action], rules: str, expected: int
) -> None:
    store = record(*calls)
    text = _rules(rules)
    if expected == -1:
        text, expected = text.replace("default: allow", "default: deny"), 1
    data = replay_store(store, load_policy_text(text)).as_json("any")
    assert data["records"]["replayed"] == len(calls)
    assert data["outcome"]["cannot_tell"] == expected, data["examples"]
    if expected:
        example = data["examples"]["cannot_tell"][0]
        assert "redacted" in example["why"] or "do not keep" in example["why"]
        assert data["failed"] is True  # --fail-on any counts a verdict it cannot tell
    else:
        assert "cannot_tell" not in data["examples"]


def test_the_secret_itself_is_never_in_the_report(record: Any) -> None:
    store = record(FETCH_WITH_KEY, MAIL_WITH_TOKEN, SHELL_WITH_BEARER)
    draft = _rules(_rule("nothing", "deny", "    name: '*'\n"))
    text = str(replay_store(store, load_policy_text(draft)).as_json())
    for secret in ("sk-live-123", "s3cr3t-abc", "abc.def-123"):
        assert secret not in text


@pytest.mark.parametrize(
    ("value", "lossy"),
    [
        ("[REDACTED]", True),
        ("Bearer [REDACTED:authorization]", True),
        ({"nested": ["x", "<bytes len=3>"]}, True),
        ("<truncated: depth>", True),
        ("<cycle>", True),
        ("<unrepresentable: Foo>", True),
        ("<int bits=20000>", True),
        ({"[REDACTED:github-token]": 1}, True),  # a key
        ("redacted", False),
        ("[REDACT]", False),
        ("<bytes>", False),
        ({"a": [1, 2.5, None, True]}, False),
        ("the <cycle of life", False),
    ],
)
def test_what_counts_as_lost(value: Any, lossy: bool) -> None:
    assert lossy_value(value) is lossy


def test_a_body_with_no_marker_is_not_walked() -> None:
    assert not body_may_be_lossy('{"action":{"arguments":{"x":"y"}}}')
    assert body_may_be_lossy('{"action":{"arguments":{"x":"[REDACTED]"}}}')
