"""The ``peer`` benchmark's policy and call mix, written once in the peer toolkit's shape.

The peer toolkit's policy is a flat list of rules, each with **one** condition — a
context field, an operator (``eq``, ``ne``, ``gt``, ``gte``, ``lt``, ``lte``, ``in``,
``not_in``, ``matches``, ``contains``) and a value — an action (``allow`` / ``deny``)
and a priority; the highest-priority rule whose condition holds decides, and a policy
default applies when none does. The context is a flat dict: the tool's name under
``tool_name`` and its arguments beside it.

:func:`rules` is that policy (100 rules). :func:`peer_document` renders it in the
peer's own format and :func:`interlock_yaml` translates it, rule for rule, into
``interlock.yaml``:

* a condition on ``tool_name`` (``eq`` / ``in``) → the rule's ``name``;
* a condition on any other field → ``params: {args.<field>: ...}`` with the same test
  (``matches`` → ``regex``; ``contains`` → a CEL ``when``), and no ``name``: the peer's
  rule applies to every tool whose call has that field, and so does the translation.

First match by priority and deny-overrides give the same verdict when every deny rule
has a higher priority than every allow rule, which is how the policy is written. The
peer reports the first matching rule; Interlock reports every matching rule of the
deciding tier. :func:`matching_rules` evaluates each rule's condition with the peer's
semantics so the full sets can be compared; the real peer does the same in its own
process (``bench/peer/runner.py``), with its own condition matcher.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

import yaml

__all__ = [
    "CALLS",
    "Call",
    "PeerRule",
    "interlock_yaml",
    "matching_rules",
    "peer_context",
    "peer_document",
    "reference_decision",
    "rules",
]

DENY_PRIORITY: Final = 100
ALLOW_PRIORITY: Final = 10
_OPERATORS: Final = frozenset(
    {"eq", "ne", "gt", "gte", "lt", "lte", "in", "not_in", "matches", "contains"}
)


@dataclass(frozen=True, slots=True)
class PeerRule:
    """One rule in the peer's shape: one condition, an action, a priority."""

    name: str
    field: str
    operator: str
    value: Any
    action: str  # allow | deny

    @property
    def priority(self) -> int:
        return DENY_PRIORITY if self.action == "deny" else ALLOW_PRIORITY

    def to_peer(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "condition": {"field": self.field, "operator": self.operator, "value": self.value},
            "action": self.action,
            "priority": self.priority,
            "message": f"{self.action}: {self.field} {self.operator} {self.value}",
        }

    def to_interlock(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "id": self.name,
            "decision": self.action,
            "reason": f"{self.field} {self.operator} {self.value}",
        }
        if self.field == "tool_name":
            if self.operator == "eq":
                out["name"] = self.value
            elif self.operator == "in":
                out["name"] = list(self.value)
            else:
                raise ValueError(f"rule {self.name}: no translation of tool_name {self.operator}")
            return out
        key = f"args.{self.field}"
        if self.operator == "matches":
            out["params"] = {key: {"regex": [self.value]}}
        elif self.operator == "contains":
            if not isinstance(self.value, str):
                raise ValueError(f"rule {self.name}: contains translates for text only")
            out["when"] = f"has({key}) && {key}.contains({json.dumps(self.value)})"
        elif self.operator in ("in", "not_in"):
            out["params"] = {key: {self.operator: list(self.value)}}
        elif self.operator in _OPERATORS:
            out["params"] = {key: {self.operator: self.value}}
        else:
            raise ValueError(f"rule {self.name}: unknown operator {self.operator!r}")
        return out


def _matches(rule: PeerRule, context: Mapping[str, Any]) -> bool:
    """The peer's condition semantics: a missing (or null) field never matches."""
    value = context.get(rule.field)
    if value is None:
        return False
    op, target = rule.operator, rule.value
    if op == "eq":
        return bool(value == target)
    if op == "ne":
        return bool(value != target)
    if op == "gt":
        return bool(value > target)
    if op == "lt":
        return bool(value < target)
    if op == "gte":
        return bool(value >= target)
    if op == "lte":
        return bool(value <= target)
    if op == "in":
        return value in target
    if op == "not_in":
        return value not in target
    if op == "contains":
        return target in value
    if op == "matches":
        return re.search(str(target), str(value)) is not None
    return False


