"""Grant signing keys: Ed25519 key pairs in a key ring, rotated, published as a JWK set.

Where a store's grant keys are, first match wins (as for the audit key,
:mod:`interlock.store.audit_keys`):

1. ``grant_key_file=PATH`` in the store URL;
2. ``INTERLOCK_GRANT_KEY_FILE=PATH``;

   (a named file that does not exist is created on first use — except for a shared
   database: every replica must be given the same ring, so it is made once, by hand)
3. for a SQLite file, the key ring beside it, ``<database>.grant-keys``;
4. for an in-memory SQLite store, a ring that lives as long as the store does;
5. otherwise (PostgreSQL, shared by replicas that must all sign with the same keys)
   none: issuing a grant is refused with an error that says how to make one
   (``interlock keys rotate --key-file PATH``), never a key made up per replica.

A key ring file is JSON, mode 0600, in a directory only its owner can write (see
:mod:`interlock.store.keyfiles`)::

    {"v": 1, "keys": [{"kid": "...", "seed": "<base64url, 32 bytes>",
                       "created": 1700000000, "retired": null}, ...]}

The first key is the *active* one: new grants are signed with it. A key's id
(``kid``) is its RFC 7638 JWK thumbprint: derived from the public key, so it names
the key and reveals nothing of it. :func:`rotate_key_ring` puts a new active key first
and marks the previous one retired; a retired key keeps verifying (it stays in the
JWK set) until every grant it can have signed has expired — its retirement plus the
longest grant lifetime (:data:`MAX_GRANT_TTL`) — and is dropped at a later rotation.
A file is created whole (a new one is linked into place, so processes starting at
once agree on one) and replaced whole; a process re-reads it when it changes, so a
rotation takes effect without a restart.

Example::

    from pathlib import Path
    from interlock.store.grant_keys import GrantKeys, rotate_key_ring

    keys = GrantKeys.resolve(file=None, ephemeral=True)
    ring = keys.ring()
    assert ring.jwks()["keys"][0]["kid"] == ring.active.kid
"""

from __future__ import annotations

import hashlib
import json
import os
import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final, final

import rfc8785

from interlock.errors import AuditKeyError
from interlock.policy.intents import MAX_GRANT_TTL
from interlock.store.keyfiles import create_private_file, read_private_file, replace_private_file
from interlock.verify.tokens import b64url, b64url_decode, public_jwk

if TYPE_CHECKING:
    from cryptography.hazmat.primitives.asymmetric.ed25519 import (
        Ed25519PrivateKey,
        Ed25519PublicKey,
    )

__all__ = [
    "ENV_KEY_FILE",
    "MAX_GRANT_TTL",
    "GrantKey",
    "GrantKeyRing",
    "GrantKeys",
    "create_key_ring",
    "key_id",
    "read_key_ring",
    "rotate_key_ring",
]

ENV_KEY_FILE: Final = "INTERLOCK_GRANT_KEY_FILE"
_WHAT: Final = "grant key ring"


def key_id(public: Ed25519PublicKey) -> str:
    """The RFC 7638 thumbprint of the key's JWK (base64url SHA-256): its ``kid``."""
    jwk = public_jwk("-", public)
    members = {"crv": jwk["crv"], "kty": jwk["kty"], "x": jwk["x"]}
    return b64url(hashlib.sha256(rfc8785.dumps(members)).digest())


@final
@dataclass(frozen=True, slots=True)
class GrantKey:
    """One Ed25519 key pair of the ring. ``retired`` (seconds since the epoch) is when
    another key took its place; ``None`` for the active key."""

    kid: str
    private: Ed25519PrivateKey
    created: int
    retired: int | None = None

    @classmethod
    def generate(cls, now: int) -> GrantKey:
        from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

        private = Ed25519PrivateKey.generate()
        return cls(key_id(private.public_key()), private, now)

    @property
    def public(self) -> Ed25519PublicKey:
        return self.private.public_key()

    def verifies_until(self) -> int | None:
        """When the last grant this key can have signed expires (``None``: active)."""
        return None if self.retired is None else self.retired + MAX_GRANT_TTL

    def __repr__(self) -> str:  # never the private key
        return f"GrantKey(kid={self.kid!r}, created={self.created}, retired={self.retired})"


