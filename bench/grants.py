"""Grants: what signing and checking one costs, beside a bare Ed25519 sign + verify.

Subjects, each timed in turn with its baseline in the same run (interleaved: one call
of each, then the next, so both meet the same moments of a shared machine):

- ``token``: ``sign_grant`` + ``read_grant`` (the JWS built from the claims' RFC 8785
  JSON, signed; then parsed, its header checked, verified, its claims checked) vs a
  bare Ed25519 ``sign`` + ``verify`` of a message of the same length — the floor;
- ``issue+claim``: ``guard.issue_grant`` + ``guard.claim_grant`` on a SQLite file store
  (signing, the insert and the conditional update, each audited in its transaction)
  vs ``guard.check`` of the same call on the same guard.

CPU time per pair (``time.process_time``) is reported too: it does not drift with the
load of other processes the way wall time does.
"""

from __future__ import annotations

import gc
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench.harness import BenchResult, Target, summarise

__all__ = ["DEFAULT_CALLS", "run"]

DEFAULT_CALLS = 5_000
Pair = tuple[Callable[[], Any], Callable[[], Any]]


def _interleaved(
    one: Callable[[], Any], other: Callable[[], Any], calls: int
) -> tuple[list[int], list[int]]:
    for _ in range(min(200, calls)):
        one()
        other()
    clock = time.perf_counter_ns
    ones, others = [0] * calls, [0] * calls
    gc.collect()
    enabled = gc.isenabled()
    gc.disable()
    try:
        for i in range(calls):
            t0 = clock()
            one()
            t1 = clock()
            other()
            ones[i] = t1 - t0
            others[i] = clock() - t1
    finally:
        if enabled:
            gc.enable()
    return ones, others


def _cpu_ns(fn: Callable[[], Any], calls: int) -> float:
    start = time.process_time_ns()
    for _ in range(calls):
        fn()
    return (time.process_time_ns() - start) / calls


def _token_pair() -> Pair:
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    from interlock.store.grant_keys import key_id
    from interlock.verify.tokens import GrantClaims, read_grant, sign_grant

    key = Ed25519PrivateKey.generate()
    public = key.public_key()
    kid = key_id(public)
    keys = {kid: public}
    now = int(time.time())
    claims = GrantClaims(
        grant_id="grt_" + "a" * 32,
        issuer="interlock",
        audience="shopify",
        tenant="acme",
        agent="support-bot",
        intent_hash="sha256:" + "1" * 64,
        binding="sha256:" + "2" * 64,
        issued_at=now,
        expires_at=now + 60,
    )
    signing_input = sign_grant(claims, key, kid=kid).rsplit(".", 1)[0].encode()

    def grant() -> None:
        token = sign_grant(claims, key, kid=kid)
        read_grant(token, keys)

    def bare() -> None:
        public.verify(key.sign(signing_input), signing_input)

    return grant, bare


def _store_pair(directory: Path) -> tuple[Pair, Any]:
    from interlock import Action, Context, Guard
    from interlock.core.action import Downstream

    guard = Guard(
        {"version": 1, "default": "allow"},
        store=f"sqlite:///{directory / 'interlock.db'}",
        reap_interval=None,
    )
    call = Action.tool(
        "refund_order",
        {"order_id": 42, "amount": 250},
        target="shopify:order:42",
        context=Context(
            tenant="acme", agent="support-bot", downstream=Downstream("shopify", "refund")
        ),
    )
    decisions: list[Any] = []

    def check() -> None:
        decisions.append(guard.check(call))

    def issue_and_claim() -> None:
        decision = decisions.pop() if decisions else guard.check(call)
        guard.claim_grant(guard.issue_grant(decision))

    return (issue_and_claim, check), guard


def run(calls: int | None, quick: bool) -> BenchResult:
    calls = calls or (300 if quick else DEFAULT_CALLS)
    result = BenchResult("grants")
    result.info["calls"] = calls
    grant, bare = _token_pair()
    ones, others = _interleaved(grant, bare, calls)
    mine, floor = summarise("grant sign+read", ones, 0), summarise("bare Ed25519", others, 0)
    cpu_grant, cpu_bare = _cpu_ns(grant, calls), _cpu_ns(bare, calls)
    result.stats += [mine, floor]
    ratio = mine.p50_ns / floor.p50_ns
    result.targets.append(Target("grant sign+read p50 vs bare Ed25519", ratio, "<=", 1.5, "×"))
    result.info["token"] = {
        "grant_p50_ns": mine.p50_ns,
        "bare_p50_ns": floor.p50_ns,
        "grant_cpu_ns": round(cpu_grant),
        "bare_cpu_ns": round(cpu_bare),
    }
    result.notes.append(
        f"token: sign_grant+read_grant p50 {mine.p50_ns / 1000:.1f} µs vs bare Ed25519 "
        f"sign+verify {floor.p50_ns / 1000:.1f} µs ({ratio:.2f}×); CPU "
        f"{cpu_grant / 1000:.1f} vs {cpu_bare / 1000:.1f} µs ({cpu_grant / cpu_bare:.2f}×)"
    )
    store_calls = max(50, calls // 10)
    with tempfile.TemporaryDirectory(prefix="interlock-bench-grants-") as scratch:
        (issue, check), guard = _store_pair(Path(scratch))
        try:
            ones, others = _interleaved(issue, check, store_calls)
        finally:
            guard.close()
    granted, checked = summarise("issue+claim (SQLite)", ones, 0), summarise("check", others, 0)
    result.stats += [granted, checked]
    result.info["store"] = {
        "calls": store_calls,
        "issue_claim_p50_ns": granted.p50_ns,
        "check_p50_ns": checked.p50_ns,
    }
    result.notes.append(
        f"store: issue_grant+claim_grant p50 {granted.p50_ns / 1000:.0f} µs vs guard.check "
        f"(durable SQLite) {checked.p50_ns / 1000:.0f} µs "
        f"({granted.p50_ns / checked.p50_ns:.2f}×; two write transactions, each audited)"
    )
    return result
