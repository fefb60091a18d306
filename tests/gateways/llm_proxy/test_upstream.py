"""Which client reaches the upstream: the lean one, unless an httpx transport is
given or the environment sends the upstream through an HTTP proxy — and httpx's
errors then read as the lean client's."""

from __future__ import annotations

import httpx
import pytest

from interlock.gateways.http1 import (
    ConnectError,
    Http1Client,
    Limits,
    ReadTimeout,
    RemoteProtocolError,
    ResponseTooLarge,
    Target,
    Timeouts,
)
from interlock.gateways.llm_proxy.upstream import HttpxUpstream, proxied, upstream_client

OPENAI = Target.of("https://api.example.test/v1/chat/completions")
LOCAL = Target.of("http://127.0.0.1:8000/v1/chat/completions")
PROXY_VARIABLES = ("HTTPS_PROXY", "HTTP_PROXY", "ALL_PROXY", "NO_PROXY")


@pytest.fixture(autouse=True)
def no_proxy_in_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in PROXY_VARIABLES:
        monkeypatch.delenv(name, raising=False)
        monkeypatch.delenv(name.lower(), raising=False)


def test_without_a_proxy_or_a_transport_the_lean_client_connects_directly() -> None:
    assert not proxied([OPENAI, LOCAL])
    client = upstream_client(Timeouts(), Limits(), transport=None, targets=[OPENAI])
    assert isinstance(client, Http1Client)


def test_a_proxy_in_the_environment_sends_the_upstream_through_httpx(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("HTTPS_PROXY", "http://egress.internal:3128")
    assert proxied([OPENAI])
    assert not proxied([LOCAL])  # an https proxy says nothing of http upstreams
    client = upstream_client(Timeouts(), Limits(), transport=None, targets=[OPENAI])
    assert isinstance(client, HttpxUpstream)


def test_an_upstream_the_proxy_is_bypassed_for_stays_on_the_lean_client(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("ALL_PROXY", "http://egress.internal:3128")
    monkeypatch.setenv("NO_PROXY", "api.example.test,127.0.0.1")
    assert not proxied([OPENAI, LOCAL])


async def test_httpx_errors_read_as_the_lean_clients() -> None:
    failures = {
        "/connect": httpx.ConnectError("refused"),
        "/read": httpx.ReadTimeout("slow"),
        "/broken": httpx.RemoteProtocolError("peer closed connection"),
    }

    def upstream(request: httpx.Request) -> httpx.Response:
        failure = failures.get(request.url.path)
        if failure is not None:
            raise failure
        return httpx.Response(200, content=b"x" * 100, headers={"request-id": "req_1"})

    client = HttpxUpstream(Timeouts(), Limits(max_body=50), httpx.MockTransport(upstream))
    try:
        base = "http://upstream.test"
        with pytest.raises(ConnectError) as refused:
            await client.send("POST", Target.of(base + "/connect"), [], b"{}")
        assert not refused.value.sent
        with pytest.raises(ReadTimeout):
            await client.send("POST", Target.of(base + "/read"), [], b"{}")
        with pytest.raises(RemoteProtocolError):
            await client.send("POST", Target.of(base + "/broken"), [], b"{}")
        answer = await client.send("POST", Target.of(base + "/ok"), [], b"{}")
        assert (answer.status_code, answer.headers["request-id"]) == (200, "req_1")
        with pytest.raises(ResponseTooLarge):
            await answer.aread()
    finally:
        await client.aclose()
