"""Session history over HTTP: what a remote agent reports so that the server's
session-aware rules see what its calls did and read (issue 18).

- ``POST /v1/sessions/outcome`` — the outcome of a call the server decided
  (``decision_id`` from ``/v1/check``): whether it ran, the fingerprints of its
  result — computed by the agent with :func:`interlock.session.fingerprints.of_data`;
  the result itself never leaves the agent — and labels its result carries.
- ``POST /v1/sessions/input`` — outside data entering the session: the user's
  request or a system prompt (``trusted``), an inbound message (not trusted, e.g.
  labels ``["untrusted"]``), as its fingerprints; with ``tool`` (the name and arguments
  of the call an untrusted input is the result of), the server adds the labels its own
  policy gives such a call.

Fingerprints travel as base64 of packed sorted little-endian uint64
(:mod:`interlock.session.packing`), at most 4096. Both are within the key's tenant,
the session named in the body (as ``/v1/check`` takes it from the call's context);
they only ever add labels (a label is removed by a policy's declared ``clear``, never
by a client). ``recorded`` is false when the server's policy reads no sessions
(nothing is kept then), or, for an outcome, when the session has no such step; 503
``session_unavailable`` when the history cannot be written.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Any, Final

from fastapi import APIRouter, Depends, Request
from pydantic import BaseModel, ConfigDict, Field, field_validator

from interlock.core.action import Context
from interlock.errors import SessionUnavailable, message_of
from interlock.server.api_models import ErrorOut
from interlock.server.auth import Permission, require
from interlock.server.errors import ApiError
from interlock.server.keys import ApiKey
from interlock.server.routes.common import errors
from interlock.server.state import state_of
from interlock.session.fingerprints import MAX_FINGERPRINTS
from interlock.session.history import NewStep
from interlock.session.labels import LABEL_PATTERN
from interlock.session.packing import unpack_text

if TYPE_CHECKING:
    from interlock.session.history import SessionHistory

__all__ = ["CallIn", "InputIn", "OutcomeIn", "RecordedOut", "router"]

router = APIRouter(prefix="/v1/sessions", tags=["sessions"])
CheckKey = Annotated[ApiKey, Depends(require(Permission.CHECK))]

#: base64 of MAX_FINGERPRINTS packed uint64s, rounded up
_MAX_TEXT: Final = (MAX_FINGERPRINTS * 8 + 2) // 3 * 4
Label = Annotated[str, Field(pattern=LABEL_PATTERN)]
SessionId = Annotated[
    str, Field(min_length=1, max_length=200, pattern=r"^[^\x00-\x1f\x7f]+$")
]  # as /v1/check takes it


def _fingerprints(text: str) -> frozenset[int]:
    try:
        return unpack_text(text)
    except ValueError as exc:
        raise ValueError(str(exc)) from None


class OutcomeIn(BaseModel):
    """The outcome of a call this server decided."""

    model_config = ConfigDict(extra="forbid")

    session_id: SessionId
    decision_id: str = Field(min_length=1, max_length=200, description="From /v1/check.")
    executed: bool = Field(description="Whether the call ran (false: it raised).")
    fingerprints: str = Field(
        "",
        max_length=_MAX_TEXT,
        description="base64 of the result's fingerprints, packed sorted little-endian uint64.",
    )
    labels: list[Label] = Field(default_factory=list, max_length=32)

    @field_validator("fingerprints")
    @classmethod
    def _valid_fingerprints(cls, value: str) -> str:
        _fingerprints(value)
        return value


class CallIn(BaseModel):
    """The call an untrusted input is the result of."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field(min_length=1, max_length=200, description="The tool's name.")
    arguments: Any = Field(
        None,
        description="Its arguments: an object, or the JSON text a model wrote. Anything "
        "else gets every label the policy's label rules could attach to a call of the tool.",
    )


class InputIn(BaseModel):
    """Outside data entering a session, as its fingerprints."""

    model_config = ConfigDict(extra="forbid")

    session_id: SessionId
    fingerprints: str = Field(
        "",
        max_length=_MAX_TEXT,
        description="base64 of the input's fingerprints, packed sorted little-endian uint64.",
    )
    trusted: bool = Field(
        description="Required: true for the user's request or the operator's prompt (a value "
        "they hold counts as the user's), false for an inbound message."
    )
    labels: list[Label] = Field(default_factory=list, max_length=32)
    tool: CallIn | None = Field(
        None,
        description="An untrusted input that is a tool's result: the call it answers. The "
        "server adds the labels its policy gives an allowed call of that tool with those "
        "arguments (a result whose call this server did not decide, or cannot match).",
    )

    @field_validator("fingerprints")
    @classmethod
    def _valid_fingerprints(cls, value: str) -> str:
        _fingerprints(value)
        return value


class RecordedOut(BaseModel):
    recorded: bool = Field(
        description="False when the server's policy reads no sessions, or (an outcome) "
        "the session holds no step of that decision."
    )
    seq: int | None = Field(None, description="The input's step number in its session.")


def _responses() -> dict[int | str, dict[str, Any]]:
    return {
        **errors(403),
        503: {"model": ErrorOut, "description": "The session history cannot be written."},
    }


def _history(request: Request) -> SessionHistory | None:
    """The server guard's session history: None until its policy reads sessions."""
    history: SessionHistory | None = getattr(state_of(request).guard, "sessions", None)
    return history


def _unavailable(exc: SessionUnavailable) -> ApiError:
    return ApiError(503, "session_unavailable", message_of(exc))


@router.post("/outcome", response_model=RecordedOut, responses=_responses())
def record_outcome(body: OutcomeIn, request: Request, key: CheckKey) -> RecordedOut:
    """Settle the session step of a decided call: ran or not, its result's
    fingerprints (computed by the agent), labels its result carries."""
    history = _history(request)
    if history is None:
        return RecordedOut(recorded=False, seq=None)
    settle = getattr(history, "settle_step", None)  # the SQL history says if it matched
    try:
        known = (settle or history.settle)(
            key.tenant,
            body.session_id,
            body.decision_id,
            executed=body.executed,
            fingerprints=_fingerprints(body.fingerprints),
            labels=frozenset(body.labels),
        )
    except SessionUnavailable as exc:
        raise _unavailable(exc) from None
    return RecordedOut(recorded=known is not False, seq=None)


@router.post("/input", response_model=RecordedOut, responses=_responses())
def record_input(body: InputIn, request: Request, key: CheckKey) -> RecordedOut:
    """Record outside data entering the session (its fingerprints)."""
    history = _history(request)
    if history is None:
        return RecordedOut(recorded=False, seq=None)
    labels = frozenset(body.labels)
    if body.tool is not None and not body.trusted:
        from interlock.policy.call_labels import labels_of_call

        context = Context(tenant=key.tenant, agent=key.identity, session_id=body.session_id)
        policy = state_of(request).guard.policy
        labels |= labels_of_call(policy, context, body.tool.name, body.tool.arguments)
    step = NewStep(
        kind="input",
        name="input" if body.trusted else "input:untrusted",
        verdict="input",
        labels=labels,
        fingerprints=_fingerprints(body.fingerprints),
        trusted=body.trusted,
        executed=True,
    )
    try:
        kept = history.append(key.tenant, body.session_id, step)
    except SessionUnavailable as exc:
        raise _unavailable(exc) from None
    return RecordedOut(recorded=True, seq=kept.seq)
