"""The proxy in front of the shared server (``SharedServer``, ``--server``): it holds
no Interlock key, asks with each client's own, remembers identities by hash only, and
fails closed — a server that is down, slow or answering garbage is a 503 before any
upstream call.

(Every other test of this directory runs in this mode too: the ``proxy`` fixture is
parametrized over ``standalone`` and ``server``.)"""

from __future__ import annotations

import json
import socket
from collections.abc import Iterator
from typing import Any

import anthropic
import httpx
import openai
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from interlock.core.decision import Decision, Verdict
from interlock.errors import ActionUndetermined, RemoteError
from interlock.gateways.llm_proxy import ProxyConfig, SharedServer, Upstream, create_app
from interlock.gateways.llm_proxy.refusals import refusal_for_decision
from interlock.server import KeyStore, Role

from .conftest import Proxy, Served, Settled
from .standin import OPENAI_USAGE, StandIn

pytest.importorskip("fastapi")

MESSAGES = [{"role": "user", "content": "Say hello."}]
TOTAL = OPENAI_USAGE["total_tokens"]


#: the ``proxy`` fixture in its ``server`` mode only
server_mode = pytest.mark.parametrize("proxy", ["server"], indirect=True)


def openai_client(url: str, key: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=url + "/v1", api_key=key, max_retries=0)


def _revoke(proxy: Proxy, label: str) -> None:
    keys = KeyStore(proxy.store)
    (key,) = [k for k in keys.list_keys() if proxy.tokens[label].startswith(f"ilk_{k.id}_")]
    keys.revoke(key.id)


# -- what the proxy says to the server ----------------------------------------------------


@server_mode
def test_every_server_request_carries_the_clients_own_key(proxy: Proxy) -> None:
    api = openai_client(proxy.url, proxy.tokens["agent"])
    for _ in range(2):
        api.chat.completions.create(model="gpt-4o-mini", messages=MESSAGES)
    list(api.chat.completions.create(model="gpt-4o-mini", messages=MESSAGES, stream=True))
    proxy.settled.wait_for(3)
    other = openai_client(proxy.url, proxy.tokens["other"])
    other.chat.completions.create(model="gpt-4o-mini", messages=MESSAGES)
    proxy.settled.wait_for(4)

    paths = [(method, path) for method, path, _ in proxy.server_seen]
    assert paths.count(("GET", "/v1/whoami")) == 2  # once per key, then remembered
    assert paths.count(("POST", "/v1/check")) == 4
    assert paths.count(("POST", "/v1/budgets/commit")) == 4
    tokens = {token for _, _, token in proxy.server_seen}
    assert tokens == {proxy.tokens["agent"], proxy.tokens["other"]}  # no key of its own
    assert proxy.spent("acme") == (3 * TOTAL, 0)
    assert proxy.spent("globex") == (TOTAL, 0)


@server_mode
def test_identities_are_remembered_under_the_keys_hash_only(proxy: Proxy) -> None:
    openai_client(proxy.url, proxy.tokens["agent"]).chat.completions.create(
        model="gpt-4o-mini", messages=MESSAGES
    )
    assert isinstance(proxy.judge, SharedServer)
    known = proxy.judge._known
    assert len(known) == 1
    (digest,) = known
    assert isinstance(digest, bytes) and len(digest) == 32
    assert proxy.tokens["agent"] not in repr(known)
    (who,) = known.values()
    assert (who.tenant, who.role, who.name) == ("acme", "agent", "ops-bot")


