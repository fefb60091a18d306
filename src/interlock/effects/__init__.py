"""Effects: how an authorized action leaves the process, once, and is accounted for.

- :mod:`~interlock.effects.protocol` — the :class:`EffectAdapter` contract
  (``prepare`` / ``execute`` / ``observe_effect`` / ``reconcile``) and the outcomes
  COMMITTED / FAILED / INDETERMINATE;
- :mod:`~interlock.effects.pipeline` — :func:`run_effect`: capture → decide → grant
  → claim → record → execute → observe → report, once per idempotency key;
- :mod:`~interlock.effects.reconcile` — resolving attempts whose outcome was lost;
- :mod:`~interlock.effects.http` — the HTTP family (needs httpx; imported on its own).

See docs/effects.md.
"""

from __future__ import annotations

from interlock.effects.pipeline import EffectResult, arun_effect, run_effect
from interlock.effects.protocol import (
    EffectAdapter,
    Execution,
    Outcome,
    PreparedEffect,
    ProviderResult,
    ReconcileContext,
    Reconciled,
    Resolution,
)
from interlock.effects.reconcile import (
    Reconciler,
    ReconcileReport,
    reconcile_effect,
    reconcile_pending,
)
from interlock.effects.records import EffectRecord, EffectStatus

__all__ = [
    "EffectAdapter",
    "EffectRecord",
    "EffectResult",
    "EffectStatus",
    "Execution",
    "Outcome",
    "PreparedEffect",
    "ProviderResult",
    "ReconcileContext",
    "ReconcileReport",
    "Reconciled",
    "Reconciler",
    "Resolution",
    "arun_effect",
    "reconcile_effect",
    "reconcile_pending",
    "run_effect",
]
