"""The compiled, stateful parts of a policy: budgets, rate limits, audit and approval
settings. Pure data, built by the loader; the store and the guard act on them.

Amounts are integers of *units*: a currency budget counts micro-units (1 USD is
1 000 000 units), a token budget counts tokens. Integer arithmetic in SQL is exact.
"""

from __future__ import annotations

import math
import re
import time
from dataclasses import dataclass
from decimal import ROUND_CEILING, Decimal
from typing import TYPE_CHECKING, Final, Literal

from interlock.core.decision import Verdict
from interlock.policy.matchers import GlobSet

if TYPE_CHECKING:
    from interlock.core.action import Action

__all__ = [
    "DEFAULT_OVERAGE",
    "MICRO",
    "ApprovalPolicy",
    "AuditPolicy",
    "BudgetSpec",
    "Durability",
    "KeyScope",
    "Overage",
    "RateLimitSpec",
    "Selector",
    "Window",
    "parse_duration",
    "scope_key",
    "to_units",
    "units_to_amount",
    "window_start",
]

KeyScope = Literal["tenant", "agent", "session", "tool"]
Window = Literal["none", "hour", "day", "month"]
Durability = Literal["none", "process", "power"]

#: Units per currency unit: budgets in a currency count micro-units.
MICRO: Final = 1_000_000

_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h|d)?\s*$")
_SECONDS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0, None: 1.0}


def parse_duration(value: str | float | int) -> float:
    """Seconds from ``30``, ``"500ms"``, ``"10s"``, ``"5m"``, ``"1h"`` or ``"1d"``.

    Raises ValueError for anything else, or for a duration that is not positive
    and finite.
    """
    if isinstance(value, bool):
        raise ValueError(f"not a duration: {value!r}")
    if isinstance(value, (int, float)):
        try:
            seconds = float(value)
        except OverflowError:  # an int past the float range
            raise ValueError(f"a duration must be positive and finite, not {value!r}") from None
    else:
        match = _DURATION.match(value)
        if match is None:
            raise ValueError(
                f"not a duration: {value!r} (use seconds, or a number with ms, s, m, h or d)"
            )
        seconds = float(match.group(1)) * _SECONDS[match.group(2)]
    if not (seconds > 0 and math.isfinite(seconds)):
        raise ValueError(f"a duration must be positive and finite, not {value!r}")
    return seconds


def to_units(amount: Decimal | float | int | str, unit: str) -> int:
    """An amount in ``unit`` as integer units, rounded up (a reservation never
    undercounts): tokens as they are, a currency in micro-units."""
    value = Decimal(str(amount))
    if not value.is_finite() or value < 0:
        raise ValueError(f"an amount must be a finite number ≥ 0, not {amount!r}")
    if unit == "tokens":
        return int(value.to_integral_value(rounding=ROUND_CEILING))
    return int((value * MICRO).to_integral_value(rounding=ROUND_CEILING))


def units_to_amount(units: int, unit: str) -> Decimal:
    """The inverse of :func:`to_units` (exact)."""
    if unit == "tokens":
        return Decimal(units)
    return Decimal(units) / MICRO


def scope_key(scope: KeyScope, action: Action) -> str:
    """What a budget or rate limit counts separately, e.g. ``agent:support-bot``.
    A missing agent or session is counted under ``?`` (one shared bucket, never none)."""
    context = action.context
    if scope == "tenant":
        return "tenant"
    if scope == "agent":
        return f"agent:{context.agent or '?'}"
    if scope == "session":
        return f"session:{context.session_id or '?'}"
    return f"tool:{action.name}"


def window_start(window: Window, now: float | None = None) -> int:
    """The UTC start (epoch seconds) of the window holding ``now``; 0 for ``none``."""
    if window == "none":
        return 0
    import calendar  # with datetime and locale: only a budget with a window needs it

    t = time.gmtime(time.time() if now is None else now)
    if window == "hour":
        return calendar.timegm((t.tm_year, t.tm_mon, t.tm_mday, t.tm_hour, 0, 0))
    if window == "day":
        return calendar.timegm((t.tm_year, t.tm_mon, t.tm_mday, 0, 0, 0))
    return calendar.timegm((t.tm_year, t.tm_mon, 1, 0, 0, 0))


