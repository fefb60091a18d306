"""Framework adapters: the guard at each framework's own tool-call hook.

Importing this package imports no framework; each adapter module (e.g.
``interlock.adapters.langchain``) imports its framework and fails with an ImportError
naming the extra to install when it is missing or out of the supported range.
"""

from __future__ import annotations

from interlock.adapters.base import (
    Adapter,
    Coverage,
    LLMBinding,
    Outcome,
    PatchTarget,
    ToolBinding,
    adapter_for,
    register_adapter,
    verdict_outcome,
)

__all__ = [
    "Adapter",
    "Coverage",
    "LLMBinding",
    "Outcome",
    "PatchTarget",
    "ToolBinding",
    "adapter_for",
    "register_adapter",
    "verdict_outcome",
]
