"""``Guard.remote``: the local semantics over a real server, failing closed on anything
that is not a decision.

The server is the real app (``create_app``) under uvicorn on a free port (and, once,
on a Unix socket); the broken servers are real sockets that misbehave on purpose.
"""

from __future__ import annotations

import asyncio
import http.server
import json
import logging
import socket
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("fastapi")
pytest.importorskip("uvicorn")

import uvicorn

from adapters import conformance as _conformance
from interlock import (
    Action,
    ActionDenied,
    ApprovalRequired,
    Guard,
    Usage,
    Verdict,
    load_policy_text,
)
from interlock.errors import RemoteError, RemoteRefused
from interlock.server import KeyStore, Role, create_app

_CONFORMANCE_POLICY = """\
version: 1
default: deny
rules:
  - {id: allow-shell, decision: allow, reason: shell is allowed, name: shell}
  - id: no-rm
    decision: deny
    reason: no recursive deletes
    name: shell
    when: "args.command.startsWith('rm')"
  - {id: pay-small, decision: allow, reason: small payments, name: pay, when: "args.amount <= 100"}
  - id: pay-big
    decision: require_approval
    reason: big payments need a human
    name: pay
    when: "args.amount > 100"
"""

POLICY = """\
version: 1
default: deny
approvals:
  url: "https://interlock.example.com/approvals/{id}"
budgets:
  - id: model-tokens
    limit: 1000
    unit: tokens
    scope: agent
    kind: llm
rules:
  - id: models
    decision: allow
    reason: models are fine
    kind: llm
  - id: allow-shell
    decision: allow
    reason: shell is allowed
    name: shell
  - id: no-rm
    decision: deny
    reason: no recursive deletes
    name: shell
    when: "args.command.startsWith('rm')"
  - id: pay-big
    decision: require_approval
    reason: big payments need a human
    name: pay
"""


class Server:
    """The real app under uvicorn in a thread, with an agent and an approver key."""

    def __init__(self, tmp_path: Path, *, uds: str | None = None, policy: str = POLICY) -> None:
        self.guard = Guard(load_policy_text(policy), store=f"sqlite:///{tmp_path / 's.db'}")
        assert self.guard.store is not None
        keys = KeyStore(self.guard.store)
        self.agent_key = keys.create(tenant="acme", role=Role.AGENT, name="ops-bot").token
        self.approver_key = keys.create(tenant="acme", role=Role.APPROVER, name="alice").token
        app = create_app(self.guard)
        if uds is None:
            self.sock = socket.socket()
            self.sock.bind(("127.0.0.1", 0))
            self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}"
        else:
            self.sock = socket.socket(socket.AF_UNIX)
            self.sock.bind(uds)
            self.url = f"unix:{uds}"
        config = uvicorn.Config(app, log_level="warning", lifespan="off")
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(
            target=self.server.run, kwargs={"sockets": [self.sock]}, daemon=True
        )
        self.thread.start()
        for _ in range(2000):
            if self.server.started:
                break
            threading.Event().wait(0.005)
        assert self.server.started

    def remote(self, **options: Any) -> Guard:
        return Guard.remote(self.url, self.agent_key, **options)

    def close(self) -> None:
        self.server.should_exit = True
        self.thread.join()
        self.sock.close()
        self.guard.close()


@pytest.fixture
def server(tmp_path: Path) -> Iterator[Server]:
    running = Server(tmp_path)
    yield running
    running.close()


CASES = [
    (Action.tool("shell", {"command": "ls"}), Verdict.ALLOW, ("allow-shell",)),
    (Action.tool("shell", {"command": "rm -rf /"}), Verdict.DENY, ("no-rm",)),
    (Action.tool("pay", {"amount": 500}), Verdict.REQUIRE_APPROVAL, ("pay-big",)),
    (Action.tool("mail", {}), Verdict.DENY, ()),
]


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_remote_decisions_match_local_ones(server: Server, mode: str) -> None:
    local = Guard(load_policy_text(POLICY))
    with server.remote() as remote:
        for action, verdict, rules in CASES:
            here = local.check(action)
            there = remote.check(action) if mode == "sync" else asyncio.run(remote.acheck(action))
            assert (there.verdict, there.rule_ids, there.reason) == (
                here.verdict,
                here.rule_ids,
                here.reason,
            )
            assert (there.verdict, there.rule_ids) == (verdict, rules)


