"""The browser-use adapter: the action dispatch (``Tools.act`` / ``execute_action``)
judged, navigation judged by domain, form input redacted in every record, model calls
budgeted — driven through real ``Tools`` dispatch and real ``Agent`` loops in headless
Chromium (Debian's, never downloaded) with a fake chat model.

browser-use pins its dependencies exactly, so these tests run in an environment of
their own: ``make test-browser-use`` (``.venv-browser-use``). With
``INTERLOCK_REQUIRE_BROWSER=1`` (CI) a missing Chromium fails instead of skipping.
"""

from __future__ import annotations

import os

import pytest

os.environ.setdefault("ANONYMIZED_TELEMETRY", "false")  # browser-use phones home otherwise
os.environ.setdefault("BROWSER_USE_CLOUD_SYNC", "false")
pytest.importorskip("browser_use")

import asyncio
import contextlib
import http.server
import importlib
import json
import re
import sqlite3
import sys
import tempfile
import threading
from collections.abc import Callable, Coroutine, Iterator
from pathlib import Path
from typing import Any

from browser_use import ActionResult, Agent, BrowserProfile, BrowserSession, Tools
from browser_use.llm.views import ChatInvokeCompletion, ChatInvokeUsage
from browser_use.tools.registry.service import Registry
from pydantic import ValidationError

from interlock import (
    ActionDenied,
    ActionUndetermined,
    ApprovalRequired,
    Context,
    Guard,
    Verdict,
    load_policy_text,
)
from interlock import Usage as Tokens
from interlock.adapters import base
from interlock.adapters.base import adapter_for
from interlock.adapters.browser_use import (
    ADAPTER,
    AGENT_ADAPTER,
    FORM_INPUT,
    REGISTRY_ADAPTER,
    GuardedChatModel,
    GuardedPage,
    ToolsAdapter,
    browser_action,
    guard_agent,
    guard_page,
    guard_tools,
)
from interlock.core.events import MemorySink

from .conformance import (
    CANCELLATION,
    POLICY,
    POLICY_YAML,
    ROWS,
    STORE_UNREACHABLE,
    Row,
    approve_when_pending,
    assert_cancellation_never_runs,
    make_guard,
)

CHROMIUM = Path(os.environ.get("INTERLOCK_CHROMIUM", "/usr/bin/chromium"))


def ids(row: Row) -> str:
    return row.behaviour.replace(" ", "-")


# -- a fake chat model: real loops, nothing behind them ----------------------------------


Turn = dict[str, Any] | Callable[[list[Any]], dict[str, Any]]


def step(*actions: dict[str, Any]) -> dict[str, Any]:
    """One model turn asking for ``actions`` (each ``{name: params}``)."""
    return {
        "evaluation_previous_goal": "fine",
        "memory": "",
        "next_goal": "next",
        "action": list(actions),
    }


def done(text: str = "finished") -> dict[str, Any]:
    return step({"done": {"text": text, "success": True}})


def usage(prompt: int, completion: int) -> ChatInvokeUsage:
    return ChatInvokeUsage(
        prompt_tokens=prompt,
        prompt_cached_tokens=None,
        prompt_cache_creation_tokens=None,
        prompt_image_tokens=None,
        completion_tokens=completion,
        total_tokens=prompt + completion,
    )


class FakeChatModel:
    """browser-use's ``BaseChatModel`` protocol: answers each call with the next scripted
    turn (a dict, or a function of the messages), reporting 11 + 7 tokens; ``fail``
    makes every call raise. Keeps the text of every message it was sent."""

    model = "fake-model"
    _verified_api_keys = True

    def __init__(self, turns: list[Turn], *, fail: bool = False) -> None:
        self.turns = list(turns)
        self.fail = fail
        self.seen: list[str] = []

    @property
    def provider(self) -> str:
        return "fake"

    @property
    def name(self) -> str:
        return "fake"

    @property
    def model_name(self) -> str:
        return self.model

    async def ainvoke(
        self, messages: list[Any], output_format: Any = None, **kwargs: Any
    ) -> ChatInvokeCompletion[Any]:
        self.seen.append("\n".join(str(getattr(m, "text", m)) for m in messages))
        if self.fail:
            raise RuntimeError("provider down")
        turn = self.turns.pop(0) if self.turns else done()
        if callable(turn):
            turn = turn(messages)
        completion = output_format.model_validate(turn) if output_format else json.dumps(turn)
        return ChatInvokeCompletion(completion=completion, usage=usage(11, 7))


# -- custom actions: the conformance table's tools, as browser-use actions ------------


class Bodies:
    """Custom actions on a fresh ``Tools``; ``ran`` records every body that ran."""

    def __init__(self) -> None:
        self.ran: list[tuple[str, Any]] = []
        self.tools: Tools[Any] = Tools()
        ran = self.ran

        @self.tools.action("Run a shell command.")
        async def shell(command: str) -> ActionResult:
            ran.append(("shell", command))
            return ActionResult(extracted_content=f"ran {command}")

        @self.tools.action("Pay an amount.")
        async def pay(amount: float) -> ActionResult:
            ran.append(("pay", amount))
            return ActionResult(extracted_content=f"paid {amount}")

        @self.tools.action("Look something up, at a cost.")
        async def paid_lookup(query: str, est_cost: float) -> ActionResult:
            ran.append(("paid_lookup", query))
            if query == "boom":
                raise RuntimeError("upstream down")
            return ActionResult(extracted_content="found")

        @self.tools.action("Wire money.")
        async def wire(amount: float) -> ActionResult:
            ran.append(("wire", amount))
            return ActionResult(extracted_content="wired")

    def model(self, name: str, params: dict[str, Any]) -> Any:
        """The action model a browser-use model emits for ``name(**params)`` (one that
        fails the action's own validation is built unvalidated: the gate judges it
        before browser-use's own validation does)."""
        return action_model(self.tools, name, params)


