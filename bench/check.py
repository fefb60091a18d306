"""Benchmark ``check``: the cost of one decision, against a floor and against Cedar.

The subjects, all on the same fixed workload of 22 actions cycled, in one run:

* ``guard.check`` — the full facade with a :class:`MemorySink`, so the audit event is
  built for every call;
* ``evaluate`` — the pure engine, without the facade;
* the **floor** — a dict lookup plus one compiled regex search per call: the cheapest
  in-process decision anyone could write;
* **cedarpy** — the same 100 rules translated into Cedar and evaluated with
  ``cedarpy.is_authorized`` on pre-parsed ``PolicySet`` / ``Entities`` handles (the
  fastest path cedarpy offers; the per-call request dicts are built ahead of time, so
  request building is not charged to Cedar either).

The policy is generated from one rule spec (:func:`rules`) that renders to both
``interlock.yaml`` and Cedar, so the two are equivalent by construction; the run then
checks that the two engines give the same answers on the workload and reports any
mismatch loudly.

How the three Interlock tiers are modelled in Cedar. Cedar has two effects (permit,
forbid; forbid overrides; no match denies), Interlock three (deny > require_approval >
allow; no match gives ``default: deny``):

* ``allow`` rule            → ``permit``;
* ``deny`` rule             → ``forbid`` annotated ``@verdict("deny")``;
* ``require_approval`` rule → ``forbid`` annotated ``@verdict("require_approval")``.

A require_approval rule must block the action just like a deny does, so "allowed" means
the same thing in both engines. The annotation, read back through the ids of the
policies Cedar reports as reasons, tells a Cedar ``Deny`` caused by an approval rule
from one caused by a deny rule (deny wins when both match, as in Interlock), and a
``Deny`` with no reasons is the default. Every policy carries ``@id("<rule id>")``, so
the rule ids can be compared too.

What does not translate one-to-one: Cedar has no regular expressions. The handful of
``regex`` conditions are given hand-written ``like`` equivalents that agree on this
workload (not in general); the agreement check is what keeps them honest.
"""

from __future__ import annotations

import cProfile
import functools
import io
import ipaddress
import json
import posixpath
import pstats
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final
from urllib.parse import urlsplit

import yaml

from bench.harness import (
    RESULTS_DIR,
    BenchResult,
    Stats,
    Target,
    dict_regex_floor,
    summarise,
    time_calls,
    timer_overhead,
)
from interlock import Action, Context, Guard, load_policy_text
from interlock.core.events import MemorySink
from interlock.policy import CompiledPolicy, evaluate
from interlock.policy.engine import facts_for

__all__ = ["DEFAULT_CALLS", "build", "profile", "rules", "run", "workload"]

DEFAULT_CALLS: Final = 200_000
DEFAULT_WARMUP: Final = 10_000
#: Cedar is ~10x slower per call; 100k calls keep the whole run well under a minute.
DEFAULT_CEDAR_CALLS: Final = 100_000
TARGET_P50_US: Final = 10.0
TARGET_P99_US: Final = 50.0
TARGET_CEDAR_RATIO: Final = 15.0

# ---------------------------------------------------------------------------------
# The rule spec: one source, rendered to interlock.yaml and to Cedar.
# ---------------------------------------------------------------------------------


def _q(text: str) -> str:
    """A double-quoted string literal valid in both CEL and Cedar."""
    return json.dumps(text)


def _like(pattern: str) -> str:
    """A Cedar ``like`` pattern from an fnmatch glob that only uses ``*``."""
    if any(ch in pattern for ch in "?[]"):
        raise ValueError(f"glob {pattern!r} uses more than `*`; Cedar `like` cannot say it")
    return _q(pattern)


@dataclass(frozen=True, slots=True)
class Test:
    """One boolean test, said in CEL (for ``when:``) and in Cedar."""

    cel: str
    cedar: str


def all_of(*tests: Test) -> Test:
    return Test(
        " && ".join(f"({t.cel})" for t in tests), " && ".join(f"({t.cedar})" for t in tests)
    )


def any_of(*tests: Test) -> Test:
    return Test(
        " || ".join(f"({t.cel})" for t in tests), " || ".join(f"({t.cedar})" for t in tests)
    )


def not_(test: Test) -> Test:
    return Test(f"!({test.cel})", f"!({test.cedar})")


def _lit(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, str):
        return _q(value)
    raise TypeError(f"no literal for {value!r}")


def _cel_has(key: str) -> tuple[str, str]:
    """(presence test, value) in CEL for ``args.x`` or an extracted param."""
    var = key if key.startswith("args.") else f"params.{key}"
    return f"has({var})", var


def _cedar_has(key: str) -> tuple[str, str]:
    if key.startswith("args."):
        name = key[5:]
        return f"context.args has {name}", f"context.args.{name}"
    return f"context.params has {key}", f"context.params.{key}"


def num(key: str, op: str, value: int) -> Test:
    """``args.amount > 100`` and friends (integers only: Cedar has no floats)."""
    ch, cv = _cel_has(key)
    dh, dv = _cedar_has(key)
    return Test(f"{ch} && {cv} {op} {value}", f"{dh} && {dv} {op} {value}")


def eq(key: str, value: str | int | bool) -> Test:
    ch, cv = _cel_has(key)
    dh, dv = _cedar_has(key)
    return Test(f"{ch} && {cv} == {_lit(value)}", f"{dh} && {dv} == {_lit(value)}")


def one_of(key: str, values: Sequence[str]) -> Test:
    ch, cv = _cel_has(key)
    dh, dv = _cedar_has(key)
    items = ", ".join(_q(v) for v in values)
    return Test(f"{ch} && {cv} in [{items}]", f"{dh} && [{items}].contains({dv})")


def starts(key: str, prefix: str) -> Test:
    ch, cv = _cel_has(key)
    dh, dv = _cedar_has(key)
    return Test(
        f"{ch} && {cv}.startsWith({_q(prefix)})", f"{dh} && {dv} like {_like(prefix + '*')}"
    )


def ends(key: str, suffix: str) -> Test:
    ch, cv = _cel_has(key)
    dh, dv = _cedar_has(key)
    return Test(f"{ch} && {cv}.endsWith({_q(suffix)})", f"{dh} && {dv} like {_like('*' + suffix)}")


def contains(key: str, part: str) -> Test:
    ch, cv = _cel_has(key)
    dh, dv = _cedar_has(key)
    return Test(
        f"{ch} && {cv}.contains({_q(part)})", f"{dh} && {dv} like {_like('*' + part + '*')}"
    )


def list_has(key: str, item: str) -> Test:
    """A list argument holds ``item`` (a Cedar set)."""
    ch, cv = _cel_has(key)
    dh, dv = _cedar_has(key)
    return Test(f"{ch} && {_q(item)} in {cv}", f"{dh} && {dv}.contains({_q(item)})")


