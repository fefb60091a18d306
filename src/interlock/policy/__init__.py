"""Policies: the ``interlock.yaml`` schema, its loader and the pure local engine."""

from __future__ import annotations

from interlock.policy.compiled import CompiledPolicy, CompiledRule
from interlock.policy.engine import AMBIGUOUS_URL_RULE, CONFLICTING_ALIASES_RULE, evaluate
from interlock.policy.loader import compile_policy, load_policy, load_policy_text
from interlock.policy.schema import policy_json_schema

__all__ = [
    "AMBIGUOUS_URL_RULE",
    "CONFLICTING_ALIASES_RULE",
    "CompiledPolicy",
    "CompiledRule",
    "compile_policy",
    "evaluate",
    "load_policy",
    "load_policy_text",
    "policy_json_schema",
]
