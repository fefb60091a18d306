"""``interlock serve``: the shared decision point over HTTP.

One :class:`~interlock.Guard` behind a versioned API (``/v1``, OpenAPI published),
API keys that carry a tenant and a role, and Prometheus metrics. Needs
``pip install 'interlock[server]'``; the key store (:mod:`interlock.server.keys`)
does not, so ``interlock keys ...`` works without it.

Example::

    from interlock import Guard
    from interlock.server import KeyStore, Role, create_app

    guard = Guard.from_file("interlock.yaml", store="sqlite:///.interlock/interlock.db")
    token = KeyStore(guard.store).create(tenant="acme", role=Role.AGENT, name="ops-bot").token
    app = create_app(guard)
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from interlock.server.errors import (
    ApiError,
    ApiKeyError,
    ApiKeyNotFound,
    KeyNameTaken,
    ServerError,
)
from interlock.server.keys import ApiKey, KeyStore, NameCollision, NewKey, Role

if TYPE_CHECKING:
    from interlock.server.app import create_app

__all__ = [
    "ApiError",
    "ApiKey",
    "ApiKeyError",
    "ApiKeyNotFound",
    "KeyNameTaken",
    "KeyStore",
    "NameCollision",
    "NewKey",
    "Role",
    "ServerError",
    "create_app",
]


def __getattr__(name: str) -> Any:
    # The app needs the server extra; the keys do not. Import it only when asked for.
    if name == "create_app":
        try:
            from interlock.server.app import create_app
        except ImportError as exc:
            raise ImportError(
                f"the Interlock server needs FastAPI and uvicorn ({exc.name} is missing): "
                "pip install 'interlock[server]'"
            ) from exc
        return create_app
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
