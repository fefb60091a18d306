"""Signed checkpoints of the audit chains: what they say, where they go, how they are
checked.

The hash chain shows a record edited, removed from the middle or inserted; it cannot
show the newest records cut off with the head moved back, or a tenant's chain removed
whole — what is left is a valid chain. A checkpoint is a tenant's chain head (tenant,
record ``seq``, its hash, its key id, the time) signed with Ed25519 and written where a
database writer cannot rewrite it: a JSON-lines file (appended to), stdout for a log
shipper, the log, or an HTTP URL. :func:`read_checkpoints` checks the lines;
:meth:`~interlock.store.sql_audit.AuditStore.verify_audit` then checks the database
against them: every record a checkpoint saw must still be there, with the hash it saw.

One line per checkpoint, in streams: each audit writer (one per process, usually)
writes its own stream, numbered 1, 2, 3 ... and linked (``prev`` is the SHA-256 of the
stream's previous line), ended by an ``end`` line at a clean shutdown. So an edited or
forged line fails its signature, a line from another key is not trusted, and a line
deleted from the middle, or lines reordered, show as a gap or a broken link. Deleting
a stream's *last* lines leaves a shorter, valid stream: only a copy shipped elsewhere
(stdout to a log shipper, the URL) shows it — verify against both.

Settings (``open_store(..., checkpoints=CheckpointSettings(...))``, or from the
environment): ``INTERLOCK_CHECKPOINTS`` (comma-separated destinations: a file path,
``stdout``, ``stderr``, ``log``, an ``http(s)://`` URL; ``off`` for none),
``INTERLOCK_CHECKPOINT_KEY_FILE`` (the Ed25519 signing key, PEM, mode 0600),
``INTERLOCK_CHECKPOINT_EVERY`` (records, default 1000) and
``INTERLOCK_CHECKPOINT_INTERVAL`` (seconds, default 60). A store on a SQLite file
defaults to ``<database>.checkpoints.jsonl`` signed with ``<database>.checkpoint-key``
(created on first use); PostgreSQL has no default: give both.

Example::

    from pathlib import Path
    from interlock.store import open_store
    from interlock.store.checkpoints import load_public_key, read_checkpoints

    store = open_store("sqlite:///.interlock/interlock.db")
    log = read_checkpoints([Path(".interlock/interlock.db.checkpoints.jsonl")],
                           trusted=[load_public_key("ed25519:...")])
    report = store.verify_audit(checkpoints=log)
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final, Literal

import rfc8785

from interlock.errors import AuditKeyError
from interlock.store.chain import Anchor
from interlock.store.keyfiles import create_private_file, read_private_file
from interlock.store.records import CheckpointProblem

if TYPE_CHECKING:
    from cryptography.hazmat.primitives.asymmetric.ed25519 import (
        Ed25519PrivateKey,
        Ed25519PublicKey,
    )

    from interlock.store.sql_base import StoreBase

__all__ = [
    "DEFAULT_EVERY",
    "DEFAULT_INTERVAL",
    "ENV_DESTINATIONS",
    "ENV_EVERY",
    "ENV_INTERVAL",
    "ENV_KEY_FILE",
    "LINE_TYPE",
    "CheckpointLog",
    "CheckpointOption",
    "CheckpointSettings",
    "PublicKey",
    "create_signing_key",
    "line_digest",
    "load_public_key",
    "load_signing_key",
    "public_key_text",
    "read_checkpoints",
    "settings_for",
    "settings_from_env",
    "sign_line",
]

ENV_DESTINATIONS: Final = "INTERLOCK_CHECKPOINTS"
ENV_KEY_FILE: Final = "INTERLOCK_CHECKPOINT_KEY_FILE"
ENV_EVERY: Final = "INTERLOCK_CHECKPOINT_EVERY"
ENV_INTERVAL: Final = "INTERLOCK_CHECKPOINT_INTERVAL"
DEFAULT_EVERY: Final = 1000
DEFAULT_INTERVAL: Final = 60.0
LINE_TYPE: Final = "interlock.audit.checkpoint"
_WHAT: Final = "checkpoint signing key"
_PUBLIC_PREFIX: Final = "ed25519:"


# -- keys ----------------------------------------------------------------------------


def _ed25519() -> Any:
    """The module, imported when first needed (``import interlock`` stays light)."""
    from cryptography.hazmat.primitives.asymmetric import ed25519

    return ed25519


def _raw_public(key: Ed25519PublicKey) -> bytes:
    from cryptography.hazmat.primitives import serialization

    return key.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)


def _key_id(key: Ed25519PublicKey) -> str:
    return hashlib.sha256(_raw_public(key)).hexdigest()[:16]


@dataclass(frozen=True, slots=True)
class PublicKey:
    """A public key checkpoints are verified with; ``key_id`` is what lines name."""

    key: Ed25519PublicKey
    key_id: str

    @classmethod
    def of(cls, key: Ed25519PublicKey) -> PublicKey:
        return cls(key, _key_id(key))

    @property
    def text(self) -> str:
        return public_key_text(self.key)


def public_key_text(key: Ed25519PublicKey) -> str:
    """``ed25519:<base64 of the 32 raw bytes>``: one line to pin and pass around."""
    return _PUBLIC_PREFIX + base64.b64encode(_raw_public(key)).decode()


def load_public_key(text_or_path: str) -> PublicKey:
    """A public key from ``ed25519:...`` (what ``interlock audit checkpoint-key``
    prints), or from a file holding that or a PEM public key."""
    text = text_or_path.strip()
    if not text.startswith(_PUBLIC_PREFIX) and Path(text).is_file():
        text = Path(text).read_text("utf-8").strip()
    if text.startswith("-----BEGIN"):
        from cryptography.hazmat.primitives import serialization

        try:
            loaded = serialization.load_pem_public_key(text.encode())
        except ValueError as exc:
            raise ValueError(f"not a PEM public key: {exc}") from None
        if not isinstance(loaded, _ed25519().Ed25519PublicKey):
            raise ValueError(f"not an Ed25519 public key: {type(loaded).__name__}")
        return PublicKey.of(loaded)
    if text.startswith(_PUBLIC_PREFIX):
        try:
            raw = base64.b64decode(text[len(_PUBLIC_PREFIX) :], validate=True)
            return PublicKey.of(_ed25519().Ed25519PublicKey.from_public_bytes(raw))
        except (binascii.Error, ValueError):
            pass
    raise ValueError(
        f"{text_or_path[:80]!r} is not a checkpoint public key: expected ed25519:<base64> "
        "(as `interlock audit checkpoint-key` prints it), or a file holding it or a PEM "
        "public key"
    )


def create_signing_key(path: Path) -> bool:
    """Create an Ed25519 signing key file (PEM, mode 0600) unless one exists; True if
    created."""
    from cryptography.hazmat.primitives import serialization

    key = _ed25519().Ed25519PrivateKey.generate()
    pem = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )
    return create_private_file(path, pem, what=_WHAT)


def load_signing_key(path: Path) -> Ed25519PrivateKey:
    """The signing key in ``path``; AuditKeyError if it is not one, or others can read
    it (``FileNotFoundError`` if missing)."""
    from cryptography.hazmat.primitives import serialization

    data = read_private_file(path, what=_WHAT)
    try:
        key = serialization.load_pem_private_key(data, password=None)
    except (ValueError, TypeError) as exc:
        raise AuditKeyError(f"the {_WHAT} {path} is not a PEM private key: {exc}") from None
    if not isinstance(key, _ed25519().Ed25519PrivateKey):
        raise AuditKeyError(f"the {_WHAT} {path} is not an Ed25519 key")
    signing: Ed25519PrivateKey = key
    return signing


# -- settings -------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class CheckpointSettings:
    """Where checkpoints go and how often. ``destinations``: file paths, ``stdout``,
    ``stderr``, ``log``, ``http(s)://`` URLs. ``key_file``: the Ed25519 signing key
    (``create_key``: make it on first use if missing — for one host's SQLite store
    only). A round of checkpoints is signed once ``every`` records were written, or
    ``interval`` seconds after the previous round if anything was written, and at a
    clean shutdown."""

    destinations: tuple[str, ...]
    key_file: Path | None = None
    every: int = DEFAULT_EVERY
    interval: float = DEFAULT_INTERVAL
    create_key: bool = False

    def __post_init__(self) -> None:
        if not self.destinations:
            raise ValueError("checkpoints need at least one destination")
        if self.every < 1:
            raise ValueError(f"checkpoint every must be at least 1 record, not {self.every}")
        if not 0 < self.interval < float("inf"):
            raise ValueError(f"checkpoint interval must be positive seconds, not {self.interval}")

    def signing_key(self) -> Ed25519PrivateKey:
        """The signing key, created first if allowed and missing."""
        if self.key_file is None:
            raise AuditKeyError(
                f"checkpoints to {', '.join(self.destinations)} need a signing key: set "
                f"{ENV_KEY_FILE}=PATH (make one with `interlock audit checkpoint-key "
                "--create --key-file PATH`)"
            )
        try:
            return load_signing_key(self.key_file)
        except FileNotFoundError:
            if not self.create_key:
                raise AuditKeyError(
                    f"no {_WHAT} at {self.key_file}: make it once with `interlock audit "
                    f"checkpoint-key --create --key-file {self.key_file}` (a store on a "
                    "shared database never makes one: each replica would have its own)"
                ) from None
        create_signing_key(self.key_file)
        return load_signing_key(self.key_file)

    def public_key(self) -> PublicKey:
        return PublicKey.of(self.signing_key().public_key())


#: What ``open_store(..., checkpoints=...)`` takes: settings, ``False`` for none, or
#: ``None`` to take them from the environment and the defaults.
CheckpointOption = CheckpointSettings | Literal[False] | None


def settings_from_env(
    *, default_base: Path | None = None, create_key: bool = False
) -> CheckpointSettings | None:
    """The settings the environment gives, with the defaults for a database file at
    ``default_base`` (``None``: no defaults). ``None`` when nothing is to be written."""
    raw = os.environ.get(ENV_DESTINATIONS, "").strip()
    if raw.lower() == "off":
        return None
    destinations = tuple(part.strip() for part in raw.split(",") if part.strip())
    key_env = os.environ.get(ENV_KEY_FILE, "").strip()
    key_file = Path(key_env) if key_env else None
    if default_base is not None:
        destinations = destinations or (f"{default_base}.checkpoints.jsonl",)
        key_file = key_file or Path(f"{default_base}.checkpoint-key")
    if not destinations:
        return None
    return CheckpointSettings(
        destinations=destinations,
        key_file=key_file,
        every=_env_number(ENV_EVERY, DEFAULT_EVERY, int),
        interval=_env_number(ENV_INTERVAL, DEFAULT_INTERVAL, float),
        create_key=create_key or default_base is not None,
    )


def _env_number(name: str, default: Any, kind: type) -> Any:
    raw = os.environ.get(name, "").strip()
    if not raw:
        return default
    try:
        return kind(raw)
    except ValueError:
        what = "a whole number of records" if kind is int else "a number of seconds"
        raise ValueError(f"{name}={raw!r} is not {what}") from None


def settings_for(store: StoreBase, option: CheckpointOption = None) -> CheckpointSettings | None:
    """The checkpoint settings of an audit writer on ``store``: ``option`` if given,
    else the store's, else the environment's and the store's defaults."""
    chosen = option if option is not None else store.checkpoints
    if chosen is False:
        return None
    if isinstance(chosen, CheckpointSettings):
        return chosen
    return settings_from_env(default_base=store.file_path())