@server_mode
def test_a_key_revoked_on_the_server_is_refused_at_its_next_call_and_forgotten(
    proxy: Proxy,
) -> None:
    api = openai_client(proxy.url, proxy.tokens["agent"])
    api.chat.completions.create(model="gpt-4o-mini", messages=MESSAGES)
    proxy.settled.wait_for(1)  # the commit follows the answer
    _revoke(proxy, "agent")
    with pytest.raises(openai.AuthenticationError) as raised:
        api.chat.completions.create(model="gpt-4o-mini", messages=MESSAGES)
    assert isinstance(raised.value.body, dict)
    assert raised.value.body["code"] == "unauthorized"
    assert proxy.standin.calls == 1
    assert isinstance(proxy.judge, SharedServer) and not proxy.judge._known
    with pytest.raises(anthropic.AuthenticationError):  # asked again: still no one
        anthropic.Anthropic(
            base_url=proxy.url, api_key=proxy.tokens["agent"], max_retries=0
        ).messages.create(model="claude-sonnet-4-5", max_tokens=10, messages=MESSAGES)  # type: ignore[arg-type]
    assert proxy.standin.calls == 1
    assert proxy.spent() == (TOTAL, 0)


@server_mode
def test_an_admin_key_of_the_server_may_not_call_models(proxy: Proxy) -> None:
    admin = KeyStore(proxy.store).create(tenant="acme", role=Role.ADMIN, name="root").token
    with pytest.raises(openai.PermissionDeniedError) as raised:
        openai_client(proxy.url, admin).chat.completions.create(
            model="gpt-4o-mini", messages=MESSAGES
        )
    assert isinstance(raised.value.body, dict) and raised.value.body["code"] == "forbidden"
    assert [path for _, path, _ in proxy.server_seen] == ["/v1/whoami"]  # never checked
    assert proxy.standin.calls == 0


@server_mode
@pytest.mark.parametrize(
    "token", ["ilk_x\ty", "ilk_" + "x" * 600, "ilk_é", "a b"], ids=["tab", "long", "utf8", "space"]
)
def test_a_token_that_cannot_be_a_key_is_401_without_asking_the_server(
    proxy: Proxy, token: str
) -> None:
    answer = httpx.post(
        proxy.url + "/v1/chat/completions",
        headers=[(b"x-api-key", token.encode())],
        json={"model": "gpt-4o-mini", "messages": MESSAGES},
        timeout=30,
    )
    assert answer.status_code == 401
    assert proxy.server_seen == []
    assert proxy.standin.calls == 0


@server_mode
def test_the_approval_url_and_the_approval_are_the_servers(proxy: Proxy) -> None:
    with pytest.raises(openai.PermissionDeniedError) as raised:
        openai_client(proxy.url, proxy.tokens["agent"]).chat.completions.create(
            model="gpt-5-pro", messages=MESSAGES
        )
    error = raised.value.body
    assert isinstance(error, dict)
    (pending,) = proxy.store.list_approvals(status="pending")
    assert error["approval_id"] == pending.id
    assert error["approval_url"] == f"https://interlock.example.com/approvals/{pending.id}"
    assert (pending.tenant, pending.requested_by) == ("acme", "ops-bot")


@server_mode
def test_tool_calls_are_judged_on_the_server_and_audited_there(proxy: Proxy) -> None:
    proxy.standin.mode = "tools"
    proxy.standin.tool_calls = [("get_weather", {"city": "Oslo"}), ("delete_account", {})]
    reply = openai_client(proxy.url, proxy.tokens["agent"]).chat.completions.create(
        model="gpt-4o-mini", messages=MESSAGES
    )
    message = reply.choices[0].message
    assert [c.function.name for c in message.tool_calls or []] == ["get_weather"]  # type: ignore[union-attr]
    assert "nothing is deleted by a model" in (message.content or "")
    assert proxy.guard.audit is not None and proxy.guard.audit.flush()
    decided = [
        json.loads(row.body) for row in proxy.store.audit_rows(tenant="acme", kind="decision")
    ]
    names = [(d["action"]["kind"], d["action"]["name"], d["decision"]) for d in decided]
    assert names == [
        ("llm", "gpt-4o-mini", "allow"),
        ("tool", "get_weather", "allow"),
        ("tool", "delete_account", "deny"),
    ]


# -- failing closed -----------------------------------------------------------------------


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


