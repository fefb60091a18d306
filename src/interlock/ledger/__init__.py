"""The ledger: what actions cost, and the prices that say so."""

from __future__ import annotations

__all__: list[str] = []
