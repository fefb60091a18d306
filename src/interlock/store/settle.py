"""The arithmetic of a budget counter, written once for the SQL store and the
in-memory ledger.

A counter holds ``spent``, ``reserved`` (what calls in flight reserved) and
``headroom`` (how far those calls may run past their reservations: each line's
share of the budget's ``max_overage``). It admits a line only while

    spent + reserved + headroom + line.amount + line.headroom <= cap

and every settlement keeps the invariant (forced, human-approved lines aside)

    spent + reserved + headroom <= cap + excess

where ``excess`` is what commits ran past ``amount + headroom``: recorded, and the
reason the counter closes. So concurrency cannot multiply the overage a budget
allows — every call in flight already holds its own — and ``spent - excess`` never
passes the cap. ``docs/adr/0007-budgets-that-cannot-be-dodged.md`` has the proof.

Amounts are integers from 0 to :data:`MAX_UNITS`; the running totals saturate at
:data:`CEILING`, so no sum can overflow a signed 64-bit column.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Final

from interlock.errors import AmountOutOfRange, ReservationNotOwned
from interlock.store.records import ANY_AGENT, BudgetLine, Reservation, Settler

__all__ = [
    "CEILING",
    "MAX_UNITS",
    "Settlement",
    "admits",
    "check_owner",
    "committed",
    "expired",
    "released",
    "units",
]

#: The largest amount, cap or usage a budget counts (exact in a double, too).
MAX_UNITS: Final = 2**53
#: Where ``spent``, ``overage`` and ``excess`` stop growing: far from 2**63 - 1, so
#: adding one more :data:`MAX_UNITS` can never overflow.
CEILING: Final = 2**62


def units(value: Any, what: str, *, least: int = 0) -> int:
    """``value`` if it is an integer from ``least`` to :data:`MAX_UNITS`, else
    :class:`AmountOutOfRange` naming ``what``."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise AmountOutOfRange(f"{what} must be an integer number of units, not {value!r}")
    if not least <= value <= MAX_UNITS:
        raise AmountOutOfRange(f"{what} must be from {least} to 2**53 units, not {value}")
    return value


def check_owner(reservation: Reservation, by: Settler) -> None:
    """Raise :class:`ReservationNotOwned` unless ``by`` may settle ``reservation``:
    the agent that made it, or :data:`ANY_AGENT`. (The message does not say whose it
    is: the caller is not entitled to know.)"""
    if by is ANY_AGENT or by == reservation.owner:
        return
    raise ReservationNotOwned(
        f"reservation {reservation.id} was made by another agent: only that agent or an "
        "admin may settle it",
        reservation_id=reservation.id,
    )


def admits(spent: int, reserved: int, headroom: int, line: BudgetLine) -> bool:
    """Whether a counter holding these totals can take ``line`` (amount and headroom)."""
    return spent + reserved + headroom + line.held <= line.cap


@dataclass(frozen=True, slots=True)
class Settlement:
    """What settling one line does to its counter: added to ``spent``, ``overage`` and
    ``excess``, taken off ``reserved`` and ``headroom``."""

    charge: int = 0
    overage: int = 0
    excess: int = 0
    reserved: int = 0
    headroom: int = 0


def committed(line: BudgetLine, used: int, *, in_flight: bool) -> Settlement:
    """A commit of ``used`` units. In flight: the real amount is charged whatever was
    reserved; what runs past ``amount`` is overage, past ``amount + headroom`` excess.
    After the reaper expired it (``in_flight=False``) the reaper already charged
    ``amount`` and gave the headroom back, so all of what runs past is excess."""
    over = max(0, used - line.amount)
    if not in_flight:
        return Settlement(charge=over, overage=over, excess=over)
    return Settlement(
        charge=used,
        overage=over,
        excess=max(0, over - line.headroom),
        reserved=line.amount,
        headroom=line.headroom,
    )


def released(line: BudgetLine) -> Settlement:
    """A release: the call did not run; nothing is charged."""
    return Settlement(reserved=line.amount, headroom=line.headroom)


def expired(line: BudgetLine) -> Settlement:
    """The reaper's settlement of a line nobody settled in time: the call may have
    run, and money spent late is still spent, so its reservation is charged in full."""
    return Settlement(charge=line.amount, reserved=line.amount, headroom=line.headroom)
