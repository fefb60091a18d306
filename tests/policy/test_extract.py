"""Scope inference and parameter extraction (the check sees what the tool receives)."""

from __future__ import annotations

from typing import Any

import pytest

from interlock import Action, Verdict, load_policy_text
from interlock.policy.engine import CONFLICTING_ALIASES_RULE, evaluate, facts_for
from interlock.policy.extract import infer_keyword_scope, name_tokens, project_arguments, verb_of

POLICY = load_policy_text(
    """
version: 1
scopes:
  default: shell
  tools:
    "crm_*": data
"""
)


def facts(name: str, arguments: dict[str, Any], **fields: Any) -> Any:
    return facts_for(
        Action(kind=fields.pop("kind", "tool"), name=name, arguments=arguments, **fields), POLICY
    )


@pytest.mark.parametrize(
    ("name", "description", "arguments", "scope"),
    [
        ("run_shell", None, {"command": "ls"}, "shell"),
        ("bash", None, {}, "shell"),
        ("http_get", None, {}, "network"),
        ("fetchPage", None, {}, "browser"),  # page is more specific than fetch
        ("read_file", None, {}, "filesystem"),
        ("browser_navigate", None, {}, "browser"),
        ("lookup", "Fetch a URL from the web", {}, "network"),
        ("lookup", "Read a file from disk", {}, "filesystem"),
        ("lookup", None, {}, "shell"),  # the policy's default
        ("lookup", None, {"url": "https://x.io"}, "network"),  # runtime upgrade wins
        ("lookup", None, {"domain": "x.io"}, "network"),
        ("run_shell", None, {"path": "/etc/passwd"}, "filesystem"),  # seed semantics
        ("lookup", None, {"file_path": "/tmp/a"}, "filesystem"),
        ("crm_update", None, {"path": "/tmp"}, "data"),  # a policy pin wins over everything
    ],
)
def test_scope_inference(
    name: str, description: str | None, arguments: dict[str, Any], scope: str
) -> None:
    assert facts(name, arguments, description=description).scope == scope


def test_a_pinned_scope_on_the_action_wins() -> None:
    assert facts("read_file", {"url": "http://x"}, scope="cost").scope == "cost"


def test_llm_and_browser_kinds_have_their_own_scope() -> None:
    assert facts("gpt-5", {}, kind="llm").scope == "llm"
    assert facts("click", {"url": "http://x"}, kind="browser").scope == "browser"


@pytest.mark.parametrize(
    ("name", "verb"),
    [
        ("read_file", "read"),
        ("getUser", "read"),
        ("write_file", "write"),
        ("create-ticket", "write"),
        ("delete_row", "delete"),
        ("remove_and_save", "delete"),  # the strictest verb wins
        ("frobnicate", None),
    ],
)
def test_verb_from_the_tool_name(name: str, verb: str | None) -> None:
    assert verb_of(name) == verb
    assert facts(name, {}).params.get("verb") == verb


def test_name_tokens_split_snake_kebab_and_camel_case() -> None:
    assert name_tokens("readFile_now-please") == ("read", "file", "now", "please")
    assert infer_keyword_scope("x", "") is None


@pytest.mark.parametrize(
    ("arguments", "expected"),
    [
        ({"command": "ls -la"}, {"command": "ls -la"}),
        ({"cmd": "ls"}, {"command": "ls"}),
        ({"command": ["rm", "-rf", "/tmp/a b"]}, {"command": "rm -rf '/tmp/a b'"}),
        ({"command": "ls", "cmd": "ls"}, {"command": "ls"}),  # agreeing aliases are fine
        ({"command": None, "cmd": "ls"}, {"command": "ls"}),  # None is an unset optional
        ({"path": "/workspace/../etc/passwd"}, {"path": "/etc/passwd"}),
        ({"file_path": "a/./b"}, {"path": "a/b"}),
        (
            {"url": "https://Docs.Example.COM./x?q=1"},
            {
                "url": "https://Docs.Example.COM./x?q=1",
                "domain": "docs.example.com",
                "site": "example.com",
                "scheme": "https",
                "port": 443,
            },
        ),
        (
            {"url": "example.org/path"},
            {
                "url": "example.org/path",
                "domain": "example.org",
                "site": "example.org",
                "scheme": "http",
                "port": 80,
            },
        ),
        ({"domain": "API.github.com"}, {"domain": "api.github.com", "site": "github.com"}),
        (
            {"url": "https://a.io/x", "domain": "a.io"},
            {
                "url": "https://a.io/x",
                "domain": "a.io",
                "site": "a.io",
                "scheme": "https",
                "port": 443,
            },
        ),
        (
            {"url": "http://0x7f.1:8080/"},
            {
                "url": "http://0x7f.1:8080/",
                "domain": "127.0.0.1",
                "scheme": "http",
                "port": 8080,
                "ip_class": "loopback",
            },
        ),
        ({"host": "Docs.Example.com."}, {"domain": "docs.example.com", "site": "example.com"}),
        ({"session_id": "s-1", "est_cost": 0.25}, {"session_id": "s-1", "est_cost": 0.25}),
    ],
)
def test_parameter_extraction(arguments: dict[str, Any], expected: dict[str, Any]) -> None:
    assert facts("tool", arguments).params == expected


def test_a_raw_string_input_is_the_command_of_a_shell_tool() -> None:
    action = Action.tool("terminal", "ls -la")
    assert action.arguments == {"input": "ls -la"}
    assert facts_for(action, POLICY).params["command"] == "ls -la"