# ---------------------------------------------------------------------------------
# The policy: 40 deny rules (priority 100) and 60 allow rules (priority 10).
# ---------------------------------------------------------------------------------

_BLOCKED_TOOLS: Final = (
    ("deny-destructive-tools", ["db_drop_table", "format_disk", "k8s_delete_namespace"]),
    ("deny-shell-tools", ["shell_exec", "bash", "powershell"]),
    ("deny-credential-tools", ["vault_read_secret", "iam_create_key"]),
)
_DENY_PATHS: Final = (
    ("deny-path-etc", r"^/etc/"),
    ("deny-path-root-home", r"^/root/"),
    ("deny-path-ssh", r"/\.ssh/"),
    ("deny-path-pem", r"\.pem$"),
    ("deny-path-key", r"\.key$"),
    ("deny-path-dotenv", r"(^|/)\.env$"),
    ("deny-path-proc", r"^/proc/"),
    ("deny-path-sys", r"^/sys/"),
    ("deny-path-traversal", r"(^|/)\.\.(/|$)"),
    ("deny-path-var-lib", r"^/var/lib/"),
    ("deny-path-kube", r"/\.kube/config$"),
    ("deny-path-aws", r"/\.aws/credentials$"),
)
_DENY_URLS: Final = (
    ("deny-url-plain-http", r"^http://"),
    ("deny-url-metadata", r"169\.254\.169\.254"),
    ("deny-url-localhost", r"^https?://(localhost|127\.0\.0\.1)(:|/|$)"),
    ("deny-url-onion", r"\.onion(:|/|$)"),
    ("deny-url-paste", r"^https://(www\.)?(pastebin\.com|paste\.ee)/"),
    ("deny-url-file", r"^file:"),
    ("deny-url-raw-ip", r"^https?://[0-9]+\.[0-9]+\.[0-9]+\.[0-9]+"),
    ("deny-url-userinfo", r"^https?://[^/]*@"),
)
_DENY_TEXT: Final = (
    ("deny-to-webmail", "to", "matches", r"@(gmail|yahoo|outlook|proton)\.(com|me)$"),
    ("deny-to-list-all", "to", "eq", "all-staff@example.com"),
    ("deny-cc-external", "cc", "matches", r"@(?:[a-z0-9-]+\.)*(?:com|net|org)$"),
    ("deny-query-drop", "query", "matches", r"(?i)\bdrop\s+table\b"),
    ("deny-query-truncate", "query", "matches", r"(?i)\btruncate\b"),
    ("deny-query-delete", "query", "matches", r"(?i)\bdelete\s+from\b"),
    ("deny-query-grant", "query", "matches", r"(?i)\bgrant\s+all\b"),
    ("deny-body-secret", "body", "contains", "BEGIN PRIVATE KEY"),
    ("deny-env-production", "environment", "eq", "production"),
    ("deny-region-unapproved", "region", "not_in", ["eu-west-1", "eu-central-1", "us-east-1"]),
    ("deny-currency-unknown", "currency", "not_in", ["EUR", "USD", "GBP"]),
    ("deny-amount-large", "amount", "gt", 5000),
    ("deny-amount-negative", "amount", "lt", 0),
    ("deny-tokens-large", "max_tokens", "gt", 32000),
    ("deny-replicas-many", "replicas", "gte", 50),
    ("deny-department-hr", "department", "in", ["hr", "legal"]),
    ("deny-role-admin", "role", "eq", "admin"),
)
_ALLOWED_TOOLS: Final = (
    "read_file",
    "write_file",
    "list_dir",
    "http_get",
    "http_post",
    "send_email",
    "refund_order",
    "db_query",
    "search_docs",
    "create_ticket",
)


