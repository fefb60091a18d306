"""The browser-use adapter (``browser-use``).

Every browser action an agent takes is an Interlock action, judged before it runs:

- :func:`guard_tools` / ``guard.attach(tools)`` — gates the action dispatch of a
  ``Tools``: ``Tools.act(action, browser_session, ...)`` and the
  ``Registry.execute_action(name, params, ...)`` it calls (and that anyone can call
  directly). browser-use has no hook that every action passes besides these two
  methods — no middleware, no before-action callback — so these are the patches, per
  instance. Built-in actions (``navigate``, ``click``, ``input``, ``evaluate``...) are
  ``kind: browser`` actions, in scope ``browser`` — or ``data`` for the ones that move
  data in or out (``input``, ``upload_file``, ``extract``, the file actions) — with the
  current page's URL as ``target``; a custom action (``@tools.action``) is a tool call,
  judged like any other.
- :func:`guard_agent` / ``guard.attach(agent)`` — the agent's ``Tools`` as above, its
  models (``llm``, ``judge_llm``, the fallback) as :class:`GuardedChatModel`, and, with
  ``refusal="raise"``, its ``run`` so that a refusal ends the run and is raised out of
  ``agent.run()`` (browser-use turns any exception from an action into an error the
  model reads, so a raise has to be carried past the agent's own handling). Its
  ``run`` also records the agent's ``task`` and the operator's system message as
  trusted inputs of the session (:func:`agent_inputs`; page content never).
- :class:`GuardedChatModel` — a chat model whose every ``ainvoke`` is judged as an
  ``llm`` action and reserved on the policy's budgets before the wrapped model runs,
  then committed from the ``usage`` it reports (released if it raises).
- :class:`GuardedPage` — the actor API (``Page.goto`` / ``evaluate`` / ``press`` ...,
  ``Element.click`` / ``fill`` / ``set_input_files`` ..., ``Mouse``) for code that
  drives the browser directly: judged under the same action names as the tools, so
  one policy covers both.

**Form input is never recorded.** The text of an ``input`` action (and of
``Element.fill``) is replaced, in the action judged, by ``[REDACTED:form-input]`` and a
keyed digest (``text_digest``: HMAC-SHA-256 under a key that lives in this process
only) that binds an approval to the exact text without revealing it; the events of
the call scrub it from the action's result ("Typed '...'") and error.

Refusal styles: ``refusal="message"`` answers a refused action with
``ActionResult(error=...)`` — the model reads the refusal and the run goes on;
``refusal="raise"`` (default) raises ``ActionDenied`` / ``ApprovalRequired`` /
``ActionUndetermined`` out of ``Tools.act`` (and out of ``agent.run()`` for an
attached agent).

Example::

    from browser_use import Agent
    from interlock.adapters.browser_use import GuardedChatModel, guard_agent

    agent = Agent(task="...", llm=GuardedChatModel(llm, guard))
    guard_agent(agent, guard, refusal="message")
    await agent.run()
"""

from __future__ import annotations

import asyncio
import contextvars
import hashlib
import hmac
import json
import logging
import math
import secrets
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final, Literal, NoReturn
from urllib.parse import urlsplit

from interlock.adapters.base import (
    Adapter,
    LLMBinding,
    PatchTarget,
    ToolBinding,
    arun_settled,
    call_key,
    inside_a_call,
    judged_by,
    pending_approval,
    register_adapter,
    verdict_outcome,
)
from interlock.adapters.inputs import Input, inputs_of, records_inputs
from interlock.core.action import Action, normalise_arguments
from interlock.core.decision import Decision
from interlock.core.phases import tool_finished, tool_started
from interlock.errors import Blocked
from interlock.ledger.usage import Usage

try:
    from browser_use.actor import Element, Mouse, Page
    from browser_use.agent.service import Agent
    from browser_use.agent.views import ActionResult
    from browser_use.tools.registry.service import Registry
    from browser_use.tools.service import Tools
except ImportError as exc:  # the extra is missing (tests/adapters: a missing framework)
    raise ImportError(
        f"the browser-use adapter needs browser-use ({exc}): pip install 'interlock[browser-use]'"
    ) from exc

if TYPE_CHECKING:
    from interlock.guard import Guard, Mapper

__all__ = [
    "ADAPTER",
    "AGENT_ADAPTER",
    "BROWSER_ACTIONS",
    "DATA_ACTIONS",
    "FORM_INPUT",
    "REGISTRY_ADAPTER",
    "AgentAdapter",
    "GuardedChatModel",
    "GuardedElement",
    "GuardedMouse",
    "GuardedPage",
    "RegistryAdapter",
    "ToolsAdapter",
    "agent_inputs",
    "browser_action",
    "estimate_usage",
    "guard_agent",
    "guard_page",
    "guard_tools",
    "output_ceiling",
    "page_origin",
    "typed_digest",
]

log = logging.getLogger("interlock")

Refusal = Literal["raise", "message"]
OnApproval = Literal["refuse", "wait"]

#: The actions browser-use 0.13 registers itself: judged as ``kind: browser``.
BROWSER_ACTIONS: Final = frozenset(
    {
        "search",
        "navigate",
        "go_back",
        "go_forward",
        "reload",
        "wait",
        "click",
        "input",
        "upload_file",
        "switch",
        "close",
        "extract",
        "search_page",
        "find_elements",
        "scroll",
        "send_keys",
        "find_text",
        "screenshot",
        "save_as_pdf",
        "dropdown_options",
        "select_dropdown",
        "write_file",
        "replace_file",
        "read_file",
        "evaluate",
        "done",
        "hover",
        "focus",
        "check",
        "drag",
        "mouse",
    }
)

