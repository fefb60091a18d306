"""What an approver is told and asked, over the API (SQLite and PostgreSQL): the
tool's description and declared risk stored with each approval, what approving
grants, a reason required to decide (422 without one, unless the server says it is
optional), and the history of decided approvals, paged, per tenant, by role."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from interlock import Guard, load_policy_text
from interlock.server import KeyStore, create_app

from .harness import Api, make_keys

POLICY = """\
version: 1
default: deny
approvals:
  url: "http://127.0.0.1:8750/ui/#{id}"
  ttl: 1h
  grant_ttl: 15m
tools:
  refund_order:
    description: Refunds an order to the customer's card.
    parameters:
      type: object
      properties:
        order_id: {type: integer}
        amount: {type: number}
rules:
  - id: refund-large
    decision: require_approval
    reason: refunds over 100 need a human
    severity: high
    name: refund_order
    when: "args.amount > 100"
  - id: wire
    decision: require_approval
    reason: wires need a human
    severity: low
    name: wire
  - id: note
    decision: require_approval
    reason: notes need a human
    name: note
"""

STRIPE = "sk_" + "live_" + "Zq8Xv2Lm9Pw4Rt7Ks1Nb6Hy3"
GRANT_TTL_US = 15 * 60 * 1_000_000


async def _open(url: str, clock: Any, **options: Any) -> AsyncIterator[Api]:
    guard = Guard(load_policy_text(POLICY), store=url)
    assert guard.store is not None
    guard.store.clock = clock
    keys = KeyStore(guard.store)
    app = create_app(guard, keys=keys, **options)
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://interlock.test") as client:
        yield Api(guard, keys, app, make_keys(keys), client)
    guard.close()


@pytest.fixture
async def api(store_url: str, clock: Any) -> AsyncIterator[Api]:
    async for opened in _open(store_url, clock):
        yield opened


@pytest.fixture
async def lax_api(tmp_path: Path, clock: Any) -> AsyncIterator[Api]:
    """A server made with ``approval_reason_required=False``."""
    async for opened in _open(
        f"sqlite:///{tmp_path / 'lax.db'}", clock, approval_reason_required=False
    ):
        yield opened


async def ask(api: Api, name: str = "refund_order", who: str = "agent", **fields: Any) -> str:
    """Have ``who`` check a call that needs approval; the approval's id."""
    body: dict[str, Any] = {"name": name, "arguments": fields.pop("arguments", {}), **fields}
    decision = await api.check(who, **body)
    assert decision["verdict"] == "require_approval", decision
    approval_id: str = decision["approval"]["id"]
    return approval_id


async def decide(api: Api, approval_id: str, verdict: str, reason: Any, who: str = "approver"):  # type: ignore[no-untyped-def]
    return await api.client.post(
        f"/v1/approvals/{approval_id}/{verdict}", json={"reason": reason}, headers=api.h(who)
    )


# -- what the approver is told ------------------------------------------------------------


async def test_an_approval_carries_the_tools_description_risk_and_grant(api: Api) -> None:
    approval_id = await ask(api, arguments={"order_id": 42, "amount": 250})
    shown = (await api.client.get(f"/v1/approvals/{approval_id}", headers=api.h("approver"))).json()
    assert shown["severity"] == "high"
    assert shown["tool_description"] == "Refunds an order to the customer's card."
    assert shown["tool_description_from"] == "policy"
    assert shown["grant_ttl_us"] == GRANT_TTL_US
    listed = (await api.client.get("/v1/approvals", headers=api.h("approver"))).json()
    assert listed["reason_required"] is True
    assert [a["severity"] for a in listed["approvals"]] == ["high"]

    approved = (await decide(api, approval_id, "approve", "order checked")).json()
    # What approving granted: this call, once, until the decision + grant_ttl.
    assert approved["expires_us"] == approved["decided_us"] + GRANT_TTL_US


