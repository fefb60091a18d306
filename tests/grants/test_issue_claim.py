"""Guard.issue_grant / claim_grant: an allow becomes a signed grant, claimed exactly once,
on SQLite and PostgreSQL; everything that is not a plain allow of this guard is refused."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import pytest

from interlock import Action, Context, Guard
from interlock.core.action import Downstream
from interlock.core.decision import Decision, ShadowVerdict, Verdict
from interlock.core.intent import intent_hash
from interlock.errors import (
    BadSignature,
    ConfigError,
    GrantError,
    GrantExpired,
    GrantInvalid,
    GrantReplayed,
    UnknownKey,
)
from interlock.store import SqlStore, open_store
from interlock.verify.tokens import b64url, keys_from_jwks, read_grant

ALLOW_ALL: dict[str, Any] = {"version": 1, "default": "allow"}
REFUND = Action.tool(
    "refund_order",
    {"order_id": 42, "amount": 250},
    target="shopify:order:42",
    context=Context(
        tenant="acme",
        agent="support-bot",
        downstream=Downstream("shopify", "refund", "POST /refunds"),
        idempotency_key="refund-42-v1",
    ),
)


@pytest.fixture
def guard(store: SqlStore) -> Iterator[Guard]:
    with Guard(ALLOW_ALL, store=store, reap_interval=None) as opened:
        yield opened


def test_an_allow_becomes_a_grant_the_store_claims_once(guard: Guard, store: SqlStore) -> None:
    decision = guard.check(REFUND)
    grant = guard.issue_grant(decision)
    claims = grant.claims
    assert claims.audience == "shopify"  # the action's downstream system
    assert (claims.tenant, claims.agent) == ("acme", "support-bot")
    assert claims.intent_hash == intent_hash(REFUND)
    assert claims.expires_at - claims.issued_at == 60
    # the token verifies under the guard's published keys, and says what claims says
    assert read_grant(grant.token, keys_from_jwks(guard.grant_jwks())) == claims
    record = store.get_grant(claims.grant_id)
    assert record is not None and record.status == "issued"
    assert record.decision_id == decision.decision_id
    assert guard.claim_grant(grant) == claims
    with pytest.raises(GrantReplayed):
        guard.claim_grant(grant.token)
    record = store.get_grant(claims.grant_id)
    assert record is not None and record.status == "claimed"


def test_issue_and_claim_are_audited_in_the_tenants_chain(guard: Guard, store: SqlStore) -> None:
    grant = guard.issue_grant(guard.check(REFUND), audience="shop-eu", ttl=30)
    guard.claim_grant(grant)
    with pytest.raises(GrantReplayed):
        guard.claim_grant(grant)
    guard.close()  # the decision's own record written
    with store.transaction(write=False) as cur:
        cur.execute(
            "SELECT kind, decision_id, agent, body FROM audit_events WHERE tenant = 'acme' "
            "ORDER BY seq"
        )
        rows = cur.fetchall()
    grants = [row for row in rows if row[0] == "grant"]
    events = [__import__("json").loads(row[3]) for row in grants]
    assert [e["event"] for e in events] == ["issued", "claimed", "claim_refused"]
    assert {e["grant_id"] for e in events} == {grant.claims.grant_id}
    assert events[2]["refused"] == "grant_replayed"
    assert all(row[2] == "support-bot" for row in grants)
    assert store.verify_audit().ok


def test_a_grant_past_its_expiry_is_not_claimed(guard: Guard, store: SqlStore, clock: Any) -> None:
    grant = guard.issue_grant(guard.check(REFUND), ttl=5)
    clock.advance(5)
    with pytest.raises(GrantExpired):
        guard.claim_grant(grant)
    record = store.get_grant(grant.claims.grant_id)
    assert record is not None and record.as_of(clock()) == "expired"


def test_one_grant_per_decision(guard: Guard) -> None:
    decision = guard.check(REFUND)
    guard.issue_grant(decision)
    with pytest.raises(GrantError, match=r"not made by this guard|granted already"):
        guard.issue_grant(decision)


def test_async_twins(guard: Guard) -> None:
    async def run() -> None:
        decision = await guard.acheck(REFUND)
        grant = await guard.aissue_grant(decision, audience="shopify", binding="sha256:" + "a" * 64)
        assert grant.claims.binding == "sha256:" + "a" * 64
        assert (await guard.aclaim_grant(grant)).grant_id == grant.claims.grant_id
        with pytest.raises(GrantReplayed):
            await guard.aclaim_grant(grant)

    asyncio.run(run())


# -- what is refused ----------------------------------------------------------------------

DENY_REFUNDS: dict[str, Any] = {
    "version": 1,
    "default": "allow",
    "rules": [{"id": "no-refunds", "decision": "deny", "reason": "no", "name": "refund_*"}],
}


def test_refused_decisions(store: SqlStore) -> None:
    """Each row: a decision that must not become a grant, next to the allow that does."""
    with Guard(DENY_REFUNDS, store=store, reap_interval=None) as guard:
        denied = guard.check(REFUND)
        allowed = guard.check(Action.tool("lookup", {}, context=REFUND.context))
        with pytest.raises(GrantError, match="deny, not allow"):
            guard.issue_grant(denied)
        forged = Decision(Verdict.ALLOW, "I say so", decision_id=denied.decision_id)
        with pytest.raises(GrantError, match="not made by this guard"):
            guard.issue_grant(forged)
        with pytest.raises(GrantError, match="not made by this guard"):
            guard.issue_grant(Decision(Verdict.ALLOW, "made up"))
        fail_open = allowed._replace(fail_open=True)
        with pytest.raises(GrantError, match="fail_mode='open'"):
            guard.issue_grant(fail_open)
        shadowed = allowed._replace(shadow=ShadowVerdict(Verdict.DENY, "would deny"))
        with pytest.raises(GrantError, match="shadow mode"):
            guard.issue_grant(shadowed)
        with pytest.raises(GrantError, match="Decision"):
            guard.issue_grant("dec_1")  # type: ignore[arg-type]
        # the benign look-alike: the same guard's plain allow is granted
        assert guard.issue_grant(allowed).claims.audience == "shopify"


def test_another_guards_decision_is_not_granted(store: SqlStore) -> None:
    with (
        Guard(ALLOW_ALL, store=store, reap_interval=None) as one,
        Guard(ALLOW_ALL, store=store, reap_interval=None) as other,
    ):
        decision = one.check(REFUND)
        with pytest.raises(GrantError, match="not made by this guard"):
            other.issue_grant(decision)
        one.issue_grant(decision)


def test_no_audience_is_a_configuration_error(guard: Guard) -> None:
    plain = Action.tool("lookup", {"q": 1}, context=Context(tenant="acme"))
    with pytest.raises(ConfigError, match="no audience"):
        guard.issue_grant(guard.check(plain))
    assert guard.issue_grant(guard.check(plain), audience="search").claims.audience == "search"


@pytest.mark.parametrize("ttl", [0, 0.5, -1, 3601, float("nan"), float("inf"), True, "60"])
def test_a_ttl_out_of_bounds_is_refused(guard: Guard, ttl: Any) -> None:
    with pytest.raises(ConfigError, match="ttl"):
        guard.issue_grant(guard.check(REFUND), ttl=ttl)


def test_a_guard_without_a_store_issues_no_grant() -> None:
    guard = Guard(ALLOW_ALL)
    with pytest.raises(ConfigError, match="store"):
        guard.issue_grant(guard.check(REFUND), audience="x")
    with pytest.raises(ConfigError, match="store"):
        guard.claim_grant("a.b.c")


def _tampered(token: str) -> list[tuple[str, str, type[GrantError]]]:
    head, body, signature = token.split(".")
    import base64
    import json

    payload = json.loads(base64.urlsafe_b64decode(body + "=="))
    payload["aud"] = "someone-else"
    other_body = b64url(json.dumps(payload).encode())
    flipped = signature[:-2] + ("A" if signature[-2] != "A" else "B") + signature[-1]
    none_header = b64url(b'{"alg":"none","kid":"x","typ":"interlock-grant+jws"}')
    return [
        ("changed claim", f"{head}.{other_body}.{signature}", BadSignature),
        ("flipped signature", f"{head}.{body}.{flipped}", BadSignature),
        ("alg none", f"{none_header}.{body}.", GrantInvalid),
        ("two parts", f"{head}.{body}", GrantInvalid),
        ("not a string", 42, GrantInvalid),  # type: ignore[list-item]
        ("empty", "", GrantInvalid),
    ]


def test_tampered_tokens_are_refused_and_the_real_one_still_claims(guard: Guard) -> None:
    grant = guard.issue_grant(guard.check(REFUND))
    for what, token, error in _tampered(grant.token):
        with pytest.raises(error):
            guard.claim_grant(token)
        assert what
    assert guard.claim_grant(grant.token).grant_id == grant.claims.grant_id


def test_a_token_signed_by_another_store_is_an_unknown_key(store_url: str, tmp_path: Any) -> None:
    other_ring = tmp_path / "other" / "grant-keys"
    with (
        Guard(
            ALLOW_ALL, store=f"sqlite:///:memory:?grant_key_file={other_ring}", reap_interval=None
        ) as elsewhere,
        Guard(ALLOW_ALL, store=store_url, reap_interval=None) as here,
    ):
        foreign = elsewhere.issue_grant(elsewhere.check(REFUND))
        with pytest.raises(UnknownKey):
            here.claim_grant(foreign)


def test_a_grant_row_that_disagrees_with_its_token_is_refused(
    guard: Guard, store: SqlStore
) -> None:
    grant = guard.issue_grant(guard.check(REFUND))
    with store.transaction(write=True) as cur:
        cur.execute(
            store.q("UPDATE grants SET intent_hash = ? WHERE id = ?"),
            ("sha256:" + "0" * 64, grant.claims.grant_id),
        )
    with pytest.raises(GrantInvalid, match="another intent"):
        guard.claim_grant(grant)


def test_a_store_opened_again_claims_what_the_first_issued(store_url: str, tmp_path: Any) -> None:
    """The key ring is the store's (beside the SQLite file, or the file PostgreSQL is given):
    another process opening it verifies the grants the first one signed."""
    with Guard(ALLOW_ALL, store=store_url, reap_interval=None) as first:
        grant = first.issue_grant(first.check(REFUND))
    with Guard(ALLOW_ALL, store=open_store(store_url), reap_interval=None) as second:
        assert second.claim_grant(grant.token).grant_id == grant.claims.grant_id


def test_a_grant_of_another_database_signed_with_the_same_keys_is_refused(
    store: SqlStore, tmp_path: Any
) -> None:
    """Replicas share keys, not rows: a grant the store never issued is not claimable,
    however good its signature."""
    with (
        Guard(ALLOW_ALL, store=f"sqlite:///{tmp_path / 'other.db'}", reap_interval=None) as other,
        Guard(ALLOW_ALL, store=store, reap_interval=None) as here,
    ):
        foreign = other.issue_grant(other.check(REFUND))
        with pytest.raises(GrantInvalid, match="no grant"):
            here.claim_grant(foreign)
        assert other.claim_grant(foreign).grant_id == foreign.claims.grant_id