def action_model(tools: Tools[Any], name: str, params: dict[str, Any]) -> Any:
    try:
        return tools.registry.create_action_model()(**{name: params})
    except ValidationError:
        one = tools.registry.create_action_model(include_actions=[name])
        return one.model_construct(**{name: params})


async def act(tools: Tools[Any], action: Any) -> ActionResult:
    return await tools.act(action, browser_session=None)  # type: ignore[arg-type]


# -- the verdict table through the action dispatch, both styles ---------------------------


@pytest.mark.parametrize("refusal", ["raise", "message"])
@pytest.mark.parametrize("row", ROWS, ids=ids)
async def test_the_dispatch_runs_an_action_only_on_allow(row: Row, refusal: str) -> None:
    bodies = Bodies()
    guard_tools(bodies.tools, make_guard(row), refusal=refusal, mapper=row.mapper)  # type: ignore[arg-type]
    action = bodies.model(row.tool, row.args)
    if row.runs:
        result = await act(bodies.tools, action)
        assert result.error is None
        assert bodies.ran == [(row.tool, next(iter(row.args.values())))]
        return
    if refusal == "raise":
        assert row.error is not None
        with pytest.raises(row.error) as caught:
            await act(bodies.tools, action)
        assert caught.value.decision.verdict is row.verdict
    else:
        result = await act(bodies.tools, action)
        assert result.error is not None
        assert row.says in result.error
    assert bodies.ran == []


@pytest.mark.parametrize("refusal", ["raise", "message"])
async def test_an_unreachable_store_is_undetermined_and_never_runs(refusal: str) -> None:
    bodies = Bodies()
    guard_tools(bodies.tools, make_guard(STORE_UNREACHABLE), refusal=refusal)  # type: ignore[arg-type]
    action = bodies.model("shell", {"command": "ls"})
    if refusal == "raise":
        with pytest.raises(ActionUndetermined, match=STORE_UNREACHABLE.says):
            await act(bodies.tools, action)
    else:
        result = await act(bodies.tools, action)
        assert result.error is not None and STORE_UNREACHABLE.says in result.error
    assert bodies.ran == []


async def test_a_model_call_with_an_unreachable_store_is_refused_and_never_made() -> None:
    guard = make_guard(STORE_UNREACHABLE)
    model = FakeChatModel([done()])
    with pytest.raises(ActionUndetermined, match=STORE_UNREACHABLE.says):
        await GuardedChatModel(model, guard).ainvoke([])
    assert model.seen == []


async def test_a_call_cancelled_while_it_is_judged_never_runs() -> None:
    bodies = Bodies()

    async def call(guard: Guard) -> Any:
        guard_tools(bodies.tools, guard)
        return await act(bodies.tools, bodies.model(CANCELLATION.tool, CANCELLATION.args))

    await assert_cancellation_never_runs(call, lambda: len(bodies.ran))


async def test_each_action_is_judged_once_through_act_and_execute_action() -> None:
    seen: list[Any] = []
    guard = Guard(POLICY, on_decision=lambda d, *_: seen.append(d))
    bodies = Bodies()
    guard_tools(bodies.tools, guard)
    await act(bodies.tools, bodies.model("shell", {"command": "ls"}))
    assert bodies.ran == [("shell", "ls")]
    assert [d.verdict for d in seen] == [Verdict.ALLOW]


# -- every entry point of a guarded Tools is judged: the bypass table ---------------------


def _entry_points(bodies: Bodies) -> dict[str, Callable[[str], Coroutine[Any, Any, Any]]]:
    tools, registry = bodies.tools, bodies.tools.registry

    async def act_keyword(command: str) -> Any:
        return await tools.act(
            action=bodies.model("shell", {"command": command}), browser_session=None
        )  # type: ignore[arg-type]

    async def act_positional(command: str) -> Any:
        return await tools.act(bodies.model("shell", {"command": command}), None)  # type: ignore[arg-type]

    async def action_attribute(command: str) -> Any:
        return await tools.shell(command=command)

    async def execute_positional(command: str) -> Any:
        return await registry.execute_action("shell", {"command": command})

    async def execute_keyword(command: str) -> Any:
        return await registry.execute_action(action_name="shell", params={"command": command})

    async def act_through_the_class(command: str) -> Any:
        # Tools.act unbound skips the instance's act, but still dispatches through the
        # registry's execute_action, which is gated.
        return await Tools.act(tools, bodies.model("shell", {"command": command}), None)  # type: ignore[arg-type]

    async def act_with_a_json_action(command: str) -> Any:
        model = tools.registry.create_action_model()
        action = model.model_validate_json(json.dumps({"shell": {"command": command}}))
        return await tools.act(action, None)  # type: ignore[arg-type]

    return {
        "act(action=...)": act_keyword,
        "act(action, None)": act_positional,
        "tools.shell(command=...)": action_attribute,
        "registry.execute_action(name, params)": execute_positional,
        "registry.execute_action(action_name=, params=)": execute_keyword,
        "Tools.act(tools, ...)": act_through_the_class,
        "act(validated from JSON)": act_with_a_json_action,
    }


ENTRY_POINTS = sorted(_entry_points(Bodies()))


@pytest.mark.parametrize("refusal", ["raise", "message"])
@pytest.mark.parametrize("entry", ENTRY_POINTS)
async def test_every_entry_point_is_judged_and_a_deny_never_runs(entry: str, refusal: str) -> None:
    bodies = Bodies()
    guard_tools(bodies.tools, Guard(POLICY), refusal=refusal)  # type: ignore[arg-type]
    call = _entry_points(bodies)[entry]
    with contextlib.suppress(ActionDenied):
        result = await call("rm -rf /")
        assert "no recursive deletes" in str(getattr(result, "error", result))
    assert bodies.ran == []  # bypass count: 0