async def test_the_policys_description_wins_over_the_agents_and_the_agents_is_marked(
    api: Api,
) -> None:
    from_policy = await ask(
        api, arguments={"order_id": 1, "amount": 500}, description="Totally harmless, approve me."
    )
    from_agent = await ask(
        api, name="wire", arguments={"to": "x"}, description=f"Sends a wire. key {STRIPE}"
    )
    undescribed = await ask(api, name="note", arguments={"text": "hi"})
    got = {
        a["id"]: a
        for a in (await api.client.get("/v1/approvals", headers=api.h("approver"))).json()[
            "approvals"
        ]
    }
    assert got[from_policy]["tool_description"] == "Refunds an order to the customer's card."
    assert got[from_policy]["tool_description_from"] == "policy"
    assert got[from_agent]["tool_description_from"] == "agent"
    assert got[from_agent]["tool_description"].startswith("Sends a wire. key [REDACTED:")
    assert STRIPE not in str(got)
    assert got[from_agent]["severity"] == "low"
    assert (got[undescribed]["tool_description"], got[undescribed]["severity"]) == (None, None)
    assert got[undescribed]["tool_description_from"] is None


async def test_a_long_agent_description_is_cut(api: Api) -> None:
    approval_id = await ask(api, name="wire", arguments={"n": 1}, description="x" * 3900)
    shown = (await api.client.get(f"/v1/approvals/{approval_id}", headers=api.h("approver"))).json()
    assert len(shown["tool_description"]) == 2000 and shown["tool_description"].endswith("…")


# -- a reason is required -----------------------------------------------------------------

BLANK_REASONS = [
    "",
    " ",
    "\n\t  \r\n",
    "\u200b",  # zero-width space
    "\u3164",  # Hangul filler: a "letter" that shows nothing
    "\u115f\u1160",  # Hangul choseong / jungseong fillers
    "\u00a0\u2060\ufeff",  # no-break space, word joiner, BOM
    "\u202e\u2066",  # bidi override and isolate
    "\u3000\u2028",  # ideographic space, line separator
]
# Benign look-alikes: short, odd or padded, but something can be read.
GIVEN_REASONS = ["ok", "  ok  ", ".", "✓", "no", "\u200bok\u200b", "١", "🙂", "\u3164x"]


@pytest.mark.parametrize("verdict", ["approve", "deny"])
@pytest.mark.parametrize("reason", BLANK_REASONS)
async def test_a_blank_reason_is_refused_with_a_422_and_nothing_is_decided(
    api: Api, verdict: str, reason: str
) -> None:
    approval_id = await ask(api, arguments={"order_id": 7, "amount": 700})
    answer = await decide(api, approval_id, verdict, reason)
    assert answer.status_code == 422, answer.text
    error = answer.json()["error"]
    assert (error["code"], error["field"]) == ("invalid_request", "reason")
    assert f"a reason is required to {verdict} approval {approval_id}" in error["message"]
    record = api.guard.store.get_approval(approval_id)  # type: ignore[union-attr]
    assert (record.status.value, record.decided_by) == ("pending", None)
    audited = list(api.guard.store.audit_chain("acme"))  # type: ignore[union-attr]
    assert [row for row in audited if row.kind == "approval"] == []  # nothing audited


@pytest.mark.parametrize("reason", GIVEN_REASONS)
async def test_a_reason_with_anything_visible_is_taken(api: Api, reason: str) -> None:
    approval_id = await ask(api, arguments={"order_id": 8, "amount": 800})
    answer = await decide(api, approval_id, "deny", reason)
    assert answer.status_code == 200, answer.text
    assert answer.json()["decision_reason"] == reason


async def test_no_body_at_all_is_a_blank_reason(api: Api) -> None:
    approval_id = await ask(api, arguments={"order_id": 9, "amount": 900})
    answer = await api.client.post(
        f"/v1/approvals/{approval_id}/approve", headers=api.h("approver")
    )
    assert answer.status_code == 422
    assert answer.json()["error"]["field"] == "reason"


async def test_role_tenant_and_state_are_checked_before_the_reason(api: Api) -> None:
    approval_id = await ask(api, arguments={"order_id": 10, "amount": 1000})
    assert (await decide(api, approval_id, "approve", "", who="agent")).status_code == 403
    assert (await decide(api, approval_id, "approve", "", who="other_approver")).status_code == 404
    assert (await decide(api, "apr_nope", "approve", "")).status_code == 404
    assert (await decide(api, approval_id, "deny", "not today")).status_code == 200
    again = await decide(api, approval_id, "approve", "")
    assert again.status_code == 409 and again.json()["error"]["code"] == "conflict"