#: Browser actions that move data into the page or out of it: scope ``data``.
DATA_ACTIONS: Final = frozenset(
    {
        "input",
        "upload_file",
        "extract",
        "write_file",
        "replace_file",
        "read_file",
        "save_as_pdf",
        "screenshot",
    }
)

#: What stands, in every record, for the text typed into a page.
FORM_INPUT: Final = "[REDACTED:form-input]"

#: The field of each action that carries text typed into a page.
_TYPED: Final[dict[str, str]] = {"input": "text"}

#: The key of :func:`typed_digest`: in this process's memory only, never written.
_DIGEST_KEY: Final = secrets.token_bytes(32)

#: Characters per token for the default input estimate (a rough, model-agnostic rule).
CHARS_PER_TOKEN: Final = 4


def typed_digest(text: str) -> str:
    """A digest of typed ``text`` that binds a decision (an approval) to it without
    revealing it: keyed with a secret of this process, so it cannot be brute-forced
    from the records."""
    data = text.encode("utf-8", "surrogatepass")
    return hmac.new(_DIGEST_KEY, data, hashlib.sha256).hexdigest()[:32]


# -- one action as the guard sees it -----------------------------------------------------


def browser_action(
    name: str,
    params: Mapping[str, Any] | str | None,
    *,
    fields: Sequence[str] | None = None,
    description: str | None = None,
    page_url: str | None = None,
) -> Action:
    """The Action for one browser action: ``params`` projected onto the action's
    ``fields`` (when known: a key the action never receives plays no part), the text
    it types redacted (see :data:`FORM_INPUT`). A built-in action is ``kind:
    browser`` with the page it acts on as ``target``; a custom action is a tool call."""
    arguments = dict(normalise_arguments(params))
    if fields is not None:
        arguments = {key: value for key, value in arguments.items() if key in fields}
    typed = _TYPED.get(name)
    if typed is not None and typed in arguments:
        text = arguments[typed]
        arguments[typed] = FORM_INPUT
        arguments[f"{typed}_digest"] = typed_digest(text if isinstance(text, str) else repr(text))
    if name not in BROWSER_ACTIONS:
        return Action.tool(name, arguments, description=description)
    return Action(
        kind="browser",
        name=name,
        arguments=arguments,
        scope="data" if name in DATA_ACTIONS else "browser",
        target=page_url or None,
        description=description,
    )


def _secrets(name: str, params: Any, sensitive_data: Any = None) -> tuple[str, ...]:
    """What must not appear in the records of one call: the text it types, and the
    values of browser-use's ``sensitive_data`` (put in after the gate, so the action's
    result can hold them)."""
    found: list[str] = []
    typed = _TYPED.get(name)
    if typed is not None and isinstance(params, Mapping):
        text = params.get(typed)
        if isinstance(text, str) and text:
            found.append(text)
    if isinstance(sensitive_data, Mapping):
        for value in sensitive_data.values():
            values = value.values() if isinstance(value, Mapping) else (value,)
            found.extend(v for v in values if isinstance(v, str) and v)
    return tuple(sorted(found, key=len, reverse=True))  # the longest first


def _scrub(value: object, secrets: tuple[str, ...]) -> object:
    if not secrets:
        return value
    text = str(value)
    for secret in secrets:
        text = text.replace(secret, FORM_INPUT)
    return text


@dataclass(frozen=True, slots=True)
class _Options:
    refusal: Refusal = "raise"
    mapper: Mapper | None = None
    on_approval: OnApproval = "refuse"
    approval_timeout: float = 300.0
    models: bool = True  # an agent's models are judged too


_DEFAULT: Final = _Options()


def _checked_options(refusal: str, on_approval: str) -> None:
    if refusal not in ("raise", "message"):
        raise ValueError(f"refusal must be 'raise' or 'message', not {refusal!r}")
    if on_approval not in ("refuse", "wait"):
        raise ValueError(f"on_approval must be 'refuse' or 'wait', not {on_approval!r}")


# -- raise style: a refusal inside the dispatch is carried past browser-use's handling --


class _Refusals:
    """Where a refusal raised inside browser-use's own error handling is kept, so that
    it is raised past it: in one ``agent.run()`` of an agent attached in raise style
    (the agent is stopped at the first refusal), or one ``Tools.act`` call (a model
    call the ``extract`` action makes, refused)."""

    __slots__ = ("agent", "error")

    def __init__(self, agent: Any = None) -> None:
        self.agent = agent
        self.error: Blocked | None = None

    def fail(self, error: Blocked) -> None:
        if self.error is None:
            self.error = error
            if self.agent is not None:
                self.agent.stop()


_REFUSALS: contextvars.ContextVar[_Refusals | None] = contextvars.ContextVar(
    "interlock_browser_use_refusals", default=None
)


def _raise(error: Blocked) -> NoReturn:
    refusals = _REFUSALS.get()
    if refusals is not None:
        refusals.fail(error)
    raise error


@dataclass(slots=True)
class _Held:
    """A decision ``Tools.act`` made, for the ``execute_action`` it calls to settle."""

    guard: Guard
    name: str
    params: Any
    decision: Decision | None
    action: Action
    taken: bool = False

    def claims(self, guard: Guard, name: str, params: Any) -> bool:
        """Whether this is the very call ``act`` judged (once)."""
        if self.taken or self.guard is not guard or self.name != name or self.params != params:
            return False
        self.taken = True
        return True


