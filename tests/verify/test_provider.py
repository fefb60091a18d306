"""A provider stand-in behind the grant middleware, driven through a real uvicorn
socket: a granted request is accepted exactly once, with a receipt the caller checks;
a replay, a changed argument, an expired grant, another audience, an unknown or retired
key are refused, and the service never runs for them."""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from interlock.errors import ReceiptError
from interlock.verify import GrantAuth, areceipt_hook, receipt_hook
from interlock.verify.keys import jwks_file
from interlock.verify.receipts import ReceiptClaims, body_digest
from interlock.verify.tokens import public_jwk

from .provider import Provider, Served, issue
from .support import JWKS, NOW, PROVIDER_JWKS, seeded_key

RETIRED_KEY = seeded_key("interlock test key 0 (retired)")
BODY = {"amount": 500, "currency": "EUR"}


@pytest.fixture
def provider() -> Provider:
    return Provider(keys=JWKS)


@pytest.fixture
def served(provider: Provider) -> Iterator[Served]:
    server = Served(provider.app())
    yield server
    server.close()


class Issuer:
    """The caller's ``grant_for``: one fresh grant per request (ids ``<prefix>_0``,
    ``<prefix>_1``, ...), recorded."""

    def __init__(self, prefix: str = "g", **options: Any) -> None:
        self.prefix = prefix
        self.options = options
        self.issued: list[str] = []

    def __call__(self, method: str, target: str, body: bytes, key: str) -> str:
        grant_id = f"{self.prefix}_{len(self.issued)}"
        token = issue(method, target, body, key, grant_id=grant_id, **self.options)
        self.issued.append(token)
        return token


def client(served: Served, issuer: Issuer, **options: Any) -> httpx.Client:
    return httpx.Client(
        base_url=served.url,
        auth=GrantAuth(issuer),
        event_hooks={"response": [receipt_hook(PROVIDER_JWKS, **options)]},
    )


def test_a_granted_request_runs_once_and_its_receipt_checks(
    served: Served, provider: Provider
) -> None:
    issuer = Issuer()
    with client(served, issuer) as http:
        answer = http.post("/refunds/42", json=BODY)
    assert answer.status_code == 201 and answer.json()["grant"] == "g_0"
    receipt = answer.extensions["interlock_receipt"]
    assert isinstance(receipt, ReceiptClaims)
    assert receipt.grant_id == "g_0" and receipt.status == 201 and receipt.issuer == "shop"
    assert receipt.body_digest == body_digest(answer.content)
    assert answer.request.headers["Idempotency-Key"]  # given one: the request had none
    assert provider.effects == [{"order": "42", "body": BODY, "grant": "g_0"}]


def test_a_replay_is_refused_and_the_service_does_not_run_again(
    served: Served, provider: Provider
) -> None:
    issuer = Issuer()
    with client(served, issuer) as http:
        first = http.post("/refunds/42", json=BODY)
    with httpx.Client(base_url=served.url) as raw:  # the same request, headers and all
        again = raw.post(
            "/refunds/42", content=first.request.content, headers=first.request.headers
        )
    assert first.status_code == 201
    assert again.status_code == 409
    assert again.json()["error"]["code"] == "grant_replayed"
    assert "Interlock-Receipt" not in again.headers
    assert len(provider.effects) == 1