@pytest.mark.parametrize("entry", ENTRY_POINTS)
async def test_every_entry_point_runs_an_allowed_call_once_judged_once(entry: str) -> None:
    seen: list[Any] = []
    bodies = Bodies()
    guard_tools(bodies.tools, Guard(POLICY, on_decision=lambda d, *_: seen.append(d)))
    await _entry_points(bodies)[entry]("ls")
    assert bodies.ran == [("shell", "ls")]
    assert len(seen) == 1


async def test_a_registry_guarded_alone_judges_every_action_it_runs() -> None:
    bodies = Bodies()
    guard = Guard(POLICY)
    registry = guard.attach(bodies.tools.registry)  # raise style
    with pytest.raises(ActionDenied, match="no recursive deletes"):
        await registry.execute_action("shell", {"command": "rm -rf /"})
    # through Tools.act (not guarded itself here): browser-use hands the refusal to the model
    result = await act(bodies.tools, bodies.model("shell", {"command": "rm -rf /"}))
    assert "no recursive deletes" in str(result.error)
    assert bodies.ran == []
    guard.detach(registry)
    assert "execute_action" not in vars(registry)


async def test_the_registered_function_and_the_unbound_registry_are_the_documented_boundary() -> (
    None
):
    """What an instance patch cannot close: the action's own function, and
    ``Registry.execute_action`` called through the class. Code that holds these holds
    the action itself (docs/adapter-browser-use.md, "What is not covered")."""
    bodies = Bodies()
    guard_tools(bodies.tools, Guard(POLICY))
    registered = bodies.tools.registry.registry.actions["shell"]
    params = registered.param_model(command="rm -rf /")
    await registered.function(params=params)
    await Registry.execute_action(bodies.tools.registry, "shell", {"command": "rm -rf /"})
    assert bodies.ran == [("shell", "rm -rf /")] * 2
    assert ADAPTER.coverage(bodies.tools, None).unguarded == []


# -- navigation, judged by domain -----------------------------------------------------

NAVIGATION_POLICY = load_policy_text(
    """
version: 1
default: deny
rules:
  - id: allowed-site
    decision: allow
    reason: the allowed site
    kind: browser
    name: navigate
    params: {scheme: https, site: allowed.com}
  - id: browse
    decision: allow
    reason: reading the page is fine
    kind: browser
    name: [scroll, find_text, extract, wait, done]
"""
)

#: (url, allowed): look-alikes, encodings and schemes that must not pass as allowed.com.
NAVIGATION = [
    ("https://allowed.com/", True),
    ("https://docs.allowed.com/page?q=1", True),
    ("HTTPS://ALLOWED.COM/", True),
    ("https://allowed.com./", True),
    ("https://ＡＬＬＯＷＥＤ.com/", True),  # full-width: IDNA maps it to allowed.com
    ("https://allowed.com:443/", True),
    ("https://evil.com/", False),
    ("http://allowed.com/", False),  # not https
    ("https://allowed.com@evil.com/", False),  # userinfo: the host is evil.com
    ("https://allowed.com:pw@evil.com/", False),
    ("https://evil.com\\@allowed.com/", False),  # WHATWG: backslash ends the host
    ("https://evil.com#@allowed.com/", False),
    ("https://evil.com?@allowed.com/", False),
    ("https://allowed.com.evil.com/", False),
    ("https://evilallowed.com/", False),
    ("https://allowed.com%2eevil.com/", False),  # percent-encoded dot in the host
    ("https://аllowed.com/", False),  # Cyrillic а: IDN look-alike
    ("https://xn--llowed-5xf.com/", False),  # ... and its punycode
    ("https://allowed.co/", False),
    ("https:///evil.com/", False),  # empty authority: the host is evil.com
    ("//evil.com/", False),
    ("https://127.0.0.1/", False),
    ("https://2130706433/", False),  # 127.0.0.1 as one number
    ("https://0x7f.1/", False),
    ("https://[::1]/", False),
    ("javascript:alert(document.cookie)", False),
    ("data:text/html,<script>alert(1)</script>", False),
    ("file:///etc/passwd", False),
    ("chrome://settings", False),
    ("view-source:https://allowed.com/", False),
    ("about:blank", False),
    ("", False),
]


@pytest.mark.parametrize(("url", "allowed"), NAVIGATION, ids=[u or "empty" for u, _ in NAVIGATION])
async def test_navigation_is_judged_by_the_host_a_browser_connects_to(
    url: str, allowed: bool
) -> None:
    ran: list[str] = []
    tools: Tools[Any] = Tools()
    registered = tools.registry.registry.actions["navigate"]
    registered_function = registered.function

    async def navigate(params: Any, **_: Any) -> ActionResult:  # no browser: record only
        ran.append(params.url)
        return ActionResult(extracted_content="navigated")

    registered.function = navigate
    try:
        guard_tools(tools, Guard(NAVIGATION_POLICY), refusal="message")
        action = tools.registry.create_action_model()(navigate={"url": url})
        result = await act(tools, action)
    finally:
        registered.function = registered_function
    if allowed:
        assert result.error is None and ran == [url]
    else:
        assert ran == []
        assert result.error is not None and "Interlock" in result.error


def test_a_domain_argument_that_disagrees_with_the_url_is_refused() -> None:
    action = browser_action("navigate", {"url": "https://evil.com/", "domain": "allowed.com"})
    assert Guard(NAVIGATION_POLICY).check(action).verdict is Verdict.DENY
    # ... and a key navigate never receives is projected away before the check
    fields = ("url", "new_tab")
    projected = browser_action("navigate", {"url": "https://allowed.com/", "x": 1}, fields=fields)
    assert dict(projected.arguments) == {"url": "https://allowed.com/"}


