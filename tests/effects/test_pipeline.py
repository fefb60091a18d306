"""run_effect end to end: a guard on SQLite and PostgreSQL, the provider stand-in on a
real uvicorn socket, the cut proxy between them."""

from __future__ import annotations

import asyncio
import json

import pytest

from interlock import Guard
from interlock.effects import (
    EffectStatus,
    Outcome,
    arun_effect,
    reconcile_effect,
    reconcile_pending,
    run_effect,
)
from interlock.effects.http import HttpEffect
from interlock.effects.records import find_effect, get_effect
from interlock.errors import ActionDenied, EffectConflict, EffectError, EffectUnresolved

from .chaos import CutProxy
from .provider import Provider, Served
from .support import refund, spent


def _store(guard: Guard):  # type: ignore[no-untyped-def]
    assert guard.store is not None
    return guard.store


def test_an_allowed_effect_runs_once_and_is_charged_once(
    guard: Guard, provider: tuple[Provider, Served], refunds: HttpEffect
) -> None:
    app, _ = provider
    result = run_effect(guard, refunds, refund(), idempotency_key="r-1")
    assert result.outcome is Outcome.COMMITTED and result.status is EffectStatus.COMMITTED
    assert [e["target"] for e in app.effects] == ["/orders/42/refunds"]
    assert result.observed is not None and result.observed["status"] == 201
    charged, held = spent(_store(guard))
    assert charged > 0 and held == 0
    again = run_effect(guard, refunds, refund(), idempotency_key="r-1")
    assert (
        again.replayed
        and again.outcome is Outcome.COMMITTED
        and again.effect_id == result.effect_id
    )
    assert len(app.effects) == 1
    assert spent(_store(guard)) == (charged, 0)


def test_the_grant_is_bound_to_the_exact_request(
    guard: Guard, provider: tuple[Provider, Served], refunds: HttpEffect
) -> None:
    app, _ = provider
    run_effect(guard, refunds, refund(order=7, amount=3), idempotency_key="r-bind")
    assert len(app.seen_grants) == 1
    record = find_effect(_store(guard), "acme", "r-bind")
    assert record is not None and record.grant_id is not None
    assert record.binding is not None and record.binding.startswith("sha256:")


def test_a_deny_runs_nothing_and_records_nothing(
    guard: Guard, provider: tuple[Provider, Served], refunds: HttpEffect
) -> None:
    app, _ = provider
    adapter = HttpEffect(refunds.base_url, audience="shop")
    with pytest.raises(ActionDenied):
        run_effect(
            guard,
            adapter,
            refund().__class__.tool("wipe", {}, context=refund().context),
            idempotency_key="w-1",
        )
    assert app.effects == [] and app.seen_grants == []
    assert find_effect(_store(guard), "acme", "w-1") is None
    adapter.close()


def test_a_key_names_one_effect(
    guard: Guard, provider: tuple[Provider, Served], refunds: HttpEffect
) -> None:
    app, _ = provider
    run_effect(guard, refunds, refund(amount=5), idempotency_key="r-2")
    with pytest.raises(EffectConflict):
        run_effect(guard, refunds, refund(amount=500), idempotency_key="r-2")
    assert len(app.effects) == 1


def test_a_refusal_is_failed_and_released(
    guard: Guard, provider: tuple[Provider, Served], refunds: HttpEffect
) -> None:
    result = run_effect(guard, refunds, refund(amount=5000), idempotency_key="r-big")
    assert result.outcome is Outcome.FAILED and result.status is EffectStatus.FAILED
    assert spent(_store(guard)) == (0, 0)
    assert provider[0].effects == []
    again = run_effect(guard, refunds, refund(amount=5000), idempotency_key="r-big")
    assert again.replayed and again.status is EffectStatus.FAILED


def test_answer_lost_after_commit_is_indeterminate_then_reconciled_committed(
    guard: Guard, provider: tuple[Provider, Served], proxy: CutProxy, refunds: HttpEffect
) -> None:
    app, _ = provider
    proxy.next("drop_after")
    result = run_effect(guard, refunds, refund(), idempotency_key="r-cut-after")
    assert proxy.cuts == ["drop_after"]
    assert result.outcome is Outcome.INDETERMINATE
    assert len(app.effects) == 1  # it happened; the caller could not know
    charged, held = spent(_store(guard))
    assert charged == 0 and held > 0  # held until reconciled
    report = reconcile_pending(_store(guard), [refunds], audit=guard.audit)
    assert [r.status for r in report.settled] == [EffectStatus.COMMITTED]
    assert spent(_store(guard)) == (held, 0)  # charged once
    again = run_effect(guard, refunds, refund(), idempotency_key="r-cut-after")
    assert again.replayed and again.outcome is Outcome.COMMITTED
    assert len(app.effects) == 1
    assert spent(_store(guard)) == (held, 0)


