"""Request limits: JSON nested deeper than the server's limit, or a body larger than
it, is a 4xx on every route — the fast check routes and the FastAPI ones alike —
never a 5xx, and nothing is logged as a server failure."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from interlock.server.limits import DEFAULT_MAX_JSON_DEPTH, json_depth

from .harness import Api, open_api
from .test_errors import error_of

DEEP = 100_000


def _deep(opener: str, closer: str, depth: int = DEEP) -> bytes:
    return (opener * depth + closer * depth).encode()


def _post_routes(api: Api) -> list[str]:
    """Every POST route of the published API, ids filled in."""
    paths = api.app.openapi()["paths"]
    return sorted(
        path.replace("{approval_id}", "apr_0")
        for path, operations in paths.items()
        if "post" in operations
    )


async def test_the_table_of_routes_is_read_from_the_openapi_document(sqlite_api: Api) -> None:
    # A POST route added later is in the table below without anyone adding it.
    routes = set(_post_routes(sqlite_api))
    assert {"/v1/check", "/v1/check/batch", "/v1/budgets/reserve"} <= routes
    assert {"/v1/approvals/apr_0/approve", "/v1/approvals/apr_0/deny"} <= routes


@pytest.mark.parametrize(("opener", "closer"), [("[", "]"), ('{"a":', "}")])
@pytest.mark.parametrize("content_type", ["application/json", "text/plain"])
async def test_json_nested_100000_deep_is_a_4xx_on_every_post_route(
    sqlite_api: Api,
    opener: str,
    closer: str,
    content_type: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    body = _deep(opener, closer)
    for route in _post_routes(sqlite_api):
        for who in ("admin", "agent"):
            with caplog.at_level(logging.ERROR, logger="interlock.server"):
                response = await sqlite_api.client.post(
                    route,
                    content=body,
                    headers={**sqlite_api.h(who), "content-type": content_type},
                )
            assert response.status_code == 400, (route, who, response.text)
            error = error_of(response)
            assert error["code"] == "too_deep", (route, error)
            assert f"deeper than {DEFAULT_MAX_JSON_DEPTH} levels" in error["message"]
            assert "Traceback" not in response.text
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]


async def test_a_deep_body_sent_to_any_other_route_is_refused_too(sqlite_api: Api) -> None:
    # The audit routes, budgets, approvals, whoami... take no body; one sent anyway is
    # measured like any other.
    paths = sqlite_api.app.openapi()["paths"]
    routes = [
        (method.upper(), path.replace("{approval_id}", "apr_0"))
        for path, operations in paths.items()
        for method in operations
        if method != "post"
    ]
    assert ("GET", "/v1/audit") in routes and ("GET", "/v1/audit/export") in routes
    for method, route in routes:
        response = await sqlite_api.client.request(
            method, route, content=_deep("[", "]"), headers=sqlite_api.h("admin")
        )
        assert response.status_code == 400, (method, route, response.text)
        assert error_of(response)["code"] == "too_deep"


async def test_the_depth_is_judged_before_the_key(sqlite_api: Api) -> None:
    # Nothing of a refused body is parsed: not even the key is looked up for it.
    response = await sqlite_api.client.post(
        "/v1/check", content=_deep("[", "]"), headers={"content-type": "application/json"}
    )
    assert (response.status_code, error_of(response)["code"]) == (400, "too_deep")


async def test_a_body_streamed_without_a_length_is_judged_too(sqlite_api: Api) -> None:
    async def chunks() -> AsyncIterator[bytes]:
        for _ in range(100):
            yield b"[" * 1000
        for _ in range(100):
            yield b"]" * 1000

    response = await sqlite_api.client.post(
        "/v1/check",
        content=chunks(),
        headers={**sqlite_api.h("agent"), "content-type": "application/json"},
    )
    assert (response.status_code, error_of(response)["code"]) == (400, "too_deep")


async def test_brackets_inside_strings_do_not_count(sqlite_api: Api) -> None:
    text = "[" * 5000 + '\\"{' * 100 + "]" * 5000
    response = await sqlite_api.client.post(
        "/v1/check",
        json={"name": "search", "arguments": {"query": text}},
        headers=sqlite_api.h("agent"),
    )
    assert response.status_code == 200, response.text
    assert response.json()["verdict"] == "allow"


async def test_the_depth_limit_is_configurable(sqlite_url: str, policy_file: Path) -> None:
    async for api in open_api(sqlite_url, policy_file, max_json_depth=3):
        ok = await api.client.post(
            "/v1/check", json={"name": "search", "arguments": {"q": "x"}}, headers=api.h("agent")
        )
        assert ok.status_code == 200, ok.text
        deeper = await api.client.post(
            "/v1/check",
            json={"name": "search", "arguments": {"q": [["x"]]}},  # 4 levels
            headers=api.h("agent"),
        )
        assert deeper.status_code == 400
        error = error_of(deeper)
        assert error["code"] == "too_deep"
        assert "deeper than 3 levels" in error["message"]


@pytest.mark.parametrize("route", ["/v1/check", "/v1/budgets/reserve"])
async def test_a_body_over_the_size_limit_is_413(sqlite_api: Api, route: str) -> None:
    body = b'{"name": "' + b"x" * (2 << 20) + b'"}'
    response = await sqlite_api.client.post(
        route, content=body, headers={**sqlite_api.h("admin"), "content-type": "application/json"}
    )
    assert response.status_code == 413
    assert error_of(response)["code"] == "too_large"


@pytest.mark.parametrize(
    ("raw", "depth"),
    [
        (b"", 0),
        (b"1", 0),
        (b"[]", 1),
        (b'{"a": [1, {"b": []}]}', 4),
        (b'["[[[[", "]]"]', 1),
        (b'["\\"[[["]', 1),
        (b'["\\\\", [[]]]', 3),
        (b"[[[" + b"]" * 3, 3),
        (b'"[[[', 0),  # an unterminated string hides the rest
    ],
)
def test_json_depth(raw: bytes, depth: int) -> None:
    assert json_depth(raw) == depth


def test_json_depth_of_a_large_flat_body_is_quick_enough() -> None:
    raw = b"[" + b"[]," * 300_000 + b"[]]"
    assert json_depth(raw) == 2


async def test_a_declared_length_over_the_limit_is_413_before_the_body_is_read() -> None:
    from interlock.server.body_limit import BodyLimitMiddleware

    async def app(scope: Any, receive: Any, send: Any) -> None:
        raise AssertionError("the app must not run")

    async def receive() -> Any:
        raise AssertionError("the body must not be read")

    sent: list[Any] = []

    async def send(message: Any) -> None:
        sent.append(message)

    limit = BodyLimitMiddleware(app, max_body_size=1000)
    for name in (b"content-length", b"x-other"):
        sent.clear()
        headers = [(b"host", b"x"), (name, b"1001")]
        scope = {"type": "http", "method": "POST", "path": "/v1/check", "headers": headers}
        if name == b"content-length":
            await limit(scope, receive, send)
            assert sent[0]["status"] == 413
            assert b'"too_large"' in sent[1]["body"]
        else:  # not a declared length: the body is read (and here that fails)
            with pytest.raises(AssertionError, match="must not be read"):
                await limit(scope, receive, send)