def same_args(first: str, second: str) -> Test:
    c1, v1 = _cel_has(first)
    c2, v2 = _cel_has(second)
    d1, w1 = _cedar_has(first)
    d2, w2 = _cedar_has(second)
    return Test(f"{c1} && {c2} && {v1} == {v2}", f"{d1} && {d2} && {w1} == {w2}")


def arg_not_tenant(key: str) -> Test:
    """An argument names a tenant other than the caller's (cross-tenant access)."""
    ch, cv = _cel_has(key)
    dh, dv = _cedar_has(key)
    return Test(f"{ch} && {cv} != context.tenant", f"{dh} && {dv} != context.tenant")


def tenant_is(tenant: str) -> Test:
    return Test(f"context.tenant == {_q(tenant)}", f"context.tenant == {_q(tenant)}")


def tenant_in(tenants: Sequence[str]) -> Test:
    items = ", ".join(_q(t) for t in tenants)
    return Test(f"context.tenant in [{items}]", f"[{items}].contains(context.tenant)")


def agent_is(agent: str) -> Test:
    # Interlock gives CEL a null agent when none is set; Cedar has no null, so the
    # attribute is simply absent.
    return Test(
        f"context.agent == {_q(agent)}", f"context has agent && context.agent == {_q(agent)}"
    )


def agent_type_is(agent_type: str) -> Test:
    return Test(
        f"context.agent_type == {_q(agent_type)}",
        f"context has agent_type && context.agent_type == {_q(agent_type)}",
    )


def verb_in(verbs: Sequence[str]) -> Test:
    items = ", ".join(_q(v) for v in verbs)
    return Test(
        f"action.verb in [{items}]", f"context has verb && [{items}].contains(context.verb)"
    )


def no_session() -> Test:
    return Test("context.session_id == null", "!(context has session_id)")


@dataclass(frozen=True, slots=True)
class Param:
    """A ``params:`` condition: its YAML form and a Cedar expression that says the same."""

    key: str
    yaml: Any
    cedar: str


def _cedar_any_like(value: str, globs: Sequence[str]) -> str:
    return " || ".join(f"{value} like {_like(g)}" for g in globs)


def p_glob(key: str, *globs: str) -> Param:
    has, value = _cedar_has(key)
    return Param(key, {"glob": list(globs)}, f"{has} && ({_cedar_any_like(value, globs)})")


def p_not_glob(key: str, *globs: str) -> Param:
    has, value = _cedar_has(key)
    return Param(key, {"not_glob": list(globs)}, f"{has} && !({_cedar_any_like(value, globs)})")


def p_regex(key: str, regexes: Sequence[str], *, cedar_like: Sequence[str]) -> Param:
    """A regex condition; Cedar has no regex, so ``cedar_like`` is a hand-made ``like``
    approximation (exact on this workload, not in general)."""
    has, value = _cedar_has(key)
    return Param(key, {"regex": list(regexes)}, f"{has} && ({_cedar_any_like(value, cedar_like)})")


def p_regex_cedar(key: str, regexes: Sequence[str], *, cedar: str) -> Param:
    """A regex condition with a free-form Cedar approximation (``$`` is the value)."""
    has, value = _cedar_has(key)
    return Param(key, {"regex": list(regexes)}, f"{has} && ({cedar.replace('$', value)})")


def p_regex_unless_cedar(
    key: str, regexes: Sequence[str], unless: Sequence[str], *, cedar: str
) -> Param:
    """A regex condition with a ``not_regex`` (RE2 has no lookarounds: "matches A but
    not B" is two tests), and a free-form Cedar approximation (``$`` is the value)."""
    has, value = _cedar_has(key)
    return Param(
        key,
        {"regex": list(regexes), "not_regex": list(unless)},
        f"{has} && ({cedar.replace('$', value)})",
    )


def p_in(key: str, *values: str) -> Param:
    has, value = _cedar_has(key)
    items = ", ".join(_q(v) for v in values)
    return Param(key, {"in": list(values)}, f"{has} && [{items}].contains({value})")


def p_not_in(key: str, *values: str) -> Param:
    has, value = _cedar_has(key)
    items = ", ".join(_q(v) for v in values)
    return Param(key, {"not_in": list(values)}, f"{has} && !([{items}].contains({value}))")


def p_eq(key: str, value: str | int) -> Param:
    has, cedar_value = _cedar_has(key)
    return Param(key, {"eq": value}, f"{has} && {cedar_value} == {_lit(value)}")


def p_num(key: str, op: str, value: int) -> Param:
    names = {">": "gt", ">=": "gte", "<": "lt", "<=": "lte"}
    has, cedar_value = _cedar_has(key)
    return Param(key, {names[op]: value}, f"{has} && {cedar_value} {op} {value}")


@dataclass(frozen=True, slots=True)
class Rule:
    id: str
    decision: str  # allow | deny | require_approval
    reason: str
    names: tuple[str, ...] | None = None
    kind: str | None = "tool"
    scope: str | None = None
    agent: str | None = None
    tenant: str | None = None
    params: tuple[Param, ...] = ()
    when: Test | None = None

    def to_yaml(self) -> dict[str, Any]:
        out: dict[str, Any] = {"id": self.id, "decision": self.decision, "reason": self.reason}
        if self.kind is not None:
            out["kind"] = self.kind
        if self.names is not None:
            out["name"] = self.names[0] if len(self.names) == 1 else list(self.names)
        for key in ("scope", "agent", "tenant"):
            value = getattr(self, key)
            if value is not None:
                out[key] = value
        if self.params:
            out["params"] = {p.key: p.yaml for p in self.params}
        if self.when is not None:
            out["when"] = self.when.cel
        return out

    def to_cedar(self) -> str:
        effect = "permit" if self.decision == "allow" else "forbid"
        action = f'action == Action::"{self.kind}"' if self.kind is not None else "action"
        resource = "resource"
        conditions: list[str] = []
        if self.names is not None:
            exact = [n for n in self.names if "*" not in n]
            globs = [n for n in self.names if "*" in n]
            if len(exact) == 1 and not globs:
                resource = f"resource == Tool::{_q(exact[0])}"
            else:
                parts = []
                if exact:
                    parts.append(
                        "[" + ", ".join(f"Tool::{_q(n)}" for n in exact) + "].contains(resource)"
                    )
                parts.extend(f"context.name like {_like(g)}" for g in globs)
                conditions.append(" || ".join(parts))
        if self.scope is not None:
            conditions.append(f"context.scope == {_q(self.scope)}")
        if self.agent is not None:
            conditions.append(f"context has agent && context.agent like {_like(self.agent)}")
        if self.tenant is not None:
            conditions.append(f"context.tenant like {_like(self.tenant)}")
        conditions.extend(p.cedar for p in self.params)
        if self.when is not None:
            conditions.append(self.when.cedar)
        head = (
            f"@id({_q(self.id)})\n@verdict({_q(self.decision)})\n"
            f"{effect} (principal, {action}, {resource})"
        )
        body = "".join(f"\nwhen {{ {c} }}" for c in conditions)
        return f"{head}{body};"


