"""A call judged as everything it is: every scope its arguments add, every listed
value, every file and URL its shell command uses (policy/facets.py)."""

from __future__ import annotations

from typing import Any

import pytest

from interlock import Action, Verdict, load_policy_text
from interlock.policy.engine import evaluate

POLICY = load_policy_text(
    """
version: 1
default: deny
scopes:
  tools:
    pinned_shell: shell
rules:
  - id: shell-ls
    decision: allow
    reason: listing is fine
    scope: shell
    shell: {programs: [ls, cat, curl], writes: false}
  - id: net-docs
    decision: allow
    reason: the docs site
    scope: network
    params: {domain: docs.example.com}
  - id: net-no-loopback
    decision: deny
    reason: no loopback
    scope: network
    params: {ip_class: loopback}
  - id: files-workspace
    decision: allow
    reason: the workspace
    scope: filesystem
    params: {path: "/workspace/*"}
  - id: files-no-etc
    decision: deny
    reason: system files are off limits
    scope: filesystem
    params: {path: "/etc/*"}
  - id: files-keys-ask
    decision: require_approval
    reason: keys need a human
    scope: filesystem
    params: {path: "*.pem"}
  - id: files-tmp-trial
    decision: deny
    mode: shadow
    reason: (trial) /tmp is off limits
    scope: filesystem
    params: {path: "/tmp/*"}
  - id: files-cel
    decision: deny
    reason: no hidden files by CEL
    scope: filesystem
    when: "params.path.contains('/.')"
"""
)


def decide(name: str, arguments: dict[str, Any], **fields: Any) -> Any:
    return evaluate(Action(kind="tool", name=name, arguments=arguments, **fields), POLICY)


@pytest.mark.parametrize(
    ("name", "arguments", "verdict", "rule_ids"),
    [
        # every scope the arguments add, each with the default
        (
            "run",
            {"command": "ls", "url": "https://docs.example.com/"},
            Verdict.ALLOW,
            ("net-docs", "shell-ls"),
        ),
        ("run", {"command": "ls", "url": "https://evil.example/"}, Verdict.DENY, ()),
        ("run", {"command": "rm -rf /", "url": "https://docs.example.com/"}, Verdict.DENY, ()),
        ("run", {"command": "ls", "path": "/etc/passwd"}, Verdict.DENY, ("files-no-etc",)),
        # a pinned scope is the only one
        (
            "pinned_shell",
            {"command": "ls", "url": "https://evil.example/"},
            Verdict.ALLOW,
            ("shell-ls",),
        ),
        # lists: each value
        ("read", {"paths": ["/workspace/a", "/workspace/b"]}, Verdict.ALLOW, ("files-workspace",)),
        ("read", {"paths": ["/workspace/a", "/etc/shadow"]}, Verdict.DENY, ("files-no-etc",)),
        ("read", {"paths": ["/workspace/a", "/home/x"]}, Verdict.DENY, ()),
        (
            "read",
            {"paths": ["/workspace/a.pem", "/workspace/b"]},
            Verdict.REQUIRE_APPROVAL,
            ("files-keys-ask",),
        ),
        (
            "fetch",
            {"urls": ["https://docs.example.com/a", "https://docs.example.com/b"]},
            Verdict.ALLOW,
            ("net-docs",),
        ),
        (
            "fetch",
            {"urls": ["https://docs.example.com/a", "http://127.1/"]},
            Verdict.DENY,
            ("net-no-loopback",),
        ),
        # the files and URLs a command uses meet the deny rules of their scope
        ("run", {"command": "cat /etc/shadow"}, Verdict.DENY, ("files-no-etc",)),
        ("run", {"command": "cat /workspace/a"}, Verdict.ALLOW, ("shell-ls",)),
        ("run", {"command": "cat /home/x"}, Verdict.ALLOW, ("shell-ls",)),  # no default
        (
            "run",
            {"command": "cat /workspace/key.pem"},
            Verdict.REQUIRE_APPROVAL,
            ("files-keys-ask",),
        ),
        ("run", {"command": "curl http://0x7f.1/admin"}, Verdict.DENY, ("net-no-loopback",)),
        ("run", {"command": "curl https://evil.example/"}, Verdict.ALLOW, ("shell-ls",)),
        # a file URL is a file read
        ("fetch", {"url": "file:///etc/passwd"}, Verdict.DENY, ("files-no-etc",)),
    ],
)
def test_each_facet_is_judged_and_the_strictest_wins(
    name: str, arguments: dict[str, Any], verdict: Verdict, rule_ids: tuple[str, ...]
) -> None:
    decision = decide(name, arguments)
    assert (decision.verdict, decision.rule_ids) == (verdict, rule_ids), decision.reason


def test_the_reason_says_which_file_decided() -> None:
    decision = decide("run", {"command": "ls /workspace; cat /etc/shadow"})
    assert decision.reason == "system files are off limits (`cat` reads /etc/shadow)"
    decision = decide("run", {"command": "echo x > /etc/motd"})
    assert "a redirection writes /etc/motd" in decision.reason


def test_shadow_rules_see_the_files_a_command_uses() -> None:
    decision = decide("run", {"command": "cat /tmp/x"})
    assert decision.verdict is Verdict.ALLOW
    assert decision.shadow is not None
    assert (decision.shadow.verdict, decision.shadow.rule_ids) == (
        Verdict.DENY,
        ("files-tmp-trial",),
    )


@pytest.mark.parametrize(
    ("arguments", "says"),
    [
        ({"command": "cat ../../etc/passwd"}, "only known as the pattern '*/etc/passwd'"),
        ({"command": "$EDITOR /workspace/x"}, "not known until it runs"),
        ({"command": "ls 'open"}, "cannot be parsed"),
        ({"path": "../../etc/passwd"}, "only known as the pattern"),
        ({"command": "cat /workspace/$X"}, "`when` reads params"),
    ],
)
def test_what_cannot_be_known_is_undetermined(arguments: dict[str, Any], says: str) -> None:
    decision = decide("run", arguments)
    assert decision.verdict is Verdict.UNDETERMINED
    assert says in decision.reason


def test_too_many_combinations_of_listed_values_are_undetermined() -> None:
    paths = [f"/workspace/{i}" for i in range(20)]
    urls = [f"https://docs.example.com/{i}" for i in range(20)]
    decision = decide("sync", {"paths": paths, "urls": urls})
    assert decision.verdict is Verdict.UNDETERMINED
    assert "400 combinations" in decision.reason


def test_one_facet_calls_take_the_plain_path() -> None:
    """A call with one scope and one value per parameter is not split: the engine's
    result is the same object shape, and the default applies as ever."""
    decision = decide("refund", {"amount": 5})
    assert (decision.verdict, decision.rule_ids) == (Verdict.DENY, ())
    assert decision.reason == "no rule matched; the policy default is deny"
