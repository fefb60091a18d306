"""Side doors of a guarded LangChain tool, each shut, in real LangChain.

- String (and positional) input is judged as the tool's own field — the one LangChain
  itself parses the string as — not as ``{"input": ...}``.
- Every attribute that can run the body of a guarded copy or an attached tool — the
  public entry points, ``_run`` / ``_arun``, ``func`` / ``coroutine`` — is judged.
- A refused direct call is visible to LangChain callbacks: ``on_tool_start``, then
  ``on_tool_error`` carrying the refusal.
"""

from __future__ import annotations

import pytest

pytest.importorskip("langchain")

import asyncio
import threading
from collections.abc import Callable
from typing import Any
from uuid import UUID

from langchain_core.callbacks import AsyncCallbackHandler, BaseCallbackHandler
from langchain_core.tools import BaseTool, StructuredTool, Tool, tool

from interlock import Action, ActionDenied, Decision, Guard, Verdict, load_policy_text
from interlock.adapters.langchain import guard_tool, tool_action

from .conformance import POLICY

#: A policy for single-input tools (``Tool``): LangChain names their one field
#: ``tool_input``.
SINGLE_INPUT_POLICY = load_policy_text(
    """
version: 1
default: deny
rules:
  - id: allow-shell
    decision: allow
    reason: shell is allowed
    name: shell
  - id: no-rm
    decision: deny
    reason: no recursive deletes
    name: shell
    when: "args.tool_input.startsWith('rm')"
""",
    file="single.yaml",
)


class Ran:
    """The bodies that ran (any thread)."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, Any]] = []
        self._lock = threading.Lock()

    def add(self, what: str, value: Any) -> str:
        with self._lock:
            self.calls.append((what, value))
        return f"ran {value}"


def structured(ran: Ran) -> BaseTool:
    """``@tool`` with a sync body and an async one (``func`` and ``coroutine``)."""

    def shell(command: str) -> str:
        """Run a shell command."""
        return ran.add("func", command)

    async def ashell(command: str) -> str:
        """Run a shell command."""
        return ran.add("coroutine", command)

    return StructuredTool.from_function(func=shell, coroutine=ashell, name="shell")


def decorated(ran: Ran) -> BaseTool:
    @tool
    def shell(command: str) -> str:
        """Run a shell command."""
        return ran.add("func", command)

    return shell


def subclassed(ran: Ran) -> BaseTool:
    class Shell(BaseTool):
        name: str = "shell"
        description: str = "Run a shell command."

        def _run(self, command: str) -> str:
            return ran.add("_run", command)

        async def _arun(self, command: str) -> str:
            return ran.add("_arun", command)

    return Shell()


TOOLS: dict[str, Callable[[Ran], BaseTool]] = {
    "structured": structured,
    "decorated": decorated,
    "subclassed": subclassed,
}


def _seen(guard_decisions: list[tuple[Decision, Action | None]]) -> list[dict[str, Any]]:
    return [dict(action.arguments) for _, action in guard_decisions if action is not None]


def _guarded(make: Callable[[Ran], BaseTool], how: str, policy: Any = POLICY) -> Any:
    ran = Ran()
    seen: list[tuple[Decision, Action | None]] = []
    guard = Guard(policy, on_decision=lambda d, a: seen.append((d, a)))
    original = make(ran)
    subject = guard_tool(original, guard) if how == "copy" else guard.attach(original)
    return subject, ran, seen


# -- string input is judged as the tool's own field -------------------------------------------


def _string_entry_points(t: BaseTool, text: str) -> dict[str, Callable[[], Any]]:
    async def collect(stream: Any) -> list[Any]:
        return [chunk async for chunk in stream]

    return {
        "invoke": lambda: t.invoke(text),
        "ainvoke": lambda: asyncio.run(t.ainvoke(text)),
        "run": lambda: t.run(text),
        "arun": lambda: asyncio.run(t.arun(text)),
        "batch": lambda: t.batch([text]),
        "abatch": lambda: asyncio.run(t.abatch([text])),
        "stream": lambda: list(t.stream(text)),
        "astream": lambda: asyncio.run(collect(t.astream(text))),
    }


STRING_ENTRIES = list(_string_entry_points(Tool("x", lambda s: s, "x"), ""))


@pytest.mark.parametrize("entry", STRING_ENTRIES)
@pytest.mark.parametrize("kind", list(TOOLS))
@pytest.mark.parametrize("how", ["copy", "attach"])
def test_a_string_input_is_judged_as_the_field_langchain_runs_it_as(
    entry: str, kind: str, how: str
) -> None:
    guarded, ran, seen = _guarded(TOOLS[kind], how)
    with pytest.raises(ActionDenied, match="no recursive deletes"):
        _string_entry_points(guarded, "rm -rf /x")[entry]()
    assert ran.calls == []
    assert _seen(seen) == [{"command": "rm -rf /x"}]


@pytest.mark.parametrize("kind", list(TOOLS))
def test_an_allowed_string_input_runs_once_judged_once(kind: str) -> None:
    guarded, ran, seen = _guarded(TOOLS[kind], "copy")
    guarded.invoke("ls")
    assert [value for _, value in ran.calls] == ["ls"]
    assert _seen(seen) == [{"command": "ls"}]
    assert [d.verdict for d, _ in seen] == [Verdict.ALLOW]


@pytest.mark.parametrize(
    "given", ["rm -rf /x", {"__arg1": "rm -rf /x"}, {"query": "rm -rf /x"}], ids=str
)
def test_a_single_input_tool_is_judged_on_the_value_it_receives(given: Any) -> None:
    """LangChain hands a ``Tool``'s body its one value positionally, whatever key the
    model gave it: it is judged as the tool's declared field, ``tool_input``."""
    ran = Ran()
    seen: list[tuple[Decision, Action | None]] = []
    guard = Guard(SINGLE_INPUT_POLICY, on_decision=lambda d, a: seen.append((d, a)))
    single = Tool(name="shell", func=lambda text: ran.add("func", text), description="shell")
    guarded = guard_tool(single, guard)
    with pytest.raises(ActionDenied, match="no recursive deletes"):
        guarded.invoke(given)
    assert ran.calls == []
    assert _seen(seen) == [{"tool_input": "rm -rf /x"}]
    # the middleware judges a model's call to it the same way
    action = tool_action("shell", given if isinstance(given, dict) else {"x": given}, single)
    assert guard.check(action).verdict is Verdict.DENY


