"""The result of a replay: its filters, its tally, and its JSON form.

The JSON document (``interlock audit replay --format json``, ``POST /v1/audit/replay``)
is versioned by ``schema``; docs/replay.md describes every field. Keys are stable;
counts are integers; every change name of :data:`~interlock.replay.compare.CHANGES`
is present (zero when nothing changed that way).

Example::

    report = replay_store(store, draft)
    if report.fails("loosen"):
        print(report.as_json()["loosened"], "calls the draft would let through")
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Final, Literal

from interlock.policy.compiled import CompiledPolicy
from interlock.replay.compare import CHANGES, LOOSENING, ReplayTally

__all__ = ["FAIL_ON", "SCHEMA", "FailOn", "ReplayFilter", "ReplayReport"]

#: The version of the JSON document.
SCHEMA: Final = "interlock.replay/1"
FailOn = Literal["loosen", "any", "never"]
FAIL_ON: Final = ("loosen", "any", "never")

_SESSIONS_NOTE: Final = (
    "sessions are rebuilt from the records in order: labels and after: as the recorded "
    "calls left them (an allowed call counts as executed); the audit holds no fingerprints "
    "of results, so flows_from, provenance and their CEL functions never hold in a replay"
)
_STATEFUL_NOTE: Final = (
    "budgets and rate limits depend on what was spent and when: they are not replayed. "
    "'recorded' counts calls a budget or rate limit refused (compared by the rules' "
    "verdict behind it); 'draft' counts calls the draft allows that one of its budgets "
    "or rate limits covers (they may still be refused when they run)"
)


@dataclass(frozen=True, slots=True)
class ReplayFilter:
    """Which records to replay: times in microseconds since the epoch (``since``
    inclusive, ``until`` exclusive), the tenant and agent exactly, the tool (the
    action's name) as a glob."""

    since_us: int | None = None
    until_us: int | None = None
    tenant: str | None = None
    agent: str | None = None
    tool: str | None = None

    def as_dict(self) -> dict[str, Any]:
        return {
            "since_us": self.since_us,
            "until_us": self.until_us,
            "tenant": self.tenant,
            "agent": self.agent,
            "tool": self.tool,
        }


@dataclass(frozen=True, slots=True)
class ReplayReport:
    """One replay's outcome."""

    policy: CompiledPolicy
    tally: ReplayTally
    filters: ReplayFilter

    @property
    def never_fired(self) -> list[str]:
        """The draft's rules (shadow rules included) that decided no replayed call."""
        fired = self.tally.fired
        return [rule.id for rule in self.policy.rules if rule.id not in fired]

    def fails(self, fail_on: FailOn) -> bool:
        """Whether the ``--fail-on`` condition holds: ``loosen`` — some call would run
        more freely (a loosening change); ``any`` — some verdict would change or
        cannot be told; ``never`` — never."""
        tally = self.tally
        if fail_on == "loosen":
            return tally.loosened > 0
        if fail_on == "any":
            return tally.changed > 0 or tally.cannot_tell > 0
        return False

    def as_json(self, fail_on: FailOn = "never") -> dict[str, Any]:
        tally = self.tally
        changes = {name: tally.changes.get(name, 0) for name in CHANGES}
        return {
            "schema": SCHEMA,
            "policy": {
                "source": self.policy.source,
                "rules": len(self.policy.rules),
                "default": self.policy.default.value,
            },
            "filters": self.filters.as_dict(),
            "records": {
                "read": tally.read,
                "replayed": tally.replayed,
                "skipped": dict(sorted(tally.skipped.items())),
                "truncated": tally.truncated,
            },
            "outcome": {
                "unchanged": tally.unchanged,
                "rules_changed": tally.rules_changed,
                "changed": tally.changed,
                "cannot_tell": tally.cannot_tell,
            },
            "changes": changes,
            "loosening": list(LOOSENING),
            "loosened": tally.loosened,
            "tightened": tally.tightened,
            "stateful": {
                "recorded": dict(sorted(tally.stateful_recorded.items())),
                "draft": dict(sorted(tally.stateful_draft.items())),
                "note": _STATEFUL_NOTE,
            },
            "rules": {rule_id: tally.rules[rule_id].as_dict() for rule_id in sorted(tally.rules)},
            "never_fired": self.never_fired,
            "examples": {name: list(found) for name, found in sorted(tally.examples.items())},
            "fail_on": fail_on,
            "failed": self.fails(fail_on),
            **({"sessions": {"note": _SESSIONS_NOTE}} if self.policy.sessions is not None else {}),
        }