# The tools the policy knows: name -> (pinned scope, kind). 30 tools and 2 models.
TOOLS: Final[dict[str, tuple[str, str]]] = {
    "shell": ("shell", "tool"),
    "run_script": ("shell", "tool"),
    "bash_exec": ("shell", "tool"),
    "read_file": ("filesystem", "tool"),
    "write_file": ("filesystem", "tool"),
    "delete_file": ("filesystem", "tool"),
    "list_dir": ("filesystem", "tool"),
    "http_get": ("network", "tool"),
    "http_post": ("network", "tool"),
    "fetch_url": ("network", "tool"),
    "webhook_send": ("network", "tool"),
    "refund_order": ("data", "tool"),
    "transfer_funds": ("data", "tool"),
    "create_invoice": ("data", "tool"),
    "issue_credit": ("data", "tool"),
    "charge_card": ("data", "tool"),
    "db_query": ("data", "tool"),
    "db_write": ("data", "tool"),
    "db_drop_table": ("data", "tool"),
    "crm_update": ("data", "tool"),
    "export_report": ("data", "tool"),
    "send_email": ("comms", "tool"),
    "send_sms": ("comms", "tool"),
    "slack_post": ("comms", "tool"),
    "deploy_service": ("ops", "tool"),
    "k8s_scale": ("ops", "tool"),
    "ticket_create": ("ops", "tool"),
    "ticket_close": ("ops", "tool"),
    "browser_navigate": ("browser", "tool"),
    "browser_click": ("browser", "tool"),
    "gpt-4o": ("llm", "llm"),
    "claude-sonnet": ("llm", "llm"),
}

_TENANT_LIMITS: Final = {
    "globex": 300,
    "initech": 150,
    "umbrella": 75,
    "hooli": 500,
    "stark": 1000,
    "wayne": 800,
    "wonka": 60,
    "tyrell": 250,
}