def rules() -> list[PeerRule]:
    """The 100 rules: 40 deny, then 60 allow (one per permitted tool)."""
    out: list[PeerRule] = []
    for name, tools in _BLOCKED_TOOLS:
        out.append(PeerRule(name, "tool_name", "in", tools, "deny"))
    for name, pattern in _DENY_PATHS:
        out.append(PeerRule(name, "path", "matches", pattern, "deny"))
    for name, pattern in _DENY_URLS:
        out.append(PeerRule(name, "url", "matches", pattern, "deny"))
    for name, field, operator, value in _DENY_TEXT:
        out.append(PeerRule(name, field, operator, value, "deny"))
    tools = list(_ALLOWED_TOOLS)
    tools.extend(f"crm_action_{i:02d}" for i in range(60 - len(tools)))
    for tool in tools:
        out.append(PeerRule(f"allow-{tool.replace('_', '-')}", "tool_name", "eq", tool, "allow"))
    return out


def peer_document(spec: Sequence[PeerRule]) -> dict[str, Any]:
    """The policy in the peer's document format (a dict its model validates)."""
    return {
        "version": "1.0",
        "name": "bench-peer-100",
        "description": "Benchmark policy: 100 single-condition rules, default deny.",
        "rules": [rule.to_peer() for rule in spec],
        "defaults": {"action": "deny"},
    }


def interlock_yaml(spec: Sequence[PeerRule]) -> str:
    """The same policy as ``interlock.yaml``."""
    document = {
        "version": 1,
        "default": "deny",
        "description": "The peer benchmark's 100 single-condition rules, translated.",
        # No tool here is a shell: the default scope would read a tool's raw input as a
        # command, which the peer's policy never does.
        "scopes": {"default": "data"},
        "rules": [rule.to_interlock() for rule in spec],
    }
    return yaml.safe_dump(document, sort_keys=False, width=100, allow_unicode=True)


# ---------------------------------------------------------------------------------
# The 6-call mix, each call with the verdict and rule ids it is written to get.
# ---------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Call:
    tool: str
    args: Mapping[str, Any]
    expect: str  # allow | deny
    expect_rules: tuple[str, ...]  # every matching rule of the deciding tier, sorted
    note: str


CALLS: Final[tuple[Call, ...]] = (
    Call(
        "read_file",
        {"path": "/workspace/src/app.py"},
        "allow",
        ("allow-read-file",),
        "a permitted tool, no deny rule on its path",
    ),
    Call(
        "http_get",
        {"url": "https://docs.example.com/guide/install"},
        "allow",
        ("allow-http-get",),
        "a permitted tool; all eight URL regexes searched and missed",
    ),
    Call(
        "send_email",
        {"to": "ops@example.com", "subject": "nightly report", "body": "All green."},
        "allow",
        ("allow-send-email",),
        "a permitted tool; recipient and body rules miss",
    ),
    Call(
        "refund_order",
        {"order_id": "A-1001", "amount": 12000, "currency": "EUR"},
        "deny",
        ("deny-amount-large",),
        "a number rule denies",
    ),
    Call(
        "read_file",
        {"path": "/home/agent/.ssh/id_ed25519.key"},
        "deny",
        ("deny-path-key", "deny-path-ssh"),
        "two path regexes deny",
    ),
    Call(
        "launch_rocket",
        {"target": "moon"},
        "deny",
        (),
        "no rule matches: the default denies (the peer tests all 100 rules)",
    ),
)


def peer_context(call: Call) -> dict[str, Any]:
    """The peer's evaluation context for a call: the tool name beside the arguments."""
    if "tool_name" in call.args:
        raise ValueError("an argument named tool_name would shadow the tool's name")
    return {"tool_name": call.tool, **call.args}


def matching_rules(spec: Sequence[PeerRule], context: Mapping[str, Any]) -> list[PeerRule]:
    """Every rule whose condition holds, with the peer's semantics (this module's own
    reading of them; the real peer's matcher is used in its own process)."""
    return [rule for rule in spec if _matches(rule, context)]


def reference_decision(
    spec: Sequence[PeerRule], context: Mapping[str, Any]
) -> tuple[str, tuple[str, ...]]:
    """The verdict first-match-by-priority gives, and every matching rule of its tier
    (sorted), read the way Interlock reports rule ids."""
    matched = matching_rules(spec, context)
    if not matched:
        return "deny", ()
    winner = sorted(matched, key=lambda r: r.priority, reverse=True)[0]
    tier = sorted(r.name for r in matched if r.action == winner.action)
    return winner.action, tuple(tier)
