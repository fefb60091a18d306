"""The official ``openai`` and ``anthropic`` clients, guarded: real clients, a fake
model endpoint behind an httpx ``MockTransport`` (:mod:`.model_endpoint`).

Every test runs over each way to a model (OpenAI chat completions, OpenAI Responses,
Anthropic messages), sync and async, streamed and not, where it applies. A raw client
has one refusal style — raise, before any request is sent — so each conformance row is
driven once per kit and mode. The mapper rows do not apply: a model call is judged as
the ``llm`` action the LLM proxy builds, and there is no mapper to pass.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import httpx2
import pytest

pytest.importorskip("openai")
pytest.importorskip("anthropic")

import anthropic
import openai

from interlock import (
    ActionDenied,
    ActionUndetermined,
    ApprovalRequired,
    Context,
    Guard,
    Verdict,
    load_policy_text,
)
from interlock.adapters import base
from interlock.adapters.anthropic_client import AnthropicClientAdapter
from interlock.adapters.openai_client import OpenAIClientAdapter
from interlock.core.events import MemorySink

from .conformance import (
    ROWS,
    STORE_UNREACHABLE,
    Row,
    assert_cancellation_never_runs,
    make_guard,
)
from .model_endpoint import ANTHROPIC_USAGE, OPENAI_USAGE, RESPONSES_USAGE, FakeModel

MODEL_POLICY = load_policy_text(
    """
version: 1
default: deny
rules:
  - id: models-ok
    decision: allow
    reason: the model may think
    kind: llm
    name: "ok-*"
  - id: no-big-models
    decision: deny
    reason: no big models
    kind: llm
    name: "big-*"
  - id: pricey-needs-a-human
    decision: require_approval
    reason: pricey models need a human
    kind: llm
    name: "pricey-*"
  - id: broken
    decision: allow
    reason: a rule whose condition cannot be evaluated
    kind: llm
    name: "broken-*"
    when: "args.max_tokens > 'lots'"
""",
    file="models.yaml",
)

BUDGET_POLICY = """
version: 1
default: deny
budgets:
  - id: model-tokens
    limit: 100000
    unit: tokens
    scope: agent
    kind: llm
    default_estimate: 200
rules:
  - id: models-ok
    decision: allow
    reason: the model may think
    kind: llm