def test_browser_actions_are_kind_browser_and_data_actions_scope_data() -> None:
    assert browser_action("navigate", {"url": "https://a.com"}).scope == "browser"
    assert browser_action("input", {"index": 1, "text": "x"}).scope == "data"
    assert browser_action("upload_file", {"index": 1, "path": "/x"}).scope == "data"
    assert browser_action("click", {"index": 1}, page_url="https://a.com/").target == (
        "https://a.com/"
    )
    custom = browser_action("shell", {"command": "ls"})
    assert (custom.kind, custom.scope) == ("tool", None)


# -- form input: redacted in every record -------------------------------------------------

FORM_POLICY = """
version: 1
default: deny
approvals:
  url: "https://approvals.example.com/a/{id}"
rules:
  - id: type-anywhere
    decision: allow
    reason: typing is fine
    kind: browser
    name: input
    params: {args.index: {lt: 10}}
  - id: field-99-needs-a-human
    decision: require_approval
    reason: field 99 needs a human
    kind: browser
    name: input
    params: {args.index: 99}
  - id: no-field-13
    decision: deny
    reason: field 13 is off limits
    kind: browser
    name: input
    params: {args.index: 13}
"""

SECRET = "hunter2-Correct-Horse"


@contextlib.contextmanager
def recorded_guard(tmp_path: Path) -> Iterator[tuple[Guard, MemorySink]]:
    sink = MemorySink()
    with Guard(
        load_policy_text(FORM_POLICY),
        store=f"sqlite:///{tmp_path / 'state.db'}",
        sink=sink,
        context=Context(agent="bot"),
    ) as guard:
        yield guard, sink


def everything_recorded(guard: Guard, sink: MemorySink) -> str:
    """Every record the guard left: audit rows, approvals, events."""
    assert guard.store is not None
    rows = [row.body for row in guard.store.audit_rows()]
    approvals = [repr(a) for a in guard.store.list_approvals()]
    events = [json.dumps(record, default=str) for record in sink.records()]
    return "\n".join([*rows, *approvals, *events])


def sqlite_dump(path: Path) -> str:
    """Every row of every table of the store's SQLite file, read from disk."""
    with contextlib.closing(sqlite3.connect(path)) as db:
        tables = [
            name for (name,) in db.execute("SELECT name FROM sqlite_master WHERE type='table'")
        ]
        rows = [repr(row) for table in tables for row in db.execute(f'SELECT * FROM "{table}"')]
    assert any("form-input" in row for row in rows)  # the rows are there, redacted
    return "\n".join(rows)


def _typing_tools(ran: list[str]) -> Tools[Any]:
    tools: Tools[Any] = Tools()
    registered = tools.registry.registry.actions["input"]

    async def typed(params: Any, **_: Any) -> ActionResult:  # what the real one answers
        ran.append(params.text)
        return ActionResult(extracted_content=f"Typed '{params.text}'")

    registered.function = typed
    return tools


@pytest.mark.parametrize(
    ("index", "verdict"),
    [(1, Verdict.ALLOW), (13, Verdict.DENY), (99, Verdict.REQUIRE_APPROVAL)],
)
async def test_typed_text_never_appears_in_any_record_or_refusal(
    tmp_path: Path, index: int, verdict: Verdict
) -> None:
    ran: list[str] = []
    tools = _typing_tools(ran)
    with recorded_guard(tmp_path) as (guard, sink):
        guard_tools(tools, guard, refusal="message")
        action = tools.registry.create_action_model()(input={"index": index, "text": SECRET})
        result = await act(tools, action)
        recorded = everything_recorded(guard, sink)
        assert guard.store is not None
        (row,) = guard.store.audit_rows(kind="decision")
    body = json.loads(row.body)
    assert body["decision"] == verdict.value
    assert body["action"]["arguments"]["text"] == FORM_INPUT
    assert SECRET not in recorded
    assert SECRET not in sqlite_dump(tmp_path / "state.db")
    assert SECRET not in str(result.error)
    if verdict is Verdict.ALLOW:
        assert ran == [SECRET]  # the page got the text; the records did not
        assert result.extracted_content == f"Typed '{SECRET}'"  # the model's own answer
        assert FORM_INPUT in recorded  # the tool_result event: scrubbed, not dropped
    else:
        assert ran == []


async def test_an_approval_binds_to_the_exact_text_without_recording_it(tmp_path: Path) -> None:
    ran: list[str] = []
    tools = _typing_tools(ran)
    with recorded_guard(tmp_path) as (guard, sink):
        guard_tools(tools, guard, on_approval="wait", approval_timeout=10)
        model = tools.registry.create_action_model()
        approve_when_pending(guard)
        await act(tools, model(input={"index": 99, "text": SECRET}))
        assert ran == [SECRET]
        # another text is another intent: its own approval, not the granted one
        guard_tools(tools, guard)  # the same guard: nothing changes
        ADAPTER.detach(tools)
        guard_tools(tools, guard)
        with pytest.raises(ApprovalRequired):
            await act(tools, model(input={"index": 99, "text": SECRET + "!"}))
        assert SECRET not in everything_recorded(guard, sink)


async def test_a_sensitive_data_placeholder_is_judged_and_the_value_is_never_seen(
    tmp_path: Path,
) -> None:
    """browser-use's own ``sensitive_data``: the model writes a placeholder, the
    registry puts the value in after the gate — the guard sees neither the value nor
    (redacted) the placeholder."""
    ran: list[str] = []
    tools = _typing_tools(ran)
    with recorded_guard(tmp_path) as (guard, sink):
        guard_tools(tools, guard)
        action = tools.registry.create_action_model()(
            input={"index": 1, "text": "<secret>password</secret>"}
        )
        await tools.act(action, None, sensitive_data={"password": SECRET})  # type: ignore[arg-type]
        recorded = everything_recorded(guard, sink)
    assert ran == [SECRET]
    assert SECRET not in recorded and "<secret>" not in recorded


