"""A guarded ``ClientSession`` judges the sampling requests a server makes of it as
model calls, before its sampling callback runs: in both protocol generations (a
2025-11-25 server-to-client request, and the input requests of a 2026-07-28
``input_required`` result), with the budget committed from the callback's answer and
released when it answers an error, raises or is cancelled.

Real parts: an in-process ``MCPServer`` whose tools sample (``ask``:
``session.create_message``; ``muse``: the SDK's dual-generation ``Resolve(Sample)``),
``mcp.Client`` in memory on both wires, a SQLite store. The action itself is pinned
by the unit tests at the end."""

from __future__ import annotations

import pytest

pytest.importorskip("mcp")

import contextlib
import math
from pathlib import Path
from typing import Annotated, Any, Literal

import anyio
import mcp_types as types
from mcp import Client
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.resolve import Resolve, Sample
from mcp.shared.exceptions import MCPError

from interlock import Guard
from interlock.adapters.mcp import CLIENT, guard_session
from interlock.adapters.mcp_sampling import (
    SAMPLING_MODEL,
    sampled_usage,
    sampling_action,
    sampling_params,
)
from interlock.ledger.estimate import estimate_model_call

pytestmark = pytest.mark.anyio

POLICY = {
    "version": 1,
    "default": "deny",
    "rules": [
        {"id": "tools", "decision": "allow", "reason": "tools", "name": ["ask", "muse"]},
        {
            "id": "sampling-ok",
            "decision": "allow",
            "reason": "the server may ask the model",
            "kind": "llm",
            "name": "mcp-sampling",
            "params": {"server": "docs"},
        },
        {
            "id": "no-secrets",
            "decision": "deny",
            "reason": "no secrets to the model",
            "kind": "llm",
            "when": "args.messages[0].content.text.contains('secret')",
        },
    ],
    "budgets": [
        {"id": "sampling-tokens", "limit": 1000, "unit": "tokens", "kind": "llm"},
    ],
}

Wire = Literal["legacy", "modern"]


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


async def ask(question: str, ctx: Context) -> str:
    """Ask the client's model (2025-11-25)."""
    message = types.SamplingMessage(
        role="user", content=types.TextContent(type="text", text=question)
    )
    reply = await ctx.session.create_message(messages=[message], max_tokens=16)
    content = reply.content
    return content.text if isinstance(content, types.TextContent) else str(content)


def draft(topic: str) -> Sample:
    text = types.TextContent(type="text", text=f"write about {topic}")
    return Sample([types.SamplingMessage(role="user", content=text)], max_tokens=32)


async def muse(topic: str, reply: Annotated[types.CreateMessageResult, Resolve(draft)]) -> str:
    """Ask the client's model (either generation)."""
    content = reply.content
    return content.text if isinstance(content, types.TextContent) else str(content)


def make_server() -> MCPServer:
    server = MCPServer("docs")
    server.add_tool(ask)
    server.add_tool(muse)
    return server


class Model:
    """The client's "model": answers in capitals; ``behave`` replaces the answer."""

    def __init__(self, behave: Any = None) -> None:
        self.asked: list[str] = []
        self.behave = behave

    async def __call__(
        self, context: Any, params: types.CreateMessageRequestParams
    ) -> types.CreateMessageResult | types.ErrorData:
        question = params.messages[0].content
        assert isinstance(question, types.TextContent)
        self.asked.append(question.text)
        if self.behave is not None:
            return await self.behave()  # type: ignore[no-any-return]
        return types.CreateMessageResult(
            role="assistant",
            content=types.TextContent(type="text", text=question.text.upper()),
            model="client-model",
        )


def guard_for(tmp_path: Path) -> Guard:
    return Guard(POLICY, store=f"sqlite:///{tmp_path / 'interlock.db'}", reap_interval=None)


def figures(guard: Guard) -> tuple[int, int]:
    assert guard.store is not None
    rows = guard.store.budget_rows(budget_id="sampling-tokens")
    return sum(r.spent for r in rows), sum(r.reserved for r in rows)


def charged(question: str, answer: str, max_tokens: int) -> int:
    message = {"role": "user", "content": {"type": "text", "text": question}}
    estimate = estimate_model_call({"messages": [message], "max_tokens": max_tokens})
    return estimate.input_tokens + min(math.ceil(len(answer) / 4), max_tokens)


@contextlib.asynccontextmanager
async def guarded_client(guard: Guard, model: Model, wire: Wire) -> Any:
    mode = "legacy" if wire == "legacy" else "auto"
    async with Client(make_server(), mode=mode, sampling_callback=model) as client:
        guard_session(client.session, guard, server="docs")
        yield client


def text_of(result: types.CallToolResult) -> str:
    return "".join(b.text for b in result.content if isinstance(b, types.TextContent))


@pytest.mark.parametrize(
    ("wire", "tool", "asked"),
    [
        ("legacy", "ask", "hello"),
        ("legacy", "muse", "write about hello"),
        ("modern", "muse", "write about hello"),
    ],
)
async def test_an_allowed_request_reaches_the_callback_and_is_charged(
    tmp_path: Path, wire: Wire, tool: str, asked: str
) -> None:
    with guard_for(tmp_path) as guard:
        model = Model()
        argument = {"question": "hello"} if tool == "ask" else {"topic": "hello"}
        async with guarded_client(guard, model, wire) as client:
            result = await client.call_tool(tool, argument)
        assert text_of(result) == asked.upper()
        assert model.asked == [asked]
        bound = 16 if tool == "ask" else 32
        assert figures(guard) == (charged(asked, asked.upper(), bound), 0)


