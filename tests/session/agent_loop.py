"""Run one :class:`~tests.session.sequences.Sequence` through a real LangChain agent loop.

``create_agent`` with :class:`~interlock.adapters.langchain.InterlockMiddleware`
(``refusal="message"``: the model reads a refusal and the loop goes on), a fake chat
model scripted with one tool call a turn, and real tools whose bodies return the
sequence's scripted results and record that they ran. The guard's context names the
session; the adapter records the user's request as a trusted input.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from langchain.agents import create_agent
from langchain_core.language_models.fake_chat_models import FakeMessagesListChatModel
from langchain_core.messages import AIMessage, BaseMessage
from langchain_core.tools import BaseTool, StructuredTool

from interlock import Action, Context, Decision, Guard, Verdict
from interlock.adapters.langchain import InterlockMiddleware
from interlock.policy import CompiledPolicy

from .sequences import TOOLS, Sequence

__all__ = ["Outcome", "run_sequence"]

_SESSIONS = itertools.count(1)


class ScriptedModel(FakeMessagesListChatModel):
    """A scripted model; ``create_agent`` binds tools, which a script ignores."""

    def bind_tools(self, tools: Any, **kwargs: Any) -> Any:
        return self


def _key(tool: str, args: Mapping[str, Any]) -> str:
    return json.dumps([tool, dict(args)], sort_keys=True, default=str)


@dataclass
class Outcome:
    """What happened to each call of a sequence: its verdict and whether its body ran."""

    sequence: Sequence
    verdicts: list[Verdict | None] = field(default_factory=list)
    ran: list[bool] = field(default_factory=list)
    rule_ids: list[tuple[str, ...]] = field(default_factory=list)
    final: str = ""
    #: the session holds the user's request as a trusted input (recorded by the adapter)
    request_trusted: bool = False

    @property
    def stopped(self) -> bool:
        """An attack: none of its harmful bodies ran."""
        return not any(self.ran[i] for i in self.sequence.harmful_calls)

    @property
    def refused(self) -> bool:
        """An attack: every harmful call was denied outright."""
        return all(self.verdicts[i] is Verdict.DENY for i in self.sequence.harmful_calls)

    @property
    def untouched(self) -> bool:
        """A benign sequence: every call ran."""
        return all(self.ran)


class _Bodies:
    """The agent's tools for one sequence: each returns its scripted result."""

    def __init__(self, sequence: Sequence) -> None:
        self.results = {_key(c.tool, c.args): c.result for c in sequence.calls}
        self.ran: list[str] = []
        self._lock = threading.Lock()
        self.tools: list[BaseTool] = [self._tool(name, params) for name, params in TOOLS.items()]

    def _tool(self, name: str, params: tuple[str, ...]) -> BaseTool:
        def body(**kwargs: Any) -> str:
            key = _key(name, kwargs)
            with self._lock:
                self.ran.append(key)
            return self.results.get(key, "ok")

        schema = {
            "type": "object",
            "properties": {p: {"type": "number" if p == "amount" else "string"} for p in params},
            "required": list(params),
        }
        return StructuredTool.from_function(
            func=body, name=name, description=f"The {name} tool.", args_schema=schema
        )


def _script(sequence: Sequence) -> list[BaseMessage]:
    turns: list[BaseMessage] = [
        AIMessage(
            content="",
            tool_calls=[{"name": c.tool, "args": dict(c.args), "id": f"call-{i}"}],
        )
        for i, c in enumerate(sequence.calls)
    ]
    return [*turns, AIMessage(content="done")]


def run_sequence(sequence: Sequence, policy: CompiledPolicy, *, mode: str = "sync") -> Outcome:
    """Run ``sequence`` under ``policy`` in a fresh session of its own."""
    seen: dict[str, tuple[Verdict, tuple[str, ...]]] = {}

    def on_decision(decision: Decision, action: Action | None) -> None:
        if action is not None and action.kind == "tool":
            key = _key(str(action.name), action.arguments)
            seen[key] = (decision.verdict, tuple(decision.rule_ids))

    context = Context(tenant="table", session_id=f"{sequence.id}-{next(_SESSIONS)}")
    guard = Guard(policy, context=context, on_decision=on_decision)
    bodies = _Bodies(sequence)
    middleware = InterlockMiddleware(guard, refusal="message")
    agent = create_agent(
        ScriptedModel(responses=_script(sequence)), bodies.tools, middleware=[middleware]
    )
    inputs = {"messages": [("user", sequence.request)]}
    result = asyncio.run(agent.ainvoke(inputs)) if mode == "async" else agent.invoke(inputs)
    outcome = Outcome(sequence, final=str(result["messages"][-1].content))
    history = guard.sessions
    if history is not None and context.session_id is not None:
        steps = history.view(context.tenant, context.session_id).steps
        outcome.request_trusted = any(s.kind == "input" and s.trusted for s in steps)
    for call in sequence.calls:
        key = _key(call.tool, call.args)
        verdict, rules = seen.get(key, (None, ()))
        outcome.verdicts.append(verdict)
        outcome.rule_ids.append(rules)
        outcome.ran.append(key in bodies.ran)
    return outcome
