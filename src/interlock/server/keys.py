"""API keys: who is calling the server, for which tenant, in which role.

A key reads ``ilk_<id>_<secret>``: ``id`` names the row (16 hex digits), ``secret`` is
32 random bytes (URL-safe base64). The table ``api_keys`` keeps the id, tenant, role,
name and the SHA-256 of the secret — never the key — so the key is shown exactly once,
when it is created. A key's *identity* is its ``name``: the server records it as the
agent of the checks the key makes and as the approver of the approvals it decides,
and refuses to let one identity decide its own request.

One identity has one name in a tenant. Names are compared as
:mod:`interlock.core.identity` does (case, width, invisible characters and
look-alike letters do not make another identity), and a key whose name is another
key's name written another way — ``аlice`` with a Cyrillic ``а`` beside ``alice`` — is
refused (:class:`~interlock.server.errors.KeyNameTaken`); the same name again is the
same identity (how a key is rotated). Table ``api_key_names`` holds the names given,
so that two look-alikes created at once on two replicas end with one key;
:meth:`KeyStore.collisions` reports look-alikes made before this was enforced.

Lookups are cached in-process for ``cache_ttl`` seconds (5 by default): a key revoked
through another process or replica stops working within that time; one revoked
through this :class:`KeyStore` stops at once.

Example::

    from interlock.server.keys import KeyStore, Role
    from interlock.store import open_store

    keys = KeyStore(open_store("sqlite:///.interlock/interlock.db"))
    created = keys.create(tenant="acme", role=Role.AGENT, name="ops-bot")
    print(created.token)                     # ilk_3f2a..._..., shown this once
    assert keys.authenticate(created.token) == created.key
"""

from __future__ import annotations

import hashlib
import hmac
import re
import secrets
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum
from typing import TYPE_CHECKING, Any, Final

from interlock.core.identity import identity_forms, same_identity
from interlock.server.errors import ApiKeyError, ApiKeyNotFound, KeyNameTaken
from interlock.store.sql import SqlStore
from interlock.store.sql_base import Cursor

if TYPE_CHECKING:
    import asyncio

__all__ = ["ApiKey", "KeyStore", "NameCollision", "NewKey", "Role", "parse_token"]

PREFIX: Final = "ilk_"
_ID = re.compile(r"^[0-9a-f]{16}$")
_SECRET = re.compile(r"^[A-Za-z0-9_-]{43}$")  # token_urlsafe(32): 43 characters
_LABEL = re.compile(r"^[^\x00-\x1f\x7f]{1,100}$")
_COLUMNS = "id, tenant, role, name, secret_hash, created_us, revoked_us"
_CACHE_MAX = 10_000


class Role(StrEnum):
    """What a key may do (see :mod:`interlock.server.auth` for the full matrix)."""

    AGENT = "agent"
    APPROVER = "approver"
    ADMIN = "admin"


@dataclass(frozen=True, slots=True)
class ApiKey:
    """One API key, without its secret."""

    id: str
    tenant: str
    role: Role
    name: str
    created_us: int
    revoked_us: int | None = None

    @property
    def identity(self) -> str:
        """Who the key speaks for: the agent of its checks, the approver of its
        decisions. Compared by identity (:func:`~interlock.core.identity.same_identity`),
        never as plain text."""
        return self.name

    @property
    def revoked(self) -> bool:
        return self.revoked_us is not None

    def as_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "tenant": self.tenant,
            "role": self.role.value,
            "name": self.name,
            "created_us": self.created_us,
            "revoked_us": self.revoked_us,
        }


@dataclass(frozen=True, slots=True)
class NewKey:
    """A key just created, with the only copy of its token."""

    key: ApiKey
    token: str


@dataclass(frozen=True, slots=True)
class NameCollision:
    """Names given to keys of ``tenant`` that are one identity written differently
    (made before look-alike names were refused): ``names`` sorted, ``key_ids`` the keys
    that carry them."""

    tenant: str
    names: tuple[str, ...]
    key_ids: tuple[str, ...]

    def describe(self) -> str:
        shown = ", ".join(_shown(name) for name in self.names)
        return f"tenant {self.tenant!r}: {shown} are one identity (keys {', '.join(self.key_ids)})"


@dataclass(frozen=True, slots=True)
class _Row:
    key: ApiKey
    secret_hash: str


def parse_token(token: str) -> tuple[str, str] | None:
    """``(id, secret)`` of a well-formed key, else ``None``."""
    if not token.startswith(PREFIX):
        return None
    key_id, sep, secret = token[len(PREFIX) :].partition("_")
    if not sep or not _ID.match(key_id) or not _SECRET.match(secret):
        return None
    return key_id, secret


def _shown(name: str) -> str:
    """A name quoted, and spelled in escapes when it holds more than ASCII: a reader
    must see why two names that look the same are two strings."""
    plain = repr(name)
    escaped = ascii(name)
    return plain if plain == escaped else f"{plain} ({escaped})"


def _hash(secret: str) -> str:
    # A key's secret is 256 random bits: a fast hash is as strong as a slow one here
    # (there is no dictionary to try), and it keeps every request cheap.
    return hashlib.sha256(secret.encode("ascii")).hexdigest()


