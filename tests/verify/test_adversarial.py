"""Attacks on the binding, through a real socket with exact bytes, next to benign
look-alikes that must pass — on both of uvicorn's HTTP/1.1 parsers.

Every row is a grant for ONE request (``/refunds?order=42``, the JSON body below,
``Idempotency-Key: refund-42-1``) and the bytes actually sent."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field

import pytest

from .provider import Provider, Served, issue, send_raw
from .support import JWKS

TARGET = "/refunds?order=42&note=late"
BODY = b'{"amount": 500, "currency": "EUR"}'
KEY = "refund-42-1"


@dataclass(frozen=True)
class Sent:
    """What goes on the wire; ``grant`` is where the token goes (``None``: nowhere)."""

    target: str = TARGET
    body: bytes | tuple[bytes, ...] = BODY
    headers: tuple[tuple[str, str], ...] = (("Idempotency-Key", KEY),)
    grant: tuple[str, ...] = ("Interlock-Grant",)
    extra: tuple[tuple[str, str], ...] = field(default=())
    pad_token: str = ""


ATTACKS: list[tuple[str, Sent, int, str]] = [
    ("query reordered", Sent(target="/refunds?note=late&order=42"), 403, "binding_mismatch"),
    ("query value changed", Sent(target="/refunds?order=43&note=late"), 403, "binding_mismatch"),
    ("query parameter added", Sent(target=TARGET + "&order=43"), 403, "binding_mismatch"),
    ("query dropped", Sent(target="/refunds"), 403, "binding_mismatch"),
    ("double slash", Sent(target="//refunds?order=42&note=late"), 403, "binding_mismatch"),
    ("trailing slash", Sent(target="/refunds/?order=42&note=late"), 403, "binding_mismatch"),
    ("encoded letter", Sent(target="/r%65funds?order=42&note=late"), 403, "binding_mismatch"),
    ("encoded slash", Sent(target="/%2Frefunds?order=42&note=late"), 403, "binding_mismatch"),
    ("dot segment", Sent(target="/x/../refunds?order=42&note=late"), 403, "binding_mismatch"),
    ("encoded query", Sent(target="/refunds?order=4%32&note=late"), 403, "binding_mismatch"),
    ("body re-encoded", Sent(body=b'{"amount":500,"currency":"EUR"}'), 403, "binding_mismatch"),
    (
        "body keys reordered",
        Sent(body=b'{"currency": "EUR", "amount": 500}'),
        403,
        "binding_mismatch",
    ),
    ("body number reformatted", Sent(body=BODY.replace(b"500", b"500.0")), 403, "binding_mismatch"),
    ("body newline appended", Sent(body=BODY + b"\n"), 403, "binding_mismatch"),
    ("body amount changed", Sent(body=BODY.replace(b"500", b"5000")), 403, "binding_mismatch"),
    (
        "idempotency key changed",
        Sent(headers=(("Idempotency-Key", KEY + "x"),)),
        403,
        "binding_mismatch",
    ),
    ("idempotency key dropped", Sent(headers=()), 403, "binding_mismatch"),
    (
        "idempotency key twice (same value)",
        Sent(headers=(("Idempotency-Key", KEY), ("idempotency-key", KEY))),
        403,
        "binding_mismatch",
    ),
    (
        "idempotency keys folded",
        Sent(headers=(("Idempotency-Key", f"{KEY}, other"),)),
        403,
        "binding_mismatch",
    ),
    ("grant twice", Sent(grant=("Interlock-Grant", "interlock-grant")), 401, "grant_invalid"),
    ("grant in Authorization", Sent(grant=("Authorization",)), 401, "grant_invalid"),
    ("no grant", Sent(grant=()), 401, "grant_invalid"),
    ("grant with a space inside", Sent(pad_token="inside"), 401, "bad_signature"),
]

BENIGN: list[tuple[str, Sent]] = [
    ("as granted", Sent()),
    (
        "header names in upper case",
        Sent(grant=("INTERLOCK-GRANT",), headers=(("IDEMPOTENCY-KEY", KEY),)),
    ),
    (
        "header names in odd case",
        Sent(grant=("interlock-Grant",), headers=(("idempotency-key", KEY),)),
    ),
    ("body chunked", Sent(body=(BODY,))),
    ("body in many chunks", Sent(body=tuple(BODY[i : i + 3] for i in range(0, len(BODY), 3)))),
    ("another Host", Sent(extra=(("Host", "shop.internal:8443"),))),
    ("unrelated headers", Sent(extra=(("X-Trace", "abc"), ("Content-Type", "text/plain")))),
    ("absolute-form target", Sent(target="http://shop.internal" + TARGET)),
    ("whitespace around the token", Sent(pad_token="around")),
]


@pytest.fixture(params=["h11", "httptools"], scope="module")
def served(request: pytest.FixtureRequest) -> Iterator[tuple[Served, Provider, str]]:
    provider = Provider(keys=JWKS, receipts=False)
    server = Served(provider.app(), http=request.param)
    yield server, provider, request.param
    server.close()


def _send(server: Served, sent: Sent, grant_id: str) -> tuple[int, object]:
    token = issue("POST", TARGET, BODY, KEY, grant_id=grant_id)
    if sent.pad_token == "around":
        token = f"  {token} "
    elif sent.pad_token == "inside":
        token = token.replace(".", ". ", 1)
    headers = [*sent.headers, *((name, token) for name in sent.grant), *sent.extra]
    body = sent.body if isinstance(sent.body, bytes) else list(sent.body)
    answer = send_raw(server.port, "POST", sent.target, headers, body)
    return answer.status, answer.json


@pytest.mark.parametrize(
    ("sent", "status", "code"), [a[1:] for a in ATTACKS], ids=[a[0] for a in ATTACKS]
)
def test_an_attack_on_the_binding_is_refused(
    served: tuple[Served, Provider, str],
    sent: Sent,
    status: int,
    code: str,
    request: pytest.FixtureRequest,
) -> None:
    server, provider, _ = served
    before = len(provider.effects)
    answer_status, answer = _send(server, sent, grant_id=f"g_{request.node.name}")
    assert (answer_status, answer["error"]["code"]) == (status, code), answer  # type: ignore[index]
    assert len(provider.effects) == before


@pytest.mark.parametrize("sent", [b[1] for b in BENIGN], ids=[b[0] for b in BENIGN])
def test_a_benign_look_alike_passes(
    served: tuple[Served, Provider, str], sent: Sent, request: pytest.FixtureRequest
) -> None:
    server, provider, parser = served
    status, answer = _send(server, sent, grant_id=f"g_{request.node.name}")
    if parser == "h11" and sent.target.startswith("http://"):
        # uvicorn's h11 parser hands the app the absolute form as its path: the grant
        # verifies (no 401/403), but the app cannot route the request
        assert (status, answer) == (404, "Not Found")
        return
    assert status == 201, answer
    assert provider.effects[-1]["grant"] == f"g_{request.node.name}"
    assert provider.effects[-1]["order"] == "42"


def test_a_method_in_lower_case_never_runs_the_effect(
    served: tuple[Served, Provider, str],
) -> None:
    # HTTP methods are case-sensitive: a grant for POST does not cover ``post`` (a 403
    # binding refusal from the middleware where the server passes it on, a 400 where
    # the server's parser refuses it first) — and the refused grant is not spent
    server, provider, _ = served
    before = len(provider.effects)
    token = issue("POST", TARGET, BODY, KEY, grant_id="g_lower_case_method")
    headers = [("Idempotency-Key", KEY), ("Interlock-Grant", token)]
    answer = send_raw(server.port, "post", TARGET, headers, BODY)
    assert answer.status in (400, 403)
    assert len(provider.effects) == before
    answer = send_raw(server.port, "POST", TARGET, headers, BODY)
    assert 200 <= answer.status < 300
    assert len(provider.effects) == before + 1
