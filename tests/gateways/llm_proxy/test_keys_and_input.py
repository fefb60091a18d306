"""Who may call, in whose name, and what is not a request: every refusal here comes
before the upstream, in the provider's own error format."""

from __future__ import annotations

import httpx
import openai
import orjson
import pytest

from .conftest import Proxy

MESSAGES = [{"role": "user", "content": "Say hello."}]
BODY = {"model": "gpt-4o-mini", "messages": MESSAGES}


def post(proxy: Proxy, path: str, headers: dict[str, str], **kwargs: object) -> httpx.Response:
    return httpx.post(proxy.url + path, headers=headers, timeout=30, **kwargs)  # type: ignore[arg-type]


def bearer(proxy: Proxy, key: str = "agent") -> dict[str, str]:
    return {"authorization": f"Bearer {proxy.tokens[key]}"}


@pytest.mark.parametrize(
    "headers",
    [
        {},
        {"authorization": "Bearer ilk_0000000000000000_" + "x" * 43},
        {"authorization": "Bearer sk-upstream-openai"},  # the upstream's key is not a key here
        {"x-api-key": "not-a-key"},
        {"authorization": "Basic b3BzOmJvdA=="},
    ],
)
def test_a_request_without_a_valid_key_is_401(proxy: Proxy, headers: dict[str, str]) -> None:
    answer = post(proxy, "/v1/chat/completions", headers, json=BODY)
    assert answer.status_code == 401
    assert answer.json()["error"]["type"] == "authentication_error"
    answer = post(proxy, "/v1/messages", headers, json=BODY)
    assert answer.status_code == 401
    assert answer.json() == {
        "type": "error",
        "error": {"type": "authentication_error", "message": answer.json()["error"]["message"]},
    }
    assert proxy.standin.calls == 0


def test_the_openai_client_without_a_valid_key_gets_an_authentication_error(
    proxy: Proxy,
) -> None:
    api = openai.OpenAI(base_url=proxy.url + "/v1", api_key="sk-nope", max_retries=0)
    with pytest.raises(openai.AuthenticationError):
        api.chat.completions.create(model="gpt-4o-mini", messages=MESSAGES)  # type: ignore[arg-type]
    assert proxy.standin.calls == 0


def test_two_different_keys_in_one_request_are_refused(proxy: Proxy) -> None:
    headers = {**bearer(proxy), "x-api-key": proxy.tokens["other"]}
    answer = post(proxy, "/v1/messages", headers, json=BODY)
    assert answer.status_code == 401
    assert proxy.standin.calls == 0


def test_a_key_that_is_not_an_agent_key_is_403(proxy: Proxy) -> None:
    answer = post(proxy, "/v1/chat/completions", bearer(proxy, "approver"), json=BODY)
    assert answer.status_code == 403
    assert answer.json()["error"]["code"] == "forbidden"
    assert proxy.standin.calls == 0


def test_a_revoked_key_is_refused(proxy: Proxy) -> None:
    from interlock.server import KeyStore

    keys = KeyStore(proxy.store, cache_ttl=0)
    (key,) = [k for k in keys.list_keys(tenant="globex")]
    keys.revoke(key.id)
    answer = post(proxy, "/v1/chat/completions", bearer(proxy, "other"), json=BODY)
    # The proxy caches a key for at most 5 s; it never saw this one, so it reads the table.
    assert answer.status_code == 401
    assert proxy.standin.calls == 0


def test_the_tenant_comes_from_the_key_not_from_headers_or_body(proxy: Proxy) -> None:
    headers = {
        **bearer(proxy),
        "x-interlock-tenant": "globex",
        "x-interlock-agent": "root",
        "interlock-tenant": "globex",
    }
    body = {
        **BODY,
        "tenant": "globex",
        "agent": "root",
        "context": {"tenant": "globex"},
        "metadata": {"tenant": "globex"},
        "user": "globex",
    }
    answer = post(proxy, "/v1/chat/completions", headers, json=body)
    assert answer.status_code == 200
    proxy.settled.wait_for(1)  # the commit follows the answer
    assert proxy.spent("acme") == (18, 0)
    assert proxy.store.budget_rows(tenant="globex") == []
    (row,) = proxy.store.budget_rows(tenant="acme", budget_id="tokens")
    assert row.scope_key.endswith("ops-bot")