@pytest.mark.parametrize("wire", ["legacy", "modern"])
async def test_a_refused_request_never_reaches_the_callback(tmp_path: Path, wire: Wire) -> None:
    with guard_for(tmp_path) as guard:
        model = Model()
        async with guarded_client(guard, model, wire) as client:
            with pytest.raises(MCPError) as refused:
                await client.call_tool("muse", {"topic": "the secret"})
        assert model.asked == []
        assert refused.value.error.code == -1
        assert "no secrets to the model" in refused.value.error.message
        assert figures(guard) == (0, 0)


async def test_a_server_the_policy_does_not_name_is_refused(tmp_path: Path) -> None:
    with guard_for(tmp_path) as guard:
        model = Model()
        async with Client(make_server(), sampling_callback=model) as client:
            guard_session(client.session, guard)  # no server name: no server fact
            with pytest.raises(MCPError):
                await client.call_tool("muse", {"topic": "hello"})
        assert model.asked == []


async def _rejects() -> types.ErrorData:
    return types.ErrorData(code=-1, message="User rejected sampling request")


async def _raises() -> types.CreateMessageResult:
    raise RuntimeError("the model is down")


@pytest.mark.parametrize("behave", [_rejects, _raises], ids=["error answer", "raises"])
async def test_a_failed_callback_releases_the_reservation(tmp_path: Path, behave: Any) -> None:
    with guard_for(tmp_path) as guard:
        model = Model(behave)
        async with guarded_client(guard, model, "legacy") as client:
            with pytest.raises(MCPError):
                await client.call_tool("ask", {"question": "hello"})
        assert model.asked == ["hello"]
        assert figures(guard) == (0, 0)


async def test_a_cancelled_callback_releases_the_reservation(tmp_path: Path) -> None:
    with guard_for(tmp_path) as guard:
        entered = anyio.Event()
        seen: list[tuple[int, int]] = []

        async def hang() -> types.CreateMessageResult:
            seen.append(figures(guard))
            entered.set()
            await anyio.sleep_forever()
            raise AssertionError("unreachable")

        model = Model(hang)
        async with (
            guarded_client(guard, model, "legacy") as client,
            anyio.create_task_group() as group,
        ):

            async def call() -> None:
                with contextlib.suppress(MCPError):
                    await client.call_tool("ask", {"question": "hello"})

            group.start_soon(call)
            await entered.wait()
            group.cancel_scope.cancel()
        assert seen[0][1] > 0  # held while the callback ran
        for _ in range(100):  # the release runs in a worker thread: let it land
            if figures(guard) == (0, 0):
                break
            await anyio.sleep(0.05)
        assert figures(guard) == (0, 0)


async def test_detach_restores_the_sampling_path(tmp_path: Path) -> None:
    with guard_for(tmp_path) as guard:
        model = Model()
        async with Client(make_server(), sampling_callback=model) as client:
            session = client.session
            guard_session(session, guard)
            assert "dispatch_input_request" in vars(session)
            guard.detach(session)
            assert "dispatch_input_request" not in vars(session)
            assert not CLIENT.is_attached(session)
            result = await client.call_tool("muse", {"topic": "x"})  # unjudged again
        assert text_of(result) == "WRITE ABOUT X"


# -- the action --------------------------------------------------------------------------


def test_the_action_is_named_for_sampling_never_for_a_hint() -> None:
    params = sampling_params(
        {
            "messages": [{"role": "user", "content": {"type": "text", "text": "hi"}}],
            "maxTokens": 50,
            "systemPrompt": "be brief",
            "includeContext": "none",
            "modelPreferences": {"hints": [{"name": "gpt-5"}, {"name": "claude"}]},
            "_meta": {"interlock/agent": "admin"},
        }
    )
    assert not isinstance(params, str)
    action = sampling_action(params, "docs", "7")
    assert (action.kind, action.name, action.target) == ("llm", SAMPLING_MODEL, "mcp:docs")
    assert action.arguments["provider"] == "mcp"
    assert action.arguments["system"] == "be brief"
    assert action.arguments["max_tokens"] == 50
    assert action.arguments["model_hints"] == ["gpt-5", "claude"]
    assert action.arguments["include_context"] == "none"
    assert "_meta" not in str(action.arguments)
    assert action.context.agent is None and action.context.call_id == "7"


def test_inline_data_is_not_counted_as_text() -> None:
    image = {"type": "image", "data": "A" * 10_000, "mimeType": "image/png"}
    params = sampling_params({"messages": [{"role": "user", "content": image}], "maxTokens": 1})
    assert not isinstance(params, str)
    action = sampling_action(params)
    stored = action.arguments["messages"][0]["content"]["data"]
    assert stored == "<10000 characters of base64 image/png>"
    assert estimate_model_call(action.arguments).input_tokens < 20


def test_the_output_is_estimated_from_the_answer_and_bounded_by_max_tokens() -> None:
    params = sampling_params(
        {"messages": [{"role": "user", "content": {"type": "text", "text": "q"}}], "maxTokens": 5}
    )
    assert not isinstance(params, str)
    action = sampling_action(params)
    short = sampled_usage(action, {"content": {"type": "text", "text": "abcdefgh"}})
    long = sampled_usage(action, {"content": [{"type": "text", "text": "x" * 400}]})
    tool = sampled_usage(
        action, {"content": [{"type": "tool_use", "id": "1", "name": "go", "input": {"a": 1}}]}
    )
    assert short.output_tokens == 2 and long.output_tokens == 5 and tool.output_tokens == 3
    assert short.input_tokens == estimate_model_call(action.arguments).input_tokens


def test_malformed_params_are_named() -> None:
    assert isinstance(sampling_params({"messages": []}), str)  # no maxTokens
    assert isinstance(sampling_params(["not", "an", "object"]), str)
