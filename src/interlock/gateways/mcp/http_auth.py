"""Who a client of the HTTP gateway is: its Interlock API key
(``Authorization: Bearer <key>``; ``interlock keys create``), looked up in the store
(:class:`StoreKeys`) or asked of the shared server (:class:`ServerKeys`, with
``--server``). Tenant and agent come from the key, never from the request: they
are the trusted context every call of the client's session is judged with.

No key, an unknown, malformed or revoked one: ``401``. A key whose role is not
``agent`` (an approver's, an admin's): ``403``.
"""

from __future__ import annotations

import asyncio
import hashlib
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final, Protocol

from interlock.core.action import Context

if TYPE_CHECKING:
    from interlock.guard import Guard
    from interlock.server.keys import KeyStore

__all__ = ["RUNTIME", "Caller", "Deciders", "Refused", "ServerKeys", "StoreKeys", "bearer"]

#: The runtime the gateway's checks name.
RUNTIME: Final = "mcp-gateway"


@dataclass(frozen=True, slots=True)
class Caller:
    """An authenticated client: its key's id (who owns its sessions), tenant and
    name (the agent), and the key itself (toward the shared server, with
    ``--server``; never to an upstream)."""

    key_id: str
    tenant: str
    agent: str
    token: str

    @property
    def context(self) -> Context:
        return Context(tenant=self.tenant, agent=self.agent, runtime=RUNTIME)


@dataclass(frozen=True, slots=True)
class Refused:
    """The HTTP answer to a request whose key does not do."""

    status: int
    message: str


_NO_KEY: Final = Refused(401, "an Interlock API key is required (Authorization: Bearer <key>)")
_BAD_KEY: Final = Refused(401, "the API key is not valid (unknown, malformed or revoked)")


def bearer(authorization: str | None) -> str | Refused:
    """The key an ``Authorization`` header carries."""
    scheme, _, value = (authorization or "").partition(" ")
    token = value.strip() if scheme.lower() == "bearer" else ""
    return token or _NO_KEY


def _not_an_agent(role: str) -> Refused:
    return Refused(403, f"a key with role {role!r} may not use the MCP gateway (an agent key may)")


class Deciders(Protocol):
    """Who the client is, and the guard its calls are judged by."""

    async def authenticate(self, token: str) -> Caller | Refused: ...

    def guard_for(self, caller: Caller) -> Guard: ...

    def done_with(self, guard: Guard) -> None: ...


class StoreKeys:
    """Keys from the gateway's store; every session judged by the gateway's guard
    (its policy, its store's budgets, approvals and audit log)."""

    def __init__(self, guard: Guard, keys: KeyStore) -> None:
        self.guard = guard
        self.keys = keys

    async def authenticate(self, token: str) -> Caller | Refused:
        from interlock.server.keys import Role

        hit, key = self.keys.authenticate_cached(token)
        if not hit:
            key = await asyncio.to_thread(self.keys.authenticate, token)
        if key is None:
            return _BAD_KEY
        if key.role is not Role.AGENT:
            return _not_an_agent(key.role.value)
        return Caller(key.id, key.tenant, key.identity, token)

    def guard_for(self, caller: Caller) -> Guard:
        return self.guard

    def done_with(self, guard: Guard) -> None:
        """The shared guard outlives every session."""


class ServerKeys:
    """Keys known to the shared server (``--server``): asked once per ``cache_ttl``
    seconds (``GET /v1/whoami``); each session judged by a remote guard holding the
    client's own key, so the server decides, budgets and records as that key."""

    def __init__(self, url: str, *, cache_ttl: float = 5.0, transport: Any = None) -> None:
        self.url = url
        self.cache_ttl = cache_ttl
        self._transport = transport
        self._cache: dict[str, tuple[float, Caller | Refused]] = {}

    async def authenticate(self, token: str) -> Caller | Refused:
        digest = hashlib.sha256(token.encode()).hexdigest()
        cached = self._cache.get(digest)
        if cached is not None and cached[0] > time.monotonic():
            return cached[1]
        answer = await self._whoami(token)
        if len(self._cache) > 10_000:
            self._cache.clear()
        self._cache[digest] = (time.monotonic() + self.cache_ttl, answer)
        return answer

    async def _whoami(self, token: str) -> Caller | Refused:
        import httpx

        base, transport = self.url.rstrip("/"), self._transport
        if self.url.startswith("unix:"):  # as Guard.remote reads it
            base = "http://interlock"
            transport = transport or httpx.AsyncHTTPTransport(uds=self.url[len("unix:") :])
        headers = {"authorization": f"Bearer {token}"}
        try:
            async with httpx.AsyncClient(base_url=base, transport=transport, timeout=5.0) as http:
                response = await http.get("/v1/whoami", headers=headers)
        except httpx.HTTPError as exc:
            return Refused(503, f"the Interlock server could not be asked who the key is: {exc}")
        if response.status_code in (401, 403):
            return _BAD_KEY
        if response.status_code != 200:
            return Refused(503, f"the Interlock server answered HTTP {response.status_code}")
        try:
            body = response.json()
            role, tenant, name, key_id = body["role"], body["tenant"], body["name"], body["id"]
        except (ValueError, KeyError, TypeError):
            return Refused(503, "the Interlock server's answer about the key is not readable")
        if role != "agent":
            return _not_an_agent(str(role))
        return Caller(str(key_id), str(tenant), str(name), token)

    def guard_for(self, caller: Caller) -> Guard:
        from interlock.guard import Guard

        return Guard.remote(self.url, caller.token, context=caller.context)

    def done_with(self, guard: Guard) -> None:
        guard.close()