def test_the_other_tenants_agent_of_the_same_name_has_its_own_budget(proxy: Proxy) -> None:
    assert post(proxy, "/v1/chat/completions", bearer(proxy, "other"), json=BODY).is_success
    proxy.settled.wait_for(1)  # the commit follows the answer
    assert proxy.spent("globex") == (18, 0)
    assert proxy.spent("acme") == (0, 0)


@pytest.mark.parametrize(
    ("content", "code"),
    [
        (b"{not json", "invalid_json"),
        (b"[1, 2]", "invalid_request"),
        (b'{"messages": []}', "invalid_request"),
        (b'{"model": 7, "messages": []}', "invalid_request"),
        (b'{"model": "", "messages": []}', "invalid_request"),
        (b'{"model": "gpt-4o-mini", "messages": [], "stream": "yes"}', "invalid_request"),
    ],
)
def test_a_malformed_request_is_400_before_the_upstream(
    proxy: Proxy, content: bytes, code: str
) -> None:
    headers = {**bearer(proxy), "content-type": "application/json"}
    answer = post(proxy, "/v1/chat/completions", headers, content=content)
    assert answer.status_code == 400
    assert answer.json()["error"]["code"] == code
    answer = post(proxy, "/v1/messages", headers, content=content)
    assert answer.status_code == 400
    assert answer.json()["error"]["type"] == "invalid_request_error"
    assert proxy.standin.calls == 0


def test_a_malformed_token_bound_fails_closed(proxy: Proxy) -> None:
    body = {**BODY, "max_tokens": "lots"}
    answer = post(proxy, "/v1/chat/completions", bearer(proxy), json=body)
    assert answer.status_code == 503
    assert answer.json()["error"]["code"] == "interlock_undetermined"
    assert proxy.standin.calls == 0


def test_a_benign_request_through_raw_http_passes(proxy: Proxy) -> None:
    answer = post(proxy, "/v1/chat/completions", bearer(proxy), json=BODY)
    assert answer.status_code == 200
    assert answer.headers["x-interlock-decision-id"]
    assert proxy.standin.calls == 1


def test_a_body_over_the_limit_is_413_before_the_upstream(proxy: Proxy) -> None:
    from interlock.gateways.llm_proxy import ProxyConfig, Upstream, create_app

    from .conftest import Served

    config = ProxyConfig(openai=Upstream(proxy.url + "/unused/v1"), max_body=1000)
    small = Served(create_app(proxy.guard, config))
    try:
        big = {**BODY, "messages": [{"role": "user", "content": "x" * 2000}]}
        answer = httpx.post(
            small.url + "/v1/chat/completions", headers=bearer(proxy), json=big, timeout=30
        )
        assert answer.status_code == 413
        assert answer.json()["error"]["code"] == "too_large"
        chunked = httpx.post(  # no content-length: counted as it streams in
            small.url + "/v1/chat/completions",
            headers=bearer(proxy),
            content=iter([orjson.dumps(big)]),
            timeout=30,
        )
        assert chunked.status_code == 413
    finally:
        small.close()
    assert proxy.standin.calls == 0


def test_a_duplicated_model_key_is_judged_as_the_upstream_receives_it(proxy: Proxy) -> None:
    headers = {**bearer(proxy), "content-type": "application/json"}
    smuggled = b'{"model": "gpt-4o-mini", "model": "gpt-5", "messages": []}'
    answer = post(proxy, "/v1/chat/completions", headers, content=smuggled)
    assert answer.status_code == 403  # the last one counts, for the judge as upstream
    assert proxy.standin.calls == 0
    benign = b'{"model": "gpt-5", "model": "gpt-4o-mini", "messages": []}'
    assert post(proxy, "/v1/chat/completions", headers, content=benign).status_code == 200
    # The upstream gets the body the guard judged, re-encoded: one model key.
    assert proxy.standin.seen[0].body["model"] == "gpt-4o-mini"