def test_concurrent_replays_run_the_service_once(served: Served, provider: Provider) -> None:
    token = issue("POST", "/refunds/7", b'{"amount": 1}', "k-7", grant_id="g_race")
    headers = {"Interlock-Grant": token, "Idempotency-Key": "k-7"}
    statuses: list[int] = []
    start = threading.Barrier(8)

    def send() -> None:
        with httpx.Client(base_url=served.url) as raw:
            start.wait()
            statuses.append(
                raw.post("/refunds/7", content=b'{"amount": 1}', headers=headers).status_code
            )

    threads = [threading.Thread(target=send) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(statuses) == [201] + [409] * 7
    assert len(provider.effects) == 1


REFUSED = [
    # (what, the grant's options, the request's change, status, code)
    (
        "changed argument",
        {},
        {"json": {"amount": 5000, "currency": "EUR"}},
        403,
        "binding_mismatch",
    ),
    ("expired grant", {"expires_at": NOW - 100}, {}, 401, "grant_expired"),
    ("another audience", {"audience": "bank"}, {}, 403, "wrong_audience"),
    ("unknown key", {"key": seeded_key("stranger"), "kid": "k-x"}, {}, 401, "unknown_key"),
    ("retired key", {"key": RETIRED_KEY, "kid": "k0"}, {}, 401, "unknown_key"),
    ("key id of another key", {"key": RETIRED_KEY, "kid": "k1"}, {}, 401, "bad_signature"),
]


@pytest.mark.parametrize(
    ("options", "change", "status", "code"), [r[1:] for r in REFUSED], ids=[r[0] for r in REFUSED]
)
def test_a_bad_grant_is_refused_before_the_service_runs(
    served: Served,
    provider: Provider,
    options: dict[str, Any],
    change: dict[str, Any],
    status: int,
    code: str,
) -> None:
    issuer = Issuer(**options)
    with httpx.Client(base_url=served.url) as raw:
        # the grant is for BODY; the request sent may differ (``change``)
        request = raw.build_request(
            "POST", "/refunds/42", json=BODY, headers={"Idempotency-Key": "k"}
        )
        token = issuer("POST", "/refunds/42", request.content, "k")
        sent = raw.build_request(
            "POST",
            "/refunds/42",
            headers={"Idempotency-Key": "k", "Interlock-Grant": token},
            **({"json": BODY} | change),
        )
        answer = raw.send(sent)
    assert answer.status_code == status
    assert answer.json()["error"]["code"] == code
    assert provider.effects == []
    if status == 401:
        assert answer.headers["WWW-Authenticate"] == "Interlock-Grant"


def test_the_callers_hook_names_the_providers_refusal(served: Served) -> None:
    issuer = Issuer(audience="bank")
    with client(served, issuer) as http, pytest.raises(ReceiptError) as refused:
        http.post("/refunds/42", json=BODY)
    assert refused.value.status == 403 and refused.value.provider_code == "wrong_audience"
    assert "without a receipt" in str(refused.value)


def test_a_key_retired_from_the_published_set_stops_verifying(tmp_path: Path) -> None:
    path = tmp_path / "jwks.json"
    both = [*JWKS["keys"], public_jwk("k0", RETIRED_KEY.public_key())]
    path.write_text(json.dumps({"keys": both}))
    provider = Provider(keys=jwks_file(path))
    server = Served(provider.app())
    try:
        late = NOW + 600  # grants that outlive the cache's max age
        with client(server, Issuer("a", key=RETIRED_KEY, kid="k0", expires_at=late)) as http:
            assert http.post("/refunds/1", json=BODY).status_code == 201
        path.write_text(json.dumps(JWKS))  # k0 retired
        provider.clock.now += 301  # the cached set is stale (max_age 300 s): read again
        retired = Issuer("b", key=RETIRED_KEY, kid="k0", expires_at=late)
        with client(server, retired, require=False) as http:
            answer = http.post("/refunds/2", json=BODY)
        assert answer.status_code == 401 and answer.json()["error"]["code"] == "unknown_key"
        with client(server, Issuer("c", expires_at=late)) as http:  # the current key verifies
            assert http.post("/refunds/3", json=BODY).status_code == 201
    finally:
        server.close()
    assert [e["order"] for e in provider.effects] == ["1", "3"]


def test_a_receipt_from_another_key_or_for_another_body_is_refused(
    provider: Provider,
) -> None:
    async def tamper(scope: Any, receive: Any, send: Any) -> None:
        async def changed(message: dict[str, Any]) -> None:
            if message["type"] == "http.response.body" and message.get("body"):
                message = {**message, "body": message["body"].replace(b"r_1", b"r_9")}
            await send(message)

        await inner(scope, receive, changed)

    inner = provider.app()
    server = Served(tamper)
    try:
        with client(server, Issuer()) as http, pytest.raises(ReceiptError, match="body_digest"):
            http.post("/refunds/1", json=BODY)
        stranger = {"keys": [public_jwk("shop-1", seeded_key("not the shop").public_key())]}
        with (
            httpx.Client(
                base_url=server.url,
                auth=GrantAuth(Issuer("s")),
                event_hooks={"response": [receipt_hook(stranger)]},
            ) as http,
            pytest.raises(ReceiptError, match="does not verify"),
        ):
            http.post("/refunds/2", json=BODY)
    finally:
        server.close()


def test_a_provider_without_receipts_fails_a_caller_that_requires_them() -> None:
    provider = Provider(keys=JWKS, receipts=False)
    server = Served(provider.app())
    try:
        with client(server, Issuer()) as http, pytest.raises(ReceiptError, match="201 without"):
            http.post("/refunds/1", json=BODY)
        with client(server, Issuer("b"), require=False) as http:
            answer = http.post("/refunds/2", json=BODY)
        assert answer.status_code == 201 and "interlock_receipt" not in answer.extensions
    finally:
        server.close()
    assert len(provider.effects) == 2  # the effect happened: the caller must reconcile


def test_a_large_answer_goes_out_without_a_receipt(provider: Provider) -> None:
    server = Served(provider.app(max_response=10))
    try:
        with client(server, Issuer(), require=False) as http:
            answer = http.post("/refunds/1", json=BODY)
        assert answer.status_code == 201 and answer.json()["grant"] == "g_0"
        assert "Interlock-Receipt" not in answer.headers
    finally:
        server.close()


def test_a_body_over_the_bound_is_413_and_the_grant_stays_unused(
    provider: Provider,
) -> None:
    server = Served(provider.app(max_body=16))
    issuer = Issuer()
    try:
        with client(server, issuer, require=False) as http:
            answer = http.post("/refunds/1", json=BODY)
        assert answer.status_code == 413 and answer.json()["error"]["code"] == "body_too_large"
        with httpx.Client(base_url=server.url) as raw:  # chunked: no Content-Length to read
            chunks = iter([b'{"amount": ', b'500, "currency": "EUR"}'])
            answer = raw.post("/refunds/1", content=chunks, headers={"Interlock-Grant": "x.y.z"})
        assert answer.status_code == 413
    finally:
        server.close()
    assert provider.effects == []


def test_a_request_without_a_grant_never_reaches_the_service(
    served: Served, provider: Provider
) -> None:
    with httpx.Client(base_url=served.url) as raw:
        answer = raw.post("/refunds/1", json=BODY)
        health = raw.get("/health")
    assert answer.status_code == 401 and answer.json()["error"]["code"] == "grant_invalid"
    assert health.status_code == 401  # nothing is exempt unless the provider says so
    assert provider.effects == []


def test_exempt_requests_pass_without_a_grant(provider: Provider) -> None:
    server = Served(provider.app(exempt=lambda scope: scope.get("raw_path") == b"/health"))
    try:
        with httpx.Client(base_url=server.url) as raw:
            assert raw.get("/health").json() == {"ok": True}
            assert raw.post("/refunds/1", json=BODY).status_code == 401
    finally:
        server.close()


async def test_the_async_client_attaches_and_checks_the_same(
    served: Served, provider: Provider
) -> None:
    issued: list[str] = []

    async def grant_for(method: str, target: str, body: bytes, key: str) -> str:
        await asyncio.sleep(0)
        issued.append(key)
        return issue(method, target, body, key, grant_id=f"ga_{len(issued)}")

    async with httpx.AsyncClient(
        base_url=served.url,
        auth=GrantAuth(grant_for),
        event_hooks={"response": [areceipt_hook(PROVIDER_JWKS)]},
    ) as http:
        answers = await asyncio.gather(
            *(
                http.post(f"/refunds/{n}", json=BODY, headers={"Idempotency-Key": f"k{n}"})
                for n in range(5)
            )
        )
    assert sorted(a.extensions["interlock_receipt"].grant_id for a in answers) == [
        f"ga_{n}" for n in range(1, 6)
    ]
    assert sorted(issued) == [f"k{n}" for n in range(5)]  # the caller's keys, kept
    assert len(provider.effects) == 5