_HELD: contextvars.ContextVar[_Held | None] = contextvars.ContextVar(
    "interlock_browser_use_held", default=None
)


# -- the user's words: the agent's task and the operator's system message, trusted -------


def agent_inputs(agent: Any) -> list[Input]:
    """The trusted inputs of a browser-use agent: its ``task`` (the user's, a follow-up
    given by ``add_new_task`` too) and the system message the operator wrote
    (``extend_system_message``, ``override_system_message``). Never browser-use's own
    system prompt, nor anything a page holds.

    Example::

        inputs_of(guard).record(guard, agent_inputs(agent))
    """
    found = []
    task = getattr(agent, "task", None)
    if isinstance(task, str):
        found.append(Input("user", task))
    settings = getattr(agent, "settings", None)
    for attr in ("override_system_message", "extend_system_message"):
        text = getattr(settings, attr, None)
        if isinstance(text, str):
            found.append(Input("system", text))
    return found


#: The guard and the attached agent whose ``run`` is under way (its actions' gate
#: records a task ``add_new_task`` gave mid-run).
_RUNNING: contextvars.ContextVar[tuple[Guard, Any] | None] = contextvars.ContextVar(
    "interlock_browser_use_running", default=None
)


async def _record_agent(guard: Guard, agent: Any) -> None:
    """Record ``agent``'s trusted inputs once per session: only when the guard reads
    sessions, and never inside a call it allowed (an agent run as a tool: the calling
    model wrote its task)."""
    if not records_inputs(guard) or inside_a_call(guard):
        return
    inputs = inputs_of(guard)
    fresh = inputs.fresh(guard, agent_inputs(agent))
    if fresh:  # recording may write to a store: off the event loop
        await asyncio.to_thread(inputs.record, guard, fresh)


# -- the gate: one decision per action, shared by Tools.act and execute_action ----------


class _Gate:
    """Judges the actions of one registry for one guard."""

    __slots__ = ("guard", "options", "registry")

    def __init__(self, guard: Guard, registry: Registry[Any], options: _Options) -> None:
        self.guard = guard
        self.registry = registry
        self.options = options

    def action(self, name: str, params: Any, page_url: str | None) -> Action:
        registered = self.registry.registry.actions.get(name)
        fields: Sequence[str] | None = None
        description = None
        if registered is not None:
            model = registered.param_model
            if model.model_config.get("extra") != "allow":
                fields = tuple(model.model_fields)
            description = registered.description
        return browser_action(
            name, params, fields=fields, description=description, page_url=page_url
        )

    async def decide(self, action: Action, params: Any) -> Decision | None:
        """The verdict; ``None`` when the mapper says the action is not ours. With
        ``on_approval="wait"``, a call that opened a pending approval waits for the
        human, then is judged again (the identical call claims the grant once)."""
        running = _RUNNING.get()
        if running is not None and running[0] is self.guard:
            await _record_agent(self.guard, running[1])
        decision = await self._decide_once(action, params)
        approval_id = None if decision is None else pending_approval(decision)
        if self.options.on_approval == "wait" and approval_id is not None:
            await self.guard.await_approval(approval_id, self.options.approval_timeout)
            decision = await self._decide_once(action, params) or decision
        return decision

    async def _decide_once(self, action: Action, params: Any) -> Decision | None:
        mapper = self.options.mapper
        if mapper is None:
            return await self.guard.acheck(action)
        arguments = normalise_arguments(params)
        return await self.guard.acheck_mapped(mapper, action.name, arguments, self.registry)

    def refusal(self, decision: Decision, action: Action) -> Blocked:
        error = verdict_outcome(decision, action).error
        assert error is not None  # only called for a decision that is not allow
        return error

    async def run(
        self,
        decision: Decision | None,
        action: Action,
        params: Any,
        body: Callable[[], Awaitable[Any]],
        sensitive_data: Any = None,
    ) -> Any:
        """Run an allowed (or passed-through) body, settling the decision's
        reservation; the events carry the redacted arguments and a result with the
        typed text (and ``sensitive_data``'s values) scrubbed."""
        guard = self.guard
        if decision is None:
            return await body()
        if records_inputs(guard):  # an agent run in the body records nothing (inside_a_call)
            with judged_by(guard, call_key(action.name, action.arguments)):
                return await self._run_allowed(decision, action, params, body, sensitive_data)
        return await self._run_allowed(decision, action, params, body, sensitive_data)

    async def _run_allowed(
        self,
        decision: Decision,
        action: Action,
        params: Any,
        body: Callable[[], Awaitable[Any]],
        sensitive_data: Any,
    ) -> Any:
        guard = self.guard
        if guard.sink is None:  # the hot path: nothing to observe
            return await arun_settled(guard, decision, body)
        secrets = _secrets(action.name, params, sensitive_data)
        shown = call_key(action.name, action.arguments)[1]
        started = tool_started(guard, decision, action.name, shown)
        try:
            result = await arun_settled(guard, decision, body)
        except BaseException as exc:
            failure = RuntimeError(_scrub(exc, secrets)) if secrets else exc
            tool_finished(guard, decision, action.name, started, error=failure)
            raise
        tool_finished(guard, decision, action.name, started, result=_scrub(result, secrets))
        return result


def _release_quietly(guard: Guard, decision: Decision) -> None:
    try:
        guard.release(decision)
    except Exception:
        log.exception("interlock: could not release the reservation of %s", decision.decision_id)


