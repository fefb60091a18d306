"""Intents declared per tool in the policy, and grants asked for per rule or per tool."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from interlock import Action, Context, Guard
from interlock.core.action import Downstream
from interlock.core.decision import Verdict
from interlock.core.intent import intent_hash
from interlock.errors import GrantError, MappingError, PolicyError
from interlock.policy import load_policy_text
from interlock.store import SqlStore

POLICY = """\
version: 1
default: deny
tools:
  refund_order:
    parameters:
      type: object
      properties: {order_id: {type: integer}, amount: {type: number}}
    intent:
      target: "shopify:order:{order_id}"
      system: shopify
      operation: refund
      endpoint: POST /refunds
    grant: {ttl: 30s}
  lookup:
    parameters: {type: object, properties: {q: {type: string}}}
rules:
  - id: small-refunds
    decision: allow
    reason: small refunds are fine
    name: refund_order
    params: {target: {glob: "shopify:order:4*"}, args.amount: {lte: 500}}
  - id: lookups
    decision: allow
    reason: reading is fine
    name: lookup
    grant: {audience: search, ttl: 10s}
  - id: big-refunds
    decision: require_approval
    reason: a human looks at big refunds
    name: refund_order
    params: {args.amount: {gt: 500}}
"""

CONTEXT = Context(tenant="acme", agent="support-bot", call_id="call_abc")


def refund(order_id: Any = 42, amount: Any = 250, **context: Any) -> Action:
    arguments = {"order_id": order_id, "amount": amount}
    if order_id is None:
        del arguments["order_id"]
    ctx = Context(**{"tenant": "acme", "agent": "support-bot", "call_id": "call_abc", **context})
    return Action.tool("refund_order", arguments, context=ctx)


@pytest.fixture
def guard(store: SqlStore) -> Iterator[Guard]:
    with Guard(load_policy_text(POLICY), store=store, reap_interval=None) as opened:
        yield opened


def test_the_declared_intent_enters_the_trusted_context_and_the_hash() -> None:
    policy = load_policy_text(POLICY)
    declared = policy.tool_intents["refund_order"].declare(refund())
    assert declared.target == "shopify:order:42"
    assert declared.context.downstream == Downstream("shopify", "refund", "POST /refunds")
    assert declared.context.call_id == "call_abc"  # correlation, untouched
    bare = refund()
    assert intent_hash(declared) != intent_hash(bare)
    # the framework's call id is not part of the intent: a retry with another id is the same
    again = policy.tool_intents["refund_order"].declare(refund(call_id="call_retry"))
    assert intent_hash(again) == intent_hash(declared)
    assert intent_hash(policy.tool_intents["refund_order"].declare(refund(43))) != intent_hash(
        declared
    )


def test_rules_see_the_declared_target(guard: Guard) -> None:
    assert guard.check(refund(42)).verdict is Verdict.ALLOW
    assert guard.check(refund(57)).verdict is Verdict.DENY  # target shopify:order:57


@pytest.mark.parametrize(
    ("order_id", "why"),
    [
        (None, "does not have"),
        ({"id": 42}, "dict, not a string or integer"),
        ([42], "list, not a string or integer"),
        (True, "bool, not a string or integer"),
        (4.2, "float, not a string or integer"),
        ("", "empty"),
        ("42 43", "whitespace"),
        ("42\n", "whitespace"),
        ("4" * 257, "longer than"),
    ],
)
def test_a_call_whose_target_cannot_be_built_is_undetermined(
    guard: Guard, order_id: Any, why: str
) -> None:
    decision = guard.check(refund(order_id))
    assert decision.verdict is Verdict.UNDETERMINED
    assert isinstance(decision.cause, MappingError)
    assert why in str(decision.cause)


@pytest.mark.parametrize("order_id", [42, "42", "4:gid/Order", "4" * 256, 4 * 10**15])
def test_benign_look_alikes_build_a_target(guard: Guard, order_id: Any) -> None:
    decision = guard.check(refund(order_id))
    assert decision.verdict is Verdict.ALLOW, decision.reason


def test_a_call_with_no_canonical_form_gets_no_grant_and_does_not_run(guard: Guard) -> None:
    decision = guard.check(refund(4 * 10**20))  # beyond I-JSON: no intent hash
    assert decision.verdict is Verdict.UNDETERMINED and decision.grant is None
    assert "canonical" in decision.reason


def test_a_runtime_that_states_another_target_or_system_is_undetermined(guard: Guard) -> None:
    other = refund(downstream=Downstream("stripe", "refund", "POST /refunds"))
    assert guard.check(other).verdict is Verdict.UNDETERMINED
    named = Action.tool(
        "refund_order", {"order_id": 42, "amount": 1}, target="shopify:order:7", context=CONTEXT
    )
    assert guard.check(named).verdict is Verdict.UNDETERMINED
    # the same statements as the policy's are fine
    same = refund(downstream=Downstream("shopify", "refund", "POST /refunds"))
    assert guard.check(same).verdict is Verdict.ALLOW


def test_a_tool_grant_rides_on_the_allow(guard: Guard, store: SqlStore) -> None:
    decision = guard.check(refund())
    grant = decision.grant
    assert grant is not None
    assert grant.claims.audience == "shopify"  # the tool's intent.system
    assert grant.claims.expires_at - grant.claims.issued_at == 30
    assert grant.claims.intent_hash == intent_hash(
        load_policy_text(POLICY).tool_intents["refund_order"].declare(refund())
    )
    assert guard.issue_grant(decision) is grant  # asked again: the same one
    with pytest.raises(GrantError, match="carries its grant already"):
        guard.issue_grant(decision, binding="sha256:" + "0" * 64)
    assert guard.claim_grant(grant).grant_id == grant.claims.grant_id
    guard.close()
    with store.transaction(write=False) as cur:
        cur.execute("SELECT body FROM audit_events WHERE kind = 'decision'")
        bodies = [row[0] for row in cur.fetchall()]
    assert any(grant.claims.grant_id in body for body in bodies)


def test_a_rule_grant_wins_over_the_tool_and_names_its_audience(guard: Guard) -> None:
    decision = guard.check(Action.tool("lookup", {"q": "x"}, context=CONTEXT))
    assert decision.grant is not None
    assert decision.grant.claims.audience == "search"
    assert decision.grant.claims.expires_at - decision.grant.claims.issued_at == 10


def test_a_refusal_carries_no_grant(guard: Guard) -> None:
    assert guard.check(refund(57)).grant is None
    assert guard.check(refund(amount=900)).grant is None  # pending approval


def test_a_claimed_approval_yields_a_grant(guard: Guard, store: SqlStore) -> None:
    pending = guard.check(refund(amount=900))
    assert pending.verdict is Verdict.REQUIRE_APPROVAL and pending.approval is not None
    store.approve(pending.approval.id, by="alice")
    retried = guard.check(refund(amount=900))
    assert retried.verdict is Verdict.ALLOW
    assert retried.grant is not None
    assert retried.grant.claims.audience == "shopify"
    record = store.get_grant(retried.grant.claims.grant_id)
    assert record is not None and record.approval_id == pending.approval.id


def test_a_claimed_approval_without_an_audience_yields_none(store: SqlStore) -> None:
    policy = {
        "version": 1,
        "rules": [{"id": "ask", "decision": "require_approval", "reason": "ask", "name": "x"}],
    }
    with Guard(policy, store=store, reap_interval=None) as guard:
        action = Action.tool("x", {}, context=CONTEXT)
        pending = guard.check(action)
        assert pending.approval is not None
        store.approve(pending.approval.id, by="alice")
        retried = guard.check(action)
        assert retried.verdict is Verdict.ALLOW and retried.grant is None


def test_shadow_mode_issues_no_grant_and_lets_the_call_run(store: SqlStore) -> None:
    shadowed = POLICY.replace("default: deny", "default: deny\nmode: shadow")
    with Guard(load_policy_text(shadowed), store=store, reap_interval=None) as guard:
        decision = guard.check(refund(57))
        assert decision.verdict is Verdict.ALLOW and decision.grant is None


def test_an_allow_whose_grant_cannot_be_issued_is_undetermined(
    guard: Guard, grant_key_ring: Path
) -> None:
    os.chmod(grant_key_ring, 0o644)  # a ring others can read: refused
    decision = guard.check(refund())
    assert decision.verdict is Verdict.UNDETERMINED
    assert "grant" in decision.reason and "chmod 600" in decision.reason


def test_async_checks_carry_grants_too(guard: Guard) -> None:
    import asyncio

    decision = asyncio.run(guard.acheck(refund()))
    assert decision.grant is not None
    assert asyncio.run(guard.aclaim_grant(decision.grant)).audience == "shopify"


# -- the policy's own errors name file, line and field -------------------------------------


TARGET = 'target: "shopify:order:{order_id}"'
TOOL_GRANT = "grant: {ttl: 30s}"


@pytest.mark.parametrize(
    ("old", "new", "field", "message"),
    [
        (TARGET, TARGET, "", None),
        (TARGET, 'target: "shopify:order:{0}"', "tools.refund_order.intent.target", "not an"),
        (TARGET, 'target: "shopify:order:{a.b}"', "tools.refund_order.intent.target", "not an"),
        (TARGET, 'target: "o:{order_id!r}"', "tools.refund_order.intent.target", "not an"),
        (TARGET, 'target: "o:{orderid}"', "tools.refund_order.intent.target", "does not"),
        (TARGET, 'target: "o:{order_id"', "tools.refund_order.intent.target", "target"),
        (TOOL_GRANT, "grant: {ttl: 2h}", "tools.refund_order.grant.ttl", "between 1 s and 3600"),
        (TOOL_GRANT, "grant: {ttl: 500ms}", "tools.refund_order.grant.ttl", "between 1 s"),
        (TOOL_GRANT, "grant: {ttl: 30s, audiance: x}", "tools.refund_order.grant.audiance", "unkn"),
        ("system: shopify", 'system: ""', "tools.refund_order.intent.system", "at least 1"),
    ],
)
def test_policy_errors_name_file_line_and_field(
    old: str, new: str, field: str, message: str | None
) -> None:
    assert old in POLICY
    text = POLICY.replace(old, new, 1)
    if message is None:
        load_policy_text(text, file="interlock.yaml")
        return
    with pytest.raises(PolicyError) as caught:
        load_policy_text(text, file="interlock.yaml")
    issue = caught.value.issues[0]
    assert issue.file == "interlock.yaml"
    assert issue.field == field
    assert issue.line is not None
    assert new.split(":", maxsplit=1)[0] in text.splitlines()[issue.line - 1]
    assert message in issue.message


def test_a_grant_on_a_refusing_rule_is_a_policy_error() -> None:
    text = POLICY.replace(
        "    reason: a human looks at big refunds\n",
        "    reason: a human looks at big refunds\n    grant: {ttl: 10s}\n",
    )
    with pytest.raises(PolicyError) as caught:
        load_policy_text(text, file="interlock.yaml")
    issue = caught.value.issues[0]
    assert (issue.rule_id, issue.field) == ("big-refunds", "grant")
    assert "only an allow carries a grant" in issue.message


BUDGETED = """\
version: 1
default: deny
budgets:
  - {id: refunds, limit: 1000, unit: USD, kind: tool, name: refund_order, default_estimate: 10}