def test_json_string_arguments_are_parsed_once() -> None:
    assert Action.tool("x", '{"command": "ls"}').arguments == {"command": "ls"}


@pytest.mark.parametrize(
    "arguments",
    [
        {"command": "ls", "cmd": "rm -rf /"},
        {"path": "/tmp/a", "file_path": "/etc/shadow"},
        {"url": "https://good.example.com/", "domain": "evil.example.net"},
        {"command": "1", "cmd": 1},  # different types are different values
    ],
)
def test_conflicting_aliases_are_denied_without_evaluating_policy(
    arguments: dict[str, Any],
) -> None:
    allow_all = load_policy_text("version: 1\ndefault: allow\n")
    decision = evaluate(Action.tool("tool", arguments), allow_all)
    assert decision.verdict is Verdict.DENY
    assert decision.rule_ids == (CONFLICTING_ALIASES_RULE,)
    assert "conflicting arguments" in decision.reason


@pytest.mark.parametrize(
    ("schema", "kept"),
    [
        ({"type": "object", "properties": {"command": {}}}, {"command"}),
        (
            {"type": "object", "properties": {"command": {}}, "additionalProperties": True},
            {"command", "path"},
        ),
        ({"type": "object", "properties": {}}, set()),
        ({"type": "object"}, {"command", "path"}),  # no properties declared: nothing to project on
        (None, {"command", "path"}),
    ],
)
def test_projection_onto_the_declared_schema(schema: dict[str, Any] | None, kept: set[str]) -> None:
    assert set(project_arguments({"command": "ls", "path": "/tmp"}, schema)) == kept


def test_undeclared_keys_cannot_steer_scope() -> None:
    schema = {"type": "object", "properties": {"command": {"type": "string"}}}
    projected = facts("runner", {"command": "rm -rf /", "path": "/tmp"}, schema=schema)
    assert projected.scope == "shell"
    assert "path" not in projected.params


@pytest.mark.parametrize(
    ("arguments", "problem"),
    [
        ({"command": 42}, "not a string"),
        ({"path": {"nested": 1}}, "not a string"),
        ({"est_cost": float("nan")}, "finite number"),
        ({"est_cost": "cheap"}, "finite number"),
        ({"est_cost": True}, "finite number"),
        ({"url": "http://[::1"}, "not a URL"),
        ({"command": "x" * 70_000}, "over the 65536 limit"),
    ],
)
def test_parameters_that_cannot_be_judged_are_undetermined(
    arguments: dict[str, Any], problem: str
) -> None:
    allow_all = load_policy_text("version: 1\ndefault: allow\n")
    decision = evaluate(Action.tool("tool", arguments), allow_all)
    assert decision.verdict is Verdict.UNDETERMINED
    assert problem in decision.reason


def test_argument_limits_are_enforced_and_configurable() -> None:
    deep: Any = "leaf"
    for _ in range(40):
        deep = [deep]
    allow_all = load_policy_text("version: 1\ndefault: allow\n")
    decision = evaluate(Action.tool("tool", {"x": deep}), allow_all)
    assert decision.verdict is Verdict.UNDETERMINED
    assert "nested deeper than 32" in decision.reason
    roomy = load_policy_text("version: 1\ndefault: allow\nlimits: {max_depth: 64}\n")
    assert evaluate(Action.tool("tool", {"x": deep}), roomy).verdict is Verdict.ALLOW
    many = {"x": list(range(20_000))}
    assert evaluate(Action.tool("tool", many), allow_all).verdict is Verdict.UNDETERMINED


# -- the remembered path, URL and host parameters of short text values ----------------

_MEMO_CASES: list[dict[str, Any]] = [
    {"path": "/tmp/a/../b"},
    {"path": "/tmp/a", "file_path": "/tmp/a"},
    {"path": "/tmp/a", "file_path": "/tmp/b"},  # conflicting aliases: refused each time
    {"path": "/tmp/a", "filename": "/tmp/b"},  # two paths: judged in turn, not remembered
    {"url": "https://Alpha.example:8080/x?q=1"},
    {"url": "file:///etc/passwd"},
    {"url": "http://a.example/", "domain": "b.example"},  # conflicting: refused
    {"url": "not a url"},
    {"domain": "Alpha.Example."},
    {"host": "127.0.0.1", "hostname": "127.0.0.1"},
    {"path": None, "url": "https://alpha.example/"},
    {"path": "/tmp/" + "x" * 600},  # longer than the memo keeps
    {"path": ["/tmp/a", "/tmp/b"]},  # a list: read each time
    {"path": b"/tmp/bytes"},
]


def _outcome(arguments: Any) -> Any:
    try:
        found = facts("fetch_file", arguments)
    except Exception as exc:
        return (type(exc).__name__, str(exc))
    return (found.scope, found.scopes, found.params, found.variants)


@pytest.mark.parametrize("arguments", _MEMO_CASES)
def test_remembered_path_and_url_parameters_are_those_read_afresh(
    arguments: dict[str, Any],
) -> None:
    from types import MappingProxyType

    afresh = _outcome(MappingProxyType(arguments))  # another mapping: never remembered
    assert _outcome(dict(arguments)) == afresh
    assert _outcome(dict(arguments)) == afresh  # the second time, from the memo
    if len(afresh) == 4:  # judged, not refused: what a check is given is its own
        first = facts("fetch_file", dict(arguments))
        first.params["path"] = "changed"
        first.params["domain"] = "changed"
        assert _outcome(dict(arguments)) == afresh