class Front:
    """The stand-in upstream and a proxy in front of ``server_url``."""

    def __init__(self, server_url: str, **options: Any) -> None:
        self.standin = StandIn()
        self.upstream = Served(self.standin.app())
        config = ProxyConfig(
            openai=Upstream(self.upstream.url + "/v1", "sk-upstream-openai"),
            anthropic=Upstream(self.upstream.url, "sk-upstream-anthropic"),
        )
        self.shared = SharedServer(server_url, **options)
        self.settled = Settled()
        self.proxy = Served(create_app(self.shared, config, on_settled=self.settled))
        self.url = self.proxy.url

    def close(self) -> None:
        self.proxy.close()
        self.upstream.close()


def _assert_undetermined(front: Front, key: str = "ilk_0123456789abcdef_" + "s" * 43) -> None:
    with pytest.raises(openai.InternalServerError) as raised:
        openai_client(front.url, key).chat.completions.create(
            model="gpt-4o-mini", messages=MESSAGES
        )
    assert raised.value.status_code == 503
    assert isinstance(raised.value.body, dict)
    assert raised.value.body["code"] == "interlock_undetermined"
    with pytest.raises(anthropic.InternalServerError) as refused:
        anthropic.Anthropic(base_url=front.url, api_key=key, max_retries=0).messages.create(
            model="claude-sonnet-4-5",
            max_tokens=10,
            messages=MESSAGES,  # type: ignore[arg-type]
        )
    assert refused.value.status_code == 503
    assert front.standin.calls == 0


def test_a_server_that_is_not_there_is_a_503_before_any_upstream_call() -> None:
    front = Front(f"http://127.0.0.1:{_free_port()}")
    try:
        _assert_undetermined(front)
    finally:
        front.close()


@server_mode
def test_a_server_that_goes_down_after_the_key_is_known_is_a_503(proxy: Proxy) -> None:
    api = openai_client(proxy.url, proxy.tokens["agent"])
    api.chat.completions.create(model="gpt-4o-mini", messages=MESSAGES)
    proxy.settled.wait_for(1)  # the commit follows the answer
    assert proxy.server is not None
    proxy.server.close()  # the shared server stops; the proxy still knows the key
    with pytest.raises(openai.InternalServerError) as raised:
        api.chat.completions.create(model="gpt-4o-mini", messages=MESSAGES)
    assert raised.value.status_code == 503
    assert proxy.standin.calls == 1
    assert proxy.spent() == (TOTAL, 0)


def _whoami(request: Request) -> Response:
    return JSONResponse({"id": "k1", "tenant": "acme", "role": "agent", "name": "bot"})


def _hang_then(body: bytes) -> Any:
    async def answer(request: Request) -> Response:
        import asyncio

        await asyncio.sleep(2)
        return Response(body, media_type="application/json")

    return answer


def _answer(status: int, body: bytes, media_type: str = "application/json") -> Any:
    async def answer(request: Request) -> Response:
        return Response(body, status_code=status, media_type=media_type)

    return answer


BROKEN: dict[str, tuple[Any, Any]] = {
    "whoami: not JSON": (_answer(200, b"yes", "text/plain"), None),
    "whoami: JSON that is not a key": (_answer(200, b'{"tenant": "acme"}'), None),
    "whoami: a role it does not know": (
        _answer(200, b'{"tenant": "acme", "role": "root", "name": "x"}'),
        None,
    ),
    "whoami: a 500": (_answer(500, b'{"error": {"message": "boom"}}'), None),
    "whoami: a 404 (not an Interlock server)": (_answer(404, b"{}"), None),
    "whoami: hangs": (_hang_then(b"{}"), None),
    "check: not JSON": (_whoami, _answer(200, b"allow", "text/plain")),
    "check: a verdict it does not know": (
        _whoami,
        _answer(200, b'{"verdict": "yes", "reason": "ok", "decision_id": "d"}'),
    ),
    "check: an allow without a decision id": (
        _whoami,
        _answer(200, b'{"verdict": "allow", "reason": "ok"}'),
    ),
    "check: a 503 with HTML": (_whoami, _answer(503, b"<html>down</html>", "text/html")),
    "check: hangs": (_whoami, _hang_then(b'{"verdict": "allow"}')),
}