"""

MESSAGES = [{"role": "user", "content": "Say hello to the agent, please."}]


@dataclass(frozen=True)
class Kit:
    """One way to a model: how to make the client and one whole call (a stream read to
    its end), and the usage the fake endpoint reports for it."""

    name: str
    sdk: str
    usage: dict[str, int]
    call: Callable[..., Any]
    acall: Callable[..., Any]

    def client(self, fake: FakeModel, asynchronous: bool, **options: Any) -> Any:
        maker = {
            ("openai", False): fake.openai,
            ("openai", True): fake.async_openai,
            ("anthropic", False): fake.anthropic,
            ("anthropic", True): fake.async_anthropic,
        }[(self.sdk, asynchronous)]
        return maker(**options)

    @property
    def total(self) -> int:
        return sum(v for k, v in self.usage.items() if k != "total_tokens" and "_details" not in k)


def _chat(client: Any, model: str, stream: bool = False, **extra: Any) -> Any:
    answer = client.chat.completions.create(model=model, messages=MESSAGES, stream=stream, **extra)
    return list(answer) if stream else answer


async def _achat(client: Any, model: str, stream: bool = False, **extra: Any) -> Any:
    answer = await client.chat.completions.create(
        model=model, messages=MESSAGES, stream=stream, **extra
    )
    return [chunk async for chunk in answer] if stream else answer


def _responses(client: Any, model: str, stream: bool = False, **extra: Any) -> Any:
    answer = client.responses.create(model=model, input="Say hello.", stream=stream, **extra)
    return list(answer) if stream else answer


async def _aresponses(client: Any, model: str, stream: bool = False, **extra: Any) -> Any:
    answer = await client.responses.create(model=model, input="Say hello.", stream=stream, **extra)
    return [event async for event in answer] if stream else answer


def _messages(client: Any, model: str, stream: bool = False, **extra: Any) -> Any:
    extra.setdefault("max_tokens", 64)
    answer = client.messages.create(model=model, messages=MESSAGES, stream=stream, **extra)
    return list(answer) if stream else answer


async def _amessages(client: Any, model: str, stream: bool = False, **extra: Any) -> Any:
    extra.setdefault("max_tokens", 64)
    answer = await client.messages.create(model=model, messages=MESSAGES, stream=stream, **extra)
    return [event async for event in answer] if stream else answer


KITS = [
    Kit("openai-chat", "openai", OPENAI_USAGE, _chat, _achat),
    Kit("openai-responses", "openai", RESPONSES_USAGE, _responses, _aresponses),
    Kit("anthropic-messages", "anthropic", ANTHROPIC_USAGE, _messages, _amessages),
]
MODES = ["sync", "async"]


def run(kit: Kit, client: Any, mode: str, model: str, **extra: Any) -> Any:
    if mode == "async":
        return asyncio.run(kit.acall(client, model, **extra))
    return kit.call(client, model, **extra)


@pytest.fixture(params=KITS, ids=lambda kit: kit.name)
def kit(request: pytest.FixtureRequest) -> Kit:
    return request.param  # type: ignore[no-any-return]


@pytest.fixture(params=MODES)
def mode(request: pytest.FixtureRequest) -> str:
    return request.param  # type: ignore[no-any-return]


@pytest.fixture
def budget_guard(tmp_path: Path) -> Guard:
    guard = Guard(
        load_policy_text(BUDGET_POLICY),
        store=f"sqlite:///{tmp_path / 'state.db'}",
        context=Context(agent="bot"),
    )
    yield guard  # type: ignore[misc]
    guard.close()


def budget(guard: Guard) -> tuple[int, int]:
    """(spent, reserved) on the model-tokens budget."""
    assert guard.store is not None
    rows = guard.store.budget_rows(budget_id="model-tokens")
    return (int(rows[0].spent), int(rows[0].reserved)) if rows else (0, 0)


# -- the conformance rows, adapted to model calls --------------------------------------------


def model_for(row: Row) -> str:
    """The model whose call meets ``row``'s verdict under :data:`MODEL_POLICY`."""
    if row.verdict is Verdict.DENY:
        return "big-model"
    if row.verdict is Verdict.REQUIRE_APPROVAL:
        return "pricey-model"
    if row.verdict is Verdict.UNDETERMINED and not row.guard_options:
        return "broken-model"
    return "ok-model"


MODEL_ROWS = [row for row in ROWS if row.mapper is None]


def test_only_the_mapper_rows_are_left_out() -> None:
    assert {row.behaviour for row in ROWS} - {row.behaviour for row in MODEL_ROWS} == {
        "a mapper that throws is undetermined",
        "a mapper that returns garbage is undetermined",
        "a mapper that returns None passes the call through",
    }


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "streamed"])
@pytest.mark.parametrize("row", MODEL_ROWS, ids=lambda row: row.behaviour)
def test_conformance_row(row: Row, kit: Kit, mode: str, stream: bool) -> None:
    fake = FakeModel()
    guard = Guard(MODEL_POLICY, **row.guard_options)
    client = guard.attach(kit.client(fake, mode == "async"))
    if row.runs:
        answer = run(kit, client, mode, model_for(row), stream=stream)
        assert answer
        assert len(fake.requests) == 1
        return
    assert row.error is not None
    with pytest.raises(row.error) as raised:
        run(kit, client, mode, model_for(row), stream=stream)
    assert fake.requests == []  # refused before anything was sent
    if row.verdict is Verdict.DENY:
        assert "no big models" in str(raised.value)