@final
class GrantKeyRing:
    """The active key (``active``, which signs) and the retired ones still verifying."""

    __slots__ = ("_by_kid", "active", "keys")

    def __init__(self, keys: Sequence[GrantKey]) -> None:
        if not keys or keys[0].retired is not None:
            raise AuditKeyError("a grant key ring needs an active (not retired) first key")
        self.keys = tuple(keys)
        self.active = self.keys[0]
        self._by_kid = {key.kid: key for key in self.keys}

    def verifying(self, now: float) -> dict[str, Ed25519PublicKey]:
        """The public keys a grant may be signed with at ``now``, by kid."""
        out: dict[str, Ed25519PublicKey] = {}
        for key in self.keys:
            until = key.verifies_until()
            if until is None or now < until:
                out[key.kid] = key.public
        return out

    def jwks(self, now: float | None = None) -> dict[str, Any]:
        """The JWK set verifiers need: the active key and the retired ones still valid."""
        moment = time.time() if now is None else now
        return {"keys": [public_jwk(kid, public) for kid, public in self.verifying(moment).items()]}

    def get(self, kid: str) -> GrantKey | None:
        return self._by_kid.get(kid)

    def __iter__(self) -> Iterator[GrantKey]:
        return iter(self.keys)


def _encode(keys: Sequence[GrantKey]) -> bytes:
    from cryptography.hazmat.primitives.serialization import (
        Encoding,
        NoEncryption,
        PrivateFormat,
    )

    entries = [
        {
            "kid": key.kid,
            "seed": b64url(
                key.private.private_bytes(Encoding.Raw, PrivateFormat.Raw, NoEncryption())
            ),
            "created": key.created,
            "retired": key.retired,
        }
        for key in keys
    ]
    return json.dumps({"v": 1, "keys": entries}, indent=1).encode() + b"\n"


def _decode(data: bytes, path: Path) -> list[GrantKey]:
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    where = f"the {_WHAT} {path}"
    try:
        document = json.loads(data)
    except ValueError as exc:
        raise AuditKeyError(f"{where} is not JSON: {exc}") from None
    if not isinstance(document, dict) or document.get("v") != 1:
        raise AuditKeyError(f"{where} is not a version 1 key ring ({{'v': 1, 'keys': [...]}})")
    entries = document.get("keys")
    if not isinstance(entries, list) or not entries:
        raise AuditKeyError(
            f"{where} holds no key: remove it to have one created, or run "
            f"`interlock keys rotate --key-file {path}`"
        )
    keys: list[GrantKey] = []
    for number, entry in enumerate(entries, 1):
        if not isinstance(entry, dict):
            raise AuditKeyError(f"key {number} in {where} is not an object")
        created: Any = entry.get("created")
        retired: Any = entry.get("retired")
        if not _is_time(created) or not (retired is None or _is_time(retired)):
            raise AuditKeyError(f"key {number} in {where}: 'created'/'retired' are not times")
        try:
            seed = b64url_decode(str(entry.get("seed", "")), what="seed")
            if len(seed) != 32:
                raise ValueError("not 32 bytes")
            private = Ed25519PrivateKey.from_private_bytes(seed)
        except ValueError as exc:
            raise AuditKeyError(f"key {number} in {where} has no valid Ed25519 seed") from exc
        kid = key_id(private.public_key())
        if entry.get("kid") != kid:
            raise AuditKeyError(
                f"key {number} in {where} names kid {entry.get('kid')!r}, but its public "
                f"key's thumbprint is {kid!r}"
            )
        keys.append(GrantKey(kid, private, created, retired))
    if keys[0].retired is not None or any(key.retired is None for key in keys[1:]):
        raise AuditKeyError(f"{where}: the first key must be the one active key, the rest retired")
    return keys


