"""The adapter registry: which adapter guards a framework object, found without core or
the guard importing any adapter.

Adapters fill it: each adapter module registers its adapters when it is imported
(:func:`register_adapter`), and :data:`ADAPTER_MODULES` names, by the framework's
top-level module, the adapter module to import the first time an object of that
framework is met — so ``import interlock`` imports no framework, and the guard asks
here instead of importing :mod:`interlock.adapters`. It also holds what an adapter
reports back: :class:`Coverage` of :class:`ToolBinding` and :class:`LLMBinding`.

Example::

    >>> from interlock.core.registry import adapter_for
    >>> adapter_for(object())
    Traceback (most recent call last):
    ...
    TypeError: no Interlock adapter can guard a object
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Final, Protocol, TypeVar, final

__all__ = [
    "ADAPTER_MODULES",
    "AdapterLike",
    "Coverage",
    "LLMBinding",
    "ToolBinding",
    "adapter_for",
    "register_adapter",
    "registered",
]


@final
@dataclass(frozen=True, slots=True)
class ToolBinding:
    """A framework tool as the guard sees it: what is judged, and where it lives.

    ``callable`` is what runs the tool (``None``: it runs elsewhere, a hosted tool);
    it lives at ``owner.attr`` or at ``container[key]``. ``guarded`` says whether every
    call of it passes the guard asked about (``note`` says why not, when it cannot)."""

    name: str
    description: str | None
    schema: dict[str, Any] | None  # the JSON Schema of its arguments, when known
    callable: Callable[..., Any] | None = None
    owner: object | None = None
    attr: str | None = None
    container: object | None = None
    key: object | None = None
    guarded: bool = False
    note: str | None = None


@final
@dataclass(frozen=True, slots=True)
class LLMBinding:
    """A model an agent calls, as the guard sees it (``label``: the model's name);
    where it lives and whether its calls pass the guard, as for :class:`ToolBinding`."""

    label: str
    callable: Callable[..., Any] | None = None
    owner: object | None = None
    attr: str | None = None
    container: object | None = None
    key: object | None = None
    guarded: bool = False
    note: str | None = None


@final
@dataclass(frozen=True, slots=True)
class Coverage:
    """What a guard holds of one framework object: its tools and models, each with
    whether its calls pass the guard. ``guard.coverage(agent).unguarded`` is empty when
    nothing the adapter can see runs unjudged."""

    framework: str
    tools: tuple[ToolBinding, ...]
    llms: tuple[LLMBinding, ...]
    models_inspected: bool  # False: this adapter does not look at model calls

    @property
    def unguarded(self) -> list[str]:
        """The tools (by name) and models (``model:<label>``) whose calls do not pass
        the guard."""
        tools = [t.name for t in self.tools if not t.guarded]
        return tools + [f"model:{m.label}" for m in self.llms if not m.guarded]

    def __str__(self) -> str:
        lines = [f"{self.framework}: {len(self.tools)} tool(s), {len(self.llms)} model(s)"]
        for kind, bindings in (("tool", self.tools), ("model", self.llms)):
            for b in bindings:
                name = b.name if isinstance(b, ToolBinding) else b.label
                state = "guarded" if b.guarded else "NOT guarded"
                lines.append(f"  {kind} {name}: {state}{f' ({b.note})' if b.note else ''}")
        if not self.models_inspected:
            lines.append("  (model calls are not inspected for this framework)")
        return "\n".join(lines)


class AdapterLike(Protocol):
    """What the guard asks of an adapter (:class:`interlock.adapters.base.Adapter`
    implements it); ``guard`` is the asking guard, typed loosely here because core
    knows nothing above it."""

    @property
    def framework(self) -> str: ...

    def can_wrap(self, obj: object) -> bool: ...

    def attach(self, obj: Any, guard: Any) -> Any: ...

    def detach(self, obj: Any) -> Any: ...

    def coverage(self, obj: Any, guard: Any = None) -> Coverage: ...

    def tool_bindings(self, obj: Any, guard: Any = None) -> list[ToolBinding]: ...


#: Top-level module of a framework type → the adapter module that handles it (imported
#: by name on first use; adding an entry is how an adapter registers lazily).
ADAPTER_MODULES: Final[dict[str, str]] = {
    "langchain_core": "interlock.adapters.langchain",
    "langchain": "interlock.adapters.langchain",
    "langgraph": "interlock.adapters.langchain",
    "agents": "interlock.adapters.openai_agents",
    "browser_use": "interlock.adapters.browser_use",
    "mcp": "interlock.adapters.mcp",
    "openai": "interlock.adapters.openai_client",
    "anthropic": "interlock.adapters.anthropic_client",
    "google": "interlock.adapters.google_adk",
    "pydantic_ai": "interlock.adapters.pydantic_ai",
    "smolagents": "interlock.adapters.smolagents",
    "autogen_agentchat": "interlock.adapters.autogen",
    "autogen_core": "interlock.adapters.autogen",
    "llama_index": "interlock.adapters.llama_index",
    "crewai": "interlock.adapters.crewai",
}

_ADAPTERS: dict[str, AdapterLike] = {}

A = TypeVar("A", bound=AdapterLike)


def register_adapter(adapter: A) -> A:
    """Make ``adapter`` the one :func:`adapter_for` returns for its framework."""
    _ADAPTERS[adapter.framework] = adapter
    return adapter


def registered() -> tuple[AdapterLike, ...]:
    """The adapters registered so far (those of the adapter modules imported)."""
    return tuple(_ADAPTERS.values())


def adapter_for(obj: object) -> AdapterLike:
    """The adapter that can guard ``obj``, importing its module on first use."""
    for klass in type(obj).__mro__:
        module = ADAPTER_MODULES.get(klass.__module__.partition(".")[0])
        if module is not None:
            importlib.import_module(module)
    for adapter in _ADAPTERS.values():
        if adapter.can_wrap(obj):
            return adapter
    raise TypeError(f"no Interlock adapter can guard a {type(obj).__name__}")