@dataclass(frozen=True, slots=True)
class Selector:
    """Which actions a budget or rate limit applies to. ``None`` matches anything;
    ``rules`` matches actions allowed by one of those rule ids."""

    kinds: frozenset[str] | None = None
    names: GlobSet | None = None
    agents: GlobSet | None = None
    tenants: GlobSet | None = None
    rules: frozenset[str] | None = None

    def matches(self, action: Action, rule_ids: tuple[str, ...] = ()) -> bool:
        if self.kinds is not None and action.kind not in self.kinds:
            return False
        if self.names is not None and not self.names.matches(action.name):
            return False
        context = action.context
        if self.agents is not None and (
            context.agent is None or not self.agents.matches(context.agent)
        ):
            return False
        if self.tenants is not None and not self.tenants.matches(context.tenant):
            return False
        return self.rules is None or not self.rules.isdisjoint(rule_ids)


@dataclass(frozen=True, slots=True)
class Overage:
    """How far a call may really cost more than it reserved (a budget's
    ``max_overage``): ``units`` flat, or ``percent`` of each reservation."""

    units: int | None = None
    percent: Decimal | None = None

    def headroom(self, amount: int) -> int:
        """The units a reservation of ``amount`` holds besides, for its overrun."""
        if self.units is not None:
            return self.units
        share = Decimal(amount) * (self.percent or Decimal(0)) / 100
        return int(share.to_integral_value(rounding=ROUND_CEILING))


#: The default ``max_overage``: a call may cost up to twice what it reserved.
DEFAULT_OVERAGE: Final = Overage(percent=Decimal(100))


@dataclass(frozen=True, slots=True)
class BudgetSpec:
    """A spending cap. ``limit`` and ``default_estimate`` are in units (see
    :func:`to_units`); ``max_overage`` says how much headroom each reservation holds."""

    id: str
    limit: int
    unit: str  # an ISO currency code (the pricing currency) or "tokens"
    scope: KeyScope
    window: Window
    on_exceed: Verdict  # DENY or REQUIRE_APPROVAL
    selector: Selector
    reason: str | None = None
    line: int | None = None
    default_estimate: int | None = None  # None: a call that states no cost is refused
    max_overage: Overage = DEFAULT_OVERAGE

    @property
    def is_tokens(self) -> bool:
        return self.unit == "tokens"

    def key(self, action: Action) -> str:
        return scope_key(self.scope, action)

    def headroom(self, amount: int) -> int:
        return self.max_overage.headroom(amount)


@dataclass(frozen=True, slots=True)
class RateLimitSpec:
    """At most ``limit`` allowed actions per ``per_seconds`` for each ``key``, smoothed
    (a burst of ``limit`` at once, then one every ``per_seconds / limit``)."""

    id: str
    limit: int
    per_seconds: float
    key: KeyScope
    selector: Selector
    reason: str | None = None
    line: int | None = None

    @property
    def interval_us(self) -> int:
        """Microseconds between two actions at the steady rate."""
        return max(1, round(self.per_seconds * 1_000_000 / self.limit))

    @property
    def window_us(self) -> int:
        return max(1, round(self.per_seconds * 1_000_000))


@dataclass(frozen=True, slots=True)
class AuditPolicy:
    """How decisions are recorded. ``durability``: ``process`` (the default) returns a
    verdict only once its record is committed (it survives the process crashing);
    ``power`` also waits for the disk (fsync); ``none`` records in the background
    (a crash may lose the newest records)."""

    durability: Durability = "process"


@dataclass(frozen=True, slots=True)
class ApprovalPolicy:
    """``ttl``: how long a pending approval waits for a human; ``grant_ttl``: how long
    an approved call stays claimable by its retry (seconds)."""

    ttl: float = 3600.0
    grant_ttl: float = 900.0