def test_a_second_call_reconciles_an_indeterminate_attempt_first(
    guard: Guard, provider: tuple[Provider, Served], proxy: CutProxy, refunds: HttpEffect
) -> None:
    proxy.next("drop_after")
    first = run_effect(guard, refunds, refund(), idempotency_key="r-cut-2")
    assert first.outcome is Outcome.INDETERMINATE
    again = run_effect(guard, refunds, refund(), idempotency_key="r-cut-2")
    assert again.outcome is Outcome.COMMITTED and again.replayed
    assert len(provider[0].effects) == 1
    assert spent(_store(guard))[1] == 0


def test_request_lost_before_the_provider_is_never_executed_and_a_retry_runs_once(
    guard: Guard, provider: tuple[Provider, Served], proxy: CutProxy, refunds: HttpEffect
) -> None:
    app, _ = provider
    proxy.next("drop_before")
    result = run_effect(guard, refunds, refund(), idempotency_key="r-cut-before")
    assert proxy.cuts == ["drop_before"]
    assert result.outcome is Outcome.INDETERMINATE  # the caller cannot tell the cases apart
    assert app.effects == []
    settled = reconcile_effect(_store(guard), [refunds], result.effect_id, audit=guard.audit)
    assert settled.status is EffectStatus.NEVER_EXECUTED
    assert spent(_store(guard)) == (0, 0)  # released
    retry = run_effect(guard, refunds, refund(), idempotency_key="r-cut-before")
    assert retry.outcome is Outcome.COMMITTED and retry.attempt == 2 and not retry.replayed
    assert len(app.effects) == 1
    charged, held = spent(_store(guard))
    assert charged > 0 and held == 0
    once_more = run_effect(guard, refunds, refund(), idempotency_key="r-cut-before")
    assert once_more.replayed and len(app.effects) == 1
    assert spent(_store(guard)) == (charged, 0)


def test_an_unknowable_attempt_stays_held_and_blocks_the_key(
    guard: Guard, provider: tuple[Provider, Served], proxy: CutProxy
) -> None:
    # The lookup points where the provider keeps no answers: it can never say.
    blind = HttpEffect(proxy.url, audience="shop", lookup="/nowhere/{key}/x")
    proxy.next("drop_after")
    result = run_effect(guard, blind, refund(), idempotency_key="r-blind")
    assert result.outcome is Outcome.INDETERMINATE
    # a GET of /nowhere/... is refused by the grant middleware (401): not a 404
    report = reconcile_pending(_store(guard), [blind])
    assert [r.id for r in report.unresolved] == [result.effect_id]
    with pytest.raises(EffectUnresolved):
        run_effect(guard, blind, refund(), idempotency_key="r-blind")
    assert len(provider[0].effects) == 1
    assert spent(_store(guard))[1] > 0  # still held
    _store(guard).reap(now=2**61)  # far past any TTL: a held reservation is not the reaper's
    assert spent(_store(guard)) == (0, spent(_store(guard))[1])
    blind.close()


def test_no_connection_is_failed_unsent_and_retryable(
    guard: Guard, provider: tuple[Provider, Served]
) -> None:
    import socket

    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    sock.close()  # nothing listens there
    nowhere = HttpEffect(f"http://127.0.0.1:{port}", audience="shop")
    result = run_effect(guard, nowhere, refund(), idempotency_key="r-nowhere")
    assert result.outcome is Outcome.FAILED and result.status is EffectStatus.NEVER_EXECUTED
    assert spent(_store(guard)) == (0, 0)
    there = HttpEffect(provider[1].url, audience="shop")
    retry = run_effect(guard, there, refund(), idempotency_key="r-nowhere")
    assert retry.outcome is Outcome.COMMITTED and retry.attempt == 2
    nowhere.close()
    there.close()


def test_the_async_twin(
    guard: Guard, provider: tuple[Provider, Served], refunds: HttpEffect
) -> None:
    result = asyncio.run(arun_effect(guard, refunds, refund(), idempotency_key="r-async"))
    assert result.outcome is Outcome.COMMITTED and len(provider[0].effects) == 1


