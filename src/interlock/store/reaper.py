"""The reaper: a background thread that charges reservations past their TTL, closes
budget leases past their expiry (a crashed replica's: what they hold goes back to the
counter, see ``docs/adr/0012-budget-leases.md``) and returns this store's idle ones,
and expires lapsed approvals, so a crashed agent cannot hold a budget. It also
forgets sessions idle past their history's ``expire_after``
(:meth:`~interlock.store.sql_sessions.SessionStore.reap_sessions`). With
``audited``, what it charges is recorded in the audit chain, and each round closes
starts that never reported with ``outcome_unknown``
(:func:`interlock.store.outcomes.recover_outcomes`, bound ``outcome_bound`` seconds).

Every guard on a store runs one (``Guard(reap_interval=...)``; ``None`` turns it off).
Replicas on one PostgreSQL share the work: each skips the rows another is releasing.

Example::

    from interlock.store import open_store
    from interlock.store.reaper import Reaper

    reaper = Reaper(open_store(), interval=10.0)
    reaper.start()
    ...
    reaper.stop()
"""

from __future__ import annotations

import logging
import threading

from interlock.errors import describe
from interlock.store.records import ReapResult
from interlock.store.sql import SqlStore

__all__ = ["Reaper"]

log = logging.getLogger("interlock.store")


class Reaper(threading.Thread):
    """Calls ``store.reap()`` every ``interval`` seconds until stopped."""

    def __init__(
        self,
        store: SqlStore,
        *,
        interval: float = 10.0,
        audited: bool = False,
        outcome_bound: float = 3600.0,
    ) -> None:
        if interval <= 0:
            raise ValueError(f"the reap interval must be positive, not {interval!r}")
        super().__init__(name="interlock-reaper", daemon=True)
        self.store = store
        self.interval = interval
        self.audited = audited
        self.outcome_bound = outcome_bound
        self.unknown = 0  # outcome_unknown records appended
        self.sessions_expired = 0  # idle sessions forgotten
        self._checked_us: int | None = None  # starts before it are closed
        self.total = ReapResult()
        self._stopping = threading.Event()

    def run(self) -> None:
        while not self._stopping.wait(self.interval):
            try:
                result = self.store.reap(audited=True) if self.audited else self.store.reap()
                if self.audited:
                    from interlock.store.outcomes import recover_outcomes

                    recovery = recover_outcomes(
                        self.store, older_than=self.outcome_bound, since_us=self._checked_us
                    )
                    self.unknown += recovery.appended
                    self._checked_us = recovery.checked_us
            except Exception as exc:  # the database is away: try again next round
                log.warning("interlock: the reaper could not run: %s", describe(exc))
                continue
            try:
                self.sessions_expired += self.store.reap_sessions()
            except Exception as exc:
                log.warning("interlock: the reaper could not expire sessions: %s", describe(exc))
            if result.reservations or result.approvals:
                log.info(
                    "interlock: reaper released %d reservation(s), expired %d approval(s)",
                    result.reservations,
                    result.approvals,
                )
            self.total = ReapResult(
                self.total.reservations + result.reservations,
                self.total.approvals + result.approvals,
            )

    def stop(self, timeout: float = 5.0) -> None:
        self._stopping.set()
        if self.is_alive():
            self.join(timeout)