def test_remote_protect_runs_the_body_only_on_allow(server: Server) -> None:
    ran: list[str] = []
    with server.remote() as remote:

        @remote.protect
        def shell(command: str) -> str:
            ran.append(command)
            return command

        assert shell("ls") == "ls"
        with pytest.raises(ActionDenied, match="no recursive deletes"):
            shell("rm -rf /")
    assert ran == ["ls"]


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_an_approval_made_by_a_human_releases_the_waiting_agent_once(
    server: Server, mode: str
) -> None:
    import httpx

    pay = Action.tool("pay", {"amount": 500})
    with server.remote() as remote:
        first = remote.check(pay)
        assert first.verdict is Verdict.REQUIRE_APPROVAL and first.approval is not None
        approval_id = first.approval.id
        assert approval_id is not None
        assert first.approval.url == f"https://interlock.example.com/approvals/{approval_id}"

        def approve() -> None:
            threading.Event().wait(0.05)
            httpx.post(
                f"{server.url}/v1/approvals/{approval_id}/approve",
                headers={"authorization": f"Bearer {server.approver_key}"},
                json={"reason": "checked"},
            ).raise_for_status()

        human = threading.Thread(target=approve)
        human.start()
        if mode == "sync":
            record = remote.wait_for_approval(approval_id, timeout=60)
        else:
            record = asyncio.run(remote.await_approval(approval_id, timeout=60))
        human.join()
        assert record.status.value == "approved" and record.decided_by == "alice"
        assert remote.check(pay).verdict is Verdict.ALLOW  # claims the grant ...
        again = remote.check(pay)  # ... once
        assert again.verdict is Verdict.REQUIRE_APPROVAL and again.approval is not None
        assert again.approval.id != approval_id


def test_an_agent_key_cannot_decide_its_own_approval(server: Server) -> None:
    import httpx

    with server.remote() as remote:
        asked = remote.check(Action.tool("pay", {"amount": 500}))
        assert asked.approval is not None
        answer = httpx.post(
            f"{server.url}/v1/approvals/{asked.approval.id}/approve",
            headers={"authorization": f"Bearer {server.agent_key}"},
            json={},
        )
        assert answer.status_code == 403


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_model_call_budgets_are_reserved_and_committed_on_the_server(
    server: Server, mode: str
) -> None:
    store = server.guard.store
    assert store is not None
    with server.remote() as remote:
        if mode == "sync":
            with remote.llm_call("gpt-x", estimate=Usage(300, 100)) as call:
                call.record({"input_tokens": 250, "output_tokens": 40})
        else:

            async def model_call() -> None:
                async with remote.llm_call("gpt-x", estimate=Usage(300, 100)) as call:
                    call.record({"input_tokens": 250, "output_tokens": 40})

            asyncio.run(model_call())
        (row,) = store.budget_rows(budget_id="model-tokens")
        assert (row.spent, row.reserved) == (290, 0)
        over = remote.llm_call("gpt-x", estimate=Usage(800, 100))
        with pytest.raises(ActionDenied, match="model-tokens"), over:
            raise AssertionError("the model must not be called over budget")
        (row,) = store.budget_rows(budget_id="model-tokens")
        assert (row.spent, row.reserved) == (290, 0)


def test_a_failed_model_call_releases_on_the_server(server: Server) -> None:
    store = server.guard.store
    assert store is not None
    with (
        server.remote() as remote,
        pytest.raises(TimeoutError),
        remote.llm_call("gpt-x", estimate=Usage(300, 100)),
    ):
        raise TimeoutError("provider timed out")
    (row,) = store.budget_rows(budget_id="model-tokens")
    assert (row.spent, row.reserved) == (0, 0)


def test_committing_an_unknown_reservation_is_a_clear_refusal(server: Server) -> None:
    from interlock import Decision, ReservationRef

    fake = Decision(Verdict.ALLOW, "x", reservation=ReservationRef("res_nope"))
    with server.remote() as remote, pytest.raises(RemoteRefused) as refused:
        remote.commit(fake)
    assert refused.value.status == 404


def test_a_unix_socket_server(tmp_path: Path) -> None:
    running = Server(tmp_path, uds=str(tmp_path / "interlock.sock"))
    try:
        with running.remote() as remote:
            assert remote.check(CASES[0][0]).verdict is Verdict.ALLOW
            assert asyncio.run(remote.acheck(CASES[1][0])).verdict is Verdict.DENY
    finally:
        running.close()


# -- failing closed ----------------------------------------------------------------------


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