def test_a_refusal_is_the_sdk_independent_error_and_names_the_model(kit: Kit) -> None:
    fake = FakeModel()
    client = Guard(MODEL_POLICY).attach(kit.client(fake, False))
    with pytest.raises(ApprovalRequired, match="pricey-model"):
        kit.call(client, "pricey-model")
    with pytest.raises(ActionUndetermined):
        kit.call(client, "broken-model")
    with pytest.raises(ActionDenied):
        kit.call(client, "unknown-model")  # the policy's default
    assert fake.requests == []


def test_an_unreachable_store_refuses_every_model_call(kit: Kit, mode: str) -> None:
    fake = FakeModel()
    guard = make_guard(STORE_UNREACHABLE)
    client = guard.attach(kit.client(fake, mode == "async"))
    for stream in (False, True):
        with pytest.raises(ActionUndetermined, match=STORE_UNREACHABLE.says):
            run(kit, client, mode, "ok-model", stream=stream)
    assert fake.requests == []


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "streamed"])
async def test_a_call_cancelled_while_judged_sends_nothing(kit: Kit, stream: bool) -> None:
    fake = FakeModel()

    async def call(guard: Guard) -> Any:
        client = guard.attach(kit.client(fake, True))
        return await kit.acall(client, "ok-model", stream=stream)

    await assert_cancellation_never_runs(call, lambda: len(fake.requests))


# -- budgets: reserved before, committed from the reported usage after, exactly once -------


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "streamed"])
def test_a_call_commits_the_reported_usage_exactly_once(
    budget_guard: Guard, kit: Kit, mode: str, stream: bool
) -> None:
    sink = MemorySink()
    budget_guard.sink = sink
    fake = FakeModel()
    client = budget_guard.attach(kit.client(fake, mode == "async"))
    run(kit, client, mode, "gpt-or-claude", stream=stream)
    assert budget(budget_guard) == (kit.total, 0)
    kinds = [record["kind"] for record in sink.records()]
    assert kinds.count("llm_input") == kinds.count("llm_output") == 1
    output = next(r for r in sink.records() if r["kind"] == "llm_output")
    assert output["ok"] is True
    assert sum(output["usage"].values()) == kit.total


def test_the_reservation_is_the_estimate_and_a_call_it_does_not_fit_is_refused(
    tmp_path: Path, kit: Kit
) -> None:
    policy = BUDGET_POLICY.replace("limit: 100000", "limit: 400")
    guard = Guard(load_policy_text(policy), store=f"sqlite:///{tmp_path / 's.db'}")
    fake = FakeModel()
    client = guard.attach(kit.client(fake, False))
    bound = "max_output_tokens" if kit.name == "openai-responses" else "max_tokens"
    with pytest.raises(ActionDenied, match="budget"):
        kit.call(client, "gpt-or-claude", **{bound: 500})  # 500 output tokens cannot fit
    assert fake.requests == []
    kit.call(client, "gpt-or-claude", **{bound: 100})
    assert len(fake.requests) == 1
    guard.close()


@pytest.mark.parametrize("failure", ["error", "connect", "timeout"])
@pytest.mark.parametrize("stream", [False, True], ids=["plain", "streamed"])
def test_a_failed_call_releases_its_reservation(
    budget_guard: Guard, kit: Kit, mode: str, stream: bool, failure: str
) -> None:
    sink = MemorySink()
    budget_guard.sink = sink
    fake = FakeModel(failure)
    client = budget_guard.attach(kit.client(fake, mode == "async"))
    expected = {
        "error": kit_module(kit).InternalServerError,
        "connect": kit_module(kit).APIConnectionError,
        "timeout": kit_module(kit).APITimeoutError,
    }[failure]
    with pytest.raises(expected):
        run(kit, client, mode, "gpt-or-claude", stream=stream)
    assert len(fake.requests) == 1
    assert budget(budget_guard) == (0, 0)
    output = next(r for r in sink.records() if r["kind"] == "llm_output")
    assert output["ok"] is False


def kit_module(kit: Kit) -> Any:
    return openai if kit.sdk == "openai" else anthropic


