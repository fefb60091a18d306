"""The verdict: ``Decision`` and its four ``Verdict`` values.

Example::

    decision = guard.check(action)
    if decision.allowed:
        run()
    else:
        print(decision.verdict, decision.reason, decision.rule_ids)
"""

from __future__ import annotations

import itertools
import os
from collections.abc import Iterator
from dataclasses import dataclass
from enum import StrEnum
from typing import Final, NamedTuple

from interlock.errors import describe

__all__ = [
    "SEVERITY",
    "ApprovalRef",
    "Decision",
    "ReservationRef",
    "ShadowVerdict",
    "Verdict",
    "decision_id_parts",
    "new_decision_id",
]


class Verdict(StrEnum):
    ALLOW = "allow"
    DENY = "deny"
    REQUIRE_APPROVAL = "require_approval"
    UNDETERMINED = "undetermined"


# Deny overrides: the strictest matching verdict wins.
SEVERITY: Final[dict[Verdict, int]] = {
    Verdict.ALLOW: 0,
    Verdict.REQUIRE_APPROVAL: 1,
    Verdict.DENY: 2,
    Verdict.UNDETERMINED: 3,
}

# Read as a module global: an Enum's class attribute costs about ten times as much on
# Python 3.11, and ``allowed`` is read after every check.
_ALLOW: Final = Verdict.ALLOW

_ID_PREFIX: Final = os.urandom(6).hex()
_ID_COUNTER = itertools.count(1)


def new_decision_id() -> str:
    """A process-unique, cheap decision id: a random per-process prefix and a counter."""
    return f"dec_{_ID_PREFIX}{next(_ID_COUNTER):08x}"


def decision_id_parts() -> tuple[str, Iterator[int]]:
    """What :func:`new_decision_id` is made of — the text before the counter and the
    process's one counter — for code that inlines it (``f"{text}{next(counter):08x}"``)
    on the hot path; ids stay unique, as the counter is shared."""
    return f"dec_{_ID_PREFIX}", _ID_COUNTER


@dataclass(frozen=True, slots=True)
class ApprovalRef:
    """Where an approval lives. ``id`` is ``None`` when no store records approvals;
    ``status`` is ``pending``, ``denied``, or ``claimed`` (an approved grant this very
    decision used up)."""

    id: str | None = None
    url: str | None = None
    status: str | None = None


@dataclass(frozen=True, slots=True)
class ReservationRef:
    """The budget reservation an allowed action holds until it is committed or
    released. ``amounts`` are ``(budget id, units, unit)``; ``owner`` is the agent it
    was made for: only that agent (or an admin) may settle it."""

    id: str
    amounts: tuple[tuple[str, int, str], ...] = ()
    owner: str | None = None


@dataclass(frozen=True, slots=True)
class ShadowVerdict:
    """What a shadow-mode policy or rule would have decided, had it been enforced."""

    verdict: Verdict
    reason: str
    rule_ids: tuple[str, ...] = ()


class _DecisionFields(NamedTuple):
    verdict: Verdict
    reason: str
    rule_ids: tuple[str, ...] = ()
    cause: BaseException | None = None
    decision_id: str = ""
    approval: ApprovalRef | None = None
    shadow: ShadowVerdict | None = None
    fail_open: bool = False
    reservation: ReservationRef | None = None


_new_tuple = tuple.__new__


class Decision(_DecisionFields):
    """One verdict on one action. Immutable: nothing (a hook included) can change it.

    ``rule_ids`` name the rules that decided (sorted, so rule order never shows);
    ``cause`` is set for undetermined verdicts; ``shadow`` holds what shadow rules
    would have decided; ``fail_open`` marks an undetermined verdict turned into allow
    by an explicit ``fail_mode="open"``; ``reservation`` is the budget reservation an
    allowed action holds (see ``Guard.commit`` / ``Guard.release``). A named tuple
    underneath: it is built on every check, and that is the cheapest immutable record
    Python has.
    """

    __slots__ = ()

    def __new__(
        cls,
        verdict: Verdict,
        reason: str,
        rule_ids: tuple[str, ...] = (),
        cause: BaseException | None = None,
        decision_id: str = "",
        approval: ApprovalRef | None = None,
        shadow: ShadowVerdict | None = None,
        fail_open: bool = False,
        reservation: ReservationRef | None = None,
    ) -> Decision:
        fields = (
            verdict,
            reason,
            rule_ids,
            cause,
            # new_decision_id(), inlined: a Python call fewer on every check.
            decision_id or f"dec_{_ID_PREFIX}{next(_ID_COUNTER):08x}",
            approval,
            shadow,
            fail_open,
            reservation,
        )
        return _new_tuple(cls, fields)

    @property
    def allowed(self) -> bool:
        return self.verdict is _ALLOW

    @classmethod
    def undetermined(cls, cause: BaseException, reason: str | None = None) -> Decision:
        return cls(
            verdict=Verdict.UNDETERMINED,
            reason=reason or f"no verdict: {describe(cause)}",
            cause=cause,
        )
