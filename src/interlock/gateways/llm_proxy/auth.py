"""Who a request is, and the guard that judges it.

The client's Interlock API key: ``Authorization: Bearer <key>`` (the OpenAI SDK) or
``x-api-key: <key>`` (the Anthropic SDK). Tenant and agent come from the key, never
from the request. Only ``agent`` keys may call models through the proxy.

Two ways to know a key: :class:`StoreKeys` reads the keys in the proxy's own store
(the standalone proxy); :class:`~interlock.gateways.llm_proxy.shared.SharedServer`
asks the shared server, and judges with the client's own key there.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final, Protocol

from interlock.core.action import Context
from interlock.guard import Guard
from interlock.server.keys import ApiKey, KeyStore, Role
from interlock.store.sql import SqlStore
from interlock.store.sqlite import SQLiteStore

from .refusals import Refusal

if TYPE_CHECKING:
    from .server_sessions import ServerSessions

__all__ = [
    "RUNTIME",
    "UNKNOWN_KEY",
    "Caller",
    "Callers",
    "StoreKeys",
    "authenticate",
    "not_an_agent",
    "presented_token",
]

#: ``Context.runtime`` of every action the proxy judges.
RUNTIME: Final = "llm-proxy"
UNKNOWN_KEY: Final = "the API key is not valid (unknown, malformed or revoked)"


@dataclass(frozen=True, slots=True)
class Caller:
    """One request's caller: the guard that judges its calls and the trusted context
    (tenant and agent, from the key). ``key_digest`` names the key in the caller
    cache of a shared-server proxy (``None`` for a store's key). ``inline``: the
    guard's check runs on the event loop, not in a worker thread (an embedded SQLite
    store: microseconds of I/O, less than the two thread switches it saves on the
    call's own critical path)."""

    guard: Guard
    context: Context
    key_digest: bytes | None = None
    inline: bool = False
    #: a shared-server proxy's session reports on this key (the server keeps sessions)
    server_sessions: ServerSessions | None = None


class Callers(Protocol):
    """Where the proxy learns who a request is."""

    async def caller(self, headers: Mapping[str, str]) -> Caller | Refusal:
        """The caller of the request with these ``headers`` (lower-case names), or
        the refusal to answer (401, 403, 503)."""
        ...

    def forget(self, caller: Caller) -> None:
        """The server refused ``caller``'s key: know it no more."""
        ...

    async def start(self) -> None: ...

    async def aclose(self) -> None: ...


def presented_token(headers: Mapping[str, str]) -> str | Refusal:
    """The one key the request carries (bearer or ``x-api-key``), or a 401."""
    bearer = headers.get("authorization", "")
    scheme, _, value = bearer.partition(" ")
    from_bearer = value.strip() if scheme.lower() == "bearer" else ""
    from_header = headers.get("x-api-key", "").strip()
    if from_bearer and from_header and from_bearer != from_header:
        return Refusal(401, "unauthorized", "two different API keys: send one")
    token = from_bearer or from_header
    if not token:
        return Refusal(
            401,
            "unauthorized",
            "an Interlock API key is required (Authorization: Bearer <key> or x-api-key)",
        )
    return token


def not_an_agent(role: str) -> Refusal:
    return Refusal(403, "forbidden", f"a key with role {role!r} may not call models")


async def authenticate(headers: Mapping[str, str], keys: KeyStore) -> ApiKey | Refusal:
    """The live agent key the request carries, or the refusal to answer."""
    token = presented_token(headers)
    if isinstance(token, Refusal):
        return token
    hit, key = keys.authenticate_cached(token)
    if not hit:
        key = await asyncio.to_thread(keys.authenticate, token)
    if key is None:
        return Refusal(401, "unauthorized", UNKNOWN_KEY)
    if key.role is not Role.AGENT:
        return not_an_agent(key.role.value)
    return key


class StoreKeys:
    """The standalone proxy's callers: keys in ``guard``'s own SQL store, every call
    judged by ``guard``."""

    def __init__(self, guard: Guard) -> None:
        if not isinstance(guard.store, SqlStore):
            raise ValueError("the LLM proxy needs a guard with a SQL store (it holds the API keys)")
        self.guard = guard
        self.keys = KeyStore(guard.store)
        self.inline = isinstance(guard.store, SQLiteStore)

    async def caller(self, headers: Mapping[str, str]) -> Caller | Refusal:
        key = await authenticate(headers, self.keys)
        if isinstance(key, Refusal):
            return key
        context = Context(tenant=key.tenant, agent=key.identity, runtime=RUNTIME)
        return Caller(self.guard, context, inline=self.inline)

    def forget(self, caller: Caller) -> None:
        pass  # the store's keys are live: nothing is remembered here

    async def start(self) -> None:
        pass

    async def aclose(self) -> None:
        pass