# -- lines ----------------------------------------------------------------------------


def _canonical(fields: Mapping[str, Any]) -> bytes:
    return rfc8785.dumps(dict(fields))


def line_digest(line: Mapping[str, Any]) -> str:
    """The SHA-256 of a signed line (what the next line of its stream names as
    ``prev``)."""
    return hashlib.sha256(_canonical(line)).hexdigest()


def sign_line(fields: Mapping[str, Any], key: Ed25519PrivateKey) -> dict[str, Any]:
    """``fields`` with ``signer`` (the key's id) and ``sig`` (base64 Ed25519 over the
    RFC 8785 JSON of everything else)."""
    signed = {k: v for k, v in fields.items() if k != "sig"}
    signed["signer"] = _key_id(key.public_key())
    signed["sig"] = base64.b64encode(key.sign(_canonical(signed))).decode()
    return signed


def iso(ts_us: int) -> str:
    try:
        moment = datetime.fromtimestamp(ts_us / 1e6, tz=UTC)
    except (OverflowError, OSError, ValueError):
        return str(ts_us)
    return moment.isoformat(timespec="seconds").replace("+00:00", "Z")


# -- reading and checking -------------------------------------------------------------


@dataclass
class CheckpointLog:
    """What checkpoint files say, once checked: the signed anchors per tenant (by
    record seq), the problems found in the files, and notes (streams without an end)."""

    anchors: dict[str, dict[int, Anchor]] = field(default_factory=dict)
    problems: list[CheckpointProblem] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    lines: int = 0  # signed lines accepted (copies counted once)