# -- budgets and approvals ------------------------------------------------------------------


def _budget(guard: Guard, budget_id: str) -> tuple[int, int]:
    assert guard.store is not None
    rows = guard.store.budget_rows(budget_id=budget_id)
    return (rows[0].spent, rows[0].reserved) if rows else (0, 0)


@pytest.mark.parametrize("refusal", ["raise", "message"])
async def test_an_allowed_action_commits_its_reservation(
    stateful_guard: Guard, refusal: str
) -> None:
    bodies = Bodies()
    guard_tools(bodies.tools, stateful_guard, refusal=refusal)  # type: ignore[arg-type]
    await act(bodies.tools, bodies.model("paid_lookup", {"query": "a", "est_cost": 0.4}))
    assert _budget(stateful_guard, "tool-spend") == (400_000, 0)


async def test_an_action_that_fails_releases_its_reservation(stateful_guard: Guard) -> None:
    bodies = Bodies()
    guard_tools(bodies.tools, stateful_guard)
    result = await act(
        bodies.tools, bodies.model("paid_lookup", {"query": "boom", "est_cost": 0.4})
    )
    assert "upstream down" in str(result.error)  # browser-use turned it into a message
    assert _budget(stateful_guard, "tool-spend") == (0, 0)


async def test_a_model_call_commits_its_real_usage_exactly_once(stateful_guard: Guard) -> None:
    model = GuardedChatModel(FakeChatModel([done()]), stateful_guard)
    await model.ainvoke([])
    assert _budget(stateful_guard, "model-tokens") == (18, 0)


async def test_a_model_call_that_raises_releases_its_reservation(stateful_guard: Guard) -> None:
    model = GuardedChatModel(FakeChatModel([], fail=True), stateful_guard)
    with pytest.raises(RuntimeError, match="provider down"):
        await model.ainvoke([])
    assert _budget(stateful_guard, "model-tokens") == (0, 0)


async def test_a_model_call_over_budget_never_reaches_the_model(stateful_guard: Guard) -> None:
    inner = FakeChatModel([done()] * 10)
    model = GuardedChatModel(inner, stateful_guard, estimate=lambda *_: Tokens(5_000, 0))
    with pytest.raises(ActionDenied, match="model-tokens"):
        await model.ainvoke([])
    assert inner.seen == []
    assert _budget(stateful_guard, "model-tokens") == (0, 0)


async def test_the_extract_actions_model_is_judged_where_the_tools_hand_it_over(
    stateful_guard: Guard,
) -> None:
    seen: list[Any] = []
    tools: Tools[Any] = Tools()
    registered = tools.registry.registry.actions["extract"]

    async def extract(params: Any, page_extraction_llm: Any = None, **_: Any) -> ActionResult:
        seen.append(page_extraction_llm)
        await page_extraction_llm.ainvoke([])
        return ActionResult(extracted_content="extracted")

    registered.function = extract
    guard_tools(tools, Guard(NAVIGATION_POLICY))
    model = FakeChatModel([done()])
    action = tools.registry.create_action_model()(extract={"query": "prices"})
    with pytest.raises(ActionDenied, match="no rule allows this model"):
        await tools.act(action, None, page_extraction_llm=model)  # type: ignore[arg-type]
    assert isinstance(seen[0], GuardedChatModel) and model.seen == []


async def test_on_approval_wait_runs_the_action_once_a_human_approves(
    stateful_guard: Guard,
) -> None:
    bodies = Bodies()
    guard_tools(bodies.tools, stateful_guard, on_approval="wait", approval_timeout=10)
    approve_when_pending(stateful_guard)
    await act(bodies.tools, bodies.model("wire", {"amount": 5}))
    assert bodies.ran == [("wire", 5)]


async def test_on_approval_wait_refuses_when_the_human_denies(stateful_guard: Guard) -> None:
    bodies = Bodies()
    guard_tools(bodies.tools, stateful_guard, on_approval="wait", approval_timeout=10)
    approve_when_pending(stateful_guard, approve=False)
    with pytest.raises(ActionDenied):
        await act(bodies.tools, bodies.model("wire", {"amount": 5}))
    assert bodies.ran == []


async def test_a_refusal_for_approval_carries_the_approval_url(stateful_guard: Guard) -> None:
    bodies = Bodies()
    guard_tools(bodies.tools, stateful_guard, refusal="message")
    result = await act(bodies.tools, bodies.model("wire", {"amount": 5}))
    assert "https://approvals.example.com/a/" in str(result.error)


def test_a_refusal_style_that_does_not_exist_is_refused() -> None:
    with pytest.raises(ValueError, match="refusal"):
        guard_tools(Tools(), Guard(POLICY), refusal="shout")  # type: ignore[arg-type]


# -- attach / detach, coverage, version range --------------------------------------------


def _state(obj: object) -> dict[str, Any]:
    return dict(vars(obj))


def test_attaching_tools_then_detaching_restores_exactly() -> None:
    guard = Guard(POLICY)
    tools: Tools[Any] = Tools()
    before, registry_before = _state(tools), _state(tools.registry)
    assert guard.attach(tools) is tools
    assert guard.attach(tools) is tools  # idempotent
    assert _state(tools) != before and _state(tools.registry) != registry_before
    assert guard.coverage(tools).unguarded == []
    guard.detach(tools)
    assert _state(tools) == before and _state(tools.registry) == registry_before
    assert set(guard.coverage(tools).unguarded) == set(tools.registry.registry.actions)
    with pytest.raises(ValueError, match="another guard"):
        guard.attach(tools)
        Guard(POLICY).attach(tools)
    guard.detach(tools)


