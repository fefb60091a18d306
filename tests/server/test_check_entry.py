"""The check entry (``interlock.server.check_entry``) answers a well-formed check
ahead of the Starlette stack and hands every other request on to it: each request
below is sent to the app and to the same app without the entry (same guard, same
keys), and the answers must be the same — status, error body, headers — and a
refused request must leave no audit record behind."""

from __future__ import annotations

import json
import logging
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi import FastAPI
from starlette.types import ASGIApp, Receive, Scope, Send

from interlock.errors import StoreUnavailable
from interlock.server import create_app
from interlock.server.check_entry import CheckEntry

from .harness import Api, open_api

LIMIT = 2_000  # bytes: the apps' body limit here
GOOD = {"name": "search", "arguments": {"q": "refund policy"}}
JSON = {"content-type": "application/json"}


class Pair:
    """The app under test and the same app without its check entry."""

    def __init__(self, api: Api, stack: FastAPI) -> None:
        self.api = api
        self.stack = httpx.AsyncClient(
            transport=httpx.ASGITransport(app=stack), base_url="http://interlock.test"
        )

    async def both(
        self, path: str = "/v1/check", *, who: str | None = "agent", **request: Any
    ) -> tuple[httpx.Response, httpx.Response]:
        headers = {**(self.api.h(who) if who else {}), **request.pop("headers", {})}
        method = request.pop("method", "POST")
        entry = await self.api.client.request(method, path, headers=headers, **request)
        stack = await self.stack.request(method, path, headers=headers, **request)
        return entry, stack

    async def records(self) -> int:
        assert self.api.guard.audit is not None
        self.api.guard.audit.flush()
        answer = await self.api.client.get("/v1/audit/verify", headers=self.api.h("approver"))
        count: int = answer.json()["records"]
        return count


def without_entry(app: FastAPI) -> FastAPI:
    app.user_middleware = [m for m in app.user_middleware if m.cls is not CheckEntry]
    return app


def entry_of(app: FastAPI) -> CheckEntry:
    """The app's check entry, from its built middleware stack."""
    layer: Any = app.middleware_stack
    while not isinstance(layer, CheckEntry):
        layer = layer.app
    return layer


@pytest.fixture
async def pair(sqlite_url: str, policy_file: Path) -> AsyncIterator[Pair]:
    async for api in open_api(sqlite_url, policy_file, max_body_size=LIMIT, max_json_depth=10):
        stack = without_entry(
            create_app(api.guard, keys=api.keys, max_body_size=LIMIT, max_json_depth=10)
        )
        yield Pair(api, stack)


def _same(entry: httpx.Response, stack: httpx.Response) -> None:
    assert entry.status_code == stack.status_code, (entry.text, stack.text)
    if entry.status_code == 200:  # a decision: a fresh id each time
        left, right = entry.json(), stack.json()
        assert left.pop("decision_id") != right.pop("decision_id")
        assert left == right
    else:
        assert entry.content == stack.content
    for header in ("content-type", "www-authenticate", "content-length"):
        if entry.status_code == 200 and header == "content-length":
            continue  # the two decision ids may differ in length one day
        assert entry.headers.get(header) == stack.headers.get(header), header


async def _chunks(body: bytes, size: int = 500) -> AsyncIterator[bytes]:
    """``body`` streamed: no content-length, counted as it arrives."""
    for start in range(0, len(body), size):
        yield body[start : start + size]


_DEEP = b'{"name": "search", "arguments": {"a": ' + b"[" * 20 + b"]" * 20 + b"}}"
_BIG = json.dumps({"name": "search", "arguments": {"q": "x" * (2 * LIMIT)}}).encode()

