"""What may reach a span, as a table: argument values never do (a secret, a path, a
command, however the call is refused or allowed); names and ids always do, even when
they look like the values that must not (benign look-alikes). With ``reasons=True``
the reason is there, redacted as the agent reads it."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pytest

pytest.importorskip("opentelemetry.sdk")

from interlock import Action, Context, Guard, load_policy_text

from .conftest import Otel

POLICY = load_policy_text(
    """
version: 1
default: deny
rules:
  - id: shell
    decision: allow
    reason: shell is allowed
    name: shell
  - id: no-rm
    decision: deny
    reason: no recursive deletes
    name: shell
    when: "args.command.startsWith('rm')"
  - id: secret-tools
    decision: allow
    reason: the look-alike tool is fine
    name: list_AKIA_keys
  - id: fetch-review
    decision: require_approval
    reason: "fetching needs a human"
    name: fetch
""",
    file="otel-table.yaml",
)
AWS_KEY = "AKIAIOSFODNN7EXAMPLE"
GH_TOKEN = "ghp_1234567890abcdefghijklmnopqrstuvwxyzAB"


@dataclass(frozen=True)
class Row:
    behaviour: str
    action: Action
    absent: tuple[str, ...]  # must not appear in any span text
    present: tuple[str, ...] = ()  # must appear (names, ids)
    reasons: bool = False


ROWS = [
    Row(
        "a denied command's path stays out",
        Action.tool("shell", {"command": "rm -rf /srv/payroll"}),
        absent=("/srv/payroll", "rm -rf"),
        present=("shell", "no-rm"),
    ),
    Row(
        "an allowed command's text stays out",
        Action.tool("shell", {"command": f"curl -H 'Authorization: {GH_TOKEN}' x"}),
        absent=(GH_TOKEN, "curl", "Authorization"),
        present=("shell",),
    ),
    Row(
        "an unmatched tool's arguments stay out",
        Action.tool("export", {"table": "customers", "to": "s3://leak"}),
        absent=("customers", "s3://leak"),
        present=("export", "the policy's default"),
    ),
    Row(
        "an approval's arguments stay out, its id is there",
        Action.tool("fetch", {"url": "https://intranet/secret-plan"}),
        absent=("intranet", "secret-plan"),
        present=("fetch", "fetch-review"),
    ),
    Row(
        "with reasons, a secret the reason quotes is redacted",
        Action.tool("shell", {"command": f"rm -rf /tmp/{AWS_KEY}"}),
        absent=(AWS_KEY,),
        present=("no recursive deletes", "[REDACTED:aws-access-key-id]"),
        reasons=True,
    ),
    Row(
        "look-alike: a tool whose name looks like a key is named",
        Action.tool("list_AKIA_keys", {"prefix": "AKIA"}),
        absent=(),
        present=("list_AKIA_keys",),
    ),
    Row(
        "look-alike: the framework's call id and the agent are kept",
        Action.tool(
            "shell",
            {"command": "ls"},
            context=Context(call_id="call_AKIA_1", agent="ops-bot", session_id="s-9"),
        ),
        absent=(),
        present=("call_AKIA_1", "ops-bot", "s-9"),
    ),
]


def texts(otel: Otel) -> list[str]:
    found: list[str] = []
    for span in otel.spans():
        found += [span.name, span.status.description or ""]
        for value in (span.attributes or {}).values():
            items: Any = value if isinstance(value, tuple) else (value,)
            found += [str(item) for item in items]
    return found


@pytest.mark.parametrize("row", ROWS, ids=[row.behaviour for row in ROWS])
def test_what_reaches_a_span(otel: Otel, row: Row) -> None:
    telemetry = otel.telemetry()
    telemetry.reasons = row.reasons
    guard = Guard(POLICY, telemetry=telemetry)
    decision = guard.check(row.action)
    found = texts(otel)
    assert decision.decision_id in found
    for secret in row.absent:
        assert not any(secret in text for text in found), secret
    for name in row.present:
        assert any(name in text for text in found), (name, found)
