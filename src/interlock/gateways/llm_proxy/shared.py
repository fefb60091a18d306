"""The proxy in front of the shared server (``interlock llm-proxy --server URL``).

The proxy holds the provider keys and no Interlock key of its own. Each client
presents its own agent key; the proxy judges, reserves and commits **through the
server with that key** (:class:`~interlock.remote.RemoteDecider`), so tenant and agent
are whatever the server says the key is — the proxy cannot speak for anyone else.

- **Who the key is**: ``GET /v1/whoami`` with the key, once; the answer (tenant,
  role, name) is remembered under the key's SHA-256, never the key itself, in a
  bounded least-recently-used table. Only ``agent`` keys call models (403 otherwise,
  as in the standalone proxy). Every check still carries the key, so the server
  authenticates every call: a key revoked on the server is refused at its next call
  (401), and forgotten here.
- **One connection pool**: every request's decider shares one
  :class:`~interlock.remote.RemoteConnection`; the key rides on each request. A
  decider lives for its request only, so the key is in memory only while a request
  that carries it is served.
- **Failing closed**: a server that cannot be reached, times out or answers anything
  but a decision (or, for ``whoami``, anything but a key) is ``undetermined``: a
  ``503`` before any upstream call. The server's 401 and 403 are the proxy's.
"""

from __future__ import annotations

import hashlib
import re
from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from interlock.core.action import Context
from interlock.errors import describe
from interlock.guard import Guard
from interlock.remote import RemoteConnection, RemoteDecider

from .auth import RUNTIME, UNKNOWN_KEY, Caller, not_an_agent, presented_token
from .refusals import Refusal
from .server_sessions import Learned, ServerSessions

__all__ = ["DEFAULT_KNOWN_KEYS", "SharedServer"]

#: How many keys' identities a proxy remembers (least recently used forgotten first).
DEFAULT_KNOWN_KEYS: Final = 10_000
# What a token may be before it is sent anywhere: printable ASCII, bounded.
_TOKEN: Final = re.compile(r"[\x21-\x7e]{1,512}")
_ROLES: Final = frozenset({"agent", "approver", "admin"})


@dataclass(frozen=True, slots=True)
class _Known:
    tenant: str
    role: str
    name: str
    #: whether the server's policy reads sessions, as its answers on this key said
    learned: Learned = field(default_factory=Learned, compare=False)


class SharedServer:
    """The shared Interlock server at ``url`` (``http(s)://host:port`` or
    ``unix:/path``), for :func:`~interlock.gateways.llm_proxy.create_app`: every call
    judged there with the client's own key.

    ``request_timeout`` bounds each request to the server; ``timeout`` each check
    (the guard's default when ``None``); ``known_keys`` bounds the remembered
    identities; ``transport`` replaces the network (an ``httpx`` async transport);
    ``verify`` is passed to httpx.

    Example::

        app = create_app(SharedServer("http://interlock.internal:8750"), config)
    """

    def __init__(
        self,
        url: str,
        *,
        request_timeout: float = 5.0,
        timeout: float | None = None,
        known_keys: int = DEFAULT_KNOWN_KEYS,
        transport: Any = None,
        verify: Any = True,
    ) -> None:
        if known_keys < 1:
            raise ValueError(f"known_keys must be at least 1, not {known_keys!r}")
        import httpx

        # One pool for every client of the proxy; each stream holds no server
        # connection while it runs (its commit opens or reuses one at the end).
        limits = httpx.Limits(max_connections=200, max_keepalive_connections=50)
        self.connection = RemoteConnection(
            url,
            timeout=request_timeout,
            async_transport=transport,
            verify=verify,
            limits=limits,
        )
        self.url = self.connection.url
        self.timeout = timeout
        self._capacity = known_keys
        self._known: OrderedDict[bytes, _Known] = OrderedDict()

    async def start(self) -> None:
        self.connection.async_client()  # opened on the proxy's own loop, before a call

    async def aclose(self) -> None:
        await self.connection.aclose()

    async def caller(self, headers: Mapping[str, str]) -> Caller | Refusal:
        token = presented_token(headers)
        if isinstance(token, Refusal):
            return token
        if not _TOKEN.fullmatch(token):
            return Refusal(401, "unauthorized", UNKNOWN_KEY)
        digest = hashlib.sha256(token.encode()).digest()
        known = self._known.get(digest)
        if known is None:
            answer = await self._whoami(token)
            if isinstance(answer, Refusal):
                return answer
            known = answer
            self._remember(digest, known)
        else:
            self._known.move_to_end(digest)
        if known.role != "agent":
            return not_an_agent(known.role)
        decider = RemoteDecider.on(self.connection, token)
        guard = Guard(decider=decider, timeout=self.timeout)
        context = Context(tenant=known.tenant, agent=known.name, runtime=RUNTIME)
        sessions = ServerSessions(decider, known.learned)
        return Caller(guard, context, key_digest=digest, server_sessions=sessions)

    def forget(self, caller: Caller) -> None:
        if caller.key_digest is not None:
            self._known.pop(caller.key_digest, None)

    def _remember(self, digest: bytes, known: _Known) -> None:
        self._known[digest] = known
        while len(self._known) > self._capacity:
            self._known.popitem(last=False)

    async def _whoami(self, token: str) -> _Known | Refusal:
        """Who the server says ``token`` is; a 401 when it says no one; a 503 for
        anything else that is not a key."""
        client = self.connection.async_client()
        try:
            answer = await client.get("/v1/whoami", headers={"authorization": f"Bearer {token}"})
        except Exception as exc:  # unreachable, timed out, a transport that failed
            return _undetermined(f"it could not be reached ({describe(exc)})")
        if answer.status_code == 401:
            return Refusal(401, "unauthorized", UNKNOWN_KEY)
        if answer.status_code != 200:
            return _undetermined(f"it answered HTTP {answer.status_code}")
        try:
            body = answer.json()
            known = _Known(str(body["tenant"]), str(body["role"]), str(body["name"]))
            if known.role not in _ROLES or not known.tenant or not known.name:
                raise ValueError(f"not a key: {known}")
        except (ValueError, KeyError, TypeError) as exc:
            return _undetermined(f"its answer is not a key ({type(exc).__name__})")
        return known


def _undetermined(why: str) -> Refusal:
    return Refusal(
        503,
        "interlock_undetermined",
        f"Interlock could not decide, so the call was not made: the Interlock server "
        f"could not say whose API key this is: {why}",
    )