class Broken:
    """A real HTTP server that answers every request with ``respond``."""

    def __init__(self, respond: Callable[[http.server.BaseHTTPRequestHandler], None]) -> None:
        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                respond(self)

            def log_message(self, *args: Any) -> None:
                pass

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


def _reply(status: int, body: bytes, content_type: str = "application/json") -> Any:
    def respond(handler: http.server.BaseHTTPRequestHandler) -> None:
        handler.send_response(status)
        handler.send_header("content-type", content_type)
        handler.send_header("content-length", str(len(body)))
        handler.end_headers()
        handler.wfile.write(body)

    return respond


def _hang(handler: http.server.BaseHTTPRequestHandler) -> None:
    threading.Event().wait(2)


BROKEN = {
    "a 500": _reply(500, b'{"error": {"code": "internal", "message": "boom"}}'),
    "a 503 with HTML": _reply(503, b"<html>down</html>", "text/html"),
    "a 401": _reply(401, b'{"error": {"code": "unauthorized", "message": "bad key"}}'),
    "not JSON": _reply(200, b"allow", "text/plain"),
    "JSON that is not a decision": _reply(200, b'{"verdict": "yes"}'),
    "an allow without a decision id": _reply(200, b'{"verdict": "allow", "reason": "ok"}'),
    "a timeout": _hang,
}


@pytest.mark.parametrize("mode", ["sync", "async"])
@pytest.mark.parametrize("case", sorted(BROKEN))
def test_anything_but_a_decision_is_undetermined_and_nothing_runs(case: str, mode: str) -> None:
    broken = Broken(BROKEN[case])
    ran: list[int] = []
    try:
        with Guard.remote(broken.url, "ilk_x_y", request_timeout=0.3) as remote:
            action = Action.tool("shell", {"command": "ls"})
            if mode == "sync":
                decision = remote.check(action)
            else:
                decision = asyncio.run(remote.acheck(action))

            @remote.protect
            def body() -> None:
                ran.append(1)

            with pytest.raises(Exception, match="could not decide"):
                body()
    finally:
        broken.close()
    assert decision.verdict is Verdict.UNDETERMINED
    assert isinstance(decision.cause, RemoteError)
    assert ran == []


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_an_unreachable_server_is_undetermined(mode: str) -> None:
    with Guard.remote(f"http://127.0.0.1:{_free_port()}", "ilk_x_y") as remote:
        action = Action.tool("shell", {"command": "ls"})
        decision = remote.check(action) if mode == "sync" else asyncio.run(remote.acheck(action))
    assert decision.verdict is Verdict.UNDETERMINED
    assert "ConnectError" in str(decision.cause)


def test_fail_open_is_explicit_and_logged(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="interlock"):
        remote = Guard.remote(f"http://127.0.0.1:{_free_port()}", "ilk_x_y", fail_mode="open")
    assert "fail_mode='open'" in caplog.text
    with remote:
        decision = remote.check(Action.tool("shell", {"command": "ls"}))
    assert decision.verdict is Verdict.ALLOW and decision.fail_open


def test_a_bad_url_or_missing_key_is_refused_at_once() -> None:
    with pytest.raises(ValueError, match="http://, https:// or unix:"):
        Guard.remote("127.0.0.1:8750", "ilk_x_y")
    with pytest.raises(ValueError, match="API key"):
        Guard.remote("http://127.0.0.1:8750", "")
    with pytest.raises(TypeError, match="no store"):
        Guard.remote("http://127.0.0.1:8750", "ilk_x_y", store="sqlite:///x.db")


def test_an_approval_required_error_carries_the_servers_url(server: Server) -> None:
    with server.remote() as remote:

        @remote.protect
        def pay(amount: int) -> None:
            raise AssertionError("must not run")

        with pytest.raises(ApprovalRequired) as raised:
            pay(500)
    assert "https://interlock.example.com/approvals/apr_" in str(raised.value)


def test_the_wire_body_leaves_the_trusted_fields_to_the_key() -> None:
    from interlock import Context
    from interlock.remote import action_json

    action = Action.tool(
        "shell",
        {"command": "ls"},
        context=Context(tenant="evil", agent="root", session_id="s1", call_id="c1"),
    )
    body = action_json(action)
    assert body["context"] == {"session_id": "s1", "call_id": "c1"}
    assert json.loads(json.dumps(body)) == body


# -- every adapter works unchanged over it ------------------------------------------------

_TABLE = [row for row in _conformance.ROWS if not row.guard_options]


