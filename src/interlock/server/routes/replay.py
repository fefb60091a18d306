"""``POST /v1/audit/replay``: judge the key's tenant's recorded calls under a draft
policy sent in the body, and answer what would change (admin keys only).

Bounded: the draft is at most :data:`MAX_POLICY_CHARS` characters (and the server's
body limit), at most ``max_records`` decision records are replayed (no more than
:data:`MAX_RECORDS`; the answer says when it was cut short), and at most
:data:`MAX_EXAMPLES` example calls are kept per change. The replay writes nothing.
"""

from __future__ import annotations

from typing import Annotated, Any, Final

from fastapi import APIRouter, Depends, Request
from pydantic import BaseModel, ConfigDict, Field

from interlock.errors import PolicyError
from interlock.server.auth import Permission, require
from interlock.server.errors import ApiError
from interlock.server.keys import ApiKey
from interlock.server.routes.common import errors
from interlock.server.state import state_of

__all__ = ["MAX_EXAMPLES", "MAX_POLICY_CHARS", "MAX_RECORDS", "ReplayIn", "ReplayOut", "router"]

#: The longest draft policy accepted, in characters.
MAX_POLICY_CHARS: Final = 256 * 1024
#: The most decision records one request replays.
MAX_RECORDS: Final = 1_000_000
MAX_EXAMPLES: Final = 20

router = APIRouter(prefix="/v1/audit", tags=["audit"])

AdminKey = Annotated[ApiKey, Depends(require(Permission.AUDIT_REPLAY))]
_Filter = Annotated[str | None, Field(min_length=1, max_length=200, pattern=r"^[^\x00-\x1f]+$")]
_Moment = Annotated[int | None, Field(ge=0, le=2**62)]


class ReplayIn(BaseModel):
    """The draft and which of the tenant's records to judge by it."""

    model_config = ConfigDict(extra="forbid")

    policy: str = Field(
        min_length=1, max_length=MAX_POLICY_CHARS, description="The draft policy, as YAML text."
    )
    since_us: _Moment = Field(None, description="From this time (µs since the epoch, inclusive).")
    until_us: _Moment = Field(None, description="Before this time (µs since the epoch).")
    agent: _Filter = Field(None, description="Only this agent.")
    tool: _Filter = Field(None, description="Only tools (or models) matching this glob.")
    max_records: int = Field(100_000, ge=1, le=MAX_RECORDS, description="Replay at most this many.")
    examples: int = Field(3, ge=0, le=MAX_EXAMPLES, description="Example calls kept per change.")
    fail_on: str = Field("never", pattern="^(loosen|any|never)$", description="Sets `failed`.")


class ReplayOut(BaseModel):
    """The replay report (``schema`` ``interlock.replay/1``; see docs/replay.md)."""

    model_config = ConfigDict(extra="allow")

    schema_: str = Field(alias="schema", description="interlock.replay/1")
    policy: dict[str, Any]
    filters: dict[str, Any]
    records: dict[str, Any] = Field(description="read, replayed, skipped, truncated")
    outcome: dict[str, int] = Field(description="unchanged, rules_changed, changed, cannot_tell")
    changes: dict[str, int] = Field(description="Calls per verdict change.")
    loosening: list[str] = Field(description="The changes that are loosenings.")
    loosened: int
    tightened: int
    stateful: dict[str, Any] = Field(description="Budgets and rate limits: not replayed.")
    rules: dict[str, Any] = Field(description="Per rule id: old, new, changes.")
    never_fired: list[str]
    examples: dict[str, list[dict[str, Any]]]
    fail_on: str
    failed: bool


@router.post(
    "/replay",
    response_model=ReplayOut,
    response_model_by_alias=True,
    responses=errors(403),
)
def replay_audit(request: Request, key: AdminKey, body: ReplayIn) -> dict[str, Any]:
    """Re-decide the tenant's recorded calls under the draft policy in the body, with
    the pure engine (no approvals, budgets or rate limits are touched; nothing is
    written), and answer what would change: loosenings, tightenings, approvals added or
    removed, the calls whose verdict cannot be told from their redacted record, counts
    per rule, the rules the draft never fires, and example calls."""
    from interlock.policy.loader import load_policy_text
    from interlock.replay import ReplayFilter, replay_store

    if body.since_us is not None and body.until_us is not None and body.since_us >= body.until_us:
        raise ApiError(422, "invalid", "since_us is not before until_us", field="since_us")
    try:
        draft = load_policy_text(body.policy, file="draft")
    except PolicyError as exc:
        raise ApiError(422, "invalid_policy", str(exc), field="policy") from None
    filters = ReplayFilter(body.since_us, body.until_us, key.tenant, body.agent, body.tool)
    report = replay_store(
        state_of(request).store,
        draft,
        filters,
        examples=body.examples,
        max_records=body.max_records,
    )
    return report.as_json(body.fail_on)  # type: ignore[arg-type]