REFUSED: dict[str, dict[str, Any]] = {
    "bad JSON": {"content": b'{"name": "search",', "headers": JSON},
    "not an object": {"content": b"[1, 2]", "headers": JSON},
    "missing name": {"json": {"arguments": {}}},
    "empty name": {"json": {"name": ""}},
    "unknown kind": {"json": {"name": "x", "kind": "rocket"}},
    "a field the model does not know": {"json": {"name": "x", "surprise": 1}},
    "a tenant stated in the body": {"json": {"name": "x", "context": {"tenant": "globex"}}},
    "NaN": {"content": b'{"name": "x", "arguments": {"n": NaN}}', "headers": JSON},
    "a lone surrogate": {"content": b'{"name": "x", "arguments": {"s": "\\ud800"}}'},
    "declared over the size limit": {"content": _BIG, "headers": JSON},
    "streamed over the size limit": {"streamed": True},
    "nested over the depth limit": {"content": _DEEP, "headers": JSON},
    "no key": {"json": GOOD, "who": None},
    "not a bearer key": {"json": GOOD, "who": None, "headers": {"authorization": "Basic eDp5"}},
    "an empty bearer key": {"json": GOOD, "who": None, "headers": {"authorization": "Bearer  "}},
    "an unknown key": {
        "json": GOOD,
        "who": None,
        "headers": {"authorization": "Bearer ilk_0123456789abcdef_nope"},
    },
    "a malformed key": {"json": GOOD, "who": None, "headers": {"authorization": "Bearer x"}},
    "a key without the check permission": {"json": GOOD, "who": "approver"},
}


@pytest.mark.parametrize("case", sorted(REFUSED))
async def test_a_refused_check_is_answered_as_the_stack_answers_it(
    pair: Pair, case: str, caplog: pytest.LogCaptureFixture
) -> None:
    request = dict(REFUSED[case])
    if request.pop("streamed", False):
        request["content"] = _chunks(_BIG)  # a generator is read once: one each
        entry = await pair.api.client.post("/v1/check", headers=pair.api.h("agent"), **request)
        request["content"] = _chunks(_BIG)
        stack = await pair.stack.post("/v1/check", headers=pair.api.h("agent"), **request)
    else:
        with caplog.at_level(logging.ERROR, logger="interlock.server"):
            entry, stack = await pair.both(**request)
    assert 400 <= entry.status_code < 500, entry.text
    _same(entry, stack)
    assert await pair.records() == 0  # decided by nobody
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]


@pytest.mark.parametrize(
    "path, body",
    [
        ("/v1/check/batch", {"actions": []}),
        ("/v1/check/batch", {"actions": [GOOD, {"name": ""}]}),
        ("/v1/check/batch", {"actions": GOOD}),
        ("/v1/check/batch", GOOD),
    ],
)
async def test_a_refused_batch_is_answered_as_the_stack_answers_it(
    pair: Pair, path: str, body: Any
) -> None:
    entry, stack = await pair.both(path, json=body)
    assert entry.status_code == 422, entry.text
    _same(entry, stack)
    assert await pair.records() == 0


@pytest.mark.parametrize(
    "request_",
    [
        {"json": GOOD},
        {"json": {"name": "shell", "arguments": {"command": "ls"}}},
        {"json": {"name": "refund_order", "arguments": {"amount": 500}}},
        {"json": GOOD, "headers": {"content-type": "text/plain"}},  # as the route: not checked
        {"json": GOOD, "who": "admin"},
        # only Python's parser reads these: the stack decides them, once
        {"content": b'{"name": "search", "arguments": {"n": 1180591620717411303424}}'},
        {"content": b'\xef\xbb\xbf{"name": "search"}'},
        {"content": json.dumps(GOOD).encode("utf-16")},
    ],
)
async def test_a_check_is_answered_as_the_stack_answers_it(
    pair: Pair, request_: dict[str, Any]
) -> None:
    entry, stack = await pair.both(**request_)
    _same(entry, stack)
    assert await pair.records() == 2  # one decision each: none decided twice


async def test_a_batch_is_answered_as_the_stack_answers_it(pair: Pair) -> None:
    body = {"actions": [GOOD, {"name": "shell", "arguments": {"command": "ls"}}]}
    entry, stack = await pair.both("/v1/check/batch", json=body)
    assert entry.json()["verdict"] == "deny"
    _same(entry, stack)


async def test_other_methods_and_paths_go_to_the_stack(pair: Pair) -> None:
    for method, path in [("GET", "/v1/check"), ("PUT", "/v1/check"), ("POST", "/v1/check/")]:
        entry, stack = await pair.both(path, method=method, json=GOOD)
        assert entry.status_code == stack.status_code != 200
        assert entry.content == stack.content