async def _page_url(browser_session: Any) -> str | None:
    if browser_session is None:
        return None
    try:
        url = await browser_session.get_current_page_url()
    except Exception:  # no page yet: the action names no page
        return None
    return page_origin(url) if isinstance(url, str) and url else None


def page_origin(url: str) -> str:
    """The page an action acts on, as its ``target``: the origin only
    (``https://shop.example.com:8443``), never the path or query — a form sent by GET
    puts what was typed into the next page's URL."""
    try:
        parts = urlsplit(url)
        host = parts.hostname
        port = parts.port
    except ValueError:
        return "unreadable:"
    scheme = parts.scheme.lower()
    if not host:
        return f"{scheme}:"
    host = f"[{host}]" if ":" in host else host
    return f"{scheme}://{host}{f':{port}' if port is not None else ''}"


def _guarded_llm(llm: Any, guard: Guard) -> Any:
    if llm is None or (isinstance(llm, GuardedChatModel) and llm.guard is guard):
        return llm
    return GuardedChatModel(llm, guard)


class _GatedExecute:
    """``Registry.execute_action`` judged first: runs the registry's own on allow."""

    def __init__(self, gate: _Gate, inner: Callable[..., Awaitable[Any]]) -> None:
        self.gate = gate
        self.inner = inner

    async def __call__(
        self, action_name: str, params: dict[str, Any], *args: Any, **kwargs: Any
    ) -> Any:
        gate = self.gate
        if "page_extraction_llm" in kwargs:  # the extract action's model: judged too
            kwargs["page_extraction_llm"] = _guarded_llm(kwargs["page_extraction_llm"], gate.guard)

        def body() -> Awaitable[Any]:
            return self.inner(action_name, params, *args, **kwargs)

        sensitive = kwargs.get("sensitive_data")
        held = _HELD.get()
        if held is not None and held.claims(gate.guard, action_name, params):
            # act judged this very call
            return await gate.run(held.decision, held.action, params, body, sensitive)
        session = kwargs.get("browser_session", args[0] if args else None)
        action = gate.action(action_name, params, await _page_url(session))
        decision = await gate.decide(action, params)
        if decision is not None and not decision.allowed:
            error = gate.refusal(decision, action)
            if gate.options.refusal == "message":
                return ActionResult(error=str(error))
            _raise(error)
        return await gate.run(decision, action, params, body, sensitive)


class _GatedAct:
    """``Tools.act`` judged first (outside its own error handling, which would turn a
    raised refusal into a message): runs the tools' own ``act`` on allow."""

    def __init__(self, gate: _Gate, inner: Callable[..., Awaitable[Any]]) -> None:
        self.gate = gate
        self.inner = inner

    async def __call__(
        self, action: Any, browser_session: Any = None, *args: Any, **kwargs: Any
    ) -> Any:
        gate = self.gate
        try:
            dumped = action.model_dump(exclude_unset=True)
            name, params = next((k, v) for k, v in dumped.items() if v is not None)
        except StopIteration:  # no action in it: act does nothing
            return await self.inner(action, browser_session, *args, **kwargs)
        except Exception as exc:  # an action nothing can read is never run unjudged
            unread = await gate.guard.aunreadable(
                Action(kind="browser", name="unknown", scope="browser"),
                f"could not read the browser-use action: {exc!r}",
            )
            return self._refuse(unread, Action(kind="browser", name="unknown"))
        judged = gate.action(name, params, await _page_url(browser_session))
        decision = await gate.decide(judged, params)
        if decision is not None and not decision.allowed:
            return self._refuse(decision, judged)
        # The registry's execute_action, which act calls, runs the action under this
        # decision and settles it: it sees the action raise (act turns that into a
        # message) and releases the reservation then.
        held = _Held(gate.guard, name, params, decision, judged)
        refusals = _REFUSALS.get()
        ours = refusals is None and gate.options.refusal == "raise"
        if ours:
            refusals = _Refusals()
        held_token = _HELD.set(held)
        refusals_token = _REFUSALS.set(refusals) if ours else None
        try:
            result = await self.inner(action, browser_session, *args, **kwargs)
        finally:
            _HELD.reset(held_token)
            if refusals_token is not None:
                _REFUSALS.reset(refusals_token)
            if not held.taken and decision is not None and decision.reservation is not None:
                await asyncio.to_thread(_release_quietly, gate.guard, decision)
        if ours and refusals is not None and refusals.error is not None:
            raise refusals.error  # a model call inside the action was refused
        return result

    def _refuse(self, decision: Decision, action: Action) -> Any:
        error = self.gate.refusal(decision, action)
        if self.gate.options.refusal == "message":
            return ActionResult(error=str(error))
        _raise(error)


# -- model calls: judged and reserved before, committed from real usage after ----------


#: The attributes browser-use's chat models keep their output ceiling in.
_CEILINGS: Final = ("max_completion_tokens", "max_tokens", "max_output_tokens")


def output_ceiling(llm: Any) -> int:
    """The most a call of ``llm`` may answer, in tokens, as the model states it
    (``max_completion_tokens`` / ``max_tokens`` / ``max_output_tokens``); 0 if none."""
    for attr in _CEILINGS:
        value = getattr(llm, attr, None)
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            return value
    return 0


def estimate_usage(messages: Sequence[Any], output_format: Any = None, ceiling: int = 0) -> Usage:
    """A reservation for one model request: the messages' characters / 4 as input
    tokens, ``ceiling`` (the model's stated output limit) as output tokens."""
    chars = 0
    for message in messages:
        try:
            text = getattr(message, "text", None)
            chars += len(text) if isinstance(text, str) else len(json.dumps(message, default=str))
        except Exception:
            chars += len(str(message))
    return Usage(math.ceil(chars / CHARS_PER_TOKEN), ceiling)