def test_outcomes_are_in_the_audit_chain(
    guard: Guard, provider: tuple[Provider, Served], refunds: HttpEffect
) -> None:
    result = run_effect(guard, refunds, refund(), idempotency_key="r-audit")
    assert guard.audit is not None
    guard.audit.flush()
    rows = [json.loads(r.body) for r in _store(guard).audit_rows(tenant="acme", kind="effect")]
    events = [(r["event"], r["status"]) for r in rows]
    assert events == [("attempt", "executing"), ("outcome", "committed")]
    assert all(r["effect_id"] == result.effect_id for r in rows)


@pytest.mark.parametrize(
    "key",
    ["", " ", "a b", "k\r\nX-Injected: 1", "k\x00", "ключ", "x" * 256],
    ids=["empty", "space", "inner-space", "crlf", "nul", "non-ascii", "too-long"],
)
def test_a_key_that_cannot_travel_in_a_header_is_refused_before_anything(
    guard: Guard, provider: tuple[Provider, Served], refunds: HttpEffect, key: str
) -> None:
    with pytest.raises(ValueError):
        run_effect(guard, refunds, refund(), idempotency_key=key)
    assert provider[0].effects == [] and spent(_store(guard)) == (0, 0)


@pytest.mark.parametrize("key", ["a", "order-42:v1", "x" * 255, "A.b_c~d/e+f=="])
def test_benign_keys_pass(
    guard: Guard, provider: tuple[Provider, Served], refunds: HttpEffect, key: str
) -> None:
    assert run_effect(guard, refunds, refund(), idempotency_key=key).outcome is Outcome.COMMITTED


def test_an_adapter_answers_only_for_its_actions(
    guard: Guard, provider: tuple[Provider, Served], refunds: HttpEffect
) -> None:
    other = refund().__class__.tool("payout", {"order": 1}, context=refund().context)
    with pytest.raises(EffectError):
        run_effect(guard, refunds, other, idempotency_key="p-1")


def test_a_guard_without_a_store_is_refused(refunds: HttpEffect) -> None:
    from .support import POLICY

    with pytest.raises(EffectError, match="store"):
        run_effect(Guard(POLICY), refunds, refund(), idempotency_key="r-nostore")


def test_the_record_survives_for_show(
    guard: Guard, provider: tuple[Provider, Served], refunds: HttpEffect
) -> None:
    result = run_effect(guard, refunds, refund(), idempotency_key="r-show")
    record = get_effect(_store(guard), result.effect_id)
    assert record is not None
    assert record.request["target"] == "/orders/42/refunds"
    assert record.result_digest is not None and record.reservation_id is not None


def test_a_grant_for_another_audience_is_refused_by_the_provider(
    guard: Guard, provider: tuple[Provider, Served], proxy: CutProxy
) -> None:
    elsewhere = HttpEffect(proxy.url, audience="bank")  # the provider is "shop"
    result = run_effect(guard, elsewhere, refund(), idempotency_key="r-aud")
    assert result.outcome is Outcome.FAILED and result.observed is not None
    assert result.observed["status"] == 403
    assert result.observed["body"]["error"]["code"] == "wrong_audience"
    assert provider[0].effects == [] and spent(_store(guard)) == (0, 0)
    elsewhere.close()


def test_a_receipt_that_does_not_check_is_indeterminate_until_reconciled(
    guard: Guard, provider: tuple[Provider, Served], proxy: CutProxy
) -> None:
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    from interlock.verify.tokens import public_jwk

    impostor = {"keys": [public_jwk("shop-1", Ed25519PrivateKey.generate().public_key())]}
    wary = HttpEffect(proxy.url, audience="shop", receipt_keys=impostor)
    result = run_effect(guard, wary, refund(), idempotency_key="r-receipt")
    assert result.outcome is Outcome.INDETERMINATE and "receipt" in result.reason
    assert len(provider[0].effects) == 1 and spent(_store(guard))[0] == 0
    trusting = HttpEffect(proxy.url, audience="shop")
    settled = reconcile_effect(_store(guard), [trusting], result.effect_id)
    assert settled.status is EffectStatus.COMMITTED
    assert spent(_store(guard))[1] == 0 and spent(_store(guard))[0] > 0
    wary.close()
    trusting.close()


