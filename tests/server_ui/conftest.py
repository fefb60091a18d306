"""Fixtures of the approvals-page tests: the server (:mod:`.harness`), one headless
Chromium per module (:mod:`.browser` says where it comes from), and a fresh page per
test that fails the test on any script error or Content-Security-Policy violation.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from .harness import UiServer

if TYPE_CHECKING:
    from playwright.sync_api import Browser, ConsoleMessage, Page


@pytest.fixture
def server(tmp_path: Path) -> Iterator[UiServer]:
    running = UiServer(tmp_path)
    yield running
    running.close()


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    """Headless Chromium, launched once per module (imported here, not at the top, so
    the tests that need no browser run without one)."""
    from .browser import CHROMIUM, PATIENCE_MS, expect, sync_playwright

    expect.set_options(timeout=PATIENCE_MS)
    with sync_playwright() as playwright:
        launched = playwright.chromium.launch(
            executable_path=str(CHROMIUM), headless=True, args=["--no-sandbox"]
        )
        yield launched
        launched.close()


@pytest.fixture
def page(browser: Browser) -> Iterator[Page]:
    """A page in a fresh browser context (no storage shared between tests). Any
    uncaught script error or CSP / Trusted Types violation fails the test."""
    from .browser import PATIENCE_MS

    context = browser.new_context()
    context.set_default_timeout(PATIENCE_MS)
    opened = context.new_page()
    problems: list[str] = []
    opened.on("pageerror", lambda error: problems.append(f"script error: {error}"))

    def on_console(message: ConsoleMessage) -> None:
        if "Content Security Policy" in message.text or "Trusted Type" in message.text:
            problems.append(f"console: {message.text}")

    opened.on("console", on_console)
    yield opened
    context.close()
    assert problems == []
