"""The effect adapter contract: how an authorized action leaves the process.

An :class:`EffectAdapter` is four small methods, two of them pure:

- ``prepare(action)`` works out, before anything leaves the process (and before the
  authority is asked for a grant), the exact request, the effect it should have and
  the digest that binds the grant to that request. Pure: it reaches nothing.
- ``execute(execution)`` performs the effect once, with the runtime's idempotency key,
  the grant token and a deadline, and says what the provider did: ``COMMITTED``,
  ``FAILED`` (refused, or known never to have left), or ``INDETERMINATE``. An attempt
  that neither committed nor was refused — a timeout, a connection dropped after the
  request may have been sent, a 5xx — is INDETERMINATE, never a guess. It does not
  raise for the provider's behaviour; an exception out of it counts as INDETERMINATE.
- ``observe_effect(result, prepared)`` reads the provider's answer into a small JSON
  projection (what is recorded and audited). Pure: no second call.
- ``reconcile(context)`` asks the provider, read-only, what became of an idempotency
  key: done (with the result), never executed, or unknowable. It never initiates.

A family of effects is one module implementing this (:mod:`interlock.effects.http`
is the first); the pipeline (:mod:`interlock.effects.pipeline`) and the reconciler
(:mod:`interlock.effects.reconcile`) work off this contract alone.

Example::

    from interlock.effects.protocol import Outcome, ProviderResult

    lost = ProviderResult(Outcome.INDETERMINATE, reason="the connection dropped after send")
    assert not lost.outcome.final
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

if TYPE_CHECKING:
    from interlock.core.action import Action
    from interlock.verify.tokens import GrantClaims

__all__ = [
    "EffectAdapter",
    "Execution",
    "Outcome",
    "PreparedEffect",
    "ProviderResult",
    "ReconcileContext",
    "Reconciled",
    "Resolution",
]


class Outcome(StrEnum):
    """What became of one attempt."""

    COMMITTED = "committed"
    FAILED = "failed"
    INDETERMINATE = "indeterminate"

    @property
    def final(self) -> bool:
        """Whether the attempt's fate is known (committed or failed)."""
        return self is not Outcome.INDETERMINATE


@dataclass(frozen=True, slots=True)
class PreparedEffect:
    """What an action asks for, worked out before anything leaves the process.

    ``request`` describes the exact request (JSON-safe; recorded with the attempt,
    so it must hold no secret the adapter did not redact); ``body`` is the bytes that
    will be sent (not recorded); ``expected`` the effect it should have; ``binding``
    the digest a grant for it carries (``sha256:...``); ``audience`` the downstream
    system the grant is issued for."""

    request: Mapping[str, Any]
    binding: str
    audience: str
    body: bytes = b""
    expected: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Execution:
    """One attempt, as the pipeline hands it to ``execute``. ``deadline`` is a
    ``time.monotonic()`` instant; ``grant`` the compact token of the claimed grant
    and ``claims`` what it says (to check a provider's receipt against); ``effect_id``
    and ``attempt`` name the durable record of this attempt."""

    prepared: PreparedEffect
    idempotency_key: str
    deadline: float
    grant: str
    effect_id: str
    attempt: int
    claims: GrantClaims | None = None


@dataclass(frozen=True, slots=True)
class ProviderResult:
    """What the provider did. ``status`` is the provider's own code (an HTTP status),
    ``data`` its answer (JSON-safe), ``receipt`` its signed receipt when it gave one,
    ``reason`` why, in a sentence. ``sent`` is ``False`` only when the request is known
    never to have left (a FAILED attempt that a retry may run again)."""

    outcome: Outcome
    status: int | None = None
    data: Any = None
    receipt: str | None = None
    reason: str = ""
    sent: bool = True


class Resolution(StrEnum):
    """A reconciliation's answer."""

    DONE = "done"
    NEVER_EXECUTED = "never_executed"
    UNKNOWABLE = "unknowable"


@dataclass(frozen=True, slots=True)
class ReconcileContext:
    """What the reconciler knows of an interrupted attempt: its record."""

    effect_id: str
    tenant: str
    idempotency_key: str
    request: Mapping[str, Any]
    binding: str | None
    attempt: int
    grant_id: str | None = None
    intent_hash: str | None = None


@dataclass(frozen=True, slots=True)
class Reconciled:
    """``DONE`` carries the provider's ``result`` (COMMITTED or FAILED: it refused and
    remembers it); ``NEVER_EXECUTED`` means the provider has no trace of the key;
    ``UNKNOWABLE`` that it cannot say now (unreachable, still processing)."""

    resolution: Resolution
    result: ProviderResult | None = None
    reason: str = ""

    def __post_init__(self) -> None:
        if self.resolution is Resolution.DONE and (
            self.result is None or not self.result.outcome.final
        ):
            raise ValueError("a DONE reconciliation carries a COMMITTED or FAILED result")


@runtime_checkable
class EffectAdapter(Protocol):
    """One family of consequential actions (see the module)."""

    @property
    def id(self) -> str: ...

    @property
    def version(self) -> str: ...

    @property
    def action_types(self) -> tuple[str, ...]:
        """The action names (``Action.name``) this adapter answers for; empty: any."""
        ...

    def prepare(self, action: Action) -> PreparedEffect: ...

    def execute(self, execution: Execution) -> ProviderResult: ...

    def observe_effect(
        self, result: ProviderResult, prepared: PreparedEffect
    ) -> dict[str, Any] | None: ...

    def reconcile(self, context: ReconcileContext) -> Reconciled: ...
