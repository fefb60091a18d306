"""Fingerprints as bytes: how the SQL store keeps them and how a remote agent sends
them (base64 of these bytes) — sorted little-endian uint64, 8 bytes each.

Example::

    from interlock.session.packing import pack, unpack

    assert unpack(pack({3, 1, 2})) == {1, 2, 3}
"""

from __future__ import annotations

import base64
import binascii
import sys
from array import array
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Final

from interlock._extension import switched_off

if TYPE_CHECKING:
    from interlock.session._history import FrozenPrints

try:
    from interlock.session._history import FrozenPrints as _FrozenPrints
    from interlock.session._history import frozen_from_bytes as _from_bytes
except ImportError:  # not built: fingerprints are frozensets
    _FrozenPrints = None  # type: ignore[assignment,misc]
    _from_bytes = None  # type: ignore[assignment]

__all__ = ["pack", "pack_text", "unpack", "unpack_text"]

_U64: Final = 1 << 64
_SWAP: Final = sys.byteorder != "little"
#: ``_history.frozen_from_bytes`` when the extension is built and not switched off
_frozen_from_bytes: Callable[[bytes], FrozenPrints] | None = None if switched_off() else _from_bytes


def pack(fingerprints: Iterable[int]) -> bytes:
    """Fingerprints as stored: sorted little-endian uint64. A value that is not a
    64-bit unsigned integer is a ValueError naming it (never silently changed: it
    would no longer match what an argument's probe computes). A history's packed
    ``FrozenPrints`` gives its bytes as they are (sorted, in range by construction)."""
    if _FrozenPrints is not None and type(fingerprints) is _FrozenPrints:
        return fingerprints.to_bytes()
    values = sorted(fingerprints)
    if values and (values[0] < 0 or values[-1] >= _U64):
        bad = values[0] if values[0] < 0 else values[-1]
        raise ValueError(f"a fingerprint must be a 64-bit unsigned integer, not {bad!r}")
    packed = array("Q", values)
    if _SWAP:  # pragma: no cover - big-endian hosts
        packed.byteswap()
    return packed.tobytes()


def unpack(data: bytes | memoryview | None) -> frozenset[int]:
    """The fingerprints of packed bytes (:func:`pack`'s inverse); a length that is not
    a multiple of 8 is a ValueError."""
    if not data:
        return frozenset()
    values = array("Q")
    values.frombytes(_native(data))
    return frozenset(values)


def unpack_prints(data: bytes | memoryview) -> frozenset[int] | FrozenPrints:
    """:func:`unpack` as a history keeps a step's fingerprints: a ``FrozenPrints`` read
    straight from the bytes (no int made) when the extension is built and not switched
    off, else the frozenset. Internal: the SQL store's reads of its own rows."""
    if _frozen_from_bytes is None or not data:
        return unpack(data)
    return _frozen_from_bytes(_native(data))


def _native(data: bytes | memoryview) -> bytes:
    """Stored fingerprints' bytes as native-order uint64s (the same bytes on a
    little-endian host); a length that is not a multiple of 8 is a ValueError."""
    raw = bytes(data)
    if len(raw) % 8:
        raise ValueError(f"packed fingerprints are 8 bytes each, not {len(raw)} bytes in all")
    if _SWAP:  # pragma: no cover - big-endian hosts
        values = array("Q")
        values.frombytes(raw)
        values.byteswap()
        raw = values.tobytes()
    return raw


def pack_text(fingerprints: Iterable[int]) -> str:
    """:func:`pack` as base64 text (the HTTP API's form)."""
    return base64.b64encode(pack(fingerprints)).decode("ascii")


def unpack_text(text: str) -> frozenset[int]:
    """:func:`pack_text`'s inverse; malformed text is a ValueError saying why."""
    try:
        raw = base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError) as exc:
        raise ValueError(f"fingerprints must be base64: {exc}") from None
    return unpack(raw)