tools:
  refund_order:
    intent: {target: "shop:order:{order_id}", system: shop}
    grant: {ttl: 30s}
rules:
  - {id: refunds, decision: allow, reason: refunds are fine, name: refund_order}
"""


class _BlockingKeys:
    """The store's grant keys, held at the door until released: a grant being issued
    when its check is cancelled."""

    def __init__(self, inner: Any) -> None:
        import threading

        self.inner = inner
        self.entered = threading.Event()
        self.release = threading.Event()

    def ring(self) -> Any:
        self.entered.set()
        assert self.release.wait(60)
        return self.inner.ring()


def _reserved(store: SqlStore) -> int:
    return sum(row.reserved for row in store.budget_rows(tenant="acme"))


def test_a_check_cancelled_while_its_grant_is_issued_gives_its_reservation_back(
    store: SqlStore,
) -> None:
    import asyncio

    keys = _BlockingKeys(store.grant_keys)
    store.grant_keys = keys  # type: ignore[assignment]
    with Guard(load_policy_text(BUDGETED), store=store, reap_interval=None) as guard:

        async def run() -> None:
            task = asyncio.ensure_future(guard.acheck(refund()))
            assert await asyncio.to_thread(keys.entered.wait, 60)
            assert _reserved(store) > 0  # the allow holds its reservation
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
            keys.release.set()  # the grant is issued after all: nobody will use it
            for _ in range(6000):  # until the give-back has landed (bounded)
                if _reserved(store) == 0:
                    return
                await asyncio.sleep(0.01)

        asyncio.run(run())
        assert _reserved(store) == 0