@dataclass(frozen=True, slots=True)
class _Line:
    file: str
    number: int
    fields: dict[str, Any]
    digest: str

    @property
    def stream(self) -> str:
        return str(self.fields["stream"])

    @property
    def n(self) -> int:
        return int(self.fields["n"])


def read_checkpoints(paths: Sequence[Path | str], *, trusted: Sequence[PublicKey]) -> CheckpointLog:
    """Read and check checkpoint files (the same stream may be in several: a local
    file and a shipped copy — copies count once). Only lines signed by a ``trusted``
    key become anchors."""
    keys = {key.key_id: key for key in trusted}
    log = CheckpointLog()
    accepted: list[_Line] = []
    for path in paths:
        try:
            text = Path(path).read_text("utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            log.problems.append(CheckpointProblem(str(path), 0, f"cannot be read: {exc}"))
            continue
        skipped: list[int] = []
        for number, raw in enumerate(text.splitlines(), 1):
            fields = _checkpoint_fields(raw)
            if fields is None:
                # Not a checkpoint: a shipped log's other lines, a write cut short. A
                # checkpoint garbled into one is missing from its stream, which shows.
                if raw.strip():
                    skipped.append(number)
                continue
            line = _check_line(str(path), number, fields, keys, log)
            if line is not None:
                accepted.append(line)
        if skipped:
            shown = ", ".join(map(str, skipped[:5])) + (", ..." if len(skipped) > 5 else "")
            log.notes.append(
                f"{path}: {len(skipped)} line(s) that are not checkpoints skipped (line {shown})"
            )
    streams = _dedupe(accepted, log)
    for lines in streams.values():
        _check_stream(lines, log)
        for line in lines:
            _anchor(line, log)
    log.lines = sum(len(lines) for lines in streams.values())
    log.problems.sort(key=lambda p: (str(p.file), p.line))
    return log


def _checkpoint_fields(raw: str) -> dict[str, Any] | None:
    """The line's fields if it is a checkpoint line (possibly after a prefix a log
    shipper added), else ``None``."""
    start = raw.find("{")
    if start < 0 or LINE_TYPE not in raw:
        return None
    try:
        fields = json.loads(raw[start:])
    except ValueError:
        return None
    if not isinstance(fields, dict) or fields.get("type") != LINE_TYPE:
        return None
    return fields


def _check_line(
    file: str,
    number: int,
    fields: dict[str, Any],
    keys: Mapping[str, PublicKey],
    log: CheckpointLog,
) -> _Line | None:
    def problem(text: str) -> None:
        log.problems.append(CheckpointProblem(file, number, text))

    where = f"checkpoint {fields.get('n')} of stream {fields.get('stream')}"
    key = keys.get(str(fields.get("signer")))
    if key is None:
        problem(
            f"{where} is signed by key {fields.get('signer')}, which is not a trusted key "
            "(a checkpoint from another key, or a forgery)"
        )
        return None
    try:
        signature = base64.b64decode(str(fields.get("sig", "")), validate=True)
        unsigned = {k: v for k, v in fields.items() if k != "sig"}
        key.key.verify(signature, _canonical(unsigned))
    except Exception:  # InvalidSignature, bad base64, a value RFC 8785 cannot encode
        problem(f"{where}: the signature does not match: the line was edited or forged")
        return None
    shape = _shape_problem(fields)
    if shape is not None:
        problem(f"{where}: {shape}")
        return None
    return _Line(file, number, fields, line_digest(fields))


def _shape_problem(fields: Mapping[str, Any]) -> str | None:
    """What a signed line lacks to be a checkpoint (a line from a newer Interlock)."""
    if not isinstance(fields.get("stream"), str) or not _positive(fields.get("n")):
        return "no stream or number"
    if not isinstance(fields.get("ts_us"), int):
        return "no time"
    kind = fields.get("kind")
    if kind == "end":
        return None
    if kind != "head":
        return f"unknown kind {kind!r}"
    if not isinstance(fields.get("tenant"), str) or not _positive(fields.get("seq")):
        return "no tenant or record"
    if not isinstance(fields.get("head"), str):
        return "no head hash"
    return None


def _positive(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 1


def _dedupe(lines: list[_Line], log: CheckpointLog) -> dict[str, list[_Line]]:
    """Each stream's lines in the order first met; a copy of a line (the same stream,
    number and content, from another file) counts once."""
    streams: dict[str, list[_Line]] = {}
    seen: dict[tuple[str, int], _Line] = {}
    for line in lines:
        first = seen.get((line.stream, line.n))
        if first is None:
            seen[(line.stream, line.n)] = line
            streams.setdefault(line.stream, []).append(line)
        elif first.digest != line.digest:
            log.problems.append(
                CheckpointProblem(
                    line.file,
                    line.number,
                    f"a second, different checkpoint {line.n} of stream {line.stream} "
                    f"(the first is {first.file}, line {first.number})",
                )
            )
    return streams


def _check_stream(lines: list[_Line], log: CheckpointLog) -> None:
    """Numbers 1, 2, 3 ... with no gap, each linked to the one before, in file order,
    nothing after the end."""
    stream = lines[0].stream
    ordered = sorted(lines, key=lambda line: line.n)
    _check_order(lines, log)
    expected, previous = 1, None
    for line in ordered:
        if line.n != expected:
            missing = (
                f"checkpoint {expected} of stream {stream} is missing"
                if line.n == expected + 1
                else f"checkpoints {expected}..{line.n - 1} of stream {stream} are missing"
            )
            log.problems.append(
                CheckpointProblem(line.file, line.number, f"{missing} (lines were deleted)")
            )
        elif line.fields.get("prev") != (previous.digest if previous is not None else None):
            log.problems.append(
                CheckpointProblem(
                    line.file,
                    line.number,
                    f"checkpoint {line.n} of stream {stream} does not follow checkpoint "
                    f"{line.n - 1}: a line was replaced",
                )
            )
        if previous is not None and previous.fields.get("kind") == "end":
            log.problems.append(
                CheckpointProblem(
                    line.file, line.number, f"checkpoint {line.n} comes after stream {stream} ended"
                )
            )
        expected, previous = line.n + 1, line
    if ordered[-1].fields.get("kind") != "end":
        log.notes.append(
            f"stream {stream} (from {iso(int(ordered[0].fields['ts_us']))}, last checkpoint "
            f"{ordered[-1].n} at {iso(int(ordered[-1].fields['ts_us']))}) has no closing "
            "checkpoint: its process is running or did not shut down cleanly — or its "
            "last lines were removed, which only a copy shipped elsewhere can show"
        )


def _check_order(lines: list[_Line], log: CheckpointLog) -> None:
    """In each file, a stream's lines come in number order."""
    by_file: dict[str, list[_Line]] = {}
    for line in lines:
        by_file.setdefault(line.file, []).append(line)
    for in_file in by_file.values():
        ordered = sorted(in_file, key=lambda line: line.n)
        for found, expected in zip(in_file, ordered, strict=True):
            if found is not expected:
                log.problems.append(
                    CheckpointProblem(
                        found.file,
                        found.number,
                        f"checkpoint {found.n} of stream {found.stream} is out of order: "
                        "the lines were reordered",
                    )
                )
                break


def _anchor(line: _Line, log: CheckpointLog) -> None:
    fields = line.fields
    if fields.get("kind") != "head":
        return
    tenant, seq = str(fields["tenant"]), int(fields["seq"])
    anchors = log.anchors.setdefault(tenant, {})
    known = anchors.get(seq)
    if known is None:
        anchors[seq] = Anchor(seq, str(fields["head"]), int(fields["ts_us"]))
    elif known.head != fields["head"]:
        log.problems.append(
            CheckpointProblem(
                line.file,
                line.number,
                f"checkpoints disagree about tenant {tenant!r}'s record {seq} (two databases "
                "writing to one checkpoint file?)",
            )
        )