class GuardedChatModel:
    """A browser-use chat model whose every ``ainvoke`` is judged as an ``llm`` action
    named after the model and reserved on the policy's budgets before ``llm`` runs; the
    ``usage`` it reports is committed after (released if it raises). The reservation
    is :func:`estimate_usage` with the model's own output ceiling (its
    ``max_completion_tokens`` / ``max_tokens`` / ``max_output_tokens``) unless
    ``estimate(messages, output_format)`` says otherwise. A refused call
    raises the ``Blocked`` error and never reaches ``llm``; inside the run of an agent
    attached in raise style, it also ends the run and is raised out of ``agent.run()``.

    Example::

        agent = Agent(task="...", llm=GuardedChatModel(ChatOpenAI(model="gpt-5"), guard))
    """

    _verified_api_keys: bool = False

    def __init__(
        self,
        llm: Any,
        guard: Guard,
        *,
        name: str | None = None,
        estimate: Callable[[Sequence[Any], Any], Usage] | None = None,
    ) -> None:
        self.wrapped = llm
        self.guard = guard
        self.model: str = str(getattr(llm, "model", None) or type(llm).__name__)
        self.label = name or self.model
        self.estimate = estimate or self._default_estimate

    def _default_estimate(self, messages: Sequence[Any], output_format: Any) -> Usage:
        return estimate_usage(messages, output_format, output_ceiling(self.wrapped))

    @property
    def provider(self) -> str:
        return str(self.wrapped.provider)

    @property
    def name(self) -> str:
        return str(self.wrapped.name)

    @property
    def model_name(self) -> str:
        return self.model

    async def ainvoke(self, messages: list[Any], output_format: Any = None, **kwargs: Any) -> Any:
        try:
            async with self.guard.llm_call(
                self.label, estimate=self.estimate(messages, output_format)
            ) as call:
                result = await self.wrapped.ainvoke(messages, output_format, **kwargs)
                _record_usage(call, getattr(result, "usage", None))
        except Blocked as exc:
            run = _REFUSALS.get()
            if run is not None:
                run.fail(exc)
            raise
        return result

    def __getattr__(self, name: str) -> Any:
        # Settings the agent reads off its model (base_url, temperature, ...).
        if name.startswith("__") or name == "wrapped":
            raise AttributeError(name)
        return getattr(self.wrapped, name)


def _record_usage(call: Any, usage: object) -> None:
    """Record what the provider reported; a response with no token counts keeps the
    estimate (the call happened, and its cost is not known to be lower)."""
    if usage is None:
        return
    try:
        reported = Usage.of(usage)
    except ValueError:
        return
    if reported.total:
        call.record(reported)


# -- the actor API: a guarded page, its elements and its mouse -------------------------


class _Direct:
    """Judges direct actor calls under the tools' action names (one policy for both)."""

    __slots__ = ("guard", "options")

    def __init__(self, guard: Guard, options: _Options) -> None:
        self.guard = guard
        self.options = options

    async def call(
        self,
        name: str,
        params: dict[str, Any],
        page_url: str | None,
        body: Callable[[], Awaitable[Any]],
    ) -> Any:
        action = browser_action(name, params, page_url=page_url)
        mapper = self.options.mapper
        if mapper is None:
            decision: Decision | None = await self.guard.acheck(action)
        else:
            decision = await self.guard.acheck_mapped(mapper, name, dict(params), None)
        approval_id = None if decision is None else pending_approval(decision)
        if self.options.on_approval == "wait" and approval_id is not None:
            await self.guard.await_approval(approval_id, self.options.approval_timeout)
            decision = await self.guard.acheck(action)
        if decision is not None and not decision.allowed:
            error = verdict_outcome(decision, action).error
            assert error is not None
            raise error  # a direct call has no model to read a message: always raised
        if decision is None:
            return await body()
        secrets = _secrets(name, params)
        guard = self.guard
        observed = guard.sink is not None
        shown = call_key(action.name, action.arguments)[1]
        started = tool_started(guard, decision, name, shown) if observed else 0
        try:
            result = await arun_settled(guard, decision, body)
        except BaseException as exc:
            if observed:
                failure = RuntimeError(_scrub(exc, secrets)) if secrets else exc
                tool_finished(guard, decision, name, started, error=failure)
            raise
        if observed:
            tool_finished(guard, decision, name, started, result=_scrub(result, secrets))
        return result


