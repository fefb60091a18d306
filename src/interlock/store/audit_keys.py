"""The audit log's HMAC key: where it comes from, and the id each record names it by.

Every record's link is HMAC-SHA256 under the store's audit key, so that someone who
can write to the database but does not hold the key cannot forge a record, rewrite
one, or append one that verifies. Where the key comes from, first match wins:

1. ``open_store(url, audit_key=...)``: the key itself (bytes or text), a key hook — any
   callable returning it (:class:`AuditKeyProvider`: a KMS or secrets-manager client),
   called once, when the key is first needed — or ``False`` for no key at all;
2. ``audit_key_file=PATH`` in the store URL;
3. ``INTERLOCK_AUDIT_KEY_FILE=PATH``, or ``INTERLOCK_AUDIT_KEY`` (the secret itself; not
   both);
4. for a SQLite file, the key file beside it, ``<database>.audit-key``, created with
   mode 0600 the first time a record is written; an in-memory SQLite store gets a
   random key that lives as long as it does;
5. otherwise (PostgreSQL, shared by replicas that must all hold the same key) none:
   the store writes unkeyed records, marked as such, and warns loudly when a writer
   starts (``INTERLOCK_AUDIT_REQUIRE_KEY=1`` makes that a refusal).

Unkeyed records are trusted by a verifier with a key only where a keyed record follows
them (see :mod:`.chain`). The audit writer that creates a SQLite store's key file —
the moment an existing log first gets a key — seals every chain there with a keyed
record (:meth:`~interlock.store.sql_audit.AuditStore.seal_unkeyed_chains`); a key given
to an existing unkeyed log any other way seals it only when told to (``interlock audit
seal``, after verifying it), since sealing vouches for records nobody can authenticate.

A key file holds one key per line (at least 16 characters; ``#`` comments allowed):
the first is the one new records are written with, the others are older keys, kept
so records written before a rotation still verify (:func:`rotate_key_file`). Only a
store on a SQLite file creates a missing key file; on a shared database every replica
must be given the same one (``interlock audit key --create --key-file PATH``).

A key's id — the first 16 hex digits of HMAC(key, "interlock audit key id") — is
stored with each record: it says which key to verify the record with, and reveals
nothing of the key.

Example::

    from interlock.store import open_store

    store = open_store("postgresql://db/interlock?audit_key_file=/run/secrets/audit-key")
    store = open_store("postgresql://db/interlock", audit_key=lambda: kms.decrypt(blob))
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import os
import secrets
import threading
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Final, Literal, Protocol, final

from interlock.errors import AuditKeyError
from interlock.store.keyfiles import create_private_file, read_private_file, replace_private_file

__all__ = [
    "ENV_KEY",
    "ENV_KEY_FILE",
    "ENV_REQUIRE_KEY",
    "AuditKey",
    "AuditKeyProvider",
    "AuditKeySetting",
    "AuditKeyring",
    "AuditKeys",
    "create_key_file",
    "generate_key",
    "read_key_file",
    "rotate_key_file",
]

log = logging.getLogger("interlock.audit")

ENV_KEY: Final = "INTERLOCK_AUDIT_KEY"
ENV_KEY_FILE: Final = "INTERLOCK_AUDIT_KEY_FILE"
ENV_REQUIRE_KEY: Final = "INTERLOCK_AUDIT_REQUIRE_KEY"
MIN_KEY_CHARS: Final = 16
_WHAT: Final = "audit key"
_KEY_ID_LABEL: Final = b"interlock audit key id"


class AuditKeyProvider(Protocol):
    """A key hook: returns the audit key (bytes, or text used as its UTF-8). Called
    once per store, when the key is first needed."""

    def __call__(self) -> bytes | str: ...


#: What ``open_store(..., audit_key=...)`` takes: the key, a hook, ``False`` for none,
#: or ``None`` to find it as the module docstring says.
AuditKeySetting = bytes | str | AuditKeyProvider | Literal[False] | None


@final
class AuditKey:
    """One HMAC-SHA256 key and its public id.

    >>> AuditKey(b"0123456789abcdef").digest(b"material")  # doctest: +ELLIPSIS
    '...'
    """

    __slots__ = ("_mac", "key_id")

    def __init__(self, secret: bytes) -> None:
        if not secret:
            raise AuditKeyError("an audit key cannot be empty")
        # Keyed once; each record copies this state instead of re-keying (cheaper). The
        # OpenSSL object inside hmac.HMAC, where there is one, is copied directly: the
        # same copy, update and hexdigest without hmac.HMAC's three Python-level methods
        # around them (≈ 1 µs of a record's commit).
        keyed = hmac.new(secret, digestmod=hashlib.sha256)
        self._mac: hmac.HMAC = getattr(keyed, "_hmac", None) or keyed  # (the same methods)
        self.key_id: str = hmac.new(secret, _KEY_ID_LABEL, hashlib.sha256).hexdigest()[:16]

    def digest(self, material: bytes) -> str:
        """HMAC-SHA256 of ``material``, in hex."""
        mac = self._mac.copy()
        mac.update(material)
        return mac.hexdigest()

    def __repr__(self) -> str:
        return f"AuditKey(key_id={self.key_id!r})"


@final
class AuditKeyring:
    """The key new records are written with (``current``) and the older ones that
    records written before a rotation still name."""

    __slots__ = ("_by_id", "current", "keys")

    def __init__(self, keys: Sequence[AuditKey]) -> None:
        if not keys:
            raise AuditKeyError("an audit keyring needs at least one key")
        self.keys = tuple(keys)
        self.current = self.keys[0]
        self._by_id = {key.key_id: key for key in reversed(self.keys)}

    def get(self, key_id: str) -> AuditKey | None:
        return self._by_id.get(key_id)

    def __iter__(self) -> Iterator[AuditKey]:
        return iter(self.keys)


def generate_key() -> bytes:
    """A new random key, as a key file holds it (64 hex digits)."""
    return secrets.token_hex(32).encode()


def read_key_file(path: Path) -> list[bytes]:
    """The keys in a key file, current first. Raises AuditKeyError for a file others
    can read, an empty one or a key too short (``FileNotFoundError`` if missing)."""
    data = read_private_file(path, what=_WHAT)
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise AuditKeyError(
            f"the audit key file {path} is not text: one key per line, e.g. 64 hex digits"
        ) from None
    keys = [line.strip() for line in text.splitlines()]
    keys = [key for key in keys if key and not key.startswith("#")]
    if not keys:
        raise AuditKeyError(
            f"the audit key file {path} holds no key: remove it to have one created, or "
            f"run `interlock audit key --create --key-file {path}`"
        )
    for number, key in enumerate(keys, 1):
        if len(key) < MIN_KEY_CHARS:
            raise AuditKeyError(
                f"key {number} in the audit key file {path} is too short: at least "
                f"{MIN_KEY_CHARS} characters (a new one has 64 hex digits)"
            )
    return [key.encode() for key in keys]


def create_key_file(path: Path) -> bool:
    """Create a key file holding a new random key unless one exists; True if created."""
    return create_private_file(path, generate_key() + b"\n", what=_WHAT)


def rotate_key_file(path: Path) -> str:
    """Put a new key first in the key file (creating it if needed), keeping the older
    keys to verify older records; returns the new key's id. Processes write with the
    new key once restarted."""
    older = read_key_file(path) if path.exists() else []
    new = generate_key()
    replace_private_file(path, b"\n".join([new, *older]) + b"\n", what=_WHAT)
    return AuditKey(new).key_id


def _ring(secrets_: Sequence[bytes]) -> AuditKeyring:
    return AuditKeyring([AuditKey(secret) for secret in secrets_])


def _as_bytes(value: bytes | str) -> bytes:
    return value.encode("utf-8") if isinstance(value, str) else bytes(value)


@final
class AuditKeys:
    """Where one store's audit key comes from (see the module docstring). Nothing is
    read or created until a record is written (:meth:`for_writing`) or verified
    (:meth:`for_verifying`, which never writes a file)."""

    def __init__(
        self,
        *,
        source: str,
        ring: AuditKeyring | None = None,
        provider: AuditKeyProvider | None = None,
        file: Path | None = None,
        create: bool = False,
        explicit_file: bool = False,
        where: str = "the store",
    ) -> None:
        self.source = source
        self.file = file
        self._ring = ring
        self._provider = provider
        self._create = create
        self._explicit_file = explicit_file
        self._where = where
        self._lock = threading.Lock()
        self._checked_for_writing = False
        #: This object created the key file (the one moment the log had no key before).
        self.created_here = False

    @classmethod
    def resolve(
        cls,
        setting: AuditKeySetting,
        *,
        url_file: str | None = None,
        default_file: Path | None = None,
        ephemeral: bool = False,
        shared: bool = False,
        where: str = "the store",
    ) -> AuditKeys:
        """Find the key as the module docstring says. ``shared``: the database is
        used by many hosts (never create a key file for it)."""
        if setting is False:
            return cls(source="none (audit_key=False)", where=where)
        if isinstance(setting, (bytes, str)):
            return cls(source="the audit_key argument", ring=_ring([_as_bytes(setting)]))
        if setting is not None:
            return cls(source="a key hook (audit_key=...)", provider=setting, where=where)
        env_key = os.environ.get(ENV_KEY)
        env_file = os.environ.get(ENV_KEY_FILE)
        if env_key and env_file:
            raise AuditKeyError(f"set one of {ENV_KEY} and {ENV_KEY_FILE}, not both")
        if url_file:
            return cls._from_file(Path(url_file), "audit_key_file in the store URL", shared, where)
        if env_file:
            return cls._from_file(Path(env_file), ENV_KEY_FILE, shared, where)
        if env_key:
            return cls(source=ENV_KEY, ring=_ring([env_key.encode()]), where=where)
        if ephemeral:
            return cls(source="a random key of this in-memory store", ring=_ring([generate_key()]))
        if default_file is not None:
            return cls(
                source=f"key file {default_file}", file=default_file, create=True, where=where
            )
        return cls(source="none given", where=where)

    @classmethod
    def _from_file(cls, path: Path, named_by: str, shared: bool, where: str) -> AuditKeys:
        return cls(
            source=f"key file {path} ({named_by})",
            file=path,
            create=not shared,
            explicit_file=True,
            where=where,
        )

    @property
    def configured(self) -> bool:
        """A key is set up (it may not have been read or created yet)."""
        return self._ring is not None or self._provider is not None or self.file is not None

    def for_writing(self) -> AuditKeyring | None:
        """The keys to write with, creating a missing key file where that is allowed.
        ``None`` means unkeyed: warned about once per store, or refused under
        ``INTERLOCK_AUDIT_REQUIRE_KEY=1``."""
        if self._checked_for_writing:  # every append asks: no lock once settled
            return self._ring
        with self._lock:
            ring = self._load(create=self._create)
            if ring is None and not self._checked_for_writing:
                if os.environ.get(ENV_REQUIRE_KEY) == "1":
                    raise AuditKeyError(
                        f"{ENV_REQUIRE_KEY}=1 and {self._where} has no audit key ({self.source}):"
                        f" give one — {ENV_KEY_FILE}=PATH, audit_key_file=PATH in the store "
                        "URL, or open_store(..., audit_key=...)"
                    )
                log.warning("interlock: %s", self.unkeyed_warning())
            self._checked_for_writing = True
            return ring

    def for_verifying(self) -> AuditKeyring | None:
        """The keys to verify with; ``None`` when there are none (yet). Never writes."""
        with self._lock:
            return self._load(create=False)

    def _load(self, *, create: bool) -> AuditKeyring | None:
        if self._ring is not None:
            return self._ring
        if self._provider is not None:
            try:
                secret = self._provider()
            except Exception as exc:
                raise AuditKeyError(f"the audit key hook failed: {exc}") from exc
            if not isinstance(secret, (bytes, str)) or not secret:
                raise AuditKeyError(
                    f"the audit key hook returned {type(secret).__name__}, not a non-empty "
                    "key (bytes or str)"
                )
            self._ring = _ring([_as_bytes(secret)])
            return self._ring
        if self.file is None:
            return None
        try:
            self._ring = _ring(read_key_file(self.file))
        except FileNotFoundError:
            if create:
                self.created_here = create_key_file(self.file)
                self._ring = _ring(read_key_file(self.file))
            elif self._explicit_file or self._checked_for_writing:
                raise AuditKeyError(self._missing_file_message()) from None
            else:
                return None  # the default key is made by the first writer
        return self._ring

    def _missing_file_message(self) -> str:
        assert self.file is not None
        why = (
            " (a store on a shared database never creates one: each replica would make its own)"
            if not self._create
            else ""
        )
        return (
            f"no audit key at {self.file}{why}: create it once with `interlock audit key "
            f"--create --key-file {self.file}` and give every process that writes or "
            "verifies the log the same file"
        )

    def unkeyed_warning(self) -> str:
        return (
            f"the audit log of {self._where} is NOT keyed (plain SHA-256; key: "
            f"{self.source}): anyone who can write to the database can rewrite it "
            f"undetected. Give it a key: {ENV_KEY_FILE}=PATH (make one with `interlock "
            "audit key --create --key-file PATH`), audit_key_file=PATH in the store URL, "
            "or open_store(..., audit_key=...)"
        )

    def describe(self) -> str:
        """One line for a startup log: the algorithm, the key id and where it is from
        (never the key). Reads the key if it was not read yet (never creates it)."""
        try:
            ring = self._ring if self._ring is not None else self.for_verifying()
        except AuditKeyError as exc:
            return f"HMAC-SHA256, but the key cannot be used: {exc}"
        if ring is None:
            if self.file is not None:
                return f"HMAC-SHA256, key to be created at {self.file} on the first write"
            return f"NOT keyed (plain SHA-256; key: {self.source})"
        older = len(ring.keys) - 1
        kept = f"; {older} older key{'s' if older != 1 else ''} kept to verify" if older else ""
        return f"HMAC-SHA256, key id {ring.current.key_id} (from {self.source}{kept})"