def test_the_sdks_retries_are_one_decision_and_one_release(budget_guard: Guard, kit: Kit) -> None:
    sink = MemorySink()
    budget_guard.sink = sink
    fake = FakeModel("error")
    client = budget_guard.attach(kit.client(fake, False, max_retries=2))
    with pytest.raises(kit_module(kit).InternalServerError):
        kit.call(client, "gpt-or-claude")
    assert len(fake.requests) == 3  # the SDK retried ...
    kinds = [record["kind"] for record in sink.records()]
    assert kinds.count("decision") == 1  # ... one call, judged once
    assert budget(budget_guard) == (0, 0)


def test_a_stream_cut_after_its_first_events_is_charged_what_it_streamed(
    budget_guard: Guard, kit: Kit, mode: str
) -> None:
    fake = FakeModel("cut", cut_after=3)
    client = budget_guard.attach(kit.client(fake, mode == "async"))
    with pytest.raises(kit_module(kit).APIConnectionError):
        run(kit, client, mode, "gpt-or-claude", stream=True)
    spent, reserved = budget(budget_guard)
    assert reserved == 0 and 0 < spent < kit.total + 20


def test_a_stream_cut_before_its_first_event_is_released(
    budget_guard: Guard, kit: Kit, mode: str
) -> None:
    fake = FakeModel("cut", cut_after=0)
    client = budget_guard.attach(kit.client(fake, mode == "async"))
    with pytest.raises(kit_module(kit).APIConnectionError):
        run(kit, client, mode, "gpt-or-claude", stream=True)
    assert budget(budget_guard) == (0, 0)


def _open_stream(kit: Kit, client: Any) -> Any:
    if kit.name == "openai-chat":
        return client.chat.completions.create(model="m", messages=MESSAGES, stream=True)
    if kit.name == "openai-responses":
        return client.responses.create(model="m", input="Say hello.", stream=True)
    return client.messages.create(model="m", max_tokens=64, messages=MESSAGES, stream=True)


def test_a_stream_closed_early_is_settled_once_with_what_was_seen(
    budget_guard: Guard, kit: Kit
) -> None:
    sink = MemorySink()
    budget_guard.sink = sink
    fake = FakeModel()
    client = budget_guard.attach(kit.client(fake, False))
    stream = _open_stream(kit, client)
    assert budget(budget_guard)[1] > 0  # reserved while it runs
    next(iter(stream))
    next(iter(stream))
    stream.close()
    stream.close()  # closing again settles nothing more
    spent, reserved = budget(budget_guard)
    assert reserved == 0 and spent > 0
    assert fake.streams[0].closed
    kinds = [record["kind"] for record in sink.records()]
    assert kinds.count("llm_output") == 1


async def test_an_async_stream_closed_early_is_settled_once(budget_guard: Guard, kit: Kit) -> None:
    fake = FakeModel()
    client = budget_guard.attach(kit.client(fake, True))
    if kit.name == "openai-chat":
        stream = await client.chat.completions.create(model="m", messages=MESSAGES, stream=True)
    elif kit.name == "openai-responses":
        stream = await client.responses.create(model="m", input="Say hello.", stream=True)
    else:
        stream = await client.messages.create(
            model="m", max_tokens=64, messages=MESSAGES, stream=True
        )
    async for _ in stream:
        break
    await stream.close()
    spent, reserved = budget(budget_guard)
    assert reserved == 0 and spent > 0


def test_a_stream_answered_at_once_is_metered_too(budget_guard: Guard, kit: Kit) -> None:
    """A transport that hands back the whole body at once (httpx reads it before the
    SDK does): the stream's usage is read from it, and committed."""
    fake = FakeModel()
    original = fake.__call__

    def at_once(request: Any) -> Any:
        answer = original(request)
        if answer.headers.get("content-type") == "text/event-stream":
            body = b"".join(answer.stream)
            return type(answer)(200, headers=answer.headers, content=body)
        return answer

    client = kit.client(fake, False)
    library = httpx2 if kit.sdk == "anthropic" else httpx
    client._client._transport = library.MockTransport(at_once)
    budget_guard.attach(client)
    chunks = kit.call(client, "m", stream=True)
    assert budget(budget_guard) == (kit.total, 0)
    if kit.name == "openai-chat":  # the usage chunk it did not ask for stays hidden
        assert all(chunk.choices for chunk in chunks)