def test_a_good_receipt_is_kept_with_the_outcome(
    guard: Guard, provider: tuple[Provider, Served], refunds: HttpEffect
) -> None:
    from interlock.verify.receipts import read_receipt

    result = run_effect(guard, refunds, refund(), idempotency_key="r-kept")
    assert result.observed is not None and result.observed["receipt"]
    claims = read_receipt(result.observed["receipt"], provider[0].receipt_jwks)
    record = get_effect(_store(guard), result.effect_id)
    assert record is not None and claims.grant_id == record.grant_id
    assert claims.status == 201


def _granting_guard(guard: Guard, audience: str) -> Guard:
    from .support import POLICY

    policy = dict(POLICY)
    policy["rules"] = [
        {**POLICY["rules"][0], "grant": {"audience": audience, "ttl": "30s"}},
        POLICY["rules"][1],
    ]
    assert guard.store is not None
    return Guard(policy, store=guard.store, reap_interval=None)


def test_a_policy_grant_for_another_audience_is_refused_before_anything_leaves(
    guard: Guard, provider: tuple[Provider, Served], refunds: HttpEffect
) -> None:
    granting = _granting_guard(guard, "bank")
    with pytest.raises(EffectError, match="audience"):
        run_effect(granting, refunds, refund(), idempotency_key="r-pol-bank")
    assert provider[0].effects == [] and spent(_store(guard)) == (0, 0)
    assert find_effect(_store(guard), "acme", "r-pol-bank") is None


def test_a_policy_grant_binding_no_request_is_for_the_provider_to_accept_or_refuse(
    guard: Guard, provider: tuple[Provider, Served], refunds: HttpEffect
) -> None:
    granting = _granting_guard(guard, "shop")
    result = run_effect(granting, refunds, refund(), idempotency_key="r-pol-shop")
    # this provider's verifier does not accept intent-only grants: refused, released
    assert result.outcome is Outcome.FAILED and result.observed is not None
    assert result.observed["status"] in (401, 403)
    assert provider[0].effects == [] and spent(_store(guard)) == (0, 0)


def test_the_endpoint_can_be_declared_in_the_policy(
    guard: Guard, provider: tuple[Provider, Served], refunds: HttpEffect
) -> None:
    from interlock import Action, Context

    from .support import POLICY

    policy = {
        **POLICY,
        "tools": {
            "refund": {
                "parameters": {"type": "object", "properties": {"order": {"type": "integer"}}},
                "intent": {
                    "target": "shop:order:{order}",
                    "system": "shop",
                    "endpoint": "POST /orders/{order}/refunds",
                },
            }
        },
    }
    assert guard.store is not None
    declaring = Guard(policy, store=guard.store, reap_interval=None)
    bare = Action.tool("refund", {"order": 9, "amount": 1}, context=Context(tenant="acme"))
    result = run_effect(declaring, refunds, bare, idempotency_key="r-declared")
    assert result.outcome is Outcome.COMMITTED
    assert [e["target"] for e in provider[0].effects] == ["/orders/9/refunds"]
    record = get_effect(_store(guard), result.effect_id)
    assert record is not None and record.request["target"] == "/orders/9/refunds"


def test_racing_callers_with_one_key_run_it_once_and_charge_once(
    guard: Guard, provider: tuple[Provider, Served], refunds: HttpEffect
) -> None:
    import threading

    from interlock.errors import EffectInFlight

    barrier = threading.Barrier(4)  # each holds its own reservation meanwhile: 4 fit
    outcomes: list[str] = []

    def call() -> None:
        barrier.wait()
        try:
            result = run_effect(guard, refunds, refund(), idempotency_key="r-race")
        except EffectInFlight:
            outcomes.append("in-flight")
        else:
            outcomes.append("replayed" if result.replayed else result.outcome.value)

    threads = [threading.Thread(target=call) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(outcomes) == 4 and outcomes.count("committed") == 1
    assert set(outcomes) <= {"committed", "replayed", "in-flight"}
    assert len(provider[0].effects) == 1
    charged, held = spent(_store(guard))
    assert held == 0 and charged == spent_for_one(guard)


def spent_for_one(guard: Guard) -> int:
    """What one refund is charged (the budget's default estimate, in units)."""
    record = find_effect(_store(guard), "acme", "r-race")
    assert record is not None and record.reservation_id is not None
    reservation = _store(guard).get_reservation(record.reservation_id)
    return sum(line.amount for line in reservation.lines)