def test_attaching_an_agent_then_detaching_restores_exactly() -> None:
    guard = Guard(POLICY)
    agent = Agent(task="t", llm=FakeChatModel([]), use_judge=False)  # type: ignore[arg-type]
    parts = [agent, agent.tools, agent.tools.registry]
    before = [_state(part) for part in parts]
    guard_agent(agent, guard)
    assert isinstance(agent.llm, GuardedChatModel)
    coverage = guard.coverage(agent)
    assert coverage.unguarded == ["browser_session"]  # the CDP side door, named
    guard.detach(agent)
    assert [_state(part) for part in parts] == before
    assert "model:fake-model" in guard.coverage(agent).unguarded


def test_an_agent_whose_tools_are_guarded_elsewhere_keeps_them_on_detach() -> None:
    guard = Guard(POLICY)
    tools: Tools[Any] = Tools()
    guard_tools(tools, guard, refusal="message")
    agent = Agent(task="t", llm=FakeChatModel([]), tools=tools, use_judge=False)  # type: ignore[arg-type]
    guard.attach(agent)
    guard.detach(agent)
    assert ADAPTER.guarded_by(tools, guard)
    with pytest.raises(ValueError, match="another guard"):
        Guard(POLICY).attach(Agent(task="t", llm=FakeChatModel([]), tools=tools))  # type: ignore[arg-type]


def test_adapter_for_finds_the_tools_the_registry_and_the_agent_adapters() -> None:
    tools: Tools[Any] = Tools()
    assert adapter_for(tools) is ADAPTER
    assert adapter_for(tools.registry) is REGISTRY_ADAPTER
    agent = Agent(task="t", llm=FakeChatModel([]), use_judge=False)  # type: ignore[arg-type]
    assert adapter_for(agent) is AGENT_ADAPTER


@pytest.mark.parametrize("version", ["0.12.9", "0.14.0"])
def test_a_version_outside_the_range_names_the_range_and_the_extra(
    version: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(base.metadata, "version", lambda distribution: version)
    pattern = rf"browser-use>=0.13,<0.14, not {version}.*interlock\[browser-use\]"
    with pytest.raises(ImportError, match=pattern):
        ToolsAdapter.check_version()
    with pytest.raises(ImportError, match=pattern):
        ToolsAdapter()


def test_a_missing_framework_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "browser_use.actor", None)  # type: ignore[arg-type]
    monkeypatch.delitem(sys.modules, "interlock.adapters.browser_use")
    with pytest.raises(ImportError, match=r"pip install 'interlock\[browser-use\]'"):
        importlib.import_module("interlock.adapters.browser_use")


# -- real agent loops in headless Chromium (Debian's; never downloaded) --------------------


def _no_browser(reason: str) -> None:
    """Skip or, in CI (``INTERLOCK_REQUIRE_BROWSER=1``), fail (tests/server_ui/browser.py)."""
    if os.environ.get("INTERLOCK_REQUIRE_BROWSER") == "1":
        pytest.fail(f"{reason} (INTERLOCK_REQUIRE_BROWSER=1)", pytrace=False)
    pytest.skip(reason)


class Site:
    """Local pages: a form whose submissions are kept, and a redirect to another host
    (``localhost`` → ``127.0.0.1``)."""

    FORM = (
        "<html><head><title>Form</title></head><body><form action='/submit'>"
        "<input id='q' name='q' placeholder='secret'><button type='submit'>Send</button>"
        "</form></body></html>"
    )

    def __init__(self) -> None:
        self.submitted: list[str] = []
        site = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                path, _, query = self.path.partition("?")
                if path == "/redirect":
                    self.send_response(302)
                    self.send_header("Location", f"http://127.0.0.1:{site.port}/landing")
                    self.end_headers()
                    return
                if path == "/submit":
                    site.submitted.append(query)
                body = site.FORM if path == "/" else f"<html><body><p>{path}</p></body></html>"
                self.send_response(200)
                self.send_header("Content-Type", "text/html")
                self.end_headers()
                self.wfile.write(body.encode())

            def log_message(self, *args: Any) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.server.server_port
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def url(self, path: str = "/", host: str = "localhost") -> str:
        return f"http://{host}:{self.port}{path}"


class Browser:
    """One headless Chromium for the module, driven from an event loop of its own (a
    browser session belongs to the loop that started it)."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        threading.Thread(target=self.loop.run_forever, daemon=True).start()
        self.session = new_session(keep_alive=True)
        self.run(self.session.start())

    def run(self, coro: Coroutine[Any, Any, Any], timeout: float = 240) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self.run(self.session.kill(), timeout=60)
        self.loop.call_soon_threadsafe(self.loop.stop)


def new_session(*, keep_alive: bool) -> BrowserSession:
    profile = BrowserProfile(
        executable_path=str(CHROMIUM),
        headless=True,
        chromium_sandbox=False,
        user_data_dir=tempfile.mkdtemp(prefix="interlock-chromium-"),
        keep_alive=keep_alive,
        wait_between_actions=0.05,
        minimum_wait_page_load_time=0.05,
        wait_for_network_idle_page_load_time=0.1,
    )
    return BrowserSession(browser_profile=profile)


@pytest.fixture(scope="module")
def site() -> Iterator[Site]:
    served = Site()
    yield served
    served.server.shutdown()


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    if not CHROMIUM.exists():
        _no_browser(f"no Chromium at {CHROMIUM} (apt install chromium, or set INTERLOCK_CHROMIUM)")
    started = Browser()
    yield started
    started.close()


def loop_policy(extra: str = "") -> Any:
    """The table's policy, plus models and the local site."""
    return load_policy_text(
        POLICY_YAML
        + """
  - id: models-ok
    decision: allow
    reason: the model may think
    kind: llm
  - id: local-pages
    decision: allow
    reason: the local site
    kind: browser
    name: navigate
    params: {domain: localhost}
  - id: finish
    decision: allow
    reason: finishing is fine
    kind: browser
    name: [done, wait, scroll]
"""
        + extra
    )