class GuardedPage:
    """A browser-use actor ``Page`` whose every action is judged first, under the
    names the tools use: ``goto`` / ``navigate`` → ``navigate {url}``, ``evaluate`` →
    ``evaluate {code}``, ``press`` → ``send_keys {keys}``, ``reload``, ``go_back``,
    ``go_forward``; elements it hands out are :class:`GuardedElement`, its mouse a
    :class:`GuardedMouse`. A refusal raises. Reads (``get_url``, ``get_title``...)
    pass through.

    Example::

        page = guard_page(await browser_session.get_current_page(), guard)
        await page.goto("https://docs.example.com/")
    """

    def __init__(self, page: Page, guard: Guard, *, options: _Options = _DEFAULT) -> None:
        self.wrapped = page
        self.guard = guard
        self._direct = _Direct(guard, options)

    async def _url(self) -> str | None:
        try:
            url = await self.wrapped.get_url()
        except Exception:
            return None
        return page_origin(url) if url else None

    async def _judged(
        self, name: str, params: dict[str, Any], body: Callable[[], Awaitable[Any]]
    ) -> Any:
        return await self._direct.call(name, params, await self._url(), body)

    async def goto(self, url: str) -> None:
        await self._judged("navigate", {"url": url}, lambda: self.wrapped.goto(url))

    async def navigate(self, url: str) -> None:
        await self.goto(url)

    async def reload(self) -> None:
        await self._judged("reload", {}, self.wrapped.reload)

    async def go_back(self) -> None:
        await self._judged("go_back", {}, self.wrapped.go_back)

    async def go_forward(self) -> None:
        await self._judged("go_forward", {}, self.wrapped.go_forward)

    async def evaluate(self, page_function: str, *args: Any) -> str:
        result: str = await self._judged(
            "evaluate",
            {"code": page_function, "args": list(args)},
            lambda: self.wrapped.evaluate(page_function, *args),
        )
        return result

    async def press(self, key: str) -> None:
        await self._judged("send_keys", {"keys": key}, lambda: self.wrapped.press(key))

    async def hold_key(self, key: str, duration: float) -> None:
        await self._judged(
            "send_keys",
            {"keys": key, "hold": duration},
            lambda: self.wrapped.hold_key(key, duration),
        )

    async def screenshot(self, *args: Any, **kwargs: Any) -> str:
        result: str = await self._judged(
            "screenshot", {}, lambda: self.wrapped.screenshot(*args, **kwargs)
        )
        return result

    async def get_element(self, backend_node_id: int) -> GuardedElement:
        return self._element(await self.wrapped.get_element(backend_node_id))

    async def get_elements_by_css_selector(self, selector: str) -> list[GuardedElement]:
        found = await self.wrapped.get_elements_by_css_selector(selector)
        return [self._element(element) for element in found]

    async def get_element_by_prompt(self, prompt: str, llm: Any = None) -> GuardedElement | None:
        chosen = _guarded_llm(llm, self.guard) if llm is not None else None
        found = await self.wrapped.get_element_by_prompt(prompt, chosen)
        return None if found is None else self._element(found)

    async def must_get_element_by_prompt(self, prompt: str, llm: Any = None) -> GuardedElement:
        chosen = _guarded_llm(llm, self.guard) if llm is not None else None
        return self._element(await self.wrapped.must_get_element_by_prompt(prompt, chosen))

    @property
    async def mouse(self) -> GuardedMouse:
        return GuardedMouse(await self.wrapped.mouse, self)

    def _element(self, element: Element) -> GuardedElement:
        return GuardedElement(element, self)

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__") or name == "wrapped":
            raise AttributeError(name)
        if name not in _PAGE_READS:
            raise AttributeError(
                f"GuardedPage does not offer {name!r}: it cannot judge it. Use the page "
                "itself (guarded_page.wrapped) where that is intended."
            )
        return getattr(self.wrapped, name)


#: What a :class:`GuardedPage` passes through unjudged: reads of the page.
_PAGE_READS: Final = frozenset(
    {"get_url", "get_title", "get_target_info", "session_id", "dom_service", "extract_content"}
)


class GuardedElement:
    """An actor ``Element`` whose actions are judged first: ``click`` → ``click``,
    ``fill`` → ``input {text}`` (the text redacted in every record),
    ``set_input_files`` → ``upload_file {paths}``, ``select_option`` →
    ``select_dropdown``, ``check`` / ``hover`` / ``focus`` / ``drag_to`` /
    ``evaluate``. Reads (``get_attribute``, ``get_bounding_box``...) pass through."""

    def __init__(self, element: Element, page: GuardedPage) -> None:
        self.wrapped = element
        self.page = page

    async def _judged(
        self, name: str, params: dict[str, Any], body: Callable[[], Awaitable[Any]]
    ) -> Any:
        return await self.page._judged(name, params, body)

    async def click(self, *args: Any, **kwargs: Any) -> None:
        await self._judged("click", {}, lambda: self.wrapped.click(*args, **kwargs))

    async def fill(self, value: str, clear: bool = True) -> None:
        await self._judged(
            "input", {"text": value, "clear": clear}, lambda: self.wrapped.fill(value, clear)
        )

    async def set_input_files(self, paths: list[str]) -> None:
        await self._judged(
            "upload_file", {"paths": list(paths)}, lambda: self.wrapped.set_input_files(paths)
        )

    async def select_option(self, values: str | list[str]) -> None:
        await self._judged(
            "select_dropdown", {"text": values}, lambda: self.wrapped.select_option(values)
        )

    async def check(self) -> None:
        await self._judged("check", {}, self.wrapped.check)

    async def hover(self) -> None:
        await self._judged("hover", {}, self.wrapped.hover)

    async def focus(self) -> None:
        await self._judged("focus", {}, self.wrapped.focus)

    async def drag_to(self, *args: Any, **kwargs: Any) -> None:
        await self._judged("drag", {}, lambda: self.wrapped.drag_to(*args, **kwargs))

    async def evaluate(self, page_function: str, *args: Any) -> str:
        result: str = await self._judged(
            "evaluate",
            {"code": page_function, "args": list(args)},
            lambda: self.wrapped.evaluate(page_function, *args),
        )
        return result

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__") or name in ("wrapped", "page"):
            raise AttributeError(name)
        if name not in _ELEMENT_READS:
            raise AttributeError(f"GuardedElement does not offer {name!r}: it cannot judge it")
        return getattr(self.wrapped, name)


_ELEMENT_READS: Final = frozenset(
    {"get_attribute", "get_bounding_box", "get_basic_info", "screenshot", "scroll_into_view"}
)


