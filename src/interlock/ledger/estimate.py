"""What a model call may use, from the request itself. Pure.

The input is the stated ``input_tokens`` (or ``prompt_tokens``), else the prompt's
size: the characters of every text in ``messages``, ``input``, ``prompt``,
``system``, ``instructions`` and ``tools``, divided by :data:`CHARS_PER_TOKEN` and
rounded up — a cheap rule that needs no tokenizer (it undercounts some scripts and
code; what a call really uses is charged anyway, and ``max_overage`` covers the gap).
The output is the stated ``max_output_tokens`` (or ``max_tokens``,
``max_completion_tokens``, ``output_tokens``), else the policy's
``pricing.default_max_tokens`` for the model, else unknown: a call with no bound on
its output has no estimate. A stated ``0`` states nothing.

Example::

    >>> estimate = estimate_model_call({"messages": [{"role": "user", "content": "hi there"}],
    ...                                 "max_tokens": 100})
    >>> (estimate.input_tokens, estimate.output_tokens)   # 12 characters: "user", "hi there"
    (3, 100)
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from interlock.errors import EvaluationError
from interlock.ledger.usage import Usage
from interlock.policy.matchers import GlobSet

__all__ = ["CHARS_PER_TOKEN", "Estimate", "MaxTokensTable", "estimate_model_call"]

#: Characters per token of the prompt-size estimate.
CHARS_PER_TOKEN: Final = 4

_STATED_INPUT = ("input_tokens", "prompt_tokens")
_STATED_OUTPUT = ("max_output_tokens", "max_tokens", "max_completion_tokens", "output_tokens")
_PROMPT_KEYS = ("messages", "input", "prompt", "system", "instructions", "tools")
# The walk over a prompt stops after this many values: the estimate is then a floor.
_MAX_VALUES: Final = 100_000
_MAX_TOKENS: Final = 2**53
_CACHE_LIMIT: Final = 4096


@dataclass(frozen=True, slots=True)
class Estimate:
    """A model call's input tokens (0 when nothing says) and its output bound (``None``:
    nothing bounds it)."""

    input_tokens: int
    output_tokens: int | None

    @property
    def bounded(self) -> bool:
        return self.output_tokens is not None

    def usage(self) -> Usage:
        """The estimate as usage (an unbounded output counts 0)."""
        return Usage(self.input_tokens, self.output_tokens or 0)


@dataclass(frozen=True, slots=True)
class MaxTokensTable:
    """Model name (or glob) → the ``max_tokens`` a call to it that names none is
    assumed to ask for (``pricing.default_max_tokens``). Exact names win over globs;
    globs apply in the order given."""

    entries: tuple[tuple[str, int], ...] = ()
    _exact: dict[str, int] = field(init=False, repr=False, compare=False)
    _globs: tuple[tuple[GlobSet, int], ...] = field(init=False, repr=False, compare=False)
    _cache: dict[str, int | None] = field(
        init=False, repr=False, compare=False, default_factory=dict
    )

    def __post_init__(self) -> None:
        exact = {p: n for p, n in self.entries if not any(c in p for c in "*?[")}
        globs = tuple((GlobSet.of(p), n) for p, n in self.entries if p not in exact)
        object.__setattr__(self, "_exact", exact)
        object.__setattr__(self, "_globs", globs)

    def get(self, model: str) -> int | None:
        try:
            return self._cache[model]
        except KeyError:
            pass
        found = self._exact.get(model)
        if found is None:
            found = next((n for globs, n in self._globs if globs.matches(model)), None)
        if len(self._cache) >= _CACHE_LIMIT:
            self._cache.clear()
        self._cache[model] = found
        return found


def estimate_model_call(
    arguments: Mapping[str, Any], default_max_tokens: int | None = None
) -> Estimate:
    """The estimate a model call's ``arguments`` carry (see the module docstring).
    Raises EvaluationError for a stated count that is not a whole number from 0 to
    2**53."""
    input_tokens = _stated(arguments, _STATED_INPUT)
    if not input_tokens:
        input_tokens = math.ceil(_prompt_chars(arguments) / CHARS_PER_TOKEN)
    output_tokens = _stated(arguments, _STATED_OUTPUT) or default_max_tokens or None
    return Estimate(input_tokens, output_tokens)


def _stated(arguments: Mapping[str, Any], names: tuple[str, ...]) -> int:
    for name in names:
        value = arguments.get(name)
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise EvaluationError(f"{name} must be a number of tokens, not {value!r}")
        if isinstance(value, float) and not value.is_integer():
            raise EvaluationError(f"{name} must be a whole number of tokens, not {value!r}")
        if not 0 <= value <= _MAX_TOKENS:
            raise EvaluationError(f"{name} must be from 0 to 2**53 tokens, not {value!r}")
        if value:
            return int(value)
    return 0


def _prompt_chars(arguments: Mapping[str, Any]) -> int:
    """Characters of every text under the prompt's keys (iteratively: no depth limit
    to hit, and at most ``_MAX_VALUES`` values)."""
    pending: list[Any] = [arguments[key] for key in _PROMPT_KEYS if key in arguments]
    chars = 0
    seen = 0
    while pending and seen < _MAX_VALUES:
        value = pending.pop()
        seen += 1
        if isinstance(value, str):
            chars += len(value)
        elif isinstance(value, Mapping):
            pending.extend(value.values())
        elif isinstance(value, (list, tuple)):
            pending.extend(value)
    return chars