def rules() -> list[Rule]:
    """The 100 rules, tier by tier within each family of tools."""
    shell = "shell"
    out: list[Rule] = [
        # -- shell ----------------------------------------------------------------------
        Rule(
            "shell-no-recursive-rm",
            "deny",
            "recursive deletes are never run by an agent",
            scope=shell,
            params=(
                p_regex(
                    "command",
                    [r"(^|[;&|]\s*)rm\s+-[a-zA-Z]*r", r"\bmkfs\b", r"\bdd\s+if="],
                    cedar_like=[
                        "rm -r*",
                        "rm -rf*",
                        "rm -fr*",
                        "*; rm -r*",
                        "*&& rm -r*",
                        "*mkfs*",
                        "*dd if=*",
                    ],
                ),
            ),
        ),
        Rule(
            "shell-no-pipe-to-shell",
            "deny",
            "piping a download into a shell is refused",
            scope=shell,
            params=(
                p_regex(
                    "command",
                    [r"(curl|wget)[^|]*\|\s*(ba|z)?sh\b"],
                    cedar_like=[
                        "*curl*| sh*",
                        "*curl*| bash*",
                        "*wget*| sh*",
                        "*wget*| bash*",
                        "*curl*|sh*",
                        "*curl*|bash*",
                    ],
                ),
            ),
        ),
        Rule(
            "shell-no-sudo",
            "deny",
            "no privilege escalation",
            scope=shell,
            params=(p_glob("command", "sudo *", "su -*", "doas *"),),
        ),
        Rule(
            "shell-prod-only-ops",
            "deny",
            "only the ops bot runs shell commands in prod",
            scope=shell,
            tenant="prod-*",
            when=not_(agent_is("ops-bot")),
        ),
        Rule(
            "shell-git-push",
            "require_approval",
            "pushing code needs a human",
            scope=shell,
            params=(p_glob("command", "git push*"),),
        ),
        Rule(
            "shell-long-timeout",
            "require_approval",
            "commands running over 10 minutes",
            scope=shell,
            when=num("args.timeout", ">", 600),
        ),
        Rule(
            "shell-read-only",
            "allow",
            "read-only shell commands are fine",
            scope=shell,
            params=(
                p_glob(
                    "command",
                    "ls",
                    "ls *",
                    "cat *",
                    "grep *",
                    "head *",
                    "tail *",
                    "pwd",
                    "git status",
                    "git log*",
                    "git diff*",
                    "wc *",
                ),
            ),
        ),
        Rule(
            "shell-ci",
            "allow",
            "the CI agents build and test",
            scope=shell,
            agent="ci-*",
            params=(p_glob("command", "make *", "pytest*", "npm *", "git *"),),
        ),
        Rule(
            "run-script-sandboxed",
            "allow",
            "sandboxed scripts outside prod",
            names=("run_script",),
            when=all_of(eq("args.sandbox", True), not_(tenant_in(["prod-eu", "prod-us"]))),
        ),
        # -- filesystem -----------------------------------------------------------------
        Rule(
            "files-no-secrets",
            "deny",
            "credentials and system files are off limits",
            scope="filesystem",
            params=(p_glob("path", "/etc/*", "*/.ssh/*", "*.pem", "*/.env", ".env"),),
        ),
        Rule(
            "files-delete-only-tmp",
            "deny",
            "deletes outside the scratch space are refused",
            names=("delete_file",),
            params=(p_not_glob("path", "/tmp/*", "/workspace/tmp/*"),),
        ),
        Rule(
            "files-no-system-writes",
            "deny",
            "no writes under /usr or /bin",
            scope="filesystem",
            when=all_of(
                verb_in(["write", "delete"]),
                any_of(starts("path", "/usr/"), starts("path", "/bin/")),
            ),
        ),
        Rule(
            "files-overwrite",
            "require_approval",
            "overwriting a file needs a human",
            names=("write_file",),
            when=eq("args.overwrite", True),
        ),
        Rule(
            "files-delete-workspace",
            "require_approval",
            "deleting workspace files",
            names=("delete_file",),
            params=(p_glob("path", "/workspace/*"),),
        ),
        Rule(
            "files-read-workspace",
            "allow",
            "reading inside the workspace is fine",
            scope="filesystem",
            params=(p_eq("verb", "read"), p_glob("path", "/workspace/*", "/tmp/*")),
        ),
        Rule(
            "files-write-workspace",
            "allow",
            "writing inside the workspace",
            names=("write_file",),
            params=(p_glob("path", "/workspace/*"),),
            when=not_(tenant_in(["readonly", "audit"])),
        ),
        Rule(
            "files-delete-tmp",
            "allow",
            "scratch files may go",
            names=("delete_file",),
            params=(p_glob("path", "/tmp/*", "/workspace/tmp/*"),),
        ),
        # -- network --------------------------------------------------------------------
        Rule(
            "net-no-metadata",
            "deny",
            "cloud metadata endpoints are off limits",
            scope="network",
            params=(p_in("domain", "169.254.169.254", "metadata.google.internal"),),
        ),
        Rule(
            "net-no-internal",
            "deny",
            "internal hosts are not reachable from agents",
            scope="network",
            when=any_of(ends("domain", ".internal"), ends("domain", ".local")),
        ),
        Rule(
            "net-no-plain-post",
            "deny",
            "posting over plain http is refused",
            names=("http_post", "webhook_send"),
            params=(p_glob("url", "http://*"),),
        ),
        Rule(
            "net-no-paste-sites",
            "deny",
            "paste and file-drop sites are blocked",
            scope="network",
            params=(p_glob("domain", "pastebin.com", "*.pastebin.com", "transfer.sh"),),
        ),
        Rule(
            "net-no-session",
            "deny",
            "network calls need a session",
            scope="network",
            when=no_session(),
        ),
        Rule(
            "net-post-external",
            "require_approval",
            "sending data outside the company",
            names=("http_post", "webhook_send"),
            when=all_of(
                Test("has(params.domain)", "context.params has domain"),
                not_(ends("domain", ".example.com")),
            ),
        ),
        Rule(
            "net-known-hosts",
            "allow",
            "fetching from known hosts is fine",
            scope="network",
            params=(
                p_glob(
                    "domain", "docs.example.com", "*.example.org", "api.github.com", "*.example.com"
                ),
            ),
        ),
        Rule(
            "net-research-https",
            "allow",
            "research agents may fetch any https page",
            names=("http_get", "fetch_url"),
            agent="research-*",
            params=(p_glob("url", "https://*"),),
        ),
        Rule(
            "net-slack-webhooks",
            "allow",
            "Slack webhooks",
            names=("webhook_send",),
            params=(p_eq("domain", "hooks.slack.com"),),
        ),
        Rule(
            "net-post-partners",
            "allow",
            "partner APIs over https",
            names=("http_post",),
            params=(p_glob("url", "https://*"),),
            when=tenant_in(["acme", "globex"]),
        ),
        # -- payments -------------------------------------------------------------------
        Rule(
            "refund-currency",
            "deny",
            "refunds only in EUR, USD or GBP",
            names=("refund_*",),
            params=(p_not_in("args.currency", "EUR", "USD", "GBP"),),
        ),
        Rule(
            "refund-huge",
            "deny",
            "refunds over 10,000 are never automated",
            names=("refund_*",),
            when=num("args.amount", ">", 10_000),
        ),
        Rule(
            "transfer-sanctioned",
            "deny",
            "no transfers to sanctioned countries",
            names=("transfer_funds",),
            when=one_of("args.country", ["KP", "IR", "SY", "CU"]),
        ),
        Rule(
            "transfer-self",
            "deny",
            "a transfer to the same account is an error",
            names=("transfer_funds",),
            when=same_args("args.from_account", "args.to_account"),
        ),
        Rule(
            "charge-test-cards",
            "deny",
            "test cards are refused for real tenants",
            names=("charge_card",),
            when=all_of(starts("args.card", "4242"), not_(tenant_in(["sandbox", "dev"]))),
        ),
        Rule(
            "refund-large",
            "require_approval",
            "refunds over 100 need a human at acme",
            names=("refund_*",),
            when=all_of(num("args.amount", ">", 100), tenant_is("acme")),
        ),
        Rule(
            "transfer-large",
            "require_approval",
            "transfers over 1,000 need a human",
            names=("transfer_funds",),
            when=num("args.amount", ">", 1000),
        ),
        Rule(
            "transfer-new-payee",
            "require_approval",
            "a new payee needs a human",
            names=("transfer_funds",),
            when=eq("args.new_payee", True),
        ),
        Rule(
            "invoice-large",
            "require_approval",
            "invoices over 5,000",
            names=("create_invoice",),
            when=num("args.amount", ">", 5000),
        ),
        Rule(
            "credit-large",
            "require_approval",
            "credits over 200",
            names=("issue_credit",),
            when=num("args.amount", ">", 200),
        ),
        Rule(
            "charge-large-or-foreign",
            "require_approval",
            "large or foreign-currency charges",
            names=("charge_card",),
            when=any_of(num("args.amount", ">", 500), not_(one_of("args.currency", ["EUR"]))),
        ),
        Rule(
            "refund-small",
            "allow",
            "refunds up to 100 are routine",
            names=("refund_*",),
            params=(p_num("args.amount", "<=", 100),),
        ),
        Rule(
            "refund-eur-midsize",
            "allow",
            "EUR refunds up to 250",
            names=("refund_order",),
            when=all_of(num("args.amount", "<=", 250), eq("args.currency", "EUR")),
        ),
        Rule(
            "transfer-internal",
            "allow",
            "transfers between our own accounts",
            names=("transfer_funds",),
            when=starts("args.to_account", "ACME-"),
        ),
        Rule(
            "invoice",
            "allow",
            "invoices up to 5,000",
            names=("create_invoice",),
            params=(p_num("args.amount", "<=", 5000),),
        ),
        Rule(
            "credit-billing-bot",
            "allow",
            "the billing bot issues small credits",
            names=("issue_credit",),
            when=all_of(num("args.amount", "<=", 200), agent_is("billing-bot")),
        ),
        Rule(
            "charge-small",
            "allow",
            "small charges",
            names=("charge_card",),
            when=num("args.amount", "<=", 500),
        ),
        # -- databases and records ------------------------------------------------------
        Rule(
            "db-drop-prod",
            "deny",
            "dropping tables in prod is refused",
            names=("db_drop_table",),
            tenant="prod-*",
        ),
        Rule(
            "db-query-no-ddl",
            "deny",
            "queries may not change the schema",
            names=("db_query",),
            params=(
                p_regex(
                    "args.sql",
                    [r"(?i:\b(drop|truncate|alter)\b)"],
                    cedar_like=[
                        "*DROP *",
                        "*drop *",
                        "*TRUNCATE *",
                        "*truncate *",
                        "*ALTER *",
                        "*alter *",
                    ],
                ),
            ),
        ),
        Rule(
            "db-write-needs-where",
            "deny",
            "an UPDATE or DELETE without WHERE is refused",
            names=("db_write",),
            params=(
                p_regex_unless_cedar(
                    "args.sql",
                    [r"(?is:^\s*(delete|update)\b)"],
                    [r"(?is:\bwhere\b)"],
                    cedar='($ like "DELETE*" || $ like "UPDATE*" || $ like "delete*" || '
                    '$ like "update*") && !($ like "*WHERE*" || $ like "*where*")',
                ),
            ),
        ),
        Rule(
            "crm-no-ssn",
            "deny",
            "agents never touch social security numbers",
            names=("crm_update", "export_report"),
            when=list_has("args.fields", "ssn"),
        ),
        Rule(
            "export-pii-foreign",
            "deny",
            "PII leaves only for acme",
            names=("export_report",),
            when=all_of(eq("args.include_pii", True), not_(tenant_is("acme"))),
        ),
        Rule(
            "db-write-prod",
            "require_approval",
            "writes in prod need a human",
            names=("db_write",),
            tenant="prod-*",
        ),
        Rule(
            "db-drop",
            "require_approval",
            "dropping a table needs a human",
            names=("db_drop_table",),
        ),
        Rule(
            "export-pii",
            "require_approval",
            "exports with PII need a human",
            names=("export_report",),
            when=eq("args.include_pii", True),
        ),
        Rule(
            "db-query-select",
            "allow",
            "SELECT queries",
            names=("db_query",),
            params=(
                p_regex("args.sql", [r"(?i:^\s*select\b)"], cedar_like=["SELECT *", "select *"]),
            ),
        ),
        Rule(
            "db-write-tables",
            "allow",
            "writes to the operational tables",
            names=("db_write",),
            when=one_of("args.table", ["orders", "tickets", "notes"]),
        ),
        Rule(
            "crm-update",
            "allow",
            "CRM updates",
            names=("crm_update",),
            when=Test("has(args.fields)", "context.args has fields"),
        ),
        Rule(
            "export-report",
            "allow",
            "CSV and PDF exports",
            names=("export_report",),
            when=one_of("args.format", ["csv", "pdf"]),
        ),
        # -- messaging ------------------------------------------------------------------
        Rule(
            "email-blocked-domains",
            "deny",
            "no mail to competitors or throwaway boxes",
            names=("send_email",),
            params=(p_glob("args.to", "*@competitor.com", "*@mailinator.com"),),
        ),
        Rule(
            "email-bulk-foreign",
            "deny",
            "bulk mail only for acme",
            names=("send_email",),
            when=all_of(eq("args.bulk", True), not_(tenant_is("acme"))),
        ),
        Rule(
            "slack-no-secrets",
            "deny",
            "no credentials in chat",
            names=("slack_post",),
            params=(
                p_regex(
                    "args.text",
                    [r"(?i:(api[_-]?key|password|secret)\s*[:=])"],
                    cedar_like=[
                        "*api_key=*",
                        "*api_key:*",
                        "*password=*",
                        "*password:*",
                        "*secret=*",
                        "*secret:*",
                    ],
                ),
            ),
        ),
        Rule(
            "email-external",
            "require_approval",
            "mail outside the company",
            names=("send_email",),
            params=(p_not_glob("args.to", "*@example.com"),),
        ),
        Rule(
            "sms-international",
            "require_approval",
            "international texts",
            names=("send_sms",),
            when=not_(starts("args.to", "+1")),
        ),
        Rule(
            "slack-announce",
            "require_approval",
            "company-wide channels",
            names=("slack_post",),
            params=(p_in("args.channel", "#general", "#announcements"),),
        ),
        Rule("email-allowed", "allow", "sending mail is allowed", names=("send_email",)),
        Rule(
            "sms-us",
            "allow",
            "texts to US numbers",
            names=("send_sms",),
            params=(p_glob("args.to", "+1*"),),
        ),
        Rule(
            "slack-post",
            "allow",
            "team channels",
            names=("slack_post",),
            params=(p_glob("args.channel", "#eng-*", "#support*", "#ops", "#general"),),
        ),
        # -- operations -----------------------------------------------------------------
        Rule(
            "deploy-prod-release-only",
            "deny",
            "only release agents deploy to prod",
            names=("deploy_service",),
            when=all_of(eq("args.env", "prod"), not_(agent_type_is("release"))),
        ),
        Rule(
            "k8s-no-scale-to-zero-prod",
            "deny",
            "prod never scales to zero",
            names=("k8s_scale",),
            when=all_of(eq("args.replicas", 0), starts("args.namespace", "prod")),
        ),
        Rule(
            "tickets-cross-tenant",
            "deny",
            "tickets of another tenant are off limits",
            names=("ticket_*",),
            when=arg_not_tenant("args.tenant"),
        ),
        Rule(
            "deploy-prod",
            "require_approval",
            "prod deploys need a human",
            names=("deploy_service",),
            when=eq("args.env", "prod"),
        ),
        Rule(
            "k8s-scale-big",
            "require_approval",
            "scaling past 50 replicas",
            names=("k8s_scale",),
            when=num("args.replicas", ">", 50),
        ),
        Rule(
            "ticket-close-p1",
            "require_approval",
            "closing a P1 needs a human",
            names=("ticket_close",),
            when=eq("args.priority", "p1"),
        ),
        Rule(
            "deploy-nonprod",
            "allow",
            "staging and dev deploys",
            names=("deploy_service",),
            when=one_of("args.env", ["staging", "dev"]),
        ),
        Rule(
            "deploy-release",
            "allow",
            "release agents deploy",
            names=("deploy_service",),
            agent="release-*",
        ),
        Rule(
            "k8s-scale",
            "allow",
            "scaling within limits",
            names=("k8s_scale",),
            params=(p_num("args.replicas", "<=", 50),),
        ),
        Rule("tickets", "allow", "ticket work", names=("ticket_create", "ticket_close")),
        # -- browser --------------------------------------------------------------------
        Rule(
            "browser-no-banking",
            "deny",
            "no banking sites",
            names=("browser_*",),
            params=(p_glob("domain", "*bank*", "paypal.com", "*.paypal.com"),),
        ),
        Rule(
            "browser-no-file-urls",
            "deny",
            "no local files in the browser",
            names=("browser_navigate",),
            params=(p_glob("url", "file://*"),),
        ),
        Rule(
            "browser-checkout",
            "require_approval",
            "clicking through a checkout",
            names=("browser_click",),
            when=contains("args.selector", "checkout"),
        ),
        Rule(
            "browser-navigate-https",
            "allow",
            "https pages",
            names=("browser_navigate",),
            params=(p_glob("url", "https://*"),),
        ),
        Rule("browser-click", "allow", "clicking", names=("browser_click",)),
        # -- models ---------------------------------------------------------------------
        Rule(
            "llm-cost-cap",
            "deny",
            "one call may cost at most 5",
            kind="llm",
            params=(p_num("est_cost", ">", 5),),
        ),
        Rule(
            "llm-trial-no-premium",
            "deny",
            "trial tenants use no premium models",
            kind="llm",
            tenant="trial-*",
            names=("gpt-4o*", "claude-*"),
        ),
        Rule(
            "llm-expensive",
            "require_approval",
            "costly calls outside acme",
            kind="llm",
            when=all_of(num("est_cost", ">", 1), not_(tenant_is("acme"))),
        ),
        Rule(
            "llm-approved-models",
            "allow",
            "approved models",
            kind="llm",
            names=("gpt-4o*", "claude-*"),
        ),
        # -- cross-cutting --------------------------------------------------------------
        Rule(
            "tenant-suspended",
            "deny",
            "suspended tenants do nothing",
            kind=None,
            tenant="suspended-*",
        ),
        Rule(
            "agent-quarantined",
            "deny",
            "quarantined agents do nothing",
            kind=None,
            agent="quarantine-*",
        ),
        Rule(
            "trial-no-money",
            "deny",
            "trial tenants move no money",
            tenant="trial-*",
            scope="data",
            names=("refund_*", "transfer_funds", "charge_card", "issue_credit"),
        ),
        Rule(
            "interns-writes",
            "require_approval",
            "intern agents' writes are reviewed",
            agent="intern-*",
            when=verb_in(["write", "delete"]),
        ),
    ]
    # Per-tenant refund limits and CRM regions: the block that grows with customers.
    for tenant, limit in _TENANT_LIMITS.items():
        out.append(
            Rule(
                f"tenant-{tenant}-refund-limit",
                "require_approval",
                f"{tenant}: refunds over {limit} need a human",
                names=("refund_*",),
                when=all_of(tenant_is(tenant), num("args.amount", ">", limit)),
            )
        )
    for tenant in list(_TENANT_LIMITS)[:4]:
        out.append(
            Rule(
                f"tenant-{tenant}-crm-regions",
                "deny",
                f"{tenant}: CRM data stays in the EU",
                names=("crm_update",),
                when=all_of(
                    tenant_is(tenant), not_(one_of("args.region", ["eu-west", "eu-central"]))
                ),
            )
        )
    return out