def _is_time(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def read_key_ring(path: Path) -> GrantKeyRing:
    """The ring in ``path`` (``FileNotFoundError`` when missing; AuditKeyError when it
    can be read by others or is malformed)."""
    return GrantKeyRing(_decode(read_private_file(path, what=_WHAT), path))


def create_key_ring(path: Path, *, now: int | None = None) -> bool:
    """Create a ring with one new key at ``path`` unless a file is there; True if made."""
    key = GrantKey.generate(int(time.time()) if now is None else now)
    return create_private_file(path, _encode([key]), what=_WHAT)


def rotate_key_ring(path: Path, *, now: int | None = None) -> GrantKeyRing:
    """A new active key first in the ring at ``path`` (created if missing); the
    previous active key retired now; retired keys whose grants have all expired
    dropped. Returns the new ring."""
    moment = int(time.time()) if now is None else now
    older = list(read_key_ring(path)) if path.exists() else []
    ring = _rotated(older, moment)
    if not older:
        try:
            path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        except OSError as exc:
            raise AuditKeyError(f"cannot create the {_WHAT} {path}: {exc}") from exc
    replace_private_file(path, _encode(list(ring)), what=_WHAT)
    return ring


def _rotated(older: Sequence[GrantKey], now: int) -> GrantKeyRing:
    kept = [
        key if key.retired is not None else replace(key, retired=now)
        for key in older
        if key.retired is None or now < key.retired + MAX_GRANT_TTL
    ]
    return GrantKeyRing([GrantKey.generate(now), *kept])


@final
class GrantKeys:
    """Where one store's grant keys are (see the module). Nothing is read or created
    until a grant is signed or verified; a file is re-read when it changes."""

    def __init__(
        self,
        *,
        source: str,
        file: Path | None = None,
        create: bool = False,
        ring: GrantKeyRing | None = None,
        where: str = "the store",
    ) -> None:
        self.source = source
        self.file = file
        self._create = create
        self._ring = ring
        self._where = where
        self._seen: tuple[int, int, int] | None = None
        self._lock = threading.Lock()

    @classmethod
    def resolve(
        cls,
        *,
        file: str | None,
        default_file: Path | None = None,
        ephemeral: bool = False,
        shared: bool = False,
        where: str = "the store",
    ) -> GrantKeys:
        """Find the keys as the module says (``file`` is the URL's parameter).
        ``shared``: the database serves many hosts (a missing file is never created)."""
        env_file = os.environ.get(ENV_KEY_FILE)
        named = (file, "grant_key_file in the store URL") if file else (env_file, ENV_KEY_FILE)
        if named[0]:
            path = Path(named[0])
            source = f"key ring {path} ({named[1]})"
            return cls(source=source, file=path, create=not shared, where=where)
        if ephemeral:
            ring = GrantKeyRing([GrantKey.generate(int(time.time()))])
            return cls(source="a key ring of this in-memory store", ring=ring)
        if default_file is not None:
            return cls(source=f"key ring {default_file}", file=default_file, create=True)
        return cls(source="none given", where=where)

    def ring(self) -> GrantKeyRing:
        """The ring as it is now: created where that is allowed, re-read if changed."""
        if self.file is None:
            if self._ring is None:
                raise AuditKeyError(
                    f"{self._where} has no grant signing keys: give every replica the same "
                    f"key ring — {ENV_KEY_FILE}=PATH or grant_key_file=PATH in the store URL "
                    "(make one with `interlock keys rotate --key-file PATH`)"
                )
            return self._ring
        path = self.file
        try:
            info = os.stat(path)
        except FileNotFoundError:
            if not self._create:
                raise AuditKeyError(
                    f"no grant key ring at {path} ({self.source}): create it once with "
                    f"`interlock keys rotate --key-file {path}` and give every process that "
                    "issues or claims grants the same file"
                ) from None
            with self._lock:
                create_key_ring(path)
            info = os.stat(path)
        seen = (info.st_ino, info.st_mtime_ns, info.st_size)
        ring = self._ring
        if ring is not None and seen == self._seen:
            return ring
        with self._lock:
            if self._ring is None or seen != self._seen:
                self._ring = read_key_ring(path)
                self._seen = seen
            return self._ring

    def rotate(self, *, now: int | None = None) -> GrantKeyRing:
        """Rotate (the file, or the in-memory ring); the new ring."""
        moment = int(time.time()) if now is None else now
        with self._lock:
            if self.file is not None:
                ring = rotate_key_ring(self.file, now=moment)
                self._seen = None
            else:
                ring = _rotated(list(self.ring()), moment)
            self._ring = ring
            return ring
