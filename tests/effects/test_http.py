"""The HTTP family on its own: what a request is (prepare, pure), how an answer is
read (execute, against a real socket), what a lookup says (reconcile)."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Any

import pytest

from interlock import Action, Context, Downstream
from interlock.effects.http import HttpEffect, HttpRequest
from interlock.effects.protocol import (
    Execution,
    Outcome,
    ReconcileContext,
    Resolution,
)
from interlock.errors import EffectError
from interlock.verify.binding import http_binding

from .provider import Served

ENDPOINT = "POST /orders/{order}/refunds"


def _action(arguments: dict[str, Any], endpoint: str | None = ENDPOINT) -> Action:
    downstream = Downstream("shop", "refund", endpoint) if endpoint else None
    context = Context(tenant="acme", downstream=downstream, idempotency_key="k-1")
    return Action.tool("refund", arguments, context=context)


ADAPTER = HttpEffect("http://shop.test/api", audience="shop")


@pytest.mark.parametrize(
    ("order", "target"),
    [
        (42, "/orders/42/refunds"),
        ("A-17", "/orders/A-17/refunds"),
        ("a b", "/orders/a%20b/refunds"),
        ("x/../../admin", "/orders/x%2F..%2F..%2Fadmin/refunds"),
        ("1?admin=1", "/orders/1%3Fadmin%3D1/refunds"),
        ("1#frag", "/orders/1%23frag/refunds"),
        ("é", "/orders/%C3%A9/refunds"),
        ("%2F", "/orders/%252F/refunds"),
    ],
    ids=["int", "plain", "space", "traversal", "query", "fragment", "unicode", "pre-encoded"],
)
def test_an_argument_fills_one_path_segment_and_no_more(order: Any, target: str) -> None:
    prepared = ADAPTER.prepare(_action({"order": order, "amount": 5}))
    assert prepared.request["target"] == target
    assert prepared.request["url"] == "http://shop.test/api" + target


@pytest.mark.parametrize(
    "order",
    [None, True, 1.5, "", ".", "..", ["1"], {"a": 1}],
    ids=["none", "bool", "float", "empty", "dot", "dotdot", "list", "dict"],
)
def test_an_argument_that_is_no_segment_is_refused(order: Any) -> None:
    with pytest.raises(EffectError):
        ADAPTER.prepare(_action({"order": order}))


@pytest.mark.parametrize(
    "endpoint",
    [
        "/orders/{order}/refunds",
        "POST orders",
        "POST /orders/{order",
        "POST /o/{}",
        "POST /o/{a-b}",
    ],
)
def test_a_malformed_endpoint_is_refused(endpoint: str) -> None:
    with pytest.raises(EffectError):
        ADAPTER.prepare(_action({"order": 1, "a-b": 1}, endpoint))


def test_no_endpoint_and_no_request_function_is_refused() -> None:
    with pytest.raises(EffectError, match="declares no endpoint"):
        ADAPTER.prepare(_action({"order": 1}, None))


def test_the_binding_covers_method_target_body_key_and_audience() -> None:
    prepared = ADAPTER.prepare(_action({"order": 1, "amount": 5}))
    body = prepared.body
    assert json.loads(body) == {"order": 1, "amount": 5}
    assert prepared.binding == http_binding(
        "POST", "/orders/1/refunds", body, "k-1", audience="shop"
    )
    other = ADAPTER.prepare(_action({"order": 1, "amount": 6}))
    assert other.binding != prepared.binding


def test_key_order_of_the_arguments_does_not_change_the_request() -> None:
    a = ADAPTER.prepare(_action({"order": 1, "amount": 5, "note": "x"}))
    b = ADAPTER.prepare(_action({"note": "x", "amount": 5, "order": 1}))
    assert a.body == b.body and a.binding == b.binding


def test_a_request_function_replaces_the_default() -> None:
    custom = HttpEffect(
        "http://shop.test",
        audience="shop",
        request=lambda action: HttpRequest("PUT", "/r?x=1", b"raw", "text/plain"),
    )
    prepared = custom.prepare(_action({"order": 1}))
    assert prepared.request["method"] == "PUT" and prepared.request["target"] == "/r?x=1"
    assert prepared.body == b"raw"
    custom.close()


# -- reading answers, on a real socket ---------------------------------------------------


class Scripted:
    """Answers each request with the status its path names: ``/status/503``; the
    lookup ``/idempotency/{key}`` with what ``lookups`` holds for the key."""

    def __init__(self) -> None:
        self.lookups: dict[str, tuple[int, bytes]] = {}

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        while (await receive()).get("more_body"):
            pass
        path = scope["path"]
        if path.startswith("/idempotency/"):
            key = scope["raw_path"].decode("ascii")[len("/idempotency/") :]
            status, body = self.lookups.get(key, (404, b"{}"))
        else:
            status, body = (
                int(path.rsplit("/", 1)[1]),
                b'{"said": "%d"}' % int(path.rsplit("/", 1)[1]),
            )
        await send({"type": "http.response.start", "status": status, "headers": []})
        await send({"type": "http.response.body", "body": body})


@pytest.fixture
def scripted() -> Iterator[tuple[Scripted, HttpEffect]]:
    app = Scripted()
    served = Served(app)
    adapter = HttpEffect(
        served.url,
        audience="shop",
        request=lambda action: HttpRequest("POST", f"/status/{action.arguments['status']}"),
    )
    yield app, adapter
    adapter.close()
    served.close()


def _execute(adapter: HttpEffect, status: int) -> Any:
    prepared = adapter.prepare(_action({"status": status}))
    execution = Execution(prepared, "k-1", time.monotonic() + 30, "token", "eff_1", 1)
    return adapter.execute(execution)


@pytest.mark.parametrize(
    ("status", "outcome"),
    [
        (200, Outcome.COMMITTED),
        (201, Outcome.COMMITTED),
        (204, Outcome.COMMITTED),
        (400, Outcome.FAILED),
        (401, Outcome.FAILED),
        (403, Outcome.FAILED),
        (422, Outcome.FAILED),
        (429, Outcome.FAILED),
        (409, Outcome.INDETERMINATE),
        (425, Outcome.INDETERMINATE),
        (500, Outcome.INDETERMINATE),
        (502, Outcome.INDETERMINATE),
        (503, Outcome.INDETERMINATE),
        (302, Outcome.INDETERMINATE),
    ],
)
def test_an_answer_is_read_by_its_status(
    scripted: tuple[Scripted, HttpEffect], status: int, outcome: Outcome
) -> None:
    result = _execute(scripted[1], status)
    assert result.outcome is outcome and result.status == status and result.sent


def test_a_deadline_already_passed_sends_nothing(scripted: tuple[Scripted, HttpEffect]) -> None:
    adapter = scripted[1]
    prepared = adapter.prepare(_action({"status": 200}))
    result = adapter.execute(Execution(prepared, "k", time.monotonic() - 1, "t", "eff_1", 1))
    assert result.outcome is Outcome.FAILED and not result.sent


def _context() -> ReconcileContext:
    return ReconcileContext("eff_1", "acme", "k/1 ?", {}, None, 1)


@pytest.mark.parametrize(
    ("lookup", "resolution", "outcome"),
    [
        ((200, b'{"status": 201, "body": {"id": 1}}'), Resolution.DONE, Outcome.COMMITTED),
        ((200, b'{"status": 422, "body": {}}'), Resolution.DONE, Outcome.FAILED),
        ((200, b'{"status": 500, "body": {}}'), Resolution.UNKNOWABLE, None),
        ((200, b'{"status": 409}'), Resolution.UNKNOWABLE, None),
        ((200, b'{"status": "201"}'), Resolution.UNKNOWABLE, None),
        ((200, b'{"status": true}'), Resolution.UNKNOWABLE, None),
        ((200, b"not json"), Resolution.UNKNOWABLE, None),
        ((200, b"[]"), Resolution.UNKNOWABLE, None),
        ((202, b"{}"), Resolution.UNKNOWABLE, None),
        ((500, b"{}"), Resolution.UNKNOWABLE, None),
        (None, Resolution.NEVER_EXECUTED, None),
    ],
    ids=[
        "committed",
        "refused",
        "5xx-stored",
        "in-flight",
        "status-string",
        "status-bool",
        "not-json",
        "not-object",
        "202",
        "500",
        "unknown-key",
    ],
)
def test_a_lookup_is_read_strictly(
    scripted: tuple[Scripted, HttpEffect],
    lookup: tuple[int, bytes] | None,
    resolution: Resolution,
    outcome: Outcome | None,
) -> None:
    app, adapter = scripted
    if lookup is not None:
        app.lookups["k%2F1%20%3F"] = lookup
    answer = adapter.reconcile(_context())
    assert answer.resolution is resolution
    if outcome is not None:
        assert answer.result is not None and answer.result.outcome is outcome


def test_a_lookup_that_cannot_connect_is_unknowable() -> None:
    import socket

    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    sock.close()
    adapter = HttpEffect(f"http://127.0.0.1:{port}", audience="shop")
    assert adapter.reconcile(_context()).resolution is Resolution.UNKNOWABLE
    adapter.close()


@pytest.mark.parametrize("lookup", ["idempotency/{key}", "/idempotency", ""])
def test_a_lookup_without_the_key_is_refused(lookup: str) -> None:
    with pytest.raises(ValueError):
        HttpEffect("http://shop.test", audience="shop", lookup=lookup)


def test_a_large_answer_is_recorded_by_its_digest() -> None:
    from interlock.effects.protocol import ProviderResult

    prepared = ADAPTER.prepare(_action({"order": 1}))
    small = ADAPTER.observe_effect(ProviderResult(Outcome.COMMITTED, 201, {"id": 1}), prepared)
    assert small == {"status": 201, "body": {"id": 1}, "receipt": None}
    big = {"blob": "x" * 20_000}
    observed = ADAPTER.observe_effect(ProviderResult(Outcome.COMMITTED, 201, big), prepared)
    assert observed is not None and observed["body"]["omitted_bytes"] > 20_000
    assert len(observed["body"]["sha256"]) == 64
    assert ADAPTER.observe_effect(ProviderResult(Outcome.INDETERMINATE), prepared) is None


def test_close_leaves_a_client_it_was_given_open() -> None:
    import httpx

    given = httpx.Client()
    HttpEffect("http://shop.test", audience="shop", client=given).close()
    assert not given.is_closed
    own = HttpEffect("http://shop.test", audience="shop")
    own.close()
    assert own.client.is_closed
    given.close()
