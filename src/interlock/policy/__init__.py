"""Policies: the ``interlock.yaml`` schema, its loader and the pure local engine.

The names are imported on first use (PEP 562): the engine needs no pydantic, and
``from interlock.policy.compiled import ...`` must not build the schema models.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from interlock._lazy import lazy_attributes

if TYPE_CHECKING:
    from interlock.policy.compiled import CompiledPolicy, CompiledRule
    from interlock.policy.engine import (
        AMBIGUOUS_URL_RULE,
        CONFLICTING_ALIASES_RULE,
        evaluate,
    )
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

_LAZY: dict[str, str] = {
    "AMBIGUOUS_URL_RULE": "interlock.policy.engine",
    "CONFLICTING_ALIASES_RULE": "interlock.policy.engine",
    "CompiledPolicy": "interlock.policy.compiled",
    "CompiledRule": "interlock.policy.compiled",
    "compile_policy": "interlock.policy.loader",
    "evaluate": "interlock.policy.engine",
    "load_policy": "interlock.policy.loader",
    "load_policy_text": "interlock.policy.loader",
    "policy_json_schema": "interlock.policy.schema",
}


__getattr__, __dir__ = lazy_attributes(__name__, globals(), _LAZY)