# ---------------------------------------------------------------------------------
# The workload: 22 representative actions, each with the verdict it is meant to get.
# ---------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Item:
    name: str
    args: Mapping[str, Any]
    expect: str
    tenant: str = "acme"
    agent: str | None = "support-bot"
    agent_type: str | None = None
    session_id: str | None = "sess-1"
    note: str = ""


def workload() -> list[Item]:
    return [
        Item("shell", {"command": "ls -la /workspace"}, "allow"),
        Item("shell", {"command": "rm -rf /var/lib/data"}, "deny", note="regex deny"),
        Item("shell", {"command": "git push origin main"}, "require_approval", agent="ci-runner"),
        Item("read_file", {"path": "/workspace/src/app.py"}, "allow"),
        Item("read_file", {"path": "/home/dev/.ssh/id_rsa"}, "deny"),
        Item(
            "write_file",
            {"path": "/workspace/out/report.txt", "content": "hello"},
            "allow",
            note="CEL allow",
        ),
        Item("delete_file", {"path": "/etc/passwd"}, "deny"),
        Item("http_get", {"url": "https://docs.example.com/guide"}, "allow"),
        Item(
            "http_post",
            {"url": "https://api.partner.io/orders", "body": {"id": 7}},
            "require_approval",
            note="CEL approval",
        ),
        Item("http_get", {"url": "http://169.254.169.254/latest/meta-data"}, "deny"),
        Item("refund_order", {"amount": 40, "currency": "EUR", "order": "o-1"}, "allow"),
        Item(
            "refund_order",
            {"amount": 150, "currency": "EUR", "order": "o-2"},
            "require_approval",
            note="CEL approval (args.amount > 100 && tenant == acme)",
        ),
        Item("refund_order", {"amount": 80, "currency": "JPY", "order": "o-3"}, "deny"),
        Item(
            "transfer_funds",
            {"amount": 500, "from_account": "ACME-1", "to_account": "ACME-9", "country": "DE"},
            "allow",
            note="CEL allow",
        ),
        Item(
            "transfer_funds",
            {
                "amount": 5000,
                "from_account": "ACME-1",
                "to_account": "X-77",
                "country": "FR",
                "new_payee": True,
            },
            "require_approval",
            note="two CEL approvals",
        ),
        Item("db_query", {"sql": "SELECT id, total FROM orders WHERE id = 4"}, "allow"),
        Item("db_query", {"sql": "DROP TABLE users"}, "deny", note="regex deny"),
        Item("send_email", {"to": "alice@example.com", "subject": "hi"}, "allow"),
        Item("send_email", {"to": "bob@gmail.com", "subject": "hi"}, "require_approval"),
        Item(
            "deploy_service",
            {"service": "api", "env": "prod"},
            "deny",
            agent="ops-bot",
            note="CEL deny",
        ),
        Item("gpt-4o", {"est_cost": 1}, "allow"),
        Item("mystery_tool", {"input": "x"}, "deny", note="no rule: the default"),
    ]


