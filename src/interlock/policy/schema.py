"""The shape of ``interlock.yaml``, as pydantic models.

These models validate the file and publish its JSON Schema
(``interlock policy schema``); :mod:`interlock.policy.compiler` turns a validated
model into the compiled form the engine evaluates.
"""

from __future__ import annotations

import math
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    GetJsonSchemaHandler,
    field_validator,
    model_validator,
)
from pydantic.json_schema import JsonSchemaValue
from pydantic_core import CoreSchema

__all__ = [
    "EXTRACTED_PARAMS",
    "ApprovalSettings",
    "Condition",
    "Limits",
    "PolicyModel",
    "RedactionSettings",
    "RuleModel",
    "ScopeSettings",
    "policy_json_schema",
]

#: Parameters the extractor derives from a call's arguments; conditions name these,
#: or ``args.<dotted.path>`` for any declared argument.
EXTRACTED_PARAMS: tuple[str, ...] = (
    "command",
    "url",
    "domain",
    "path",
    "verb",
    "session_id",
    "est_cost",
    "target",
)

RuleId = Annotated[str, Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.:\-]*$", max_length=128)]
Globs = str | list[str]
DecisionName = Literal["allow", "deny", "require_approval"]
Mode = Literal["enforce", "shadow"]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Condition(_Strict):
    """Tests on one parameter. All tests given must hold; a missing parameter matches
    only ``exists: false``."""

    glob: Globs | None = Field(
        None, description="Matches if any glob matches (fnmatch, case-sensitive; `*` crosses `/`)."
    )
    not_glob: Globs | None = Field(None, description="Matches if no glob matches.")
    regex: Globs | None = Field(
        None, description="Matches if any regex is found (re.search; anchor with ^ and $)."
    )
    not_regex: Globs | None = Field(None, description="Matches if no regex is found.")
    eq: str | int | float | bool | None = None
    ne: str | int | float | bool | None = None
    in_: list[str | int | float | bool] | None = Field(None, alias="in")
    not_in: list[str | int | float | bool] | None = None
    gt: float | None = None
    gte: float | None = None
    lt: float | None = None
    lte: float | None = None
    exists: bool | None = None

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)

    @model_validator(mode="before")
    @classmethod
    def _shorthand(cls, value: Any) -> Any:
        # `command: "rm *"` means a glob; `amount: 5` means equality.
        if isinstance(value, str):
            return {"glob": value}
        if isinstance(value, list) and all(isinstance(v, str) for v in value):
            return {"glob": value}
        if isinstance(value, (bool, int, float)):
            return {"eq": value}
        return value

    @classmethod
    def __get_pydantic_json_schema__(
        cls, core_schema: CoreSchema, handler: GetJsonSchemaHandler
    ) -> JsonSchemaValue:
        # Publish the shorthands too: a glob string, a list of globs, or a value.
        full = handler(core_schema)
        return {
            "anyOf": [
                full,
                {"type": "string", "description": "shorthand for {glob: ...}"},
                {"type": "array", "items": {"type": "string"}, "description": "any-of globs"},
                {"type": ["number", "boolean"], "description": "shorthand for {eq: ...}"},
            ]
        }

    @model_validator(mode="after")
    def _not_empty(self) -> Condition:
        if not self.model_fields_set:
            raise ValueError("a condition needs at least one test (glob, regex, eq, in, gt, ...)")
        for name in ("gt", "gte", "lt", "lte"):
            bound = getattr(self, name)
            if bound is not None and not math.isfinite(bound):
                raise ValueError(f"{name} must be a finite number")
        return self


class RuleModel(_Strict):
    """One rule: who and what it matches, and the decision it gives."""

    id: RuleId = Field(description="Unique id; named in every decision this rule makes.")
    decision: DecisionName
    reason: str = Field(min_length=1, description="Why; shown to the agent and in records.")
    description: str | None = None
    mode: Mode = Field("enforce", description="`shadow` records the verdict without enforcing it.")
    kind: str | list[str] | None = Field(
        None, description="Action kinds: tool, llm, mcp, browser, effect."
    )
    name: Globs | None = Field(None, description="Globs on the tool (or model) name.")
    scope: str | list[str] | None = Field(
        None, description="Scopes: shell, filesystem, network, browser, data, cost, llm, or custom."
    )
    agent: Globs | None = Field(None, description="Globs on the agent id from the trusted context.")
    tenant: Globs | None = Field(None, description="Globs on the tenant from the trusted context.")
    params: dict[str, Condition] = Field(
        default_factory=dict,
        description="Conditions on extracted parameters (command, url, domain, path, verb, "
        "session_id, est_cost, target) or on arguments as `args.<dotted.path>`.",
    )
    when: str | None = Field(
        None,
        description="A CEL expression over `action`, `args`, `params` and `context`; must be "
        "true for the rule to match. Compiled at load.",
    )

    @field_validator("kind")
    @classmethod
    def _known_kinds(cls, value: str | list[str] | None) -> str | list[str] | None:
        known = {"tool", "llm", "mcp", "browser", "effect"}
        for kind in [value] if isinstance(value, str) else value or []:
            if kind not in known:
                raise ValueError(f"unknown kind {kind!r}; expected one of {sorted(known)}")
        return value


class ScopeSettings(_Strict):
    default: str = Field("shell", description="Scope of a tool that nothing else classifies.")
    tools: dict[str, str] = Field(
        default_factory=dict,
        description="Tool-name glob → scope. Wins over inference; the first matching glob "
        "in file order applies.",
    )


class ApprovalSettings(_Strict):
    url: str | None = Field(
        None, description="Template for approval links; `{id}` is replaced by the approval id."
    )


class Limits(_Strict):
    max_depth: int = Field(32, ge=1, le=1024, description="Deepest argument nesting judged.")
    max_items: int = Field(10_000, ge=1, description="Most argument values (all levels) judged.")
    max_param_chars: int = Field(
        65_536, ge=1, description="Longest extracted parameter (command, path, url) judged."
    )


class RedactionSettings(_Strict):
    patterns: list[str] = Field(
        default_factory=list, description="Extra regexes whose matches are redacted in records."
    )


class PolicyModel(_Strict):
    """An ``interlock.yaml`` file."""

    version: Literal[1] = Field(description="Policy format version. Only 1 exists.")
    default: DecisionName = Field(
        "deny", description="Decision when no rule matches. Ships as deny."
    )
    mode: Mode = Field("enforce", description="`shadow` records verdicts and lets actions run.")
    description: str | None = None
    rules: list[RuleModel] = Field(default_factory=list)
    scopes: ScopeSettings = Field(default_factory=ScopeSettings)  # type: ignore[arg-type]
    approvals: ApprovalSettings = Field(default_factory=ApprovalSettings)  # type: ignore[arg-type]
    limits: Limits = Field(default_factory=Limits)  # type: ignore[arg-type]
    redaction: RedactionSettings = Field(default_factory=RedactionSettings)


def policy_json_schema() -> dict[str, Any]:
    """The JSON Schema of ``interlock.yaml`` (for editors and CI linting)."""
    schema = PolicyModel.model_json_schema(by_alias=True)
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    schema["title"] = "Interlock policy (interlock.yaml)"
    return schema
