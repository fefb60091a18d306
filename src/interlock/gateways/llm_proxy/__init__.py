"""An OpenAI- and Anthropic-compatible model proxy that gates every model call
(``interlock llm-proxy``; see docs/llm-proxy.md).

Example::

    from interlock import Guard
    from interlock.gateways.llm_proxy import ProxyConfig, Upstream, create_app

    guard = Guard.from_file("interlock.yaml", store="sqlite:///.interlock/interlock.db")
    app = create_app(guard, ProxyConfig(openai=Upstream("https://example.test/v1", "sk-...")))

Needs ``pip install 'interlock[llm-proxy]'``.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from .config import DEFAULT_MAX_BODY, DEFAULT_MAX_HELD, ProxyConfig, Upstream

if TYPE_CHECKING:
    from .app import ProxyApp, create_app
    from .shared import SharedServer

__all__ = [
    "DEFAULT_MAX_BODY",
    "DEFAULT_MAX_HELD",
    "ProxyApp",
    "ProxyConfig",
    "SharedServer",
    "Upstream",
    "create_app",
]

# The proxy itself is imported on first use: the pure modules beside it (the wire
# facts of ``flavours`` and ``responses``, read by the official-client adapters) must
# import without the proxy's extra.
_SERVING = {"ProxyApp": ".app", "create_app": ".app", "SharedServer": ".shared"}


def __getattr__(name: str) -> Any:
    module = _SERVING.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    try:
        import httptools as _httptools  # noqa: F401
        import httpx as _httpx  # noqa: F401
    except ImportError as exc:  # pragma: no cover - depends on the installed extras
        raise ImportError(
            f"the LLM proxy needs its extra ({exc.name} is missing): "
            "pip install 'interlock[llm-proxy]'"
        ) from exc
    return getattr(importlib.import_module(module, __name__), name)