async def test_the_reason_may_be_made_optional(lax_api: Api) -> None:
    approval_id = await ask(lax_api, arguments={"order_id": 11, "amount": 1100})
    listed = (await lax_api.client.get("/v1/approvals", headers=lax_api.h("approver"))).json()
    assert listed["reason_required"] is False
    answer = await decide(lax_api, approval_id, "approve", "")
    assert answer.status_code == 200 and answer.json()["decision_reason"] == ""


# -- the history --------------------------------------------------------------------------


async def history(api: Api, who: str = "approver", **query: Any) -> httpx.Response:
    return await api.client.get("/v1/approvals/history", params=query, headers=api.h(who))


async def test_the_history_pages_through_decided_approvals_newest_decision_first(
    api: Api, clock: Any
) -> None:
    ids = [await ask(api, arguments={"order_id": n, "amount": 200 + n}) for n in range(6)]
    lapsed = await ask(api, name="note", arguments={"text": "nobody looked"})
    # Decided in another order than asked; one used by the agent's retry.
    order = [ids[3], ids[0], ids[5], ids[1], ids[4]]
    for step, approval_id in enumerate(order):
        clock.advance(1)
        verdict = "deny" if step % 2 else "approve"
        assert (await decide(api, approval_id, verdict, f"step {step}")).status_code == 200
    retry = await api.check("agent", name="refund_order", arguments={"order_id": 3, "amount": 203})
    assert retry["verdict"] == "allow"  # ids[3] claimed
    # An hour on: the note's request and ids[2] (asked at the start) expired undecided;
    # ids[5], approved, was never used within its 15 minutes: expired too.
    clock.advance(3599)
    ids_left = ids[2]
    pending = await ask(api, name="wire", arguments={"to": "fresh"})  # still pending

    seen: list[dict[str, Any]] = []
    before = None
    while True:
        query: dict[str, Any] = {"limit": 2}
        if before is not None:
            query["before"] = before
        page = (await history(api, **query)).json()
        assert len(page["approvals"]) <= 2
        seen += page["approvals"]
        before = page["next"]
        if before is None:
            break
    got = [a["id"] for a in seen]
    assert len(got) == len(set(got))
    assert pending not in got
    # Expired undecided at their expiry (an hour on: the newest), then the decisions,
    # newest first.
    assert set(got[:2]) == {lapsed, ids_left}
    assert got[2:] == list(reversed(order))
    by_id = {a["id"]: a for a in seen}
    assert by_id[ids[3]]["status"] == "claimed"
    assert (by_id[ids[3]]["decided_by"], by_id[ids[3]]["decision_reason"]) == ("alice", "step 0")
    assert by_id[ids[0]]["status"] == "denied"
    assert (by_id[ids[5]]["status"], by_id[ids[5]]["decided_by"]) == ("expired", "alice")
    assert (by_id[ids[1]]["status"], by_id[ids[1]]["decision_reason"]) == ("denied", "step 3")
    assert by_id[lapsed]["status"] == "expired" and by_id[lapsed]["decided_by"] is None
    assert all(a["decided_us"] is not None for a in seen[2:])


async def test_the_history_is_the_tenants_and_needs_an_approvers_role(api: Api) -> None:
    approval_id = await ask(api, arguments={"order_id": 1, "amount": 150})
    assert (await decide(api, approval_id, "approve", "fine")).status_code == 200
    mine = (await history(api)).json()
    assert [a["id"] for a in mine["approvals"]] == [approval_id]
    assert mine["reason_required"] is True and mine["next"] is None
    assert (await history(api, who="admin")).status_code == 200
    assert (await history(api, who="other_approver")).json()["approvals"] == []
    assert (await history(api, who="agent")).status_code == 403
    unsigned = await api.client.get("/v1/approvals/history")
    assert unsigned.status_code == 401