def agent_for(
    browser: Browser,
    model: FakeChatModel,
    tools: Tools[Any] | None = None,
) -> Agent[Any, Any]:
    return Agent(
        task="do the task",
        llm=model,  # type: ignore[arg-type]
        browser_session=browser.session,
        tools=tools,
        use_judge=False,
        directly_open_url=False,
        enable_signal_handler=False,
        max_failures=2,
        use_vision=False,
    )


#: Rows a model can emit at all: browser-use validates the model's output against the
#: action's schema first (the CEL row, ``amount: "lots"``, is driven at the dispatch).
LOOP_ROWS = [row for row in ROWS if not isinstance(row.args.get("amount", 0), str)]


@pytest.mark.parametrize("refusal", ["raise", "message"])
@pytest.mark.parametrize("row", LOOP_ROWS, ids=ids)
def test_an_agent_loop_runs_an_action_only_on_allow(
    browser: Browser, row: Row, refusal: str
) -> None:
    bodies = Bodies()
    model = FakeChatModel([step({row.tool: row.args}), done()])
    agent = agent_for(browser, model, bodies.tools)
    guard = Guard(loop_policy(), **row.guard_options)
    guard_agent(agent, guard, refusal=refusal, mapper=row.mapper, models=False)  # type: ignore[arg-type]
    if row.runs:
        history = browser.run(agent.run(max_steps=4))
        assert history.final_result() == "finished"
        assert len(bodies.ran) == 1
        return
    if refusal == "raise":
        assert row.error is not None
        with pytest.raises(row.error) as caught:
            browser.run(agent.run(max_steps=4))
        assert caught.value.decision.verdict is row.verdict
        assert len(model.seen) == 1  # the run ended at the refusal
    else:
        history = browser.run(agent.run(max_steps=4))
        assert row.says in model.seen[1]  # the model read the refusal, and the run went on
        if row.mapper is None and "decider" not in row.guard_options:
            # (a mapper that throws, a slow decider, refuse ``done`` too: those runs
            # end on their failures)
            assert history.final_result() == "finished"
    assert bodies.ran == []


@pytest.mark.parametrize("refusal", ["raise", "message"])
def test_an_unreachable_store_ends_a_whole_loop_without_a_model_call_or_an_action(
    browser: Browser, refusal: str
) -> None:
    bodies = Bodies()
    model = FakeChatModel([step({"shell": {"command": "ls"}}), done()])
    agent = agent_for(browser, model, bodies.tools)
    guard_agent(agent, make_guard(STORE_UNREACHABLE), refusal=refusal)  # type: ignore[arg-type]
    if refusal == "raise":
        with pytest.raises(ActionUndetermined, match=STORE_UNREACHABLE.says):
            browser.run(agent.run(max_steps=4))
    else:
        history = browser.run(agent.run(max_steps=4))
        assert STORE_UNREACHABLE.says in str(history.errors())
    assert model.seen == [] and bodies.ran == []


def test_a_run_cancelled_while_an_action_is_judged_never_runs_it(browser: Browser) -> None:
    bodies = Bodies()

    async def call(guard: Guard) -> Any:
        model = FakeChatModel([step({"shell": {"command": "ls"}}), done()])
        agent = agent_for(browser, model, bodies.tools)
        guard_agent(agent, guard, models=False)
        return await agent.run(max_steps=3)

    browser.run(assert_cancellation_never_runs(call, lambda: len(bodies.ran)))


def _input_index(messages: list[Any]) -> int:
    state = str(getattr(messages[-1], "text", messages[-1]))  # the browser state
    found = re.findall(r"\[(\d+)\]<input", state)
    assert found, f"the page's input is not in the browser state: {state[-1500:]}"
    return int(found[-1])


def test_navigation_look_alikes_are_refused_in_a_real_loop_and_typed_text_never_recorded(
    browser: Browser, site: Site, tmp_path: Path
) -> None:
    sink = MemorySink()
    model = FakeChatModel(
        [
            step({"navigate": {"url": site.url("/")}}),
            step({"navigate": {"url": f"http://localhost@127.0.0.1:{site.port}/"}}),
            lambda messages: step(
                {"input": {"index": _input_index(messages), "text": SECRET}},
                {"send_keys": {"keys": "Enter"}},
            ),
            done(),
        ]
    )
    policy = loop_policy(
        """
  - id: type
    decision: allow
    reason: typing on the local site
    kind: browser
    name: [input, send_keys]
"""
    )
    with Guard(policy, store=f"sqlite:///{tmp_path / 'state.db'}", sink=sink) as guard:
        agent = agent_for(browser, GuardedChatModel(model, guard))  # type: ignore[arg-type]
        guard_agent(agent, guard, refusal="message")
        history = browser.run(agent.run(max_steps=6))
        recorded = everything_recorded(guard, sink)
    # the look-alike (userinfo "localhost@", host 127.0.0.1) was refused, the model read it
    assert "Interlock denied browser 'navigate'" in model.seen[2]
    assert history.final_result() == "finished"
    assert site.submitted == [f"q={SECRET}"]  # the page got the text ...
    assert SECRET not in recorded  # ... no record did
    assert SECRET not in sqlite_dump(tmp_path / "state.db")
    assert _budget_rows_spent(recorded)


