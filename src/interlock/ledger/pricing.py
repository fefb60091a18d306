"""Model prices: what an LLM call costs, per million input and output tokens.

:data:`DEFAULT_PRICING` ships public **list prices in USD**, as the providers published
them in November 2025. They are defaults, to be overridden: ``pricing.models`` in
``interlock.yaml`` wins over them, and they do not apply at all when the policy prices
in another currency (a USD price is never read as EUR). Where a provider tiers its
price by prompt length (Claude Sonnet, Gemini 2.5 Pro), the default is the price for
prompts up to 200k tokens; cached-input, batch and negotiated rates are not modelled.

Example::

    >>> from interlock.ledger.pricing import DEFAULT_PRICING
    >>> DEFAULT_PRICING.cost("gpt-5-mini", input_tokens=1_000, output_tokens=500)
    Decimal('0.00125')
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Final

from interlock.policy.matchers import GlobSet

__all__ = ["DEFAULT_PRICING", "ModelPrice", "PricingTable"]

_MILLION: Final = Decimal(1_000_000)
_CACHE_LIMIT: Final = 4096
_CURRENCY = re.compile(r"[A-Z]{3}")


@dataclass(frozen=True, slots=True)
class ModelPrice:
    """The price of one model, in the table's currency per million tokens."""

    input_per_million: Decimal
    output_per_million: Decimal

    def __post_init__(self) -> None:
        for price in (self.input_per_million, self.output_per_million):
            if not price.is_finite() or price < 0:
                raise ValueError(f"a price must be a finite number ≥ 0, not {price}")


@dataclass(frozen=True, slots=True)
class _Entry:
    pattern: str
    price: ModelPrice
    globs: GlobSet | None  # None: an exact name

    def matches(self, model: str) -> bool:
        return model == self.pattern if self.globs is None else self.globs.matches(model)


@dataclass(frozen=True, slots=True)
class PricingTable:
    """Model name (or glob) → :class:`ModelPrice`, in ``currency``.

    ``entries`` are in priority order: the first that matches a model prices it.
    :meth:`with_overrides` keeps that order as exact names, then globs in the order
    given, then the entries it overrides.

    Example::

        >>> table = PricingTable().with_overrides(
        ...     {"my-model-*": ModelPrice(Decimal("0.1"), Decimal("0.4"))}
        ... )
        >>> table.cost("my-model-large", 2_000_000, 1_000_000)
        Decimal('0.6')
    """

    currency: str = "USD"
    entries: tuple[tuple[str, ModelPrice], ...] = ()
    # Compiled by the first price asked: the shipped table's globs would otherwise be
    # compiled by every import of the engine, priced calls or not (ADR 0014).
    _entries: tuple[_Entry, ...] | None = field(init=False, repr=False, compare=False, default=None)
    _cache: dict[str, ModelPrice | None] = field(
        init=False, repr=False, compare=False, default_factory=dict
    )

    def __post_init__(self) -> None:
        if _CURRENCY.fullmatch(self.currency) is None:
            raise ValueError(f"a currency is a 3-letter upper-case code, not {self.currency!r}")

    def _compiled(self) -> tuple[_Entry, ...]:
        compiled = self._entries
        if compiled is None:  # two threads may both compile: the same immutable result
            compiled = tuple(
                _Entry(pattern, price, None if _is_exact(pattern) else GlobSet.of(pattern))
                for pattern, price in self.entries
            )
            object.__setattr__(self, "_entries", compiled)
        return compiled

    def price(self, model: str) -> ModelPrice | None:
        """The price of ``model``, or None when no entry matches it (memoised)."""
        try:
            return self._cache[model]
        except KeyError:
            pass
        found = next((entry.price for entry in self._compiled() if entry.matches(model)), None)
        if len(self._cache) >= _CACHE_LIMIT:
            self._cache.clear()
        self._cache[model] = found
        return found

    def cost(self, model: str, input_tokens: int, output_tokens: int) -> Decimal | None:
        """What a call costs in ``currency`` (exact), or None when ``model`` has no price."""
        if input_tokens < 0 or output_tokens < 0:
            raise ValueError("token counts must be ≥ 0")
        price = self.price(model)
        if price is None:
            return None
        total = input_tokens * price.input_per_million + output_tokens * price.output_per_million
        return total / _MILLION

    def with_overrides(
        self, mapping: Mapping[str, ModelPrice], currency: str | None = None
    ) -> PricingTable:
        """A table where ``mapping`` wins over this one. In another ``currency``, none of
        this table's entries is kept: its prices are not in that currency."""
        currency = self.currency if currency is None else currency
        if not mapping and currency == self.currency:
            return self
        exact = [(p, price) for p, price in mapping.items() if _is_exact(p)]
        globs = [(p, price) for p, price in mapping.items() if not _is_exact(p)]
        kept = [] if currency != self.currency else [e for e in self.entries if e[0] not in mapping]
        return PricingTable(currency=currency, entries=(*exact, *globs, *kept))


