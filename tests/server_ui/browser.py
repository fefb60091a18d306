"""Where the browser tests find their browser, and what they do without one.

The browser is Debian's Chromium at ``$INTERLOCK_CHROMIUM`` (default
``/usr/bin/chromium``), driven by the ``playwright`` package; it is never downloaded.
Without either, the browser tests are skipped — unless ``INTERLOCK_REQUIRE_BROWSER=1``
(CI), which turns that into a failure.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import NoReturn

import pytest

CHROMIUM = Path(os.environ.get("INTERLOCK_CHROMIUM", "/usr/bin/chromium"))
#: The bound on Playwright's auto-waiting, in ms: generous, the machine is shared.
PATIENCE_MS = 20_000


def unavailable(reason: str) -> NoReturn:
    """Skip (the module, when called at import) or, in CI, fail."""
    if os.environ.get("INTERLOCK_REQUIRE_BROWSER") == "1":
        pytest.fail(f"{reason} (INTERLOCK_REQUIRE_BROWSER=1)", pytrace=False)
    pytest.skip(reason, allow_module_level=True)


try:
    from playwright.sync_api import expect, sync_playwright
except ImportError:
    unavailable("the browser tests need the playwright package (pip install playwright)")
if not CHROMIUM.exists():
    unavailable(f"no Chromium at {CHROMIUM} (apt install chromium, or set INTERLOCK_CHROMIUM)")

__all__ = ["CHROMIUM", "PATIENCE_MS", "expect", "sync_playwright", "unavailable"]
