"""interlock.effects' public names, and what importing it loads."""

from __future__ import annotations

import subprocess
import sys

import interlock.effects


def test_the_public_names_are_pinned() -> None:
    assert sorted(interlock.effects.__all__) == [
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
    for name in interlock.effects.__all__:
        assert getattr(interlock.effects, name) is not None


def test_importing_effects_loads_no_http_client_and_interlock_loads_no_effects() -> None:
    probe = (
        "import sys, interlock\n"
        "assert 'interlock.effects' not in sys.modules\n"
        "import interlock.effects\n"
        "loaded = sorted(m for m in sys.modules if m.split('.')[0] in ('httpx', 'uvicorn'))\n"
        "assert loaded == [], loaded\n"
        "assert 'interlock.effects.http' not in sys.modules\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe], check=False, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
