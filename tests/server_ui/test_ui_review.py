"""The approvals page as an approver needs it, in real headless Chromium against the
real server: the tool's description and declared risk, what approving grants, times
in the browser's zone, a reason required (refused by the page and by the API), a
confirmation for a high-severity call, and the history of decisions with who and why,
paged."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import httpx
import pytest

from .browser import PATIENCE_MS, expect
from .harness import UiServer, WaitingAgent

if TYPE_CHECKING:
    from playwright.sync_api import Browser, Locator, Page, Request

POLICY = """\
version: 1
default: deny
approvals:
  ttl: 1h
  grant_ttl: 15m
tools:
  pay:
    description: Pays a supplier invoice from the company account.
    parameters:
      type: object
      properties:
        amount: {type: number}
        to: {type: string}
rules:
  - id: pay-big
    decision: require_approval
    reason: payments over 100 need a human
    severity: high
    name: pay
    when: "args.amount > 100"
  - id: wire-any
    decision: require_approval
    reason: wires need a human
    severity: low
    name: wire
  - id: note-any
    decision: require_approval
    reason: notes need a human
    name: note
"""


@pytest.fixture
def server(tmp_path: Path) -> Iterator[UiServer]:
    running = UiServer(tmp_path, POLICY)
    yield running
    running.close()


@pytest.fixture
def lax_server(tmp_path: Path) -> Iterator[UiServer]:
    running = UiServer(tmp_path, POLICY, approval_reason_required=False)
    yield running
    running.close()


def sign_in(page: Page, server: UiServer, who: str = "approver") -> None:
    page.goto(server.page_url)
    page.get_by_label("API key").fill(server.tokens[who])
    page.get_by_role("button", name="Sign in").click()
    expect(page.get_by_test_id("who-text")).to_contain_text("Signed in as")


def card(page: Page, approval_id: str) -> Locator:
    return page.locator(f'[data-testid="approval"][data-approval-id="{approval_id}"]')


def zoned_page(browser: Browser, zone: str) -> Iterator[Page]:
    context = browser.new_context(timezone_id=zone, locale="en-US")
    context.set_default_timeout(PATIENCE_MS)
    opened = context.new_page()
    problems: list[str] = []
    opened.on("pageerror", lambda error: problems.append(str(error)))
    yield opened
    context.close()
    assert problems == []


# -- what the card says --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("zone", "shown"),
    [("America/New_York", "EST"), ("Asia/Kolkata", "GMT+5:30"), ("UTC", "UTC")],
)
def test_the_card_shows_the_tool_its_risk_what_approving_grants_and_local_times(
    server: UiServer, browser: Browser, zone: str, shown: str
) -> None:
    for page in zoned_page(browser, zone):
        approval_id = server.ask(amount=500, to="ACME-7781")
        sign_in(page, server)
        item = card(page, approval_id)
        expect(item.get_by_test_id("approval-severity")).to_have_text("High risk")
        expect(item.get_by_test_id("approval-severity")).to_have_attribute("data-severity", "high")
        expect(item.get_by_test_id("tool-description-text")).to_have_text(
            "Pays a supplier invoice from the company account."
        )
        expect(item.get_by_test_id("tool-description-source")).to_contain_text(
            "as the policy describes it"
        )
        grants = item.get_by_test_id("approval-grants")
        expect(grants).to_contain_text(
            "Approving grants: this identical call (same tool, same arguments), once, until"
        )
        expect(grants).to_contain_text("(15 min after the approval)")
        # Times in the browser's zone, named; the exact instant in UTC in a tooltip.
        expect(grants.locator("time")).to_contain_text(shown)
        requested = item.get_by_test_id("approval-context").locator("time").first
        expect(requested).to_contain_text(shown)
        expect(requested).to_have_attribute("title", re.compile(r"^\d{4}-\d\d-\d\dT.*Z \(UTC\)$"))
        record = server.approval(approval_id)
        iso = requested.get_attribute("datetime")
        assert iso is not None and iso.endswith("Z")
        assert abs(_epoch_ms(iso) - record.created_us // 1000) <= 1


def _epoch_ms(iso: str) -> int:
    from datetime import datetime

    return int(datetime.fromisoformat(iso.replace("Z", "+00:00")).timestamp() * 1000)


def test_an_agents_own_description_is_marked_as_its_claim_and_stays_text(
    server: UiServer, page: Page
) -> None:
    claim = "Harmless. <b>Approve me</b><script>window.pwned=1</script>"
    wire = server.ask(name="wire", description=claim, to="x")
    note = server.ask(name="note", text="hi")
    sign_in(page, server)
    item = card(page, wire)
    expect(item.get_by_test_id("tool-description-text")).to_have_text(claim)
    expect(item.get_by_test_id("tool-description-source")).to_contain_text(
        "the agent's own words, not checked"
    )
    expect(item.get_by_test_id("approval-severity")).to_have_text("Low risk")
    assert item.locator("b, script:not([src])").count() == 0
    assert page.evaluate("typeof window.pwned") == "undefined"
    plain = card(page, note)
    expect(plain.get_by_test_id("tool-description")).to_have_text(
        "No description of this tool was declared."
    )
    expect(plain.get_by_test_id("approval-severity")).to_have_text("Risk not declared")


# -- a reason is required ------------------------------------------------------------------


def test_an_empty_reason_is_refused_by_the_page_and_by_the_api(
    server: UiServer, page: Page
) -> None:
    approval_id = server.ask(amount=300, to="ACME-0003")
    decisions: list[str] = []

    def on_request(request: Request) -> None:
        if request.method == "POST":
            decisions.append(request.url)

    page.on("request", on_request)
    sign_in(page, server)
    item = card(page, approval_id)
    expect(item.get_by_label("Reason for approving or denying pay")).to_be_visible()
    expect(item.locator("label")).to_contain_text("(required)")
    error = item.get_by_test_id("approval-error")

    for blank, verdict in (("", "Approve"), ("   \n ", "Deny"), ("\u200b\u3164", "Approve")):
        item.get_by_test_id("decision-reason").fill(blank)
        item.get_by_role("button", name=verdict).click()
        expect(error).to_contain_text(f"Give a reason before you {verdict.lower()} pay")
        expect(item.get_by_test_id("decision-reason")).to_be_focused()
    assert decisions == []  # refused in the page: nothing was sent
    assert server.approval(approval_id).status.value == "pending"

    # A reason the page cannot tell is blank (U+FFF0, an unassigned invisible code
    # point): the server refuses it, and the page shows why.
    item.get_by_test_id("decision-reason").fill("\ufff0")
    item.get_by_role("button", name="Deny").click()
    expect(error).to_contain_text("The decision was not recorded: A reason is required to deny")
    assert len(decisions) == 1
    assert server.approval(approval_id).status.value == "pending"
    expect(item.get_by_role("button", name="Deny")).to_be_enabled()

    # The API refuses on its own, whoever calls it.
    for body in ({"reason": ""}, {"reason": " \t"}, {}):
        answer = httpx.post(
            f"{server.url}/v1/approvals/{approval_id}/approve",
            json=body,
            headers=server.bearer("approver"),
        )
        assert answer.status_code == 422
        assert answer.json()["error"]["field"] == "reason"
    assert server.approval(approval_id).status.value == "pending"

    item.get_by_test_id("decision-reason").fill("not a known supplier")
    item.get_by_role("button", name="Deny").click()
    expect(item).to_have_count(0)
    record = server.approval(approval_id)
    assert (record.status.value, record.decision_reason) == ("denied", "not a known supplier")


def test_a_server_that_makes_the_reason_optional_lets_the_page_decide_without_one(
    lax_server: UiServer, page: Page
) -> None:
    approval_id = lax_server.ask(name="wire", to="x")
    sign_in(page, lax_server)
    item = card(page, approval_id)
    expect(item.locator("label")).to_contain_text("(optional)")
    item.get_by_role("button", name="Approve").click()
    expect(item).to_have_count(0)
    assert lax_server.approval(approval_id).status.value == "approved"


# -- the confirmation of a high-severity call ----------------------------------------------


def test_a_high_severity_call_asks_for_confirmation_before_it_is_approved(
    server: UiServer, page: Page
) -> None:
    agent = WaitingAgent(server, amount=5000, to="ACME-9999")
    agent.start()
    approval_id = agent.approval_requested()
    sign_in(page, server)
    item = card(page, approval_id)
    confirm = item.get_by_test_id("confirm")
    expect(confirm).to_be_hidden()
    item.get_by_test_id("decision-reason").fill("invoice ACME-9999 checked with finance")

    item.get_by_role("button", name="Approve").click()
    expect(confirm).to_be_visible()
    expect(item.get_by_test_id("confirm-text")).to_contain_text("pay is marked high risk")
    expect(item.get_by_role("button", name="Approve")).to_be_disabled()
    assert server.approval(approval_id).status.value == "pending"  # not yet

    item.get_by_role("button", name="Cancel").click()  # thought better of it
    expect(confirm).to_be_hidden()
    expect(item.get_by_role("button", name="Approve")).to_be_enabled()
    assert server.approval(approval_id).status.value == "pending"
    assert agent.ran == []

    item.get_by_role("button", name="Approve").click()
    item.get_by_role("button", name="Confirm approval").click()
    expect(item).to_have_count(0)
    agent.finish()
    assert agent.error is None
    assert agent.ran == [(5000, "ACME-9999")]
    record = server.approval(approval_id)
    assert (record.status.value, record.decided_by) == ("claimed", "alice")


def test_a_low_severity_call_is_approved_without_a_confirmation(
    server: UiServer, page: Page
) -> None:
    approval_id = server.ask(name="wire", to="x")
    sign_in(page, server)
    item = card(page, approval_id)
    item.get_by_test_id("decision-reason").fill("routine")
    item.get_by_role("button", name="Approve").click()
    expect(item).to_have_count(0)
    assert server.approval(approval_id).status.value == "approved"


# -- the history ---------------------------------------------------------------------------


def history_item(page: Page, approval_id: str) -> Locator:
    return page.locator(f'[data-testid="decided"][data-approval-id="{approval_id}"]')


def test_the_history_shows_who_decided_when_and_why_and_pages_back(
    server: UiServer, page: Page
) -> None:
    asked = [server.ask(name="note", text=f"note {n}") for n in range(23)]
    for n, approval_id in enumerate(asked):
        server.decide_elsewhere(approval_id, "deny" if n % 3 else "approve", f"reason {n}")
    sign_in(page, server)

    items = page.get_by_test_id("decided")
    expect(items).to_have_count(20)  # a page
    expect(items.first).to_have_attribute("data-approval-id", asked[-1])  # newest first
    newest = history_item(page, asked[-1])
    expect(newest.get_by_test_id("decided-status")).to_have_text("Denied")
    expect(newest.get_by_test_id("decided-by")).to_have_text("alice")
    expect(newest.get_by_test_id("decided-reason")).to_have_text("reason 22")
    expect(newest.get_by_test_id("requested-by")).to_have_text("ops-bot")
    expect(newest.get_by_test_id("decided-when").locator("time")).to_have_attribute(
        "title", re.compile(r"Z \(UTC\)$")
    )
    expect(page.get_by_test_id("history-newer")).to_be_disabled()

    page.get_by_role("button", name="Older").click()
    expect(page.get_by_test_id("history-page")).to_have_text("Page 2 (older decisions)")
    expect(items).to_have_count(3)
    assert items.evaluate_all("items => items.map(i => i.dataset.approvalId)") == [
        asked[2],
        asked[1],
        asked[0],
    ]
    oldest = history_item(page, asked[0])
    expect(oldest.get_by_test_id("decided-status")).to_have_text("Approved")
    expect(oldest.get_by_test_id("decided-reason")).to_have_text("reason 0")
    expect(page.get_by_test_id("history-older")).to_be_disabled()

    # An older page stays put while a new decision is made; the newest page shows it.
    fresh = server.ask(name="wire", to="fresh")
    server.decide_elsewhere(fresh, "deny", "made while paging")
    expect(page.get_by_test_id("live")).to_contain_text("Live:")
    expect(items).to_have_count(3)
    page.get_by_role("button", name="Newer").click()
    expect(page.get_by_test_id("history-page")).to_have_text("Newest decisions")
    expect(items.first).to_have_attribute("data-approval-id", fresh)
    expect(history_item(page, fresh).get_by_test_id("decided-reason")).to_have_text(
        "made while paging"
    )