@pytest.fixture(scope="module")
def table_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    running = Server(tmp_path_factory.mktemp("table"), policy=_CONFORMANCE_POLICY)
    yield running
    running.close()


@pytest.mark.parametrize("row", _TABLE, ids=[row.behaviour for row in _TABLE])
def test_the_langchain_conformance_table_over_a_remote_guard(
    table_server: Server, row: Any
) -> None:
    pytest.importorskip("langchain")
    from langchain.agents import create_agent

    from adapters.test_langchain import Bodies, FakeToolModel, parallel_calls, tool_messages
    from interlock.adapters.langchain import InterlockMiddleware

    bodies = Bodies()
    with table_server.remote() as remote:
        middleware = InterlockMiddleware(remote, mapper=row.mapper)
        agent = create_agent(
            FakeToolModel(responses=parallel_calls(row)), bodies.tools, middleware=[middleware]
        )
        result = agent.invoke({"messages": [("user", "go")]})
    answers = tool_messages(result["messages"])
    assert len(answers) == 2
    if row.runs:
        assert len(bodies.ran) == 2
    else:
        assert bodies.ran == []
        assert all(row.says in str(a.content) for a in answers)


@pytest.mark.parametrize("row", _TABLE, ids=[row.behaviour for row in _TABLE])
def test_the_openai_agents_conformance_table_over_a_remote_guard(
    table_server: Server, row: Any
) -> None:
    pytest.importorskip("agents")
    from agents import Agent

    from adapters.test_openai_agents import Bodies as AgentBodies
    from adapters.test_openai_agents import ScriptedModel, answer, run, tool_calls
    from interlock.adapters.openai_agents import guard_tools

    bodies = AgentBodies()
    with table_server.remote() as remote:
        model = ScriptedModel(
            [tool_calls((row.tool, row.args), (row.tool, row.args)), answer("done")]
        )
        tools = guard_tools(bodies.tools, remote, refusal="raise", mapper=row.mapper)
        agent = Agent(name="bot", model=model, tools=tools)
        if row.error is None:
            run(agent, "sync")
        else:
            with pytest.raises(row.error):
                run(agent, "sync")
    assert len(bodies.ran) == (2 if row.runs else 0)


@pytest.mark.parametrize("row", _TABLE, ids=[row.behaviour for row in _TABLE])
async def test_the_mcp_client_conformance_table_over_a_remote_guard(
    table_server: Server, row: Any
) -> None:
    pytest.importorskip("mcp")
    from adapters.test_mcp import Tools, check_row, connect, twice
    from interlock.adapters.mcp import guard_session

    tools = Tools()
    with table_server.remote() as remote:
        async with connect(tools.server) as client:
            guard_session(client.session, remote, mapper=row.mapper)
            results = await twice(lambda: client.session.call_tool(row.tool, row.args))
    check_row(row, results, tools.ran)


# -- many keys, one connection pool -------------------------------------------------------


def test_deciders_on_one_connection_settle_async_without_a_sync_client(
    server: Server,
) -> None:
    from interlock.remote import RemoteConnection, RemoteDecider

    store = server.guard.store
    assert store is not None
    other = KeyStore(store).create(tenant="acme", role=Role.AGENT, name="other-bot").token
    connection = RemoteConnection(server.url)

    async def calls() -> None:
        for key in (server.agent_key, other):
            guard = Guard(decider=RemoteDecider.on(connection, key))
            async with guard.llm_call("gpt-x", estimate=Usage(100, 50)) as call:
                call.record({"input_tokens": 80, "output_tokens": 20})
            with pytest.raises(TimeoutError):
                async with guard.llm_call("gpt-x", estimate=Usage(100, 50)):
                    raise TimeoutError("provider timed out")  # released, on the server
            guard.close()  # the connection is not the decider's: it stays open
        await connection.aclose()

    asyncio.run(calls())
    rows = {row.scope_key: (row.spent, row.reserved) for row in store.budget_rows()}
    assert sorted(rows.values()) == [(100, 0), (100, 0)]  # each key its own agent's budget
    assert connection._client is None  # every settle went over the async client


def test_a_decider_on_a_connection_needs_its_key() -> None:
    from interlock.remote import RemoteConnection, RemoteDecider

    with pytest.raises(ValueError, match="API key"):
        RemoteDecider.on(RemoteConnection("http://127.0.0.1:1"), "")
    with pytest.raises(ValueError, match="timeout"):
        RemoteConnection("http://127.0.0.1:1", timeout=0)