# -- every attribute that can run the body is judged --------------------------------------------


def _side_doors(t: Any, command: str, config: dict[str, Any]) -> dict[str, Callable[[], Any]]:
    """Every way to reach the body below the public entry points (``config``: what a
    tool's own ``_run`` requires besides the arguments)."""
    doors: dict[str, Callable[[], Any]] = {
        "_run positional": lambda: t._run(command, **config),
        "_run keyword": lambda: t._run(command=command, **config),
        "_arun positional": lambda: asyncio.run(t._arun(command, **config)),
        "_arun keyword": lambda: asyncio.run(t._arun(command=command, **config)),
    }
    if getattr(t, "func", None) is not None:
        doors["func positional"] = lambda: t.func(command)
        doors["func keyword"] = lambda: t.func(command=command)
    if getattr(t, "coroutine", None) is not None:
        doors["coroutine positional"] = lambda: asyncio.run(t.coroutine(command))
        doors["coroutine keyword"] = lambda: asyncio.run(t.coroutine(command=command))
    return doors


#: StructuredTool's own ``_run`` takes the run's config; a subclass's takes only its own
#: arguments.
CONFIG: dict[str, dict[str, Any]] = {"structured": {"config": {}}, "decorated": {"config": {}}}

SIDE_DOORS = [
    (kind, door)
    for kind, make in TOOLS.items()
    for door in _side_doors(make(Ran()), "", CONFIG.get(kind, {}))
]


def _door_call(guarded: Any, kind: str, door: str, command: str) -> Any:
    return _side_doors(guarded, command, CONFIG.get(kind, {}))[door]()


@pytest.mark.parametrize(("kind", "door"), SIDE_DOORS, ids=[f"{k}-{d}" for k, d in SIDE_DOORS])
@pytest.mark.parametrize("how", ["copy", "attach"])
def test_no_side_door_runs_the_body_unjudged(kind: str, door: str, how: str) -> None:
    guarded, ran, seen = _guarded(TOOLS[kind], how)
    with pytest.raises(ActionDenied, match="no recursive deletes"):
        _door_call(guarded, kind, door, "rm -rf /x")
    assert ran.calls == []
    assert _seen(seen) == [{"command": "rm -rf /x"}]


@pytest.mark.parametrize(("kind", "door"), SIDE_DOORS, ids=[f"{k}-{d}" for k, d in SIDE_DOORS])
def test_an_allowed_side_door_call_runs_once_judged_once(kind: str, door: str) -> None:
    guarded, ran, seen = _guarded(TOOLS[kind], "copy")
    _door_call(guarded, kind, door, "ls")
    assert [value for _, value in ran.calls] == ["ls"]
    assert [d.verdict for d, _ in seen] == [Verdict.ALLOW]


