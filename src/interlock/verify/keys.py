"""Where a verifier's public keys come from: a fixed mapping, a JWK set (a dict or a
file), or a callable that fetches one (from Interlock's server, say).

A fetched or file-backed set is cached. It is read again when a token names a key the
cache does not hold — at most once every ``refetch_interval`` seconds, so a stream of
tokens with made-up key ids cannot turn into a stream of fetches — and when the cached
copy is older than ``max_age`` (a key retired at the authority stops verifying within
``max_age``). A fetch that fails leaves the cached set in place; with no set at all the
verifier refuses with :class:`~interlock.errors.KeysUnavailable` (fail closed).

Example::

    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
    from interlock.verify.keys import key_source
    from interlock.verify.tokens import public_jwk

    key = Ed25519PrivateKey.generate()
    jwks = {"keys": [public_jwk("k1", key.public_key())]}
    fetches = []

    def fetch():
        fetches.append(1)
        return jwks

    source = key_source(fetch, clock=lambda: 1000.0)
    assert source.key("k1") is not None and source.key("k1") is not None
    assert source.key("k2") is None and len(fetches) == 2  # one refetch for k2, then none
    assert source.key("k2") is None and len(fetches) == 2
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final, Protocol, TypeAlias

from interlock.errors import GrantInvalid, KeysUnavailable
from interlock.verify.tokens import keys_from_jwks

if TYPE_CHECKING:
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

__all__ = [
    "FetchedKeys",
    "KeySource",
    "Keys",
    "StaticKeys",
    "jwks_file",
    "jwks_url",
    "key_source",
]

DEFAULT_REFETCH_INTERVAL: Final = 30.0
DEFAULT_MAX_AGE: Final = 300.0
_MAX_JWKS_BYTES: Final = 1 << 20

#: What a verifier accepts as its keys (see :func:`key_source`).
Keys: TypeAlias = (
    "KeySource | Mapping[str, Ed25519PublicKey] | Mapping[str, Any] | str | os.PathLike[str]"
    " | Callable[[], Mapping[str, Any]]"
)


class KeySource(Protocol):
    """Public keys by key id. ``key`` returns ``None`` for a key it does not know;
    :class:`KeysUnavailable` when it cannot know (no key set could be had)."""

    def key(self, kid: str) -> Ed25519PublicKey | None: ...


class StaticKeys:
    """A fixed set of keys (a mapping of key ids to keys, or a JWK set read once)."""

    __slots__ = ("_keys",)

    def __init__(self, keys: Mapping[str, Ed25519PublicKey]) -> None:
        self._keys = dict(keys)

    def key(self, kid: str) -> Ed25519PublicKey | None:
        return self._keys.get(kid)


class FetchedKeys:
    """A JWK set fetched by ``fetch`` (called with no arguments, returning the set as a
    dict), cached; fetched again on an unknown key id at most once every
    ``refetch_interval`` seconds, and when the cached set is older than ``max_age``.
    Thread-safe: one fetch at a time."""

    def __init__(
        self,
        fetch: Callable[[], Mapping[str, Any]],
        *,
        refetch_interval: float = DEFAULT_REFETCH_INTERVAL,
        max_age: float = DEFAULT_MAX_AGE,
        clock: Callable[[], float] = time.time,
    ) -> None:
        if not refetch_interval >= 0 or not max_age > 0:
            raise ValueError("refetch_interval must be >= 0 and max_age > 0 (seconds)")
        self._fetch = fetch
        self._refetch_interval = refetch_interval
        self._max_age = max_age
        self._clock = clock
        self._lock = threading.Lock()
        self._keys: dict[str, Ed25519PublicKey] | None = None
        self._fetched_at = float("-inf")  # the last successful fetch
        self._tried_at = float("-inf")  # the last attempt, successful or not
        self._problem: str | None = None

    def cached(self, kid: str) -> Ed25519PublicKey | None:
        """The key when the cache holds it and is fresh (no fetch, no lock), else
        ``None`` — then :meth:`key` decides (and may fetch)."""
        keys = self._keys
        if keys is not None and self._clock() - self._fetched_at < self._max_age:
            return keys.get(kid)
        return None

    def key(self, kid: str) -> Ed25519PublicKey | None:
        if (found := self.cached(kid)) is not None:
            return found
        now = self._clock()
        with self._lock:
            stale = self._keys is None or now - self._fetched_at >= self._max_age
            missing = self._keys is not None and kid not in self._keys
            if (stale or missing) and now - self._tried_at >= self._refetch_interval:
                self._refresh(now)
            if self._keys is None:
                raise KeysUnavailable(
                    f"the verifier has no keys: the JWK set could not be had ({self._problem})"
                )
            return self._keys.get(kid)

    def _refresh(self, now: float) -> None:
        self._tried_at = now
        try:
            document = self._fetch()
            keys = keys_from_jwks(document)
        except Exception as exc:  # any failure keeps the last good set (fail closed)
            self._problem = f"{type(exc).__name__}: {exc}"
            return
        self._keys, self._fetched_at, self._problem = keys, now, None


def jwks_file(path: str | os.PathLike[str]) -> Callable[[], Mapping[str, Any]]:
    """A fetch function reading a JWK set from a JSON file (read again as
    :class:`FetchedKeys` decides: a rotated file is picked up)."""
    where = Path(path)

    def read() -> Mapping[str, Any]:
        with where.open("rb") as handle:
            data = handle.read(_MAX_JWKS_BYTES + 1)
        if len(data) > _MAX_JWKS_BYTES:
            raise GrantInvalid(f"the JWK set {where} is larger than 1 MiB")
        document = json.loads(data)
        if not isinstance(document, dict):
            raise GrantInvalid(f"the JWK set {where} is not a JSON object")
        return document

    return read


def jwks_url(url: str, *, timeout: float = 5.0) -> Callable[[], Mapping[str, Any]]:
    """A fetch function reading a JWK set over HTTP(S) (the standard library's client:
    no dependency), e.g. Interlock's ``/v1/keys/jwks.json``."""
    from urllib.parse import urlsplit

    if urlsplit(url).scheme not in ("http", "https"):
        raise ValueError(f"{url!r} is not an http(s) URL")

    def fetch() -> Mapping[str, Any]:
        from urllib.request import Request, urlopen

        request = Request(url, headers={"Accept": "application/json"})
        with urlopen(request, timeout=timeout) as answer:
            data = answer.read(_MAX_JWKS_BYTES + 1)
        if len(data) > _MAX_JWKS_BYTES:
            raise GrantInvalid(f"the JWK set at {url} is larger than 1 MiB")
        document = json.loads(data)
        if not isinstance(document, dict):
            raise GrantInvalid(f"the JWK set at {url} is not a JSON object")
        return document

    return fetch