def _is_exact(pattern: str) -> bool:
    return not any(ch in pattern for ch in "*?[")


def _usd(input_per_million: str, output_per_million: str) -> ModelPrice:
    return ModelPrice(Decimal(input_per_million), Decimal(output_per_million))


# Dated snapshots (``gpt-5-2025-08-07``, ``claude-sonnet-4-20250514``) are matched by
# globs narrow enough not to catch a sibling (``gpt-4o-20*`` misses ``gpt-4o-mini``);
# a more specific glob comes before a broader one.
_DEFAULTS: Final[Mapping[str, ModelPrice]] = {
    # OpenAI
    "gpt-5": _usd("1.25", "10.00"),
    "gpt-5-mini": _usd("0.25", "2.00"),
    "gpt-5-nano": _usd("0.05", "0.40"),
    "gpt-4.1": _usd("2.00", "8.00"),
    "gpt-4.1-mini": _usd("0.40", "1.60"),
    "gpt-4.1-nano": _usd("0.10", "0.40"),
    "gpt-4o": _usd("2.50", "10.00"),
    "gpt-4o-2024-05-13": _usd("5.00", "15.00"),
    "gpt-4o-mini": _usd("0.15", "0.60"),
    "o3": _usd("2.00", "8.00"),
    "o4-mini": _usd("1.10", "4.40"),
    "gpt-5-20*": _usd("1.25", "10.00"),
    "gpt-5-mini-20*": _usd("0.25", "2.00"),
    "gpt-5-nano-20*": _usd("0.05", "0.40"),
    "gpt-4.1-20*": _usd("2.00", "8.00"),
    "gpt-4.1-mini-20*": _usd("0.40", "1.60"),
    "gpt-4.1-nano-20*": _usd("0.10", "0.40"),
    "gpt-4o-20*": _usd("2.50", "10.00"),
    "gpt-4o-mini-20*": _usd("0.15", "0.60"),
    "o3-20*": _usd("2.00", "8.00"),
    "o4-mini-20*": _usd("1.10", "4.40"),
    # Anthropic: Opus 4.5 dropped the Opus price; Opus 4 and 4.1 kept it.
    "claude-opus-4-5*": _usd("5.00", "25.00"),
    "claude-opus-4*": _usd("15.00", "75.00"),
    "claude-sonnet-4*": _usd("3.00", "15.00"),
    "claude-haiku-4*": _usd("1.00", "5.00"),
    # Google
    "gemini-2.5-pro*": _usd("1.25", "10.00"),
    "gemini-2.5-flash-lite*": _usd("0.10", "0.40"),
    "gemini-2.5-flash*": _usd("0.30", "2.50"),
}

#: List prices in USD per million tokens (see the module docstring for their date).
DEFAULT_PRICING: Final = PricingTable(currency="USD").with_overrides(_DEFAULTS)