@pytest.fixture(params=sorted(BROKEN))
def broken(request: pytest.FixtureRequest) -> Iterator[str]:
    whoami, check = BROKEN[request.param]
    routes = [Route("/v1/whoami", whoami, methods=["GET"])]
    if check is not None:
        routes.append(Route("/v1/check", check, methods=["POST"]))
    server = Served(Starlette(routes=routes))
    try:
        yield server.url
    finally:
        server.close()


def test_a_server_answering_anything_but_a_key_and_a_decision_is_a_503(broken: str) -> None:
    front = Front(broken, request_timeout=0.3)
    try:
        _assert_undetermined(front)
    finally:
        front.close()


def test_a_key_refused_by_the_servers_check_is_the_proxys_401_or_403() -> None:
    for status, error in ((401, "authentication_error"), (403, "permission_error")):
        cause = RemoteError(f"POST /v1/check: HTTP {status}: no", status=status)
        decision = Decision.undetermined(cause)
        refusal = refusal_for_decision(ActionUndetermined("x", decision=decision))
        assert refusal.status == status
        assert json.loads(refusal.render("openai")[1])["error"]["type"] == error
    other = Decision.undetermined(RemoteError("POST /v1/check: HTTP 500: boom", status=500))
    assert refusal_for_decision(ActionUndetermined("x", decision=other)).status == 503
    denied = Decision(Verdict.DENY, "no", rule_ids=("r",))
    from interlock.errors import ActionDenied

    assert refusal_for_decision(ActionDenied("x", decision=denied)).status == 403


@server_mode
def test_the_remembered_identities_are_bounded(proxy: Proxy) -> None:
    config = ProxyConfig(openai=Upstream(proxy.upstream_url, "sk-upstream-openai"))
    assert isinstance(proxy.judge, SharedServer)
    small = SharedServer(proxy.judge.url, known_keys=2)
    front = Served(create_app(small, config))
    keys = KeyStore(proxy.store)
    tokens = [keys.create(tenant="acme", role=Role.AGENT, name=f"bot-{i}").token for i in range(3)]
    try:
        for token in [*tokens, tokens[0]]:
            openai_client(front.url, token).chat.completions.create(
                model="gpt-4o-mini", messages=MESSAGES
            )
    finally:
        front.close()
    assert len(small._known) == 2
    asked = [t for method, path, t in proxy.server_seen if path == "/v1/whoami"]
    assert asked == [*tokens, tokens[0]]  # the first was forgotten, so asked again


def test_known_keys_must_be_positive() -> None:
    with pytest.raises(ValueError, match="known_keys"):
        SharedServer("http://127.0.0.1:1", known_keys=0)
    with pytest.raises(ValueError, match="http://, https:// or unix:"):
        SharedServer("127.0.0.1:8750")


def test_a_server_on_a_unix_socket(tmp_path: Any) -> None:
    from remote.test_remote_guard import Server  # the real app under uvicorn, in a thread

    server = Server(tmp_path, uds=str(tmp_path / "interlock.sock"))
    front = Front(server.url)
    try:
        reply = openai_client(front.url, server.agent_key).chat.completions.create(
            model="gpt-4o-mini", messages=MESSAGES, max_tokens=50
        )
        assert reply.choices[0].message.content == "Hello there, agent."
        front.settled.wait_for(1)  # the commit follows the answer
        assert server.guard.store is not None
        (row,) = server.guard.store.budget_rows(budget_id="model-tokens")
        assert (row.spent, row.reserved) == (TOTAL, 0)
    finally:
        front.close()
        server.close()