class GuardedMouse:
    """An actor ``Mouse`` whose every move is judged as ``mouse {op, x, y}``."""

    def __init__(self, mouse: Mouse, page: GuardedPage) -> None:
        self.wrapped = mouse
        self.page = page

    async def _op(
        self, op: str, kwargs: dict[str, Any], body: Callable[[], Awaitable[Any]]
    ) -> None:
        await self.page._judged("mouse", {"op": op, **kwargs}, body)

    async def click(self, x: int, y: int, *args: Any, **kwargs: Any) -> None:
        await self._op("click", {"x": x, "y": y}, lambda: self.wrapped.click(x, y, *args, **kwargs))

    async def down(self, *args: Any, **kwargs: Any) -> None:
        await self._op("down", {}, lambda: self.wrapped.down(*args, **kwargs))

    async def up(self, *args: Any, **kwargs: Any) -> None:
        await self._op("up", {}, lambda: self.wrapped.up(*args, **kwargs))

    async def move(self, x: int, y: int, *args: Any, **kwargs: Any) -> None:
        await self._op("move", {"x": x, "y": y}, lambda: self.wrapped.move(x, y, *args, **kwargs))

    async def scroll(self, *args: Any, **kwargs: Any) -> None:
        await self._op("scroll", {}, lambda: self.wrapped.scroll(*args, **kwargs))


def guard_page(
    page: Page,
    guard: Guard,
    *,
    mapper: Mapper | None = None,
    on_approval: OnApproval = "refuse",
    approval_timeout: float = 300.0,
) -> GuardedPage:
    """``page`` (an actor ``Page``) with every action judged first; a refusal raises."""
    _checked_options("raise", on_approval)
    if isinstance(page, GuardedPage):
        page = page.wrapped
    return GuardedPage(
        page, guard, options=_Options("raise", mapper, on_approval, approval_timeout)
    )


# -- attach / detach -----------------------------------------------------------------------


class _OptionsAdapter(Adapter):
    """An adapter whose attach takes the refusal style and its companions."""

    def __init__(self) -> None:
        super().__init__()
        self._options: dict[int, _Options] = {}

    def attach_with(self, obj: Any, guard: Guard, options: _Options) -> Any:
        if not self.is_attached(obj):
            self._options[id(obj)] = options
        try:
            return self.attach(obj, guard)
        except BaseException:
            if not self.is_attached(obj):
                self._options.pop(id(obj), None)
            raise

    def options_for(self, obj: object) -> _Options:
        return self._options.get(id(obj), _DEFAULT)

    def detach(self, obj: Any) -> Any:
        super().detach(obj)
        self._options.pop(id(obj), None)
        return obj


class RegistryAdapter(_OptionsAdapter):
    """Guards a ``Registry`` in place at ``execute_action`` — the one method every
    action of it runs through (``Tools.act``, ``tools.<action>(...)``, a direct call)."""

    framework = "browser-use-registry"
    distribution = "browser-use"
    supported = ("0.13", "0.14")
    extra = "browser-use"
    targets = (PatchTarget(Registry, "execute_action"),)

    def wrap(
        self, target: PatchTarget, obj: Any, original: Callable[..., Any], guard: Guard
    ) -> Any:
        return _GatedExecute(_Gate(guard, obj, self.options_for(obj)), original)

    def tool_bindings(self, obj: Any, guard: Guard | None = None) -> list[ToolBinding]:
        gated = self.guarded_by(obj, guard)
        return [
            ToolBinding(
                name,
                registered.description,
                None,
                registered.function,
                owner=obj,
                attr="execute_action",
                guarded=gated,
            )
            for name, registered in obj.registry.actions.items()
        ]


class ToolsAdapter(_OptionsAdapter):
    """Guards a ``Tools`` in place: its ``act`` and its registry's ``execute_action``
    (see :class:`RegistryAdapter`), sharing one refusal style."""

    framework = "browser-use"
    distribution = "browser-use"
    supported = ("0.13", "0.14")
    extra = "browser-use"
    targets = (PatchTarget(Tools, "act"),)

    def wrap(
        self, target: PatchTarget, obj: Any, original: Callable[..., Any], guard: Guard
    ) -> Any:
        return _GatedAct(_Gate(guard, obj.registry, self.options_for(obj)), original)

    def attach(self, obj: Any, guard: Guard) -> Any:
        if self.is_attached(obj):
            return super().attach(obj, guard)  # the same guard: nothing; another: refused
        REGISTRY_ADAPTER.attach_with(obj.registry, guard, self.options_for(obj))
        try:
            return super().attach(obj, guard)
        except BaseException:
            REGISTRY_ADAPTER.detach(obj.registry)
            raise

    def detach(self, obj: Any) -> Any:
        if self.is_attached(obj):
            REGISTRY_ADAPTER.detach(obj.registry)
        return super().detach(obj)

    def tool_bindings(self, obj: Any, guard: Guard | None = None) -> list[ToolBinding]:
        gated = self.guarded_by(obj, guard) and REGISTRY_ADAPTER.guarded_by(obj.registry, guard)
        return [
            ToolBinding(
                name,
                registered.description,
                None,
                registered.function,
                owner=obj,
                attr="act",
                guarded=gated,
            )
            for name, registered in obj.registry.registry.actions.items()
        ]


#: The models an agent calls, by attribute (``settings.page_extraction_llm`` is judged
#: where the tools hand it to the ``extract`` action).
_AGENT_MODELS: Final = ("llm", "judge_llm", "_fallback_llm")


