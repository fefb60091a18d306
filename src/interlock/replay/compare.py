"""How a re-decided call compares with its record, and the tally of a whole replay.

Verdicts compare by what they let happen: ``allow`` runs the call, ``require_approval``
runs it once a human agrees, ``deny`` and ``undetermined`` do not run it. A change
towards running is a *loosening*, one away from it a *tightening*:

| recorded → draft | change | direction |
| --- | --- | --- |
| deny → allow | ``deny_to_allow`` | loosening |
| deny → require_approval | ``deny_to_approval`` | loosening |
| require_approval → allow | ``approval_removed`` | loosening |
| allow → deny | ``allow_to_deny`` | tightening |
| allow → require_approval | ``approval_added`` | tightening |
| require_approval → deny | ``approval_to_deny`` | tightening |
| undetermined ↔ anything | ``undetermined_changed`` | by what runs |

A call whose draft verdict cannot be told from its record is ``cannot_tell``, never
guessed. The same verdict reached by other rules is ``rules_changed`` (not a verdict
change).

Example::

    >>> from interlock.core.decision import Verdict
    >>> change_of(Verdict.DENY, Verdict.ALLOW)
    ('deny_to_allow', 'loosened')
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Final, Literal

from interlock.core.decision import Verdict

__all__ = [
    "CHANGES",
    "LOOSENING",
    "TIGHTENING",
    "Direction",
    "ReplayTally",
    "RuleTally",
    "change_of",
]

Direction = Literal["loosened", "tightened", "neither"]

_RUNS: Final = {
    Verdict.ALLOW: 0,
    Verdict.REQUIRE_APPROVAL: 1,
    Verdict.DENY: 2,
    Verdict.UNDETERMINED: 2,
}
_NAMES: Final = {
    (Verdict.DENY, Verdict.ALLOW): "deny_to_allow",
    (Verdict.DENY, Verdict.REQUIRE_APPROVAL): "deny_to_approval",
    (Verdict.REQUIRE_APPROVAL, Verdict.ALLOW): "approval_removed",
    (Verdict.ALLOW, Verdict.DENY): "allow_to_deny",
    (Verdict.ALLOW, Verdict.REQUIRE_APPROVAL): "approval_added",
    (Verdict.REQUIRE_APPROVAL, Verdict.DENY): "approval_to_deny",
}
#: Every verdict change, loosenings first.
LOOSENING: Final = ("deny_to_allow", "deny_to_approval", "approval_removed")
TIGHTENING: Final = ("allow_to_deny", "approval_added", "approval_to_deny")
CHANGES: Final = (*LOOSENING, *TIGHTENING, "undetermined_changed")


def change_of(old: Verdict, new: Verdict) -> tuple[str, Direction]:
    """The change from ``old`` to ``new`` (two different verdicts) and its direction."""
    name = _NAMES.get((old, new), "undetermined_changed")
    ran, runs = _RUNS[old], _RUNS[new]
    direction: Direction = "loosened" if runs < ran else "tightened" if runs > ran else "neither"
    return name, direction


@dataclass(slots=True)
class RuleTally:
    """One rule id's counts: records it decided as recorded (``old``), calls it decides
    under the draft (``new``), and the changes it took part in (as either)."""

    old: int = 0
    new: int = 0
    changes: Counter[str] = field(default_factory=Counter)

    def as_dict(self) -> dict[str, Any]:
        return {"old": self.old, "new": self.new, "changes": dict(sorted(self.changes.items()))}


@dataclass(slots=True)
class ReplayTally:
    """Everything counted over one replay (see :func:`interlock.replay.replay`)."""

    examples_per_change: int = 5
    read: int = 0
    replayed: int = 0
    skipped: Counter[str] = field(default_factory=Counter)
    unchanged: int = 0
    rules_changed: int = 0
    cannot_tell: int = 0
    loosened: int = 0
    tightened: int = 0
    changes: Counter[str] = field(default_factory=Counter)
    rules: dict[str, RuleTally] = field(default_factory=dict)
    fired: set[str] = field(default_factory=set)
    stateful_recorded: Counter[str] = field(default_factory=Counter)
    stateful_draft: Counter[str] = field(default_factory=Counter)
    examples: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    truncated: bool = False

    def rule(self, rule_id: str) -> RuleTally:
        found = self.rules.get(rule_id)
        if found is None:
            found = self.rules[rule_id] = RuleTally()
        return found

    def example(self, change: str, make: Any) -> None:
        """Keep an example of ``change`` (``make()`` builds it) while there is room."""
        kept = self.examples.setdefault(change, [])
        if len(kept) < self.examples_per_change:
            kept.append(make())

    @property
    def changed(self) -> int:
        return sum(self.changes.values())
