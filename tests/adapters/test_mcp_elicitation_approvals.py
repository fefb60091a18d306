"""A guarded server that puts approvals to the client's user
(``guard_server(server, guard, approve_by_elicitation=True)``): a ``tools/call`` the
policy sends to a human is asked about in band — accepted, it runs once and the
approval names the channel; declined, it never runs; a client without form
elicitation, or the option off, gets the refusal with the approval URL.

Real parts: an ``MCPServer`` and ``mcp.Client`` in memory on both wires (2025-11-25:
the server's own ``elicitation/create``; 2026-07-28: an ``input_required`` result), a
SQLite store."""

from __future__ import annotations

import pytest

pytest.importorskip("mcp")

from pathlib import Path
from typing import Any, Literal

import mcp_types as types
from mcp import Client
from mcp.server.mcpserver import MCPServer

from interlock import Context, Guard
from interlock.adapters.mcp import guard_server

pytestmark = pytest.mark.anyio

POLICY = {
    "version": 1,
    "default": "deny",
    "approvals": {"url": "https://approvals.example.com/a/{id}"},
    "rules": [
        {"id": "small", "decision": "allow", "reason": "small payments", "name": "pay"},
        {
            "id": "big-payments-need-a-human",
            "decision": "require_approval",
            "reason": "big payments need a human",
            "name": "pay",
            "params": {"args.amount": {"gt": 100}},
        },
    ],
}

Wire = Literal["legacy", "modern"]
WIRES: list[Wire] = ["legacy", "modern"]


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


class User:
    def __init__(self, answer: types.ElicitResult) -> None:
        self.answer = answer
        self.shown: list[str] = []

    async def __call__(self, context: Any, params: Any) -> types.ElicitResult:
        self.shown.append(params.message)
        return self.answer


def paying_server(paid: list[int]) -> MCPServer:
    server = MCPServer("payments")

    def pay(amount: int) -> str:
        """Pay an amount."""
        paid.append(amount)
        return f"paid {amount}"

    server.add_tool(pay)
    return server


def guard_for(tmp_path: Path, **options: Any) -> Guard:
    store = f"sqlite:///{tmp_path / 'interlock.db'}"
    return Guard(POLICY, store=store, reap_interval=None, **options)


async def pay(server: MCPServer, wire: Wire, user: User | None) -> types.CallToolResult:
    mode = "legacy" if wire == "legacy" else "auto"
    callbacks = {"elicitation_callback": user} if user is not None else {}
    async with Client(server, mode=mode, **callbacks) as client:
        return await client.call_tool("pay", {"amount": 500})


def text_of(result: types.CallToolResult) -> str:
    return "".join(b.text for b in result.content if isinstance(b, types.TextContent))


@pytest.mark.parametrize("wire", WIRES)
async def test_accepted_in_the_client_the_call_runs_once(tmp_path: Path, wire: Wire) -> None:
    paid: list[int] = []
    with guard_for(tmp_path, context=Context(agent="billing-bot")) as guard:
        server = guard_server(paying_server(paid), guard, approve_by_elicitation=True)
        user = User(types.ElicitResult(action="accept", content={"approve": True}))
        result = await pay(server, wire, user)
        assert guard.store is not None
        (approval,) = guard.store.list_approvals()
    assert not result.is_error and text_of(result) == "paid 500"
    assert paid == [500] and len(user.shown) == 1
    assert "'pay'" in user.shown[0] and "500" in user.shown[0]
    assert "big payments need a human" in user.shown[0]
    # the requester is the agent; the approver is the channel its human answered in
    assert approval.requested_by == "billing-bot"
    assert (approval.status.value, approval.decided_by) == (
        "claimed",
        "mcp-elicitation:billing-bot",
    )


@pytest.mark.parametrize("wire", WIRES)
async def test_declined_in_the_client_the_call_never_runs(tmp_path: Path, wire: Wire) -> None:
    paid: list[int] = []
    with guard_for(tmp_path) as guard:
        server = guard_server(paying_server(paid), guard, approve_by_elicitation=True)
        result = await pay(server, wire, User(types.ElicitResult(action="decline")))
        assert guard.store is not None
        (approval,) = guard.store.list_approvals()
    assert result.is_error and "denied by mcp-elicitation" in text_of(result)
    assert paid == [] and approval.status.value == "denied"


@pytest.mark.parametrize("wire", WIRES)
@pytest.mark.parametrize("in_band", [True, False], ids=["no capability", "option off"])
async def test_otherwise_the_refusal_carries_the_approval_url(
    tmp_path: Path, wire: Wire, in_band: bool
) -> None:
    paid: list[int] = []
    with guard_for(tmp_path) as guard:
        server = guard_server(paying_server(paid), guard, approve_by_elicitation=in_band)
        user = None if in_band else User(types.ElicitResult(action="accept", content={}))
        result = await pay(server, wire, user)
        assert guard.store is not None
        (approval,) = guard.store.list_approvals()
    assert result.is_error and approval.status.value == "pending"
    assert f"https://approvals.example.com/a/{approval.id}" in text_of(result)
    assert paid == [] and (user is None or user.shown == [])


def test_it_is_refused_without_a_store() -> None:
    guard = Guard(POLICY)
    with pytest.raises(ValueError, match="need a store"):
        guard_server(MCPServer("x"), guard, approve_by_elicitation=True)


def test_it_is_refused_for_a_remote_guard() -> None:
    pytest.importorskip("httpx")
    guard = Guard.remote("http://127.0.0.1:9", "ik_test")
    try:
        with pytest.raises(ValueError, match="remote guard"):
            guard_server(MCPServer("x"), guard, approve_by_elicitation=True)
    finally:
        guard.close()
