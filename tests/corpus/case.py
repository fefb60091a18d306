"""One row of the bypass corpus, the policies rows run under, and the tools they call.

A :class:`Case` is one tool call an agent could make and what must happen to it:

- an **adversarial** row names the *intent* it tries to get around (the rule's purpose
  in words) and expects a refusal: ``deny`` or ``undetermined`` (:data:`REFUSED`),
  or exactly one of them where that matters (a NUL byte is undetermined: there is
  nothing to judge; ``sudo /bin/rm -Rf /`` is a deny by ``shell-no-destruction``);
- a **benign** row is a look-alike that must still be allowed.

A row whose input gets through today carries ``bypass`` (or, for a benign row that is
refused, ``false_positive``): it runs as ``xfail(strict=True)``, so the corpus records
the hole without going red, and turns red the day the hole is closed (remove the mark
then). See README.md.

Rows run under one of two policies:

- ``example`` — the shipped example policy (``interlock/examples/interlock.yaml``):
  an allow-list of read-only programs, destructive-command and secret-file denies,
  known hosts, no internal addresses; ``default: deny``;
- ``denylist`` — :data:`DENYLIST_POLICY`: the example's deny rules alone over
  ``default: allow``. Under the example policy the allow-list hides a deny rule that
  misses (the default refuses the call anyway); here a miss is an ``allow``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final, Literal

import pytest

from interlock import Verdict
from interlock.demo import example_policy_text

__all__ = [
    "ALIASES",
    "ALLOW",
    "DENY",
    "DENYLIST_POLICY",
    "DESCRIPTION",
    "EXAMPLE_POLICY",
    "KNOWN_HOSTS",
    "NO_DESTRUCTION",
    "NO_INTERNAL",
    "NO_SECRETS",
    "POLICIES",
    "READ_ONLY",
    "REFUSED",
    "SCOPE",
    "TOOLS",
    "UNDETERMINED",
    "UNJUDGEABLE",
    "WORKSPACE",
    "Case",
    "Expect",
    "PolicyName",
    "Row",
    "as_params",
    "table",
    "tool_schema",
]

PolicyName = Literal["example", "denylist"]

EXAMPLE_POLICY: Final = example_policy_text()

#: The example policy's deny rules with nothing allowed by name: every miss of a deny
#: rule is an allow here.
DENYLIST_POLICY: Final = """\
version: 1
default: allow
description: the example policy's deny rules over an allow default (corpus only)
rules:
  - id: shell-no-destruction
    decision: deny
    reason: destructive shell commands are never run by an agent
    scope: shell
    shell:
      commands:
        - {program: rm, flags: [-r]}
        - {program: [shred, dd, mkfs, "mkfs.*", wipefs]}
        - {program: find, flags: [-delete]}
        - {program: git, subcommand: push, flags: [--force]}

  - id: files-no-secrets
    decision: deny
    reason: credentials and system files are off limits
    scope: filesystem
    params:
      path: ["/etc/*", "*/.ssh/*", "~/.ssh/*", "*.pem", "*/.env", ".env"]

  - id: net-no-internal-addresses
    decision: deny
    reason: loopback, private and link-local addresses are off limits
    scope: network
    params:
      ip_class: {in: [loopback, private, link-local, unspecified, reserved]}
