"""Rate limits in SQL: one atomic upsert per slot (GCRA), across replicas."""

from __future__ import annotations

from interlock.store.records import RateOutcome
from interlock.store.sql_base import StoreBase

__all__ = ["RateStore"]


class RateStore(StoreBase):
    """Smoothed rate limits."""

    def rate_acquire(
        self, *, tenant: str, limit_id: str, key: str, interval_us: int, window_us: int
    ) -> RateOutcome:
        """Take one slot of a smoothed rate limit (GCRA), atomically: allowed when the
        key's theoretical arrival time, pushed one interval on, stays within the
        window from now."""
        now = self.clock()
        g = self.greatest
        with self.transaction(write=True) as cur:
            cur.execute(
                self.q(
                    "INSERT INTO rate_counters (tenant, limit_id, key, tat_us) VALUES (?, ?, ?, ?) "
                    "ON CONFLICT (tenant, limit_id, key) DO UPDATE SET "
                    f"tat_us = {g}(rate_counters.tat_us, ?) + ? "
                    f"WHERE {g}(rate_counters.tat_us, ?) + ? - ? <= ? RETURNING tat_us"
                ),
                (
                    tenant,
                    limit_id,
                    key,
                    now + interval_us,
                    now,
                    interval_us,
                    now,
                    interval_us,
                    now,
                    window_us,
                ),
            )
            if cur.fetchone() is not None:
                return RateOutcome(True)
            cur.execute(
                self.q(
                    "SELECT tat_us FROM rate_counters WHERE tenant = ? AND limit_id = ? AND key = ?"
                ),
                (tenant, limit_id, key),
            )
            row = cur.fetchone()
        tat = int(row[0]) if row else now
        return RateOutcome(False, retry_after=max(0.0, (tat + interval_us - now - window_us) / 1e6))
