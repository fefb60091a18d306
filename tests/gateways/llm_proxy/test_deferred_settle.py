"""On the embedded SQLite store a model call's commit is settled on the event loop at
its next turn after the answer (``call_soon``), not in a worker thread: once, and
before the app closes. A release (an upstream error) is not queued: it goes before
the answer.

The proxy's ASGI app is driven directly (one event loop, no server in front), in front
of the real stand-in upstream on a real socket, with a real guard and SQLite store:
what the loop has or has not run yet is known exactly, so no test waits on time.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest

from interlock import Guard
from interlock.gateways.llm_proxy import ProxyConfig, Upstream, create_app
from interlock.gateways.llm_proxy.app import ProxyApp
from interlock.ledger.llm_call import LLMCall
from interlock.server import KeyStore, Role
from interlock.store.sql import SqlStore

from .conftest import POLICY, Served
from .standin import OPENAI_USAGE, StandIn

TOKENS = OPENAI_USAGE["prompt_tokens"] + OPENAI_USAGE["completion_tokens"]


class Rig:
    def __init__(self, tmp_path: Path) -> None:
        policy = tmp_path / "interlock.yaml"
        policy.write_text(POLICY)
        self.guard = Guard.from_file(policy, store=f"sqlite:///{tmp_path / 'interlock.db'}")
        assert isinstance(self.guard.store, SqlStore)
        self.store: SqlStore = self.guard.store
        key = KeyStore(self.store).create(tenant="acme", role=Role.AGENT, name="ops-bot")
        self.token = key.token
        self.standin = StandIn()
        self.upstream = Served(self.standin.app())
        config = ProxyConfig(openai=Upstream(self.upstream.url + "/v1", "sk-upstream"))
        self.settled: list[LLMCall] = []
        self.app: ProxyApp = create_app(self.guard, config, on_settled=self.settled.append)

    def close(self) -> None:
        self.upstream.close()
        self.guard.close()

    def budget(self) -> tuple[int, int]:
        """(spent, reserved) of acme's token budget."""
        rows = self.store.budget_rows(tenant="acme", budget_id="tokens")
        return sum(r.spent for r in rows), sum(r.reserved for r in rows)

    async def post(self, body: dict[str, Any]) -> tuple[int, bytes]:
        """One request through the app: its status and its whole body."""
        raw = orjson.dumps(body)
        scope = {
            "type": "http",
            "method": "POST",
            "path": "/v1/chat/completions",
            "headers": [
                (b"authorization", f"Bearer {self.token}".encode()),
                (b"content-type", b"application/json"),
                (b"content-length", str(len(raw)).encode()),
            ],
        }
        sent: list[dict[str, Any]] = []
        given = False

        async def receive() -> dict[str, Any]:
            nonlocal given
            if not given:
                given = True
                return {"type": "http.request", "body": raw, "more_body": False}
            await asyncio.Event().wait()  # the client never leaves
            raise AssertionError("unreachable")

        async def send(message: dict[str, Any]) -> None:
            sent.append(message)

        await self.app(scope, receive, send)
        status = next(m["status"] for m in sent if m["type"] == "http.response.start")
        content = b"".join(m.get("body", b"") for m in sent if m["type"] == "http.response.body")
        return status, content


@pytest.fixture
def rig(tmp_path: Path) -> Iterator[Rig]:
    made = Rig(tmp_path)
    try:
        yield made
    finally:
        made.close()


CALL = {"model": "gpt-4o-mini", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 50}
STREAM = {**CALL, "stream": True}


def test_a_commit_lands_at_the_loops_next_turn_after_the_answer(rig: Rig) -> None:
    async def scenario() -> None:
        await rig.app.start()
        try:
            status, _ = await rig.post(CALL)
            assert status == 200
            spent, reserved = rig.budget()
            assert (spent, rig.settled) == (0, [])  # answered; not yet committed
            assert reserved > 0
            await asyncio.sleep(0)  # the loop's next turn
            assert len(rig.settled) == 1
            assert rig.budget() == (TOKENS, 0)
            assert rig.app.settle_deferred() == 0  # nothing twice
        finally:
            await rig.app.aclose()
        assert len(rig.settled) == 1
        assert rig.standin.calls == 1

    asyncio.run(scenario())


def test_calls_back_to_back_are_each_committed_once(rig: Rig) -> None:
    async def scenario() -> None:
        await rig.app.start()
        try:
            for body in (CALL, STREAM, CALL, STREAM):
                assert (await rig.post(body))[0] == 200
            await asyncio.sleep(0)
            assert len(rig.settled) == 4
            assert len(set(map(id, rig.settled))) == 4
            assert rig.budget() == (4 * TOKENS, 0)
        finally:
            await rig.app.aclose()
        assert len(rig.settled) == 4
        assert rig.standin.calls == 4

    asyncio.run(scenario())


def test_the_app_settles_what_is_queued_before_it_closes(rig: Rig) -> None:
    async def scenario() -> None:
        await rig.app.start()
        try:
            assert (await rig.post(STREAM))[0] == 200
            assert rig.settled == []  # queued, the loop not yet turned
        finally:
            await rig.app.aclose()
        assert len(rig.settled) == 1
        assert rig.budget() == (TOKENS, 0)

    asyncio.run(scenario())


def test_a_refused_call_never_reaches_the_upstream_and_settles_nothing(rig: Rig) -> None:
    async def scenario() -> None:
        await rig.app.start()
        try:
            assert (await rig.post(CALL))[0] == 200
            refused = [
                {**CALL, "model": "gpt-3.5-turbo"},  # no rule allows it: default deny
                {**CALL, "model": "gpt-5-pro"},  # require_approval
            ]
            for body in refused:
                status, content = await rig.post(body)
                assert status == 403, content
            await asyncio.sleep(0)
            assert rig.standin.calls == 1  # the refused never reached it
            assert len(rig.settled) == 1  # the allowed call's commit, no other
            assert rig.budget() == (TOKENS, 0)
        finally:
            await rig.app.aclose()

    asyncio.run(scenario())


def test_an_upstream_error_is_released_before_its_answer(rig: Rig) -> None:
    async def scenario() -> None:
        await rig.app.start()
        try:
            rig.standin.mode = "error"
            status, _ = await rig.post(CALL)
            assert status >= 500
            assert len(rig.settled) == 1  # released at once, not queued
            assert rig.budget() == (0, 0)
        finally:
            await rig.app.aclose()

    asyncio.run(scenario())
