"""``bench/verify.py`` (``python -m bench verify``): it runs and reports each subject
beside its baseline, and what it times is the path it names — its grants are accepted
by the verifier and by the middleware (a ``201`` with a signed receipt), not refused.
The bench itself discards the ASGI answer, so a grant it built wrong would time the
refusal path and report a smaller overhead; nothing else checked that (the other
benches of issue 16 have their own test: ``tests/grants/test_bench.py``,
``tests/bench/test_effects_bench.py``)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from bench.__main__ import BENCHMARKS

from bench import verify as bench
from interlock.errors import GrantError
from interlock.verify import (
    GrantMiddleware,
    Verifier,
    check_receipt,
    public_jwk,
    read_grant,
)
from interlock.verify.nonces import MemoryNonceStore

LABELS = [
    "ed25519 verify (floor)",
    "Verifier.verify, memory nonces",
    "Verifier.verify, SQLite nonces",
    "ASGI app",
    "ASGI app + GrantMiddleware",
    "ASGI app + GrantMiddleware and a receipt",
]


def test_a_quick_run_reports_every_subject_beside_its_baseline() -> None:
    assert "verify" in BENCHMARKS
    result = bench.run(60, quick=True)
    assert [stats.label for stats in result.stats] == LABELS
    assert all(stats.calls > 0 and stats.p50_ns > 0 for stats in result.stats)
    assert not result.problems
    notes = "\n".join(result.notes)
    assert "Verifier.verify, memory nonces: p50" in notes and "x the floor" in notes
    assert "ASGI app + GrantMiddleware: +" in notes and "over the bare app" in notes
    assert sum("CPU per call" in note for note in result.notes) == len(LABELS)


def _verifier() -> Verifier:
    return Verifier(
        bench.JWKS, audience="shop", nonces=MemoryNonceStore(), clock=lambda: bench.NOW + 1
    )


def test_the_benchs_grants_are_accepted_once_by_its_verifier() -> None:
    verifier = _verifier()
    tokens = bench._tokens(3, "t")
    request: dict[str, Any] = {
        "method": "POST",
        "target": bench.TARGET,
        "body": bench.BODY,
        "idempotency_key": bench.IDEMPOTENCY,
    }
    for token in tokens:
        verifier.verify(token, **request)  # accepted: the timed path is the good one
    with pytest.raises(GrantError):
        verifier.verify(tokens[0], **request)  # and each is good once, as the bench assumes


def _through(app: Any, token: str) -> tuple[int, dict[bytes, bytes]]:
    sent: list[dict[str, Any]] = []

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": bench.BODY, "more_body": False}

    scope = {  # the bench's request, as its driver builds it
        "type": "http",
        "method": "POST",
        "path": "/refunds",
        "raw_path": b"/refunds",
        "query_string": b"order=42",
        "headers": [
            (b"interlock-grant", token.encode()),
            (b"idempotency-key", bench.IDEMPOTENCY.encode()),
            (b"content-length", str(len(bench.BODY)).encode()),
        ],
    }
    asyncio.run(app(scope, receive, send))
    start = next(message for message in sent if message["type"] == "http.response.start")
    return start["status"], dict(start.get("headers", []))


def test_the_benchs_asgi_requests_reach_the_app_and_get_a_receipt() -> None:
    reached: list[bytes] = []

    async def app(scope: Any, receive: Any, send: Any) -> None:
        reached.append((await receive())["body"])
        await send({"type": "http.response.start", "status": 201, "headers": []})
        await send({"type": "http.response.body", "body": b'{"refund": "r_1"}'})

    verifier = _verifier()
    plain = GrantMiddleware(app, verifier)
    receipted = GrantMiddleware(app, verifier, receipt_key=bench.PROVIDER, receipt_kid="shop-1")
    first, second = bench._tokens(2, "asgi")

    status, _ = _through(plain, first)
    assert status == 201 and reached == [bench.BODY]
    status, headers = _through(receipted, second)
    assert status == 201 and len(reached) == 2
    receipt = headers.get(b"interlock-receipt")
    assert receipt, headers
    keys = {"keys": [public_jwk("shop-1", bench.PROVIDER.public_key())]}
    check_receipt(
        receipt.decode(),
        keys,
        grant=read_grant(second, {"k1": bench.KEY.public_key()}),
        status=201,
        body=b'{"refund": "r_1"}',
    )

    status, _ = _through(plain, first)  # a replay is refused before the app: not timed
    assert status != 201 and len(reached) == 2