class AgentAdapter(_OptionsAdapter):
    """Guards an ``Agent``: its ``tools`` (see :class:`ToolsAdapter`), its models
    (``llm``, ``judge_llm``, ``_fallback_llm``) as :class:`GuardedChatModel`, and its
    ``run`` — which records the agent's trusted inputs (:func:`agent_inputs`) and, in
    raise style, stops the run at a refusal and raises it out."""

    framework = "browser-use-agent"
    distribution = "browser-use"
    supported = ("0.13", "0.14")
    extra = "browser-use"
    targets = tuple(PatchTarget(Agent, attr) for attr in ("run", *_AGENT_MODELS))

    inspects_models = True

    def __init__(self) -> None:
        super().__init__()
        self._owns_tools: dict[int, bool] = {}

    def targets_for(self, obj: object) -> tuple[PatchTarget, ...]:
        if self.options_for(obj).models:
            return self.targets
        return tuple(t for t in self.targets if t.attr not in _AGENT_MODELS)

    def wrap(self, target: PatchTarget, obj: Any, original: Any, guard: Guard) -> Any:
        if target.attr in _AGENT_MODELS:
            return _guarded_llm(original, guard)
        run: Callable[..., Awaitable[Any]] = original
        raises = self.options_for(obj).refusal == "raise"

        async def guarded_run(*args: Any, **kwargs: Any) -> Any:
            await _record_agent(guard, obj)
            state = _Refusals(obj) if raises else None
            running = _RUNNING.set((guard, obj))
            token = _REFUSALS.set(state) if state is not None else None
            try:
                history = await run(*args, **kwargs)
            finally:
                if token is not None:
                    _REFUSALS.reset(token)
                _RUNNING.reset(running)
            if state is not None and state.error is not None:
                raise state.error
            return history

        return guarded_run

    def attach(self, obj: Any, guard: Guard) -> Any:
        if self.is_attached(obj):
            return super().attach(obj, guard)
        tools = obj.tools
        ours = not ADAPTER.is_attached(tools)
        if ours:
            ADAPTER.attach_with(tools, guard, self.options_for(obj))
        elif not ADAPTER.guarded_by(tools, guard):
            raise ValueError("this agent's tools are attached to another guard; detach them first")
        try:
            super().attach(obj, guard)
        except BaseException:
            if ours:
                ADAPTER.detach(tools)
            raise
        self._owns_tools[id(obj)] = ours
        return obj

    def detach(self, obj: Any) -> Any:
        if self._owns_tools.pop(id(obj), False):
            ADAPTER.detach(obj.tools)
        return super().detach(obj)

    def tool_bindings(self, obj: Any, guard: Guard | None = None) -> list[ToolBinding]:
        bindings = ADAPTER.tool_bindings(obj.tools, guard)
        bindings.append(
            ToolBinding(
                "browser_session",
                "the CDP connection to the browser",
                None,
                owner=obj,
                attr="browser_session",
                guarded=False,
                note="what the page does by itself (redirects, scripts, pop-ups) and code "
                "that drives browser_session / its CDP client directly are not actions: "
                "nothing here judges them (wrap pages with guard_page)",
            )
        )
        return bindings

    def llm_bindings(self, obj: Any, guard: Guard | None = None) -> list[LLMBinding]:
        bindings = []
        models = [(attr, getattr(obj, attr, None)) for attr in _AGENT_MODELS]
        models.append(("settings.page_extraction_llm", obj.settings.page_extraction_llm))
        for attr, llm in models:
            if llm is None:
                continue
            guarded = isinstance(llm, GuardedChatModel) and (guard is None or llm.guard is guard)
            if attr == "settings.page_extraction_llm" and not guarded:
                guarded = ADAPTER.guarded_by(obj.tools, guard)  # wrapped where it is used
            label = (
                llm.label if isinstance(llm, GuardedChatModel) else str(getattr(llm, "model", attr))
            )
            bindings.append(LLMBinding(label, llm.ainvoke, owner=obj, attr=attr, guarded=guarded))
        return bindings


def guard_tools(
    tools: Tools[Any],
    guard: Guard,
    *,
    refusal: Refusal = "raise",
    mapper: Mapper | None = None,
    on_approval: OnApproval = "refuse",
    approval_timeout: float = 300.0,
) -> Tools[Any]:
    """Guard ``tools`` in place (its ``act`` and its registry's ``execute_action``) and
    return it; ``guard.detach(tools)`` restores it exactly."""
    _checked_options(refusal, on_approval)
    options = _Options(refusal, mapper, on_approval, approval_timeout)
    return ADAPTER.attach_with(tools, guard, options)


def guard_agent(
    agent: Agent[Any, Any],
    guard: Guard,
    *,
    refusal: Refusal = "raise",
    mapper: Mapper | None = None,
    on_approval: OnApproval = "refuse",
    approval_timeout: float = 300.0,
    models: bool = True,
) -> Agent[Any, Any]:
    """Guard ``agent`` in place (its tools, its models and, in raise style, its run)
    and return it; ``guard.detach(agent)`` restores it exactly. ``models=False``
    leaves its models as they are (judge them elsewhere, or not at all)."""
    _checked_options(refusal, on_approval)
    options = _Options(refusal, mapper, on_approval, approval_timeout, models)
    return AGENT_ADAPTER.attach_with(agent, guard, options)


REGISTRY_ADAPTER = register_adapter(RegistryAdapter())
ADAPTER = register_adapter(ToolsAdapter())
AGENT_ADAPTER = register_adapter(AgentAdapter())
