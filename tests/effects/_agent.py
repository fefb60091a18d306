"""An agent process for the kill -9 tests: runs one effect and prints its outcome.

python _agent.py STORE_URL PROVIDER_URL IDEMPOTENCY_KEY
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))


from interlock import Guard
from interlock.effects import run_effect
from interlock.effects.http import HttpEffect
from support import POLICY, refund


def main() -> None:
    store_url, provider_url, key = sys.argv[1:4]
    with Guard(POLICY, store=store_url, reap_interval=None) as guard:
        adapter = HttpEffect(provider_url, audience="shop", action_types=("refund",))
        print(json.dumps({"started": key}), flush=True)
        result = run_effect(guard, adapter, refund(), idempotency_key=key, timeout=120)
        print(json.dumps({"outcome": result.outcome.value}), flush=True)


if __name__ == "__main__":
    main()
