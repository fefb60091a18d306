"""What a provider pays to verify a grant, against the floor of a bare Ed25519 verify.

Subjects, all in one run (so the ratios hold whatever the machine does):

- ``ed25519 verify (floor)``: ``Ed25519PublicKey.verify`` of one grant's signature —
  what any signed token costs;
- ``Verifier.verify, memory nonces``: the whole check (profile, key, signature,
  claims, audience, time, the request's binding recomputed, the nonce consumed), each
  call a fresh grant for the same 200-byte request;
- ``Verifier.verify, SQLite nonces``: the same with the nonce in a SQLite file
  (``synchronous=FULL``: one fsync per grant);
- ``ASGI app``, ``+ GrantMiddleware``, ``+ GrantMiddleware and a receipt``: one request
  driven through the ASGI interface in process (no socket), a bare app vs the same app
  behind the middleware, without and with a signed receipt of the answer.

CPU time per call (``time.process_time``) is reported beside the wall-clock figures:
it does not drift with the machine's load.
"""

from __future__ import annotations

import asyncio
import hashlib
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from bench.harness import BenchResult, atime_calls, summarise, time_calls, timer_overhead
from interlock.verify import GrantMiddleware, Verifier
from interlock.verify.binding import http_binding
from interlock.verify.nonces import MemoryNonceStore, SqliteNonceStore
from interlock.verify.tokens import GrantClaims, b64url_decode, public_jwk, sign_grant

__all__ = ["DEFAULT_CALLS", "run"]

DEFAULT_CALLS = 5_000
NOW = 1_767_225_600
KEY = Ed25519PrivateKey.from_private_bytes(hashlib.sha256(b"bench verify").digest())
PROVIDER = Ed25519PrivateKey.from_private_bytes(hashlib.sha256(b"bench provider").digest())
JWKS = {"keys": [public_jwk("k1", KEY.public_key())]}
TARGET = "/refunds?order=42"
BODY = b'{"amount": 500, "currency": "EUR", "reason": "' + b"x" * 150 + b'"}'
IDEMPOTENCY = "refund-42-1"


def _tokens(count: int, prefix: str) -> list[str]:
    binding = http_binding("POST", TARGET, BODY, IDEMPOTENCY, audience="shop")
    return [
        sign_grant(
            GrantClaims(
                grant_id=f"{prefix}_{i}",
                issuer="interlock",
                audience="shop",
                tenant="acme",
                agent="bench",
                intent_hash="sha256:" + "a" * 64,
                binding=binding,
                issued_at=NOW,
                expires_at=NOW + 60,
            ),
            KEY,
            kid="k1",
        )
        for i in range(count)
    ]


