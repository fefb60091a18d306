"""Token usage: what a model call is estimated to use, and what it really used.

Example::

    from interlock.ledger.usage import Usage

    Usage(input_tokens=1_200, output_tokens=800).total   # 2000
    Usage.of({"prompt_tokens": 10, "completion_tokens": 5})  # OpenAI chat usage
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

__all__ = ["Usage"]

# The most tokens a usage counts: more is not a usage, it is a mistake or an attack.
_MOST = 2**53

_INPUT_NAMES = ("input_tokens", "prompt_tokens")
_OUTPUT_NAMES = ("output_tokens", "completion_tokens", "max_output_tokens", "max_tokens")


@dataclass(frozen=True, slots=True)
class Usage:
    """Input and output tokens of one model call."""

    input_tokens: int = 0
    output_tokens: int = 0

    def __post_init__(self) -> None:
        for name in ("input_tokens", "output_tokens"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= _MOST:
                raise ValueError(f"{name} must be an integer from 0 to 2**53, not {value!r}")

    @property
    def total(self) -> int:
        return self.input_tokens + self.output_tokens

    def as_arguments(self) -> dict[str, int]:
        """The arguments of an ``llm`` action that carry this estimate."""
        return {"input_tokens": self.input_tokens, "max_output_tokens": self.output_tokens}

    @classmethod
    def of(cls, value: Any) -> Usage:
        """Read usage from a :class:`Usage`, a mapping or a provider's usage object:
        ``input_tokens``/``output_tokens`` (Anthropic, OpenAI Responses, LangChain's
        ``usage_metadata``) or ``prompt_tokens``/``completion_tokens`` (OpenAI Chat).
        Raises ValueError when neither is there."""
        if isinstance(value, Usage):
            return value
        get = value.get if isinstance(value, Mapping) else _attribute_getter(value)
        tokens_in = _first(get, _INPUT_NAMES)
        tokens_out = _first(get, _OUTPUT_NAMES)
        if tokens_in is None and tokens_out is None:
            raise ValueError(
                f"no token counts in {type(value).__name__}: expected input_tokens/"
                "output_tokens or prompt_tokens/completion_tokens"
            )
        return cls(int(tokens_in or 0), int(tokens_out or 0))

    @classmethod
    def from_arguments(cls, arguments: Mapping[str, Any]) -> Usage:
        """The estimate an ``llm`` action carries (zero where it carries none)."""
        try:
            return cls.of(arguments)
        except ValueError:
            return cls()


def _attribute_getter(value: Any) -> Any:
    def get(name: str) -> Any:
        return getattr(value, name, None)

    return get


def _first(get: Any, names: tuple[str, ...]) -> int | None:
    for name in names:
        found = get(name)
        if found is None:
            continue
        if isinstance(found, bool) or not isinstance(found, (int, float)):
            raise ValueError(f"{name} must be a number, not {found!r}")
        if isinstance(found, float) and not found.is_integer():
            raise ValueError(f"{name} must be a whole number, not {found!r}")
        return int(found)
    return None
