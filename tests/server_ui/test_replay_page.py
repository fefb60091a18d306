"""The policy replay page in real headless Chromium, against the real server: an
admin pastes (or uploads) a draft and sees what it would change on the calls the
tenant's log holds; a key of another role is turned away."""

from __future__ import annotations

import re
from importlib.resources import files
from pathlib import Path
from typing import TYPE_CHECKING

import httpx
import pytest

from .browser import expect
from .harness import POLICY, UiServer

if TYPE_CHECKING:
    from playwright.sync_api import Page

STATIC = files("interlock.server.ui").joinpath("static")
LOOSENED = POLICY + (
    "  - id: pay-anything\n    decision: allow\n    reason: (draft) pay freely\n    name: pay\n"
)


def record_calls(server: UiServer) -> None:
    """Three real checks by the agent key: allowed, denied (no rule), allowed."""
    for name, arguments in (("lookup", {"q": "x"}), ("pay", {"amount": 50, "to": "A-1"})):
        httpx.post(
            f"{server.url}/v1/check",
            json={"name": name, "arguments": arguments},
            headers=server.bearer("agent"),
        ).raise_for_status()
    httpx.post(
        f"{server.url}/v1/check",
        json={"name": "lookup", "arguments": {"q": "y"}},
        headers=server.bearer("agent"),
    ).raise_for_status()


def sign_in(page: Page, server: UiServer, who: str) -> None:
    page.goto(f"{server.url}/ui/replay")
    page.get_by_label("API key").fill(server.tokens[who])
    page.get_by_role("button", name="Sign in").click()


def test_an_admin_sees_the_loosening_a_draft_would_make(server: UiServer, page: Page) -> None:
    record_calls(server)
    sign_in(page, server, "admin_as_agent")
    expect(page.get_by_test_id("who-text")).to_contain_text("(admin, tenant acme)")
    page.get_by_label("Policy (YAML)").fill(LOOSENED)
    page.get_by_role("button", name="Replay").click()
    expect(page.get_by_test_id("summary")).to_contain_text("3 recorded decisions replayed")
    loosened = page.locator('[data-testid="change"][data-change="deny_to_allow"]')
    expect(loosened).to_contain_text("LOOSENED deny → allow")
    expect(loosened).to_contain_text("1")
    expect(loosened).to_have_class("loosened")
    color = loosened.locator("td").first.evaluate("node => getComputedStyle(node).color")
    assert color == "rgb(176, 0, 32)"  # red
    tightened = page.locator('[data-testid="change"][data-change="allow_to_deny"]')
    expect(tightened).not_to_have_class("loosened")
    expect(page.get_by_test_id("verdict")).to_have_text("1 calls would be loosened, 0 tightened.")
    expect(page.get_by_test_id("never-fired")).to_contain_text("pay-big")
    group = page.locator('[data-testid="example-group"][data-change="deny_to_allow"]')
    expect(group).to_contain_text('"to":"A-1"')
    expect(group).to_contain_text("draft allow [pay-anything]")


def test_an_uploaded_draft_that_does_not_load_shows_its_line(
    server: UiServer, page: Page, tmp_path: Path
) -> None:
    sign_in(page, server, "admin_as_agent")
    draft = tmp_path / "draft.yaml"
    draft.write_text("version: 1\nrules:\n  - id: x\n    decision: alow\n    reason: r\n")
    page.get_by_label("Upload a file").set_input_files(str(draft))
    expect(page.get_by_label("Policy (YAML)")).to_have_value(re.compile("decision: alow"))
    page.get_by_role("button", name="Replay").click()
    expect(page.get_by_test_id("replay-error")).to_contain_text(
        "draft:4: rule 'x': field 'decision'"
    )
    expect(page.get_by_test_id("result")).to_be_hidden()


def test_an_approver_key_is_turned_away(server: UiServer, page: Page) -> None:
    sign_in(page, server, "approver")
    expect(page.get_by_test_id("sign-in-error")).to_contain_text('it is the approver key "alice"')
    expect(page.get_by_test_id("draft")).to_be_hidden()


def test_server_data_is_shown_as_text(server: UiServer, page: Page) -> None:
    xss = "<img src=x onerror=window.pwned=1>"
    httpx.post(
        f"{server.url}/v1/check",
        json={"name": "pay", "arguments": {"amount": 1, "to": xss}},
        headers=server.bearer("agent"),
    ).raise_for_status()
    sign_in(page, server, "admin_as_agent")
    page.get_by_label("Policy (YAML)").fill(LOOSENED)
    page.get_by_role("button", name="Replay").click()
    group = page.locator('[data-testid="example-group"][data-change="deny_to_allow"]')
    expect(group).to_contain_text(xss)
    assert page.evaluate("window.pwned") is None


@pytest.mark.parametrize("name", ["replay.html", "replay.js"])
def test_the_page_has_nothing_inline_and_no_html_sinks(name: str) -> None:
    lines = STATIC.joinpath(name).read_text().splitlines()
    text = "\n".join(line for line in lines if not line.lstrip().startswith("//"))  # code only
    assert "innerHTML" not in text and "outerHTML" not in text
    assert not re.search(r"\son\w+=", text)  # no inline handlers
    if name.endswith(".html"):
        assert re.findall(r"<script[^>]*>", text) == ['<script src="replay.js" defer>']
        assert "<style" not in text