def to_action(item: Item) -> Action:
    context = Context(
        tenant=item.tenant, agent=item.agent, agent_type=item.agent_type, session_id=item.session_id
    )
    if TOOLS.get(item.name, ("", "tool"))[1] == "llm":
        return Action.llm(item.name, arguments=dict(item.args), context=context)
    return Action.tool(item.name, dict(item.args), context=context)


# The Cedar request for an item, built from the item alone (not from Interlock's
# facts), the way a Cedar user would: scope and verb from the tool table, params the
# same way Interlock extracts them. `build` checks both sides see the same inputs.
_VERBS: Final = (
    ("delete", {"delete", "remove", "rm", "del", "drop", "destroy", "purge", "unlink", "erase"}),
    (
        "write",
        {
            "write",
            "save",
            "create",
            "update",
            "put",
            "post",
            "set",
            "add",
            "send",
            "edit",
            "modify",
            "append",
            "upload",
            "insert",
            "patch",
            "move",
            "rename",
        },
    ),
    (
        "read",
        {
            "read",
            "get",
            "list",
            "fetch",
            "view",
            "search",
            "show",
            "find",
            "load",
            "query",
            "download",
            "open",
            "cat",
            "ls",
        },
    ),
)


def _verb(name: str) -> str | None:
    tokens = {t for t in re.split(r"[^a-z0-9]+", name.lower()) if t}
    for verb, words in _VERBS:
        if tokens & words:
            return verb
    return None


def cedar_context(item: Item) -> dict[str, Any]:
    scope, kind = TOOLS.get(item.name, ("shell", "tool"))  # `scopes.default: shell`
    args = dict(item.args)
    params: dict[str, Any] = {}
    for key in ("command", "url", "est_cost"):
        if key in args:
            params[key] = args[key]
    if "path" in args:
        params["path"] = posixpath.normpath(args["path"])
    if "url" in args and (host := urlsplit(args["url"]).hostname):
        # The URL facts, computed independently here from the stdlib (the workload's
        # URLs are plain: the stdlib and the WHATWG parser agree on them).
        parts = urlsplit(args["url"])
        params["domain"] = host.lower()
        params["scheme"] = parts.scheme
        params["port"] = parts.port or {"http": 80, "https": 443}[parts.scheme]
        try:
            address = ipaddress.ip_address(host)
        except ValueError:
            params["site"] = ".".join(host.lower().split(".")[-2:])
        else:
            params["ip_class"] = "link-local" if address.is_link_local else "global"
    verb = _verb(item.name)
    if verb is not None:
        params["verb"] = verb
    if "command" not in params and scope == "shell" and set(args) == {"input"}:
        params["command"] = args["input"]  # a bare string to a shell-like tool is its command
    context: dict[str, Any] = {
        "kind": kind,
        "name": item.name,
        "scope": scope,
        "tenant": item.tenant,
        "args": args,
        "params": params,
    }
    for key, value in (
        ("agent", item.agent),
        ("agent_type", item.agent_type),
        ("session_id", item.session_id),
        ("verb", verb),
    ):
        if value is not None:  # Cedar has no null: an unset field is an absent attribute
            context[key] = value
    return context


