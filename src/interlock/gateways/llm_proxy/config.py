"""What the proxy relays to: one upstream per provider, with the key the proxy holds."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field

__all__ = ["DEFAULT_MAX_BODY", "DEFAULT_MAX_HELD", "ProxyConfig", "Upstream"]

#: The largest request body the proxy reads (bytes); more is a 413.
DEFAULT_MAX_BODY = 32 * 1024 * 1024
#: The most a stream holds back of its tool calls until they are judged (bytes).
DEFAULT_MAX_HELD = 32 * 1024 * 1024


@dataclass(frozen=True, slots=True)
class Upstream:
    """A provider's API: ``base_url`` as its SDK takes it (OpenAI: ``…/v1``;
    Anthropic: without ``/v1``) and the key the proxy sends (never the client's)."""

    base_url: str
    api_key: str = field(default="", repr=False)

    def __post_init__(self) -> None:
        if not self.base_url.startswith(("http://", "https://")):
            raise ValueError(f"an upstream URL must be http(s), not {self.base_url!r}")
        object.__setattr__(self, "base_url", self.base_url.rstrip("/"))


@dataclass(frozen=True, slots=True)
class ProxyConfig:
    """The upstreams (a provider left ``None`` answers 404), and limits.

    ``max_held_bytes``: what one stream may hold back of the tool calls it has not
    judged yet (their names and arguments); a call that would pass it is refused.

    ``session_header``: whether a request may name its session
    (``x-interlock-session``, scoped to its key) when the policy reads sessions;
    ``False``: every session is the conversation's own (its system prompt and first
    user message)."""

    openai: Upstream | None = None
    anthropic: Upstream | None = None
    max_body: int = DEFAULT_MAX_BODY
    max_held_bytes: int = DEFAULT_MAX_HELD
    session_header: bool = True

    def __post_init__(self) -> None:
        if self.max_held_bytes < 1:
            raise ValueError(f"max_held_bytes must be at least 1, not {self.max_held_bytes}")

    @classmethod
    def from_urls(
        cls,
        *,
        openai_url: str | None,
        anthropic_url: str | None,
        environ: Mapping[str, str] | None = None,
        **options: object,
    ) -> ProxyConfig:
        """Upstreams at these URLs, with the keys in ``OPENAI_API_KEY`` and
        ``ANTHROPIC_API_KEY`` of the proxy's own environment."""
        env = os.environ if environ is None else environ
        openai = Upstream(openai_url, env.get("OPENAI_API_KEY", "")) if openai_url else None
        anthropic = (
            Upstream(anthropic_url, env.get("ANTHROPIC_API_KEY", "")) if anthropic_url else None
        )
        return cls(openai=openai, anthropic=anthropic, **options)  # type: ignore[arg-type]