def key_source(
    keys: Keys,
    *,
    refetch_interval: float = DEFAULT_REFETCH_INTERVAL,
    max_age: float = DEFAULT_MAX_AGE,
    clock: Callable[[], float] = time.time,
) -> KeySource:
    """The :class:`KeySource` for what a verifier was given:

    - an object with a ``key(kid)`` method: itself;
    - a JWK set (a mapping with a ``keys`` list): its Ed25519 keys, read once;
    - any other mapping: key ids to ``Ed25519PublicKey`` objects, as they are;
    - a path (``str`` or ``PathLike``) to a JWK set file: read, and read again as
      :class:`FetchedKeys` decides;
    - a callable returning a JWK set: fetched and cached (:class:`FetchedKeys`).
    """
    if hasattr(keys, "key") and callable(keys.key):
        return keys  # type: ignore[return-value]
    if isinstance(keys, Mapping):
        if isinstance(keys.get("keys"), list):
            return StaticKeys(keys_from_jwks(keys))
        return StaticKeys(_checked_keys(keys))
    if isinstance(keys, (str, os.PathLike)):
        fetch = jwks_file(keys)
    elif callable(keys):
        fetch = keys
    else:
        raise TypeError(
            f"keys must be a key mapping, a JWK set, a path or a callable, not {keys!r}"
        )
    return FetchedKeys(fetch, refetch_interval=refetch_interval, max_age=max_age, clock=clock)


def _checked_keys(keys: Mapping[str, Any]) -> dict[str, Ed25519PublicKey]:
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

    for kid, key in keys.items():
        if not isinstance(kid, str) or not kid or not isinstance(key, Ed25519PublicKey):
            raise TypeError(
                f"key {kid!r} is not an Ed25519PublicKey under a key id (pass a JWK set "
                "as {'keys': [...]})"
            )
    return dict(keys)