# -- attach, detach, derived clients, coverage ---------------------------------------------


def test_attach_guards_this_client_only_and_detach_restores_it(kit: Kit) -> None:
    fake = FakeModel()
    guard = Guard(MODEL_POLICY)
    guarded, other = kit.client(fake, False), kit.client(fake, False)
    before = dict(vars(guarded))
    guard.attach(guarded)
    with pytest.raises(ActionDenied):
        kit.call(guarded, "big-model")
    kit.call(other, "big-model")  # another instance of the class: untouched
    assert len(fake.requests) == 1
    guard.detach(guarded)
    after = vars(guarded)  # (plus the resources the calls cached: client.chat ...)
    assert {name: after[name] for name in before} == before
    assert not {"request", "copy", "with_options"} & after.keys()
    kit.call(guarded, "big-model")
    assert len(fake.requests) == 2


def test_a_client_derived_from_a_guarded_one_is_guarded_by_the_same_guard(kit: Kit) -> None:
    fake = FakeModel()
    guard, other = Guard(MODEL_POLICY), Guard(MODEL_POLICY)
    client = guard.attach(kit.client(fake, False))
    for derived in (client.with_options(timeout=5), client.copy(max_retries=1)):
        with pytest.raises(ActionDenied):
            kit.call(derived, "big-model")
        assert guard.coverage(derived).llms[0].guarded
        assert not other.coverage(derived).llms[0].guarded
        guard.attach(derived)  # already held: nothing changes
        with pytest.raises(ValueError, match="another guard"):
            other.attach(derived)
        kit.call(derived, "ok-model")
        guard.detach(derived)
        assert "request" not in vars(derived)
        kit.call(derived, "big-model")
    assert len(fake.requests) == 4
    grandchild = client.with_options(timeout=3).with_options(timeout=4)
    with pytest.raises(ActionDenied):
        kit.call(grandchild, "big-model")


def test_coverage_names_the_guarded_endpoints_and_the_side_doors(kit: Kit) -> None:
    guard = Guard(MODEL_POLICY)
    client = kit.client(FakeModel(), False)
    coverage = guard.coverage(client)
    assert coverage.tools == () and coverage.models_inspected
    assert not any(binding.guarded for binding in coverage.llms)
    guard.attach(client)
    coverage = guard.coverage(client)
    routes = [b.label for b in coverage.llms if b.guarded]
    expected = {"openai": ["chat.completions", "responses"], "anthropic": ["messages"]}
    assert routes == expected[kit.sdk]
    assert "batches" in " ".join(coverage.unguarded)  # a side door, named
    assert all(b.note for b in coverage.llms if not b.guarded)