def _label(what: str, value: str) -> str:
    text = value.strip() if isinstance(value, str) else ""
    if not _LABEL.match(text):
        raise ApiKeyError(
            f"the {what} must be 1 to 100 printable characters, not {value!r}",
        )
    return text


class KeyStore:
    """API keys in the Interlock store (table ``api_keys``). Thread-safe.

    ``cache_ttl`` (seconds) bounds how long a looked-up key is trusted without reading
    the table again; ``0`` reads it on every request. ``monotonic`` is the cache's
    clock (tests pass a fake one).
    """

    def __init__(
        self,
        store: SqlStore,
        *,
        cache_ttl: float = 5.0,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        if cache_ttl < 0:
            raise ValueError(f"cache_ttl must be ≥ 0, not {cache_ttl!r}")
        self.store = store
        self.cache_ttl = cache_ttl
        self._monotonic = monotonic
        self._cache: dict[str, tuple[float, _Row | None]] = {}
        self._lock = threading.Lock()
        #: reads of the table under way for :meth:`aauthenticate`, by (loop, token,
        #: generation); a revocation here starts a new generation
        self._reading: dict[tuple[object, str, int], asyncio.Future[ApiKey | None]] = {}
        self._generation = 0

    # -- managing keys -------------------------------------------------------------------

    def create(self, *, tenant: str, role: Role | str, name: str) -> NewKey:
        """A new key for ``name`` in ``tenant`` with ``role``; the token is in the
        result and nowhere else. Refuses (:class:`KeyNameTaken`) a name that is
        another key's name in the tenant written another way."""
        tenant = _label("tenant", tenant)
        name = _label("name", name)
        if not identity_forms(name):
            raise ApiKeyError(f"the name {_shown(name)} has nothing visible in it")
        try:
            role = Role(role)
        except ValueError:
            roles = ", ".join(r.value for r in Role)
            raise ApiKeyError(f"the role must be one of {roles}, not {role!r}") from None
        key_id = secrets.token_hex(8)
        secret = secrets.token_urlsafe(32)
        key = ApiKey(key_id, tenant, role, name, self.store.clock())
        with self.store.transaction(write=True) as cur:
            self._claim_name(cur, tenant, name, key.created_us)
            cur.execute(
                self.store.q(f"INSERT INTO api_keys ({_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, NULL)"),
                (key_id, tenant, role.value, name, _hash(secret), key.created_us),
            )
        return NewKey(key, f"{PREFIX}{key_id}_{secret}")

    def _claim_name(self, cur: Cursor, tenant: str, name: str, now: int) -> None:
        """Record ``name`` as given in ``tenant``, or refuse it as a look-alike of a
        name given before — in this transaction, so that of two look-alikes created
        at once only one is."""
        q = self.store.q
        # Names given before table api_key_names existed are only in api_keys.
        cur.execute(q("SELECT DISTINCT name FROM api_keys WHERE tenant = ?"), (tenant,))
        for (given,) in cur.fetchall():
            if given != name and same_identity(given, name):
                raise _taken(tenant, name, str(given))
        for form in sorted(identity_forms(name)):
            cur.execute(
                q(
                    "INSERT INTO api_key_names (tenant, form, name, created_us) "
                    "VALUES (?, ?, ?, ?) ON CONFLICT (tenant, form) DO NOTHING"
                ),
                (tenant, form, name, now),
            )
            cur.execute(
                q("SELECT name FROM api_key_names WHERE tenant = ? AND form = ?"),
                (tenant, form),
            )
            row = cur.fetchone()
            if row is not None and row[0] != name:
                raise _taken(tenant, name, str(row[0]))

    def collisions(self, *, tenant: str | None = None) -> list[NameCollision]:
        """Names of keys (revoked ones included) that are one identity written
        differently, by tenant: made before such names were refused, or by writing
        to the table directly. Empty when every identity has one name."""
        groups: dict[tuple[str, str], set[str]] = {}
        for key in self.list_keys(tenant=tenant):
            for form in identity_forms(key.name):
                groups.setdefault((key.tenant, form), set()).add(key.name)
        # Names that share a form are one identity; join the groups that share a name.
        merged: dict[str, list[set[str]]] = {}
        for (group_tenant, _), names in groups.items():
            if len(names) < 2:
                continue
            sets = merged.setdefault(group_tenant, [])
            joined = set(names)
            for found in [s for s in sets if not s.isdisjoint(names)]:
                sets.remove(found)
                joined |= found
            sets.append(joined)
        keys_by_name: dict[tuple[str, str], list[str]] = {}
        for key in self.list_keys(tenant=tenant):
            keys_by_name.setdefault((key.tenant, key.name), []).append(key.id)
        return [
            NameCollision(
                group_tenant,
                tuple(sorted(names)),
                tuple(i for n in sorted(names) for i in keys_by_name[(group_tenant, n)]),
            )
            for group_tenant in sorted(merged)
            for names in sorted(merged[group_tenant], key=sorted)
        ]

    def list_keys(self, *, tenant: str | None = None, include_revoked: bool = True) -> list[ApiKey]:
        """Keys, oldest first."""
        where: list[str] = []
        params: list[Any] = []
        if tenant is not None:
            where.append("tenant = ?")
            params.append(tenant)
        if not include_revoked:
            where.append("revoked_us IS NULL")
        sql = f"SELECT {_COLUMNS} FROM api_keys"
        if where:
            sql += " WHERE " + " AND ".join(where)
        sql += " ORDER BY created_us, id"
        with self.store.transaction(write=False) as cur:
            cur.execute(self.store.q(sql), params)
            return [_row(raw).key for raw in cur.fetchall()]

    def get(self, key_id: str) -> ApiKey:
        row = self._read(key_id)
        if row is None:
            raise ApiKeyNotFound(f"no API key {key_id!r}", key_id=key_id)
        return row.key

    def revoke(self, key_id: str) -> ApiKey:
        """Revoke a key; revoking it again changes nothing. Takes effect at once here,
        and within ``cache_ttl`` in other processes."""
        now = self.store.clock()
        with self.store.transaction(write=True) as cur:
            cur.execute(
                self.store.q(
                    "UPDATE api_keys SET revoked_us = ? WHERE id = ? AND revoked_us IS NULL"
                ),
                (now, key_id),
            )
        with self._lock:
            self._cache.pop(key_id, None)
            self._generation += 1  # no later request joins a read begun before this
        return self.get(key_id)

    # -- authenticating ------------------------------------------------------------------

    def authenticate(self, token: str) -> ApiKey | None:
        """The live key ``token`` is, or ``None`` (malformed, unknown, wrong secret,
        revoked). Reads the table unless the cache holds the key."""
        hit, key = self.authenticate_cached(token)
        if hit:
            return key
        parsed = parse_token(token)
        if parsed is None:
            return None
        key_id, secret = parsed
        row = self._read(key_id)
        with self._lock:
            if len(self._cache) >= _CACHE_MAX:
                self._cache.clear()  # unknown ids cannot grow it without bound
            self._cache[key_id] = (self._monotonic() + self.cache_ttl, row)
        return _verified(row, secret)

    async def aauthenticate(self, token: str) -> ApiKey | None:
        """:meth:`authenticate` for an event loop: the table is read on a worker thread,
        once for all the requests of one token that miss the cache together. When a
        key's cache entry expires under load, every request in flight misses it at
        once; each reading the table on a thread of its own (a connection each, the
        first time) stalled the server for tens of milliseconds. A request that arrives
        after the key was revoked here never shares a read begun before."""
        hit, key = self.authenticate_cached(token)
        if hit:
            return key
        import asyncio

        from starlette.concurrency import run_in_threadpool

        ident = (asyncio.get_running_loop(), token, self._generation)
        reading = self._reading.get(ident)
        if reading is None:
            reading = asyncio.ensure_future(run_in_threadpool(self.authenticate, token))
            self._reading[ident] = reading
            reading.add_done_callback(lambda done: self._read_done(ident, done))
        return await asyncio.shield(reading)  # a waiter cancelled leaves the read to others

    def _read_done(self, ident: tuple[object, str, int], done: asyncio.Future[Any]) -> None:
        self._reading.pop(ident, None)
        if not done.cancelled():
            done.exception()  # retrieved: every waiter may have gone

    def authenticate_cached(self, token: str) -> tuple[bool, ApiKey | None]:
        """``(True, key or None)`` when the answer is known without reading the table
        (a malformed token, or a cached key); ``(False, None)`` when it must be read."""
        parsed = parse_token(token)
        if parsed is None:
            return True, None
        key_id, secret = parsed
        with self._lock:
            cached = self._cache.get(key_id)
        if cached is None or cached[0] <= self._monotonic():
            return False, None
        return True, _verified(cached[1], secret)

    def _read(self, key_id: str) -> _Row | None:
        with self.store.transaction(write=False) as cur:
            cur.execute(
                self.store.q(f"SELECT {_COLUMNS} FROM api_keys WHERE id = ?"),
                (key_id,),
            )
            raw = cur.fetchone()
        return None if raw is None else _row(raw)


def _taken(tenant: str, name: str, existing: str) -> KeyNameTaken:
    return KeyNameTaken(
        f"the name {_shown(name)} looks like the key name {existing!r} in tenant "
        f"{tenant!r}: it would be the same identity under another name. Use exactly "
        f"{existing!r} for another key of that identity, or a name that reads differently",
        name=name,
        existing=existing,
        tenant=tenant,
    )


def _verified(row: _Row | None, secret: str) -> ApiKey | None:
    if row is None or row.key.revoked:
        return None
    if not hmac.compare_digest(row.secret_hash, _hash(secret)):
        return None
    return row.key


def _row(raw: Any) -> _Row:
    key = ApiKey(
        id=str(raw[0]),
        tenant=str(raw[1]),
        role=Role(raw[2]),
        name=str(raw[3]),
        created_us=int(raw[5]),
        revoked_us=None if raw[6] is None else int(raw[6]),
    )
    return _Row(key, str(raw[4]))