def cedar_request(item: Item) -> dict[str, Any]:
    kind = TOOLS.get(item.name, ("shell", "tool"))[1]
    return {
        "principal": f"Agent::{_q(item.agent or 'anonymous')}",
        "action": f"Action::{_q(kind)}",
        "resource": f"Tool::{_q(item.name)}",
        "context": cedar_context(item),
    }


# The floor: one dict lookup (tool name -> compiled regex) and one regex search on the
# call's main string argument.
_FLOOR_PATTERNS: Final = {
    "shell": r"^(ls|cat|grep|head|tail|pwd|wc)\b",
    "read_file": r"^/workspace/",
    "write_file": r"^/workspace/",
    "delete_file": r"^/tmp/",
    "http_get": r"^https://[a-z.]*example\.(com|org)/",
    "http_post": r"^https://[a-z.]*example\.com/",
    "refund_order": r"^(EUR|USD|GBP)$",
    "transfer_funds": r"^ACME-",
    "db_query": r"(?i)^\s*select\b",
    "send_email": r"@example\.com$",
    "deploy_service": r"^(staging|dev)$",
    "gpt-4o": r"^gpt-4o",
}
_FLOOR_KEYS: Final = ("command", "path", "url", "currency", "to_account", "sql", "to", "env")


def floor_input(item: Item) -> tuple[str, str]:
    text = next((str(item.args[k]) for k in _FLOOR_KEYS if k in item.args), item.name)
    return item.name, text


def make_floor() -> Callable[[tuple[str, str]], bool]:
    table = {name: re.compile(p) for name, p in _FLOOR_PATTERNS.items()}
    return dict_regex_floor(table)


# ---------------------------------------------------------------------------------
# Building, cross-checking and running.
# ---------------------------------------------------------------------------------


@dataclass(slots=True)
class Setup:
    spec: list[Rule]
    yaml_text: str
    cedar_text: str
    policy: CompiledPolicy
    items: list[Item]
    actions: list[Action]
    requests: list[dict[str, Any]]
    info: dict[str, Any] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)


def policy_yaml(spec: Sequence[Rule]) -> str:
    document = {
        "version": 1,
        "default": "deny",
        "description": "Benchmark policy: 100 rules over 30 tools and 2 models.",
        "scopes": {"default": "shell", "tools": {name: s for name, (s, _) in TOOLS.items()}},
        "rules": [rule.to_yaml() for rule in spec],
    }
    return yaml.safe_dump(document, sort_keys=False, width=100, allow_unicode=True)


def _cedar_verdict(result: Any, decisions: Mapping[str, str]) -> tuple[str, tuple[str, ...]]:
    """Interlock's verdict and rule ids, read back from a Cedar answer."""
    ids = tuple(
        sorted(
            result.diagnostics.id_annotations_by_reason.get(r, r)
            for r in result.diagnostics.reasons
        )
    )
    if result.allowed:
        return "allow", ids
    deny = tuple(i for i in ids if decisions.get(i) == "deny")
    if deny:
        return "deny", deny
    if ids:
        return "require_approval", ids
    return "deny", ()  # no forbid matched: Cedar's default deny = Interlock's default


def build() -> Setup:
    import cedarpy

    spec = rules()
    yaml_text = policy_yaml(spec)
    cedar_text = "\n\n".join(rule.to_cedar() for rule in spec) + "\n"
    policy = load_policy_text(yaml_text, file="bench/check-policy.yaml")
    items = workload()
    setup = Setup(
        spec=spec,
        yaml_text=yaml_text,
        cedar_text=cedar_text,
        policy=policy,
        items=items,
        actions=[to_action(i) for i in items],
        requests=[cedar_request(i) for i in items],
    )
    counts = {d: sum(r.decision == d for r in spec) for d in ("deny", "require_approval", "allow")}
    setup.info["policy"] = {
        "rules": len(spec),
        "by_decision": counts,
        "with_cel_when": sum(r.when is not None for r in spec),
        "with_params": sum(bool(r.params) for r in spec),
        "with_regex": sum(any("regex" in p.yaml for p in r.params) for r in spec),
        "regex_engine": "RE2",
        "exact_name_rules": sum(
            r.names is not None and all("*" not in n for n in r.names) for r in spec
        ),
        "glob_name_rules": sum(
            r.names is not None and any("*" in n for n in r.names) for r in spec
        ),
        "tools": len(TOOLS),
    }
    problems = setup.problems

    # The two engines must see the same inputs: Interlock's extracted facts against the
    # hand-built Cedar context.
    for item, action, request in zip(items, setup.actions, setup.requests, strict=True):
        facts = facts_for(action, policy)
        ctx = request["context"]
        if (
            facts.scope != ctx["scope"]
            or facts.verb != ctx.get("verb")
            or facts.params != ctx["params"]
        ):
            problems.append(
                f"input mismatch for {item.name}: interlock scope={facts.scope} verb={facts.verb} "
                f"params={facts.params}; cedar scope={ctx['scope']} verb={ctx.get('verb')} "
                f"params={ctx['params']}"
            )

    policy_set = cedarpy.PolicySet.from_str(cedar_text)
    entities = cedarpy.Entities.from_json_str("[]")
    decisions = {r.id: r.decision for r in spec}
    allow_agree = verdict_agree = ids_agree = 0
    expect_agree = 0
    rows = []
    for item, action, request in zip(items, setup.actions, setup.requests, strict=True):
        ours = evaluate(action, policy)
        guarded = Guard(policy).check(action)
        result = cedarpy.is_authorized(request, policy_set, entities)
        theirs, their_ids = _cedar_verdict(result, decisions)
        verdict = ours.verdict.value
        if guarded.verdict is not ours.verdict or guarded.rule_ids != ours.rule_ids:
            problems.append(
                f"guard.check and evaluate disagree on {item.name}: "
                f"{guarded.verdict} vs {ours.verdict}"
            )
        if verdict == "undetermined":
            problems.append(f"interlock is undetermined on {item.name}: {ours.reason}")
        if result.diagnostics.errors:
            problems.append(f"cedar errors on {item.name}: {result.diagnostics.errors}")
        allow_agree += (verdict == "allow") == result.allowed
        verdict_agree += verdict == theirs
        ids_agree += tuple(ours.rule_ids) == their_ids
        expect_agree += verdict == item.expect
        if (verdict == "allow") != result.allowed:
            problems.append(
                f"ALLOW MISMATCH on {item.name} {dict(item.args)}: interlock "
                f"{verdict} {ours.rule_ids}, cedar {result.decision.value} {their_ids}"
            )
        elif verdict != theirs or tuple(ours.rule_ids) != their_ids:
            problems.append(
                f"verdict/rule mismatch on {item.name}: interlock {verdict} "
                f"{ours.rule_ids}, cedar reads as {theirs} {their_ids}"
            )
        if verdict != item.expect:
            problems.append(
                f"workload item {item.name} {dict(item.args)} meant to be "
                f"{item.expect} but interlock says {verdict} {ours.rule_ids}"
            )
        rows.append(
            {
                "tool": item.name,
                "args": dict(item.args),
                "interlock": verdict,
                "rule_ids": list(ours.rule_ids),
                "cedar": result.decision.value,
                "cedar_rule_ids": list(their_ids),
                "note": item.note,
            }
        )
    n = len(items)
    mix = {v: sum(r["interlock"] == v for r in rows) for v in ("allow", "deny", "require_approval")}
    setup.info["workload"] = {
        "actions": n,
        "mix": mix,
        "hitting_cel_rules": sum(
            any(decisions.get(i) and _has_when(spec, i) for i in r["rule_ids"]) for r in rows
        ),
    }
    setup.info["agreement"] = {
        "allow_vs_not_allow": f"{allow_agree}/{n}",
        "three_way_verdict": f"{verdict_agree}/{n}",
        "rule_ids": f"{ids_agree}/{n}",
        "intended_verdict": f"{expect_agree}/{n}",
    }
    setup.info["decisions"] = rows
    setup.info["_cedar"] = (policy_set, entities)
    return setup