class _Refuses:
    """Stands for the stack behind the entry: counts what it is handed."""

    def __init__(self) -> None:
        self.handed: list[str] = []

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        message = await receive()
        self.handed.append(message.get("body", b"").decode())
        await send({"type": "http.response.start", "status": 418, "headers": []})
        await send({"type": "http.response.body", "body": b""})


async def test_the_entry_answers_a_good_check_and_hands_on_the_rest(pair: Pair) -> None:
    api = pair.api
    await api.check(**GOOD)  # builds the stack
    entry = entry_of(api.app)
    stack: ASGIApp = _Refuses()
    entry.app = stack
    good = await api.client.post("/v1/check", json=GOOD, headers=api.h("agent"))
    assert good.status_code == 200 and good.json()["verdict"] == "allow"
    bad = await api.client.post("/v1/check", content=b'{"name": ""}', headers=api.h("agent"))
    assert bad.status_code == 418
    streamed = await api.client.post("/v1/check", content=_chunks(_BIG), headers=api.h("agent"))
    assert streamed.status_code == 418
    # the stack is handed the body the entry read, whole, then the rest of the stream
    assert stack.handed[0] == '{"name": ""}'  # type: ignore[attr-defined]
    assert _BIG.decode().startswith(stack.handed[1])  # type: ignore[attr-defined]


async def test_a_failure_once_the_guard_was_asked_is_answered_by_the_handlers_not_handed_on(
    pair: Pair, monkeypatch: pytest.MonkeyPatch
) -> None:
    asked: list[object] = []

    async def unavailable(action: object, **_: object) -> object:
        asked.append(action)
        raise StoreUnavailable("the store is down")

    monkeypatch.setattr(pair.api.guard, "acheck", unavailable)
    entry, stack = await pair.both(json=GOOD)
    assert entry.status_code == 503
    assert entry.json()["error"]["code"] == "unavailable"
    _same(entry, stack)
    assert len(asked) == 2  # once by the entry, once by the stack: never twice for one


async def test_the_worker_header_metrics_and_access_log_are_the_stacks(
    sqlite_url: str, policy_file: Path
) -> None:
    lines: list[str] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            lines.append(record.getMessage())

    keep = Keep()
    logging.getLogger("interlock.access").addHandler(keep)
    try:
        async for api in open_api(sqlite_url, policy_file, worker="3:4242", access_log=0.5):
            answered = [
                await api.client.post("/v1/check", json=GOOD, headers=api.h("agent"))
                for _ in range(3)
            ]
            refused = await api.client.post("/v1/check", json=GOOD)
            metrics = (await api.client.get("/metrics")).text
    finally:
        logging.getLogger("interlock.access").removeHandler(keep)
    assert {a.headers["x-interlock-worker"] for a in answered} == {"3:4242"}
    assert refused.headers["x-interlock-worker"] == "3:4242"
    assert refused.status_code == 401
    # one count shared by the entry and the stack: every second request of the four
    entries = [json.loads(line) for line in lines]
    assert [(e["route"], e["status"], e["worker"]) for e in entries] == [
        ("/v1/check", 200, "3:4242"),
        ("/v1/check", 401, "3:4242"),
    ]
    for status, count in ((200, 3), (401, 1)):
        assert (
            f'interlock_http_requests_total{{method="POST",route="/v1/check",status="{status}"}} '
            f"{count}.0"
        ) in metrics
    assert 'interlock_decisions_total{verdict="allow"} 3.0' in metrics


async def test_a_store_failure_reading_the_key_is_answered_as_the_stack_answers_it(
    pair: Pair, monkeypatch: pytest.MonkeyPatch
) -> None:
    def down(token: str) -> None:
        raise StoreUnavailable("the store is down")

    monkeypatch.setattr(pair.api.keys, "authenticate_cached", lambda token: (False, None))
    monkeypatch.setattr(pair.api.keys, "authenticate", down)
    entry, stack = await pair.both(json=GOOD)
    assert entry.status_code == 503, entry.text
    _same(entry, stack)
    monkeypatch.undo()
    assert await pair.records() == 0