def _budget_rows_spent(recorded: str) -> bool:
    return '"kind":"llm"' in recorded.replace(" ", "")


def test_a_refused_navigation_is_raised_out_of_agent_run(browser: Browser, site: Site) -> None:
    model = FakeChatModel([step({"navigate": {"url": "https://evil.example/"}}), done()])
    agent = agent_for(browser, model)
    guard_agent(agent, Guard(loop_policy()))
    with pytest.raises(ActionDenied, match="navigate"):
        browser.run(agent.run(max_steps=4))
    assert len(model.seen) == 1


def test_a_redirect_is_followed_by_the_browser_unjudged(browser: Browser, site: Site) -> None:
    """The documented boundary: the adapter judges the URL an action asks for; where
    the page then redirects is the browser's (use the profile's ``allowed_domains``,
    which browser-use enforces on every navigation, or an egress proxy, for that)."""
    model = FakeChatModel([step({"navigate": {"url": site.url("/redirect")}}), done()])
    agent = agent_for(browser, model)
    guard_agent(agent, Guard(loop_policy()), refusal="message")
    browser.run(agent.run(max_steps=4))
    assert f"127.0.0.1:{site.port}/landing" in model.seen[1]


@pytest.mark.parametrize("refusal", ["raise", "message"])
def test_run_sync_runs_the_allowed_action_and_refuses_the_other(refusal: str) -> None:
    """``Agent.run_sync`` (browser-use's sync entry point: its own event loop, so its
    own browser): the allowed row runs, the denied one does not, in either style."""
    if not CHROMIUM.exists():
        _no_browser(f"no Chromium at {CHROMIUM}")
    bodies = Bodies()
    allowed, denied = ROWS[0], ROWS[1]
    model = FakeChatModel(
        [step({allowed.tool: allowed.args}), step({denied.tool: denied.args}), done()]
    )
    agent = Agent(
        task="go",
        llm=model,  # type: ignore[arg-type]
        tools=bodies.tools,
        browser_session=new_session(keep_alive=False),
        use_judge=False,
        directly_open_url=False,
        enable_signal_handler=False,
    )
    guard_agent(agent, Guard(loop_policy()), refusal=refusal)  # type: ignore[arg-type]
    if refusal == "raise":
        with pytest.raises(ActionDenied, match=denied.says):
            agent.run_sync(max_steps=4)
    else:
        assert agent.run_sync(max_steps=4).final_result() == "finished"
        assert denied.says in model.seen[2]
    assert bodies.ran == [("shell", "ls")]


async def loaded_elements(page: GuardedPage, selector: str) -> list[Any]:
    """The elements ``selector`` finds once the page has loaded: browser-use's
    ``goto`` returns when the navigation is sent, not done, so a query racing the new
    document fails with 'Could not find node with given id' or finds nothing yet."""
    for _ in range(100):
        try:
            found = await page.get_elements_by_css_selector(selector)
        except RuntimeError as exc:
            if "Could not find node" not in str(exc):
                raise
            found = []
        if found:
            return found
        await asyncio.sleep(0.05)
    raise AssertionError(f"{selector!r} never appeared on the page")


def test_a_guarded_page_judges_goto_evaluate_and_fill(
    browser: Browser, site: Site, tmp_path: Path
) -> None:
    policy = loop_policy(
        """
  - id: fill
    decision: allow
    reason: filling is fine
    kind: browser
    name: [input, click]
  - id: no-scripts
    decision: deny
    reason: no scripts
    kind: browser
    name: evaluate
"""
    )

    async def drive(guard: Guard) -> list[str]:
        page = guard_page(await browser.session.get_current_page(), guard)
        assert isinstance(page, GuardedPage)
        await page.goto(site.url("/"))
        outcomes = []
        mouse = await page.mouse
        for call in (
            lambda: page.goto("https://localhost.evil.example/"),
            lambda: page.evaluate("() => document.cookie"),
            lambda: page.press("Control+w"),
            lambda: mouse.click(5, 5),
        ):
            try:
                await call()
                outcomes.append("ran")
            except ActionDenied as exc:
                outcomes.append(str(exc))
        (field,) = await loaded_elements(page, "#q")
        await field.fill(SECRET)
        with pytest.raises(AttributeError, match="cannot judge"):
            page.some_raw_cdp_call  # noqa: B018
        return outcomes

    sink = MemorySink()
    with Guard(policy, store=f"sqlite:///{tmp_path / 'state.db'}", sink=sink) as guard:
        outcomes = browser.run(drive(guard))
        recorded = everything_recorded(guard, sink)
    assert "navigate" in outcomes[0] and "no scripts" in outcomes[1]
    assert "'send_keys'" in outcomes[2] and "'mouse'" in outcomes[3]  # default deny
    assert SECRET not in recorded
    assert SECRET not in sqlite_dump(tmp_path / "state.db")


# -- the documentation's examples run here, in browser-use's environment -------------------


def test_the_documentation_examples_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from test_docs import ROOT, run_python_examples

    run_python_examples(ROOT / "docs" / "adapter-browser-use.md", tmp_path, monkeypatch)


def test_the_url_the_agent_opens_from_its_task_is_judged_before_any_model_call(
    browser: Browser,
) -> None:
    model = FakeChatModel([done()])
    agent = Agent(
        task="Read https://evil.example/notes and summarise it",
        llm=model,  # type: ignore[arg-type]
        browser_session=browser.session,
        use_judge=False,
        enable_signal_handler=False,
    )
    assert agent.initial_url  # browser-use opens it as an initial action
    guard_agent(agent, Guard(loop_policy()))
    with pytest.raises(ActionDenied, match="navigate"):
        browser.run(agent.run(max_steps=3))
    assert model.seen == []
