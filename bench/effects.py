"""What the effect pipeline costs an agent, against the floor of the bare request.

Subjects, all in one run, against one provider stand-in served by uvicorn on a
loopback socket (so the ratios hold whatever the machine does):

- ``httpx POST (floor)``: the request alone — an ``Idempotency-Key`` header, a JSON
  body, a bare provider that dedups by key;
- ``run_effect``: the whole pipeline on a SQLite store (check with a budget
  reservation, a grant issued and claimed, the attempt recorded before it runs, the
  request, the outcome recorded, the budget committed, the attempt and outcome audited)
  against the same provider behind ``GrantMiddleware`` signing a receipt, which
  ``HttpEffect`` checks.

CPU time per call (``time.process_time``, this process only: the provider runs in a
thread of it, so its share is counted too) is reported beside the wall-clock figures.
"""

from __future__ import annotations

import itertools
import json
import socket
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench.harness import BenchResult, summarise, time_calls

__all__ = ["DEFAULT_CALLS", "run"]

DEFAULT_CALLS = 300
POLICY: dict[str, Any] = {
    "version": 1,
    "default": "deny",
    "audit": {"durability": "process"},
    "budgets": [
        {
            "id": "refunds",
            "limit": 10**9,
            "unit": "USD",
            "scope": "tenant",
            "window": "day",
            "name": "refund",
            "default_estimate": 1,
        }
    ],
    "rules": [{"id": "refunds", "decision": "allow", "reason": "fine", "name": "refund"}],
}


async def _provider(scope: Any, receive: Any, send: Any) -> None:
    if scope["type"] != "http":
        return
    while (await receive()).get("more_body"):
        pass
    await send(
        {
            "type": "http.response.start",
            "status": 201,
            "headers": [(b"content-type", b"application/json")],
        }
    )
    await send({"type": "http.response.body", "body": b'{"refund": "r_1"}'})


class _Served:
    def __init__(self, app: Any) -> None:
        import uvicorn

        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}"
        self.server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="off"))
        self.thread = threading.Thread(
            target=self.server.run, kwargs={"sockets": [self.sock]}, daemon=True
        )
        self.thread.start()
        while not self.server.started:
            time.sleep(0.005)

    def close(self) -> None:
        self.server.should_exit = True
        self.thread.join(10)
        self.sock.close()


def run(calls: int | None, quick: bool) -> BenchResult:
    import httpx
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    from interlock import Action, Context, Downstream, Guard
    from interlock.effects import Outcome, run_effect
    from interlock.effects.http import HttpEffect
    from interlock.verify import GrantMiddleware, Verifier
    from interlock.verify.tokens import public_jwk

    calls = calls or (50 if quick else DEFAULT_CALLS)
    warmup = min(20, max(1, calls // 10))
    result = BenchResult(name="effects")
    cpu_us: dict[str, float] = {}

    def measure(label: str, fn: Callable[[int], object]) -> None:
        numbers = itertools.count()
        cpu = time.process_time()
        samples, wall = time_calls(lambda _: fn(next(numbers)), [None], calls, warmup)
        cpu_us[label] = (time.process_time() - cpu) / (calls + warmup) * 1e6
        result.stats.append(summarise(label, samples, wall))

    body = json.dumps({"order": 42, "amount": 5}).encode()
    bare = _Served(_provider)
    with tempfile.TemporaryDirectory() as scratch:
        guard = Guard(POLICY, store=f"sqlite:///{Path(scratch) / 'bench.db'}", reap_interval=None)
        receipt_key = Ed25519PrivateKey.generate()
        guarded = _Served(
            GrantMiddleware(
                _provider,
                Verifier(guard.grant_jwks, audience="shop"),
                receipt_key=receipt_key,
                receipt_kid="shop-1",
            )
        )
        client = httpx.Client()
        adapter = HttpEffect(
            guarded.url,
            audience="shop",
            receipt_keys={"keys": [public_jwk("shop-1", receipt_key.public_key())]},
        )
        context = Context(
            tenant="acme",
            agent="bench",
            downstream=Downstream("shop", "refund", "POST /orders/{order}/refunds"),
        )
        try:

            def floor(n: int) -> None:
                response = client.post(
                    bare.url + "/orders/42/refunds",
                    content=body,
                    headers={"Idempotency-Key": f"floor-{n}", "Content-Type": "application/json"},
                )
                assert response.status_code == 201

            def pipeline(n: int) -> None:
                action = Action.tool("refund", {"order": 42, "amount": 5}, context=context)
                outcome = run_effect(guard, adapter, action, idempotency_key=f"bench-{n}")
                if outcome.outcome is not Outcome.COMMITTED:
                    result.problems.append(f"run_effect {n}: {outcome.reason}")

            measure("httpx POST (floor)", floor)
            measure("run_effect (SQLite, grant, receipt)", pipeline)
        finally:
            client.close()
            adapter.close()
            guarded.close()
            guard.close()
    bare.close()
    floor_p50 = result.stats[0].p50_ns
    pipe = result.stats[1]
    result.notes.append(
        f"run_effect: p50 {pipe.p50_ns / floor_p50:.1f}x the bare request "
        f"(+{(pipe.p50_ns - floor_p50) / 1000:.0f} us)"
    )
    result.notes.extend(f"CPU per call, {label}: {us:.0f} us" for label, us in cpu_us.items())
    return result