@pytest.mark.parametrize(
    ("adapter", "distribution", "supported"),
    [
        (OpenAIClientAdapter, "openai", "openai>=3,<4"),
        (AnthropicClientAdapter, "anthropic", "anthropic>=2,<3"),
    ],
)
@pytest.mark.parametrize("version", ["1.109.0", "4.0.0"])
def test_a_version_outside_the_range_names_the_range_and_the_extra(
    adapter: type[base.Adapter],
    distribution: str,
    supported: str,
    version: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(base.metadata, "version", lambda name: version)
    pattern = rf"{supported}, not {version}.*interlock\[{distribution}\]"
    with pytest.raises(ImportError, match=pattern):
        adapter.check_version()
    with pytest.raises(ImportError, match=pattern):
        adapter()


def test_the_adapters_import_without_the_llm_proxys_extra() -> None:
    """They read the proxy's wire facts (pure modules); the proxy's server is not
    needed: ``interlock[openai]`` alone is enough."""
    import subprocess
    import sys

    script = (
        "import sys; sys.modules['httptools'] = None\n"
        "import interlock.adapters.openai_client, interlock.adapters.anthropic_client\n"
        "assert 'interlock.gateways.llm_proxy.app' not in sys.modules\n"
    )
    subprocess.run([sys.executable, "-c", script], check=True, timeout=60)


# -- approvals: refuse (default) or wait for a human ------------------------------------------

APPROVAL_POLICY = """
version: 1
default: deny
approvals:
  url: "https://approvals.example.com/a/{id}"
rules:
  - id: pricey-needs-a-human
    decision: require_approval
    reason: pricey models need a human
    kind: llm
    name: "pricey-*"
"""


@pytest.fixture
def approval_guard(tmp_path: Path) -> Any:
    with Guard(
        load_policy_text(APPROVAL_POLICY),
        store=f"sqlite:///{tmp_path / 'state.db'}",
        context=Context(agent="bot"),
    ) as guard:
        yield guard


def test_an_approved_call_is_sent_once_when_retried_identically(
    approval_guard: Guard, kit: Kit
) -> None:
    fake = FakeModel()
    client = approval_guard.attach(kit.client(fake, False))
    with pytest.raises(ApprovalRequired, match=r"approvals\.example\.com") as pending:
        kit.call(client, "pricey-model")
    assert pending.value.decision is not None and pending.value.decision.approval is not None
    approval_id = pending.value.decision.approval.id
    assert approval_guard.store is not None
    approval_guard.store.approve(approval_id, by="lead", reason="ok")
    bound = "max_output_tokens" if kit.name == "openai-responses" else "max_tokens"
    with pytest.raises(ApprovalRequired):
        kit.call(client, "pricey-model", **{bound: 99})  # another call: its own approval
    kit.call(client, "pricey-model")  # the identical call claims the grant ...
    assert len(fake.requests) == 1
    with pytest.raises(ApprovalRequired):
        kit.call(client, "pricey-model")  # ... once
    assert len(fake.requests) == 1


@pytest.mark.parametrize("approve", [True, False], ids=["approved", "denied"])
def test_on_approval_wait_holds_the_call_until_a_human_decides(
    approval_guard: Guard, kit: Kit, mode: str, approve: bool
) -> None:
    from interlock.adapters import anthropic_client, openai_client

    from .conformance import approve_when_pending

    module = openai_client if kit.sdk == "openai" else anthropic_client
    fake = FakeModel()
    client = module.guard_client(  # type: ignore[attr-defined]
        kit.client(fake, mode == "async"), approval_guard, on_approval="wait", approval_timeout=20
    )
    derived = client.with_options(timeout=30)  # waits the same way
    for target in (client, derived):
        if approve or target is client:  # a denial stands for the identical call
            supervisor = approve_when_pending(approval_guard, approve=approve)
        if approve:
            run(kit, target, mode, "pricey-model")
        else:
            with pytest.raises(ActionDenied):
                run(kit, target, mode, "pricey-model")
        supervisor.join(10)
        assert not supervisor.is_alive()
    assert len(fake.requests) == (2 if approve else 0)


async def test_a_call_cancelled_while_the_model_answers_is_released(
    budget_guard: Guard, kit: Kit
) -> None:
    fake = FakeModel()
    arrived = asyncio.Event()

    async def slow(request: Any) -> Any:
        fake.requests.append(request)
        arrived.set()
        await asyncio.sleep(30)  # the model never answers in time
        raise AssertionError("not reached")

    client = kit.client(fake, True)
    library = httpx2 if kit.sdk == "anthropic" else httpx
    client._client._transport = library.MockTransport(slow)
    budget_guard.attach(client)
    task = asyncio.ensure_future(kit.acall(client, "gpt-or-claude"))
    await asyncio.wait_for(arrived.wait(), 10)
    assert budget(budget_guard)[1] > 0  # reserved while in flight
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert budget(budget_guard) == (0, 0)