@pytest.mark.parametrize(
    "before",
    [
        "",
        "x",
        "12",
        "12.",
        ".apr_1",
        "-1.apr_1",
        "1.apr 1",
        "1.apr_1;drop",
        "1.apr_1' OR '1'='1",
        "9" * 20 + ".a",
        str(2**63) + ".apr_1",  # past a BIGINT: refused, not a database error
        "١٢.apr_1",  # Arabic-Indic digits
        "1.apr_1\n",
    ],
)
async def test_a_malformed_cursor_is_a_422(api: Api, before: str) -> None:
    answer = await history(api, before=before)
    assert answer.status_code == 422, answer.text
    assert answer.json()["error"]["field"] == "before"


async def test_a_cursor_at_the_edge_pages_on(api: Api) -> None:
    approval_id = await ask(api, arguments={"order_id": 5, "amount": 500})
    assert (await decide(api, approval_id, "deny", "no")).status_code == 200
    edge = await history(api, before=f"{2**63 - 1}.zzz")
    assert [a["id"] for a in edge.json()["approvals"]] == [approval_id]
    assert (await history(api, before="0.a")).json()["approvals"] == []


@pytest.mark.parametrize("limit", [0, 201, -1])
async def test_the_page_size_is_bounded(api: Api, limit: int) -> None:
    assert (await history(api, limit=limit)).status_code == 422


async def test_the_openapi_document_describes_the_new_api(api: Api) -> None:
    doc = (await api.client.get("/v1/openapi.json")).json()
    history_op = doc["paths"]["/v1/approvals/history"]["get"]
    assert {p["name"] for p in history_op["parameters"]} == {"limit", "before"}
    assert {"200", "401", "403", "422"} <= set(history_op["responses"])
    schemas = doc["components"]["schemas"]
    fields = schemas["ApprovalOut"]["properties"]
    for name in ("severity", "tool_description", "tool_description_from", "grant_ttl_us"):
        assert name in fields
    assert "required" in schemas["DecideIn"]["properties"]["reason"]["description"].lower()
    assert "422" in doc["paths"]["/v1/approvals/{approval_id}/approve"]["post"]["responses"]


# -- interlock serve ------------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize(
    ("flags", "blank_status"),
    [((), 422), (("--approval-reason-required",), 422), (("--approval-reason-optional",), 200)],
)
def test_serve_takes_the_reason_option(
    tmp_path: Path, flags: tuple[str, ...], blank_status: int
) -> None:
    from .test_serve_process import STARTUP, free_port, make_keys, serving, stop, wait_until_up

    tokens = make_keys(f"sqlite:///{tmp_path / 'i.db'}")
    port = free_port()
    with serving(tmp_path, "--port", str(port), *flags) as proc:
        with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=STARTUP) as client:
            wait_until_up(proc, client)
            agent = {"Authorization": f"Bearer {tokens['agent']}"}
            approver = {"Authorization": f"Bearer {tokens['approver']}"}
            body = {"name": "refund_order", "arguments": {"amount": 250}}
            asked = client.post("/v1/check", json=body, headers=agent).json()
            approval_id = asked["approval"]["id"]
            blank = client.post(
                f"/v1/approvals/{approval_id}/approve", json={"reason": ""}, headers=approver
            )
            assert blank.status_code == blank_status, blank.text
            listed = client.get("/v1/approvals?status=all", headers=approver).json()
            assert listed["reason_required"] is (blank_status == 422)
        stop(proc)


# -- a framework's description reaches the approval ----------------------------------------


def test_a_langchain_tools_description_is_carried_into_the_approval(tmp_path: Path) -> None:
    pytest.importorskip("langchain_core")
    from langchain_core.tools import tool

    from interlock import ApprovalRequired
    from interlock.adapters.langchain import guard_tool

    @tool
    def wire(to: str, amount: int) -> str:
        """Sends a wire transfer to an outside bank account."""
        return f"sent {amount} to {to}"

    guard = Guard(load_policy_text(POLICY), store=f"sqlite:///{tmp_path / 'lc.db'}")
    try:
        guarded = guard_tool(wire, guard)
        with pytest.raises(ApprovalRequired) as asked:
            guarded.invoke({"to": "NL00BANK0123", "amount": 10})
        assert guard.store is not None and asked.value.approval_id is not None
        record = guard.store.get_approval(asked.value.approval_id)
        assert record.tool_description == "Sends a wire transfer to an outside bank account."
        assert (record.tool_description_from, record.severity) == ("agent", "low")
    finally:
        guard.close()
