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
from typing import TYPE_CHECKING, Final, NamedTuple

from interlock.errors import describe

if TYPE_CHECKING:  # typing only: a grant is the approvals layer's
    from interlock.approvals.grants import Grant

__all__ = [
    "SEVERITY",
    "ApprovalRef",
    "Decision",
    "ReservationRef",
    "ShadowVerdict",
    "Verdict",
    "decision_ids",
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
# The ids ``f"dec_{prefix}{n:08x}"`` for n = 1, 2, ..., made in C as they are taken
# (``next`` runs no Python frame, so threads cannot interleave inside it) and cheaply:
# formatting an int costs more than the rest of an allowed check's decision, so it
# is done once per 256 ids — the text up to the last two hex digits — and each id is
# that text and two precomputed digits.
_HEADS: Final = map(f"dec_{_ID_PREFIX}%06x".__mod__, itertools.count())
_LOW_DIGITS: Final = tuple(f"{low:02x}" for low in range(256))
_IDS: Final[Iterator[str]] = map(
    str.__add__,
    itertools.chain.from_iterable(map(itertools.repeat, _HEADS, itertools.repeat(256))),
    itertools.cycle(_LOW_DIGITS),
)
next(_IDS)  # n = 0: ids start at 1


def new_decision_id() -> str:
    """A process-unique, cheap decision id: a random per-process prefix and a counter."""
    return next(_IDS)


def decision_ids() -> Iterator[str]:
    """The process's one source of decision ids, for code that takes them on the hot
    path with ``next(ids)`` (as :func:`new_decision_id` does)."""
    return _IDS


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
    grant: Grant | None = None


_new_tuple = tuple.__new__


class Decision(_DecisionFields):
    """One verdict on one action. Immutable: nothing (a hook included) can change it.

    ``rule_ids`` name the rules that decided (sorted, so rule order never shows);
    ``cause`` is set for undetermined verdicts; ``shadow`` holds what shadow rules
    would have decided; ``fail_open`` marks an undetermined verdict turned into allow
    by an explicit ``fail_mode="open"``; ``reservation`` is the budget reservation an
    allowed action holds (see ``Guard.commit`` / ``Guard.release``); ``grant`` the
    signed, single-use grant an allow carries when the policy asks for one
    (:mod:`interlock.approvals.grants`). A named tuple
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
        grant: Grant | None = None,
    ) -> Decision:
        fields = (
            verdict,
            reason,
            rule_ids,
            cause,
            # new_decision_id(), inlined: a Python call fewer on every check.
            decision_id or next(_IDS),
            approval,
            shadow,
            fail_open,
            reservation,
            grant,
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