def run(calls: int | None, quick: bool) -> BenchResult:
    calls = calls or (500 if quick else DEFAULT_CALLS)
    sqlite_calls = max(50, calls // 10)
    warmup = min(200, calls // 10)
    result = BenchResult(name="verify")
    cpu_us: dict[str, float] = {}

    tokens = _tokens(calls + warmup, "floor")
    public = KEY.public_key()
    signed = []
    for token in tokens:
        signing_input, signature = token.rsplit(".", 1)
        signed.append((signing_input.encode(), b64url_decode(signature, what="signature")))

    def bare(item: tuple[bytes, bytes]) -> None:
        public.verify(item[1], item[0])

    def measure(label: str, fn: Callable[[Any], object], inputs: list[Any]) -> None:
        # each input once (a grant is good once): time_calls cycles its inputs
        fresh = iter(inputs)
        cpu = time.process_time()
        samples, wall = time_calls(lambda _: fn(next(fresh)), [None], len(inputs) - warmup, warmup)
        cpu_us[label] = (time.process_time() - cpu) / len(inputs) * 1e6
        result.stats.append(summarise(label, samples, wall))

    measure("ed25519 verify (floor)", bare, signed)

    memory = Verifier(JWKS, audience="shop", nonces=MemoryNonceStore(), clock=lambda: NOW + 1)

    def verify_with(verifier: Verifier) -> Callable[[str], object]:
        def call(token: str) -> object:
            return verifier.verify(
                token, method="POST", target=TARGET, body=BODY, idempotency_key=IDEMPOTENCY
            )

        return call

    measure("Verifier.verify, memory nonces", verify_with(memory), _tokens(calls + warmup, "m"))

    with tempfile.TemporaryDirectory() as scratch:
        store = SqliteNonceStore(Path(scratch) / "nonces.db")
        on_disk = Verifier(JWKS, audience="shop", nonces=store, clock=lambda: NOW + 1)
        saved = warmup
        warmup = min(20, sqlite_calls // 10)
        measure(
            "Verifier.verify, SQLite nonces",
            verify_with(on_disk),
            _tokens(sqlite_calls + warmup, "s"),
        )
        warmup = saved
        store.close()

    asyncio.run(_asgi(result, calls, warmup, cpu_us))

    floor = result.stats[0].p50_ns
    for stats in result.stats[1:3]:
        result.notes.append(f"{stats.label}: p50 {stats.p50_ns / floor:.2f}x the floor")
    app_p50 = result.stats[3].p50_ns
    for stats in result.stats[4:]:
        result.notes.append(
            f"{stats.label}: +{(stats.p50_ns - app_p50) / 1000:.1f} us p50 over the bare app"
        )
    result.notes.extend(f"CPU per call, {label}: {us:.1f} us" for label, us in cpu_us.items())
    overhead, _ = timer_overhead(10_000)
    result.info["timer_overhead_ns_p50"] = sorted(overhead)[len(overhead) // 2]
    return result


async def _asgi(result: BenchResult, calls: int, warmup: int, cpu_us: dict[str, float]) -> None:
    async def app(scope: Any, receive: Any, send: Any) -> None:
        await receive()
        await send({"type": "http.response.start", "status": 201, "headers": []})
        await send({"type": "http.response.body", "body": b'{"refund": "r_1"}'})

    verifier = Verifier(JWKS, audience="shop", nonces=MemoryNonceStore(), clock=lambda: NOW + 1)
    plain = GrantMiddleware(app, verifier)
    receipted = GrantMiddleware(app, verifier, receipt_key=PROVIDER, receipt_kid="shop-1")

    async def send(message: Any) -> None:
        pass

    def driver(asgi: Any) -> Callable[[str], Any]:
        async def call(token: str) -> None:
            scope = {
                "type": "http",
                "method": "POST",
                "path": "/refunds",
                "raw_path": b"/refunds",
                "query_string": b"order=42",
                "headers": [
                    (b"interlock-grant", token.encode()),
                    (b"idempotency-key", IDEMPOTENCY.encode()),
                    (b"content-length", str(len(BODY)).encode()),
                ],
            }

            async def receive() -> Any:
                return {"type": "http.request", "body": BODY, "more_body": False}

            await asgi(scope, receive, send)

        return call

    for label, asgi, prefix in (
        ("ASGI app", app, "a"),
        ("ASGI app + GrantMiddleware", plain, "b"),
        ("ASGI app + GrantMiddleware and a receipt", receipted, "c"),
    ):
        tokens = _tokens(calls + warmup, prefix)
        cpu = time.process_time()
        samples, wall = await atime_calls(_each_once(driver(asgi), tokens), [None], calls, warmup)
        cpu_us[label] = (time.process_time() - cpu) / len(tokens) * 1e6
        result.stats.append(summarise(label, samples, wall))


def _each_once(fn: Callable[[str], Any], tokens: list[str]) -> Callable[[Any], Any]:
    """``fn`` on the next token at each call (a grant is good once; the harness cycles
    its inputs)."""
    fresh = iter(tokens)
    return lambda _: fn(next(fresh))