"""

POLICIES: Final[Mapping[PolicyName, str]] = {
    "example": EXAMPLE_POLICY,
    "denylist": DENYLIST_POLICY,
}


@dataclass(frozen=True)
class Expect:
    """The verdicts a row may get, and the rule that must decide (when one must)."""

    verdicts: frozenset[Verdict]
    rule: str | None = None

    def __call__(self, rule: str) -> Expect:
        """The same expectation, decided by ``rule``."""
        return Expect(self.verdicts, rule)

    @property
    def allows(self) -> bool:
        return Verdict.ALLOW in self.verdicts

    def describe(self) -> str:
        names = "/".join(sorted(v.value for v in self.verdicts))
        return names + (f" by {self.rule}" if self.rule else "")

    def holds(self, verdict: Verdict, rule_ids: Iterable[str]) -> bool:
        if verdict not in self.verdicts:
            return False
        return self.rule is None or self.rule in tuple(rule_ids)


REFUSED: Final = Expect(frozenset({Verdict.DENY, Verdict.UNDETERMINED}))
DENY: Final = Expect(frozenset({Verdict.DENY}))
UNDETERMINED: Final = Expect(frozenset({Verdict.UNDETERMINED}))
ALLOW: Final = Expect(frozenset({Verdict.ALLOW}))


@dataclass(frozen=True)
class Case:
    """One row: a call (``tool``, ``args``), the intent it tests and what must happen."""

    id: str
    category: str
    tool: str
    args: Mapping[str, Any]
    intent: str
    expect: Expect = REFUSED
    policy: PolicyName = "example"
    #: a known hole: what gets through, in words (the row is a strict xfail)
    bypass: str | None = None
    #: a benign row refused today, in words (a strict xfail too)
    false_positive: str | None = None
    marks: tuple[Any, ...] = field(default=(), compare=False)

    @property
    def adversarial(self) -> bool:
        return not self.expect.allows

    def param(self) -> Any:
        """The row as a ``pytest.param`` (a strict xfail when it records a hole)."""
        marks = list(self.marks)
        if self.bypass is not None:
            marks.append(pytest.mark.xfail(strict=True, reason=f"BYPASS: {self.bypass}"))
        if self.false_positive is not None:
            marks.append(
                pytest.mark.xfail(strict=True, reason=f"FALSE POSITIVE: {self.false_positive}")
            )
        return pytest.param(self, id=self.id, marks=marks)


def as_params(cases: Iterable[Case]) -> list[Any]:
    return [case.param() for case in cases]


# -- the tools rows call -----------------------------------------------------------------

_STR: Final = {"type": "string"}
_LIST: Final = {"type": "array", "items": {"type": "string"}}

#: Every tool of the corpus: its parameters and whether each is a string or a list of
#: strings. Each adapter declares exactly these (all required, nothing else admitted),
#: so what the guard judges is what the tool body receives.
TOOLS: Final[Mapping[str, Mapping[str, Literal["str", "list"]]]] = {
    "shell": {"command": "str"},
    "shell_argv": {"command": "list"},
    "shell_with_url": {"command": "str", "url": "str"},
    "shell_with_path": {"command": "str", "path": "str"},
    "shell_with_cmd": {"command": "str", "cmd": "str"},
    "run_cmd": {"cmd": "str"},
    "terminal": {"input": "str"},
    "do_something": {"input": "str"},
    "fetch_url": {"url": "str"},
    "fetch_urls": {"urls": "list"},
    "fetch_url_list": {"url": "list"},
    "fetch_with_host": {"url": "str", "host": "str"},
    "fetch_with_hostname": {"url": "str", "hostname": "str"},
    "fetch_with_domain": {"url": "str", "domain": "str"},
    "fetch_with_uri": {"url": "str", "uri": "str"},
    "fetch_with_href": {"url": "str", "href": "str"},
    "fetch_with_command": {"url": "str", "command": "str"},
    "read_file": {"path": "str"},
    "read_file_list": {"path": "list"},
    "read_files": {"paths": "list"},
    "read_file_paths": {"file_paths": "list"},
    "read_file_aliases": {"path": "str", "file_path": "str"},
    "read_file_filename": {"path": "str", "filename": "str"},
    "read_file_filepath": {"path": "str", "filepath": "str"},
    "read_file_and_paths": {"path": "str", "paths": "list"},
    "read_file_with_command": {"path": "str", "command": "str"},
    "read_file_with_url": {"path": "str", "url": "str"},
}

#: A description with no scope keyword: scope comes from the name and the arguments,
#: on every surface alike.
DESCRIPTION: Final = "A tool of the bypass corpus."


def tool_schema(tool: str) -> dict[str, Any]:
    """The JSON Schema of ``tool``'s parameters (strict: all required, no others)."""
    params = TOOLS[tool]
    return {
        "type": "object",
        "properties": {
            name: dict(_STR if kind == "str" else _LIST) for name, kind in params.items()
        },
        "required": list(params),
        "additionalProperties": False,
    }


# -- the intents rows test (each rule's purpose, in words) --------------------------------

READ_ONLY: Final = (
    "shell-read-only: only ls, cat, grep, head, tail, pwd, wc, echo, find, sort, uniq and "
    "diff run, and no file is written"
)
NO_DESTRUCTION: Final = (
    "shell-no-destruction: no recursive rm, shred, dd, mkfs, wipefs, find -delete or "
    "git push --force, however it is spelled or wrapped"
)
NO_SECRETS: Final = (
    "files-no-secrets: /etc, .ssh, *.pem and .env are never read, by a file tool or by a "
    "shell command"
)
WORKSPACE: Final = "files-read-workspace: a file tool reads inside /workspace only"
KNOWN_HOSTS: Final = (
    "net-known-hosts: only https to docs.example.com, *.example.org and api.github.com, "
    "the host a client really connects to"
)
NO_INTERNAL: Final = (
    "net-no-internal-addresses: no loopback, private, link-local, unspecified or reserved "
    "address, however it is spelled"
)
SCOPE: Final = "scope: an argument adds a scope to a call, never takes one away"
ALIASES: Final = (
    "aliases: two names of one parameter (command/cmd, path/file_path, url/host) must agree"
)
UNJUDGEABLE: Final = (
    "fail closed: what cannot be read as meant (a NUL byte, an oversized or unparseable "
    "input, a program known only when it runs) is never allowed"
)


Row = tuple[str, Any] | tuple[str, Any, Mapping[str, Any]]


def table(
    category: str,
    rows: Iterable[Row],
    *,
    intent: str,
    expect: Expect = REFUSED,
    policy: PolicyName = "example",
    tool: str = "shell",
    key: str = "command",
) -> list[Case]:
    """Rows of one category: each ``(id, value)`` is a call of ``tool`` with ``key`` set
    to ``value``; a third item overrides fields of the row (``expect``, ``bypass``,
    ``args``, ``tool``...)."""
    out: list[Case] = []
    for row in rows:
        overrides: dict[str, Any] = dict(row[2]) if len(row) == 3 else {}  # type: ignore[misc]
        fields: dict[str, Any] = {
            "id": row[0],
            "category": category,
            "tool": tool,
            "args": {key: row[1]},
            "intent": intent,
            "expect": expect,
            "policy": policy,
        }
        fields.update(overrides)
        out.append(Case(**fields))
    return out