def _has_when(spec: Sequence[Rule], rule_id: str) -> bool:
    return any(r.id == rule_id and r.when is not None for r in spec)


def _stats(
    label: str, fn: Callable[[Any], object], inputs: Sequence[Any], calls: int, warmup: int
) -> tuple[Stats, list[int]]:
    samples, wall = time_calls(fn, inputs, calls, warmup)
    return summarise(label, samples, wall), samples


def _per_item_p50(samples: Sequence[int], items: Sequence[Item]) -> list[dict[str, Any]]:
    out = []
    for index, item in enumerate(items):
        mine = sorted(samples[index :: len(items)])
        out.append(
            {
                "tool": item.name,
                "expect": item.expect,
                "p50_us": round(mine[len(mine) // 2] / 1000, 2),
            }
        )
    return out


def run(
    calls: int = DEFAULT_CALLS, warmup: int = DEFAULT_WARMUP, cedar_calls: int | None = None
) -> BenchResult:
    import cedarpy

    setup = build()
    policy_set, entities = setup.info.pop("_cedar")
    cedar_calls = cedar_calls or min(calls, DEFAULT_CEDAR_CALLS)
    result = BenchResult(name="check", info=setup.info, problems=list(setup.problems))
    result.info["cedarpy"] = getattr(cedarpy, "__version__", None) or _dist_version("cedarpy")
    result.info["interlock_source_sha256"] = source_fingerprint()
    result.info["calls"] = {
        "interlock": calls,
        "floor": calls,
        "cedarpy": cedar_calls,
        "warmup": warmup,
    }

    overhead_samples, overhead_wall = timer_overhead(calls)
    overhead = summarise("timer overhead (empty)", overhead_samples, overhead_wall)

    sink = MemorySink()
    guard = Guard(setup.policy, sink=sink)
    check, check_samples = _stats(
        "interlock guard.check", guard.check, setup.actions, calls, warmup
    )
    result.info["audit_events_built"] = len(sink.events)
    sink.events.clear()
    engine, _ = _stats(
        "interlock evaluate",
        functools.partial(evaluate, policy=setup.policy),
        setup.actions,
        calls,
        warmup,
    )
    floor, _ = _stats(
        "floor (dict + regex)", make_floor(), [floor_input(i) for i in setup.items], calls, warmup
    )
    authorize = functools.partial(cedarpy.is_authorized, policies=policy_set, entities=entities)
    cedar, cedar_samples = _stats(
        "cedarpy is_authorized", authorize, setup.requests, cedar_calls, min(warmup, cedar_calls)
    )
    result.stats = [check, engine, floor, cedar, overhead]
    result.info["per_action_p50"] = {
        "interlock guard.check": _per_item_p50(check_samples, setup.items),
        "cedarpy is_authorized": _per_item_p50(cedar_samples, setup.items),
    }
    ratios = {
        "check_p50_over_floor_p50": check.p50_ns / floor.p50_ns,
        "evaluate_p50_over_floor_p50": engine.p50_ns / floor.p50_ns,
        "cedar_p50_over_check_p50": cedar.p50_ns / check.p50_ns,
        "cedar_p50_over_evaluate_p50": cedar.p50_ns / engine.p50_ns,
        "facade_cost_p50_us": (check.p50_ns - engine.p50_ns) / 1000,
    }
    result.info["ratios"] = {k: round(v, 2) for k, v in ratios.items()}
    result.targets = [
        Target("guard.check p50", check.p50_ns / 1000, "<=", TARGET_P50_US, "µs"),
        Target("guard.check p99", check.p99_ns / 1000, "<=", TARGET_P99_US, "µs"),
        Target(
            "cedarpy p50 / guard.check p50",
            ratios["cedar_p50_over_check_p50"],
            ">=",
            TARGET_CEDAR_RATIO,
            "×",
        ),
    ]
    agreement = setup.info["agreement"]
    result.notes = [
        f"policy: {setup.info['policy']}",
        f"workload: {setup.info['workload']}",
        f"cedar agreement (allow vs not-allow): {agreement['allow_vs_not_allow']}; "
        f"three-way verdict: {agreement['three_way_verdict']}; rule ids: {agreement['rule_ids']}",
        f"timer overhead: p50 {overhead.p50_ns} ns, mean {overhead.mean_ns:.0f} ns per sample "
        "(included in every figure, not subtracted)",
        f"interlock guard.check p50 / floor p50 = {ratios['check_p50_over_floor_p50']:.1f}×",
        f"cedarpy p50 / interlock guard.check p50 = {ratios['cedar_p50_over_check_p50']:.2f}×",
    ]
    RESULTS_DIR.mkdir(parents=True, exist_ok=True)
    (RESULTS_DIR / "check-policy.yaml").write_text(setup.yaml_text, encoding="utf-8")
    (RESULTS_DIR / "check-policy.cedar").write_text(setup.cedar_text, encoding="utf-8")
    return result


def source_fingerprint() -> str:
    """A hash of Interlock's source, so a figure can be tied to the code it measured."""
    import hashlib
    from pathlib import Path

    import interlock

    root = Path(interlock.__file__).resolve().parent
    digest = hashlib.sha256()
    for path in sorted(root.rglob("*.py")):
        digest.update(path.relative_to(root).as_posix().encode())
        digest.update(path.read_bytes())
    return digest.hexdigest()[:16]


def _dist_version(name: str) -> str | None:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(name)
    except PackageNotFoundError:
        return None


def profile(calls: int = 50_000, top: int = 25) -> str:
    """cProfile of ``guard.check`` over the workload, sorted by cumulative time."""
    setup = build()
    guard = Guard(setup.policy, sink=MemorySink())
    actions = setup.actions
    count = len(actions)
    for i in range(2_000):
        guard.check(actions[i % count])
    profiler = cProfile.Profile()
    profiler.enable()
    for i in range(calls):
        guard.check(actions[i % count])
    profiler.disable()
    out = io.StringIO()
    pstats.Stats(profiler, stream=out).sort_stats("cumulative").print_stats(top)
    return out.getvalue()
