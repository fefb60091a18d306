"""What an agent proposes to do, normalised: ``Action`` and its trusted ``Context``.

Example::

    from interlock import Action, Context

    action = Action.tool(
        "shell",
        {"command": "ls -la"},
        context=Context(tenant="acme", agent="ops-bot", session_id="s-1"),
    )
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Final, Literal

__all__ = ["CONTEXT_TEXTS", "KINDS", "SCOPES", "Action", "ActionKind", "Context", "Downstream"]

ActionKind = Literal["tool", "llm", "mcp", "browser", "effect"]
KINDS: Final[frozenset[str]] = frozenset({"tool", "llm", "mcp", "browser", "effect"})
SCOPES: Final[tuple[str, ...]] = (
    "shell",
    "filesystem",
    "network",
    "browser",
    "data",
    "cost",
    "llm",
)


@dataclass(frozen=True, slots=True)
class Downstream:
    """The system an effect lands on, as the runtime (not the model) names it."""

    system: str
    operation: str | None = None
    endpoint: str | None = None


@dataclass(frozen=True, slots=True)
class Context:
    """What the runtime states about a call and the model cannot forge.

    ``call_id`` is the framework's id for the model's call, kept for correlation only;
    ``idempotency_key`` is the runtime's retry identity.
    """

    tenant: str = "default"
    agent: str | None = None
    agent_type: str | None = None
    runtime: str | None = None
    session_id: str | None = None
    run_id: str | None = None
    call_id: str | None = None
    idempotency_key: str | None = None
    downstream: Downstream | None = None

    def __post_init__(self) -> None:
        # one test of the usual case (every field a str or None), the names on a miss:
        # a wrong type would otherwise fail far away (the audit record, a store key)
        if (
            type(self.tenant) is not str
            or (self.agent is not None and type(self.agent) is not str)
            or (self.session_id is not None and type(self.session_id) is not str)
            or (self.agent_type is not None and type(self.agent_type) is not str)
            or (self.runtime is not None and type(self.runtime) is not str)
            or (self.run_id is not None and type(self.run_id) is not str)
            or (self.call_id is not None and type(self.call_id) is not str)
            or (self.idempotency_key is not None and type(self.idempotency_key) is not str)
            or (self.downstream is not None and type(self.downstream) is not Downstream)
        ):
            self._refuse()

    def _refuse(self) -> None:
        """Name the field of a wrong type; a str subclass (a ``StrEnum`` tenant) is
        kept as the plain str it holds (a subclass's hash and == could lie)."""
        for name in CONTEXT_TEXTS:
            value = getattr(self, name)
            if isinstance(value, str):
                if type(value) is not str:
                    object.__setattr__(self, name, str.__str__(value))
            elif value is not None or name == "tenant":
                wanted = "a str" if name == "tenant" else "a str or None"
                raise TypeError(f"Context.{name} must be {wanted}, not {type(value).__name__}")
        if self.downstream is not None and not isinstance(self.downstream, Downstream):
            raise TypeError(
                f"Context.downstream must be a Downstream or None, not "
                f"{type(self.downstream).__name__}"
            )

    def merged_over(self, base: Context) -> Context:
        """This context with every unset field filled from ``base``."""
        return Context(
            tenant=self.tenant if self.tenant != "default" else base.tenant,
            agent=self.agent if self.agent is not None else base.agent,
            agent_type=self.agent_type if self.agent_type is not None else base.agent_type,
            runtime=self.runtime if self.runtime is not None else base.runtime,
            session_id=self.session_id if self.session_id is not None else base.session_id,
            run_id=self.run_id if self.run_id is not None else base.run_id,
            call_id=self.call_id,
            idempotency_key=self.idempotency_key,
            downstream=self.downstream if self.downstream is not None else base.downstream,
        )

    def as_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "tenant": self.tenant,
            "agent": self.agent,
            "agent_type": self.agent_type,
            "runtime": self.runtime,
            "session_id": self.session_id,
            "run_id": self.run_id,
            "call_id": self.call_id,
            "idempotency_key": self.idempotency_key,
        }
        if self.downstream is not None:
            out["downstream"] = {
                "system": self.downstream.system,
                "operation": self.downstream.operation,
                "endpoint": self.downstream.endpoint,
            }
        return out


#: The fields of a :class:`Context` that hold text (``downstream`` aside).
CONTEXT_TEXTS: Final = (
    "tenant",
    "agent",
    "agent_type",
    "runtime",
    "session_id",
    "run_id",
    "call_id",
    "idempotency_key",
)
_EMPTY_CONTEXT: Final = Context()


@dataclass(frozen=True, slots=True)
class Action:
    """One thing an agent proposes to do.

    ``arguments`` is always a mapping (use :meth:`tool` to accept a JSON string).
    ``scope`` pins the scope; left ``None`` it is inferred from the name, the
    description and the argument keys. ``schema`` is the tool's declared JSON
    schema for its parameters: arguments are projected onto it before the check, so
    keys the tool would never receive cannot steer the verdict.
    """

    kind: str
    name: str
    arguments: Mapping[str, Any] = field(default_factory=dict)
    target: str | None = None
    scope: str | None = None
    description: str | None = None
    schema: Mapping[str, Any] | None = None
    capabilities: tuple[str, ...] = ()
    context: Context = _EMPTY_CONTEXT

    @classmethod
    def tool(
        cls,
        name: str,
        arguments: Mapping[str, Any] | str | None = None,
        **fields: Any,
    ) -> Action:
        """A tool call. ``arguments`` may be a dict or the JSON string a model emitted;
        a string that is not a JSON object is kept as ``{"input": <string>}``."""
        return cls(kind="tool", name=name, arguments=normalise_arguments(arguments), **fields)

    @classmethod
    def llm(cls, model: str, **fields: Any) -> Action:
        """A model call (``name`` is the model)."""
        fields.setdefault("scope", "llm")
        return cls(kind="llm", name=model, **fields)

    def with_context(self, context: Context) -> Action:
        if type(self) is Action:  # every check of a guard with a context: positional,
            # not dataclasses.replace (which reads each field back by name)
            return Action(
                self.kind,
                self.name,
                self.arguments,
                self.target,
                self.scope,
                self.description,
                self.schema,
                self.capabilities,
                context,
            )
        return replace(self, context=context)

    def summary(self) -> dict[str, Any]:
        """A plain-data form of the action for records (not yet redacted)."""
        out: dict[str, Any] = {"kind": self.kind, "name": self.name}
        out["arguments"] = dict(self.arguments)
        if self.target is not None:
            out["target"] = self.target
        if self.scope is not None:
            out["scope"] = self.scope
        if self.capabilities:
            out["capabilities"] = list(self.capabilities)
        return out


def normalise_arguments(arguments: Mapping[str, Any] | str | bytes | None) -> Mapping[str, Any]:
    """Turn what a framework hands over into a mapping, once.

    ``None`` is ``{}``; a JSON object string is parsed; any other string (or a JSON
    value that is not an object) becomes ``{"input": value}``.
    """
    if arguments is None:
        return {}
    if isinstance(arguments, Mapping):
        return arguments
    if isinstance(arguments, bytes):
        arguments = arguments.decode("utf-8", errors="backslashreplace")
    if isinstance(arguments, str):
        try:
            parsed = json.loads(arguments)
        except ValueError:
            return {"input": arguments}
        if isinstance(parsed, dict):
            return parsed
        return {"input": parsed}
    if isinstance(arguments, Sequence):
        return {"input": list(arguments)}
    raise TypeError(f"arguments must be a mapping or a JSON string, not {type(arguments).__name__}")