def test_the_original_of_a_guarded_copy_keeps_its_doors_open() -> None:
    ran = Ran()
    original = structured(ran)
    guard_tool(original, Guard(POLICY))
    original.func("rm -rf /x")
    original._run("rm -rf /x", config={})
    assert [value for _, value in ran.calls] == ["rm -rf /x", "rm -rf /x"]


_MISSING = object()


def test_detach_reopens_exactly_what_attach_closed() -> None:
    ran = Ran()
    subject = structured(ran)
    doors = ("run", "arun", "_run", "_arun", "func", "coroutine")
    before = {door: vars(subject).get(door, _MISSING) for door in doors}
    guard = Guard(POLICY)
    guard.attach(subject)
    assert all(vars(subject).get(door, _MISSING) is not before[door] for door in doors)
    with pytest.raises(ActionDenied):
        subject.func("rm -rf /x")
    guard.detach(subject)
    assert all(vars(subject).get(door, _MISSING) is before[door] for door in doors)
    subject.func("rm -rf /x")
    assert ran.calls == [("func", "rm -rf /x")]


def test_a_copy_of_a_guarded_copy_is_guarded_by_the_new_guard_only() -> None:
    ran = Ran()
    seen_first: list[Decision] = []
    seen_second: list[Decision] = []
    first = guard_tool(
        structured(ran), Guard(POLICY, on_decision=lambda d, *_: seen_first.append(d))
    )
    second = guard_tool(first, Guard(POLICY, on_decision=lambda d, *_: seen_second.append(d)))
    second.func("ls")
    assert ran.calls == [("func", "ls")]
    assert (len(seen_first), len(seen_second)) == (0, 1)


# -- refusals are visible to LangChain callbacks --------------------------------------------


class Recorder(BaseCallbackHandler):
    def __init__(self) -> None:
        self.events: list[tuple[str, Any]] = []

    def on_tool_start(self, serialized: dict[str, Any], input_str: str, **kwargs: Any) -> None:
        self.events.append(("start", input_str))

    def on_tool_end(self, output: Any, **kwargs: Any) -> None:
        self.events.append(("end", output))

    def on_tool_error(self, error: BaseException, *, run_id: UUID, **kwargs: Any) -> None:
        self.events.append(("error", error))


class AsyncRecorder(AsyncCallbackHandler):
    def __init__(self) -> None:
        self.events: list[tuple[str, Any]] = []

    async def on_tool_start(
        self, serialized: dict[str, Any], input_str: str, **kwargs: Any
    ) -> None:
        self.events.append(("start", input_str))

    async def on_tool_end(self, output: Any, **kwargs: Any) -> None:
        self.events.append(("end", output))

    async def on_tool_error(self, error: BaseException, **kwargs: Any) -> None:
        self.events.append(("error", error))


CALLS: dict[str, Callable[[BaseTool, Any, Any], Any]] = {
    "invoke": lambda t, given, cb: t.invoke(given, config={"callbacks": [cb]}),
    "ainvoke": lambda t, given, cb: asyncio.run(t.ainvoke(given, config={"callbacks": [cb]})),
    "run": lambda t, given, cb: t.run(given, callbacks=[cb]),
    "arun": lambda t, given, cb: asyncio.run(t.arun(given, callbacks=[cb])),
}


@pytest.mark.parametrize("given", ["rm -rf /x", {"command": "rm -rf /x"}], ids=["str", "dict"])
@pytest.mark.parametrize("call", list(CALLS))
@pytest.mark.parametrize("handler", [Recorder, AsyncRecorder], ids=["sync", "async"])
def test_a_refused_direct_call_fires_tool_start_then_tool_error_with_the_refusal(
    call: str, given: Any, handler: type[Recorder] | type[AsyncRecorder]
) -> None:
    guarded, ran, _ = _guarded(structured, "copy")
    recorder = handler()
    with pytest.raises(ActionDenied) as refused:
        CALLS[call](guarded, given, recorder)
    assert ran.calls == []
    assert [kind for kind, _ in recorder.events] == ["start", "error"]
    assert recorder.events[1][1] is refused.value
    assert "rm -rf /x" in recorder.events[0][1]


@pytest.mark.parametrize("call", list(CALLS))
def test_an_allowed_direct_call_fires_tool_start_then_tool_end(call: str) -> None:
    guarded, ran, _ = _guarded(structured, "copy")
    recorder = Recorder()
    CALLS[call](guarded, "ls", recorder)
    assert [kind for kind, _ in recorder.events] == ["start", "end"]
    assert len(ran.calls) == 1
