"""Fingerprints of data, to tell when a call's argument carries data an earlier step
returned: robust to the data being cut into pieces, re-wrapped or re-encoded.

- :func:`of_data` — the fingerprints kept for a tool result (or an input): hashes of
  its long tokens and winnowed k-grams of its normalised text; bounded in number.
- :func:`probe` — the fingerprints of an argument value under every decoding an
  exfiltration might use (URL-encoding, base64, hex), all k-grams (not winnowed, so
  any gram the data kept is found).
- :func:`carries` — whether an argument's probe shares enough with the data's.

First version (the interface the policy and the store use); the thresholds and the
false-positive rate are measured in ``tests/session`` and ``bench/``.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import re
import unicodedata
from collections.abc import Iterable, Iterator, Mapping
from typing import Final
from urllib.parse import unquote_plus

__all__ = ["GRAM", "MAX_FINGERPRINTS", "carries", "of_data", "probe", "texts_of"]

#: k-gram length in normalised characters, the winnowing window, the most fingerprints
#: kept of one result.
GRAM: Final = 16
WINDOW: Final = 8
MAX_FINGERPRINTS: Final = 4096
_TOKEN: Final = re.compile(r"[\w@.+\-/:=%]{8,}")
_B64: Final = re.compile(r"[A-Za-z0-9+/_\-]{16,}={0,2}")
_HEX: Final = re.compile(r"(?:[0-9a-fA-F]{2}){8,}")
_KEEP: Final = re.compile(r"[^\w@.]+")


def _h(text: str) -> int:
    return int.from_bytes(hashlib.blake2b(text.encode(), digest_size=8).digest(), "big")


def texts_of(value: object) -> Iterator[str]:
    """Every string leaf of a JSON-like value (keys too); anything else by ``str``."""
    if isinstance(value, str):
        yield value
    elif isinstance(value, bytes):
        yield value.decode("utf-8", "replace")
    elif isinstance(value, Mapping):
        for k, v in value.items():
            yield str(k)
            yield from texts_of(v)
    elif isinstance(value, (list, tuple)):
        for item in value:
            yield from texts_of(item)
    elif value is not None:
        yield str(value)


def _norm(text: str) -> str:
    return _KEEP.sub("", unicodedata.normalize("NFKC", text).casefold())


def _grams(text: str) -> list[int]:
    norm = _norm(text)
    if len(norm) < GRAM:
        return [_h("t:" + norm)] if len(norm) >= 8 else []
    return [_h("g:" + norm[i : i + GRAM]) for i in range(len(norm) - GRAM + 1)]


def _tokens(text: str) -> Iterable[int]:
    for token in _TOKEN.findall(text):
        yield _h("t:" + _norm(token))


def of_data(value: object, *, limit: int = MAX_FINGERPRINTS) -> frozenset[int]:
    """The fingerprints kept of a result: long tokens and winnowed grams."""
    out: set[int] = set()
    for text in texts_of(value):
        out.update(_tokens(text))
        grams = _grams(text)
        for i in range(0, max(len(grams) - WINDOW + 1, 1)):
            window = grams[i : i + WINDOW]
            if window:
                out.add(min(window))
        if len(out) >= limit:
            break
    return frozenset(sorted(out)[:limit]) if len(out) > limit else frozenset(out)


def _decodings(text: str) -> Iterator[str]:
    yield text
    seen = text
    for _ in range(3):
        unquoted = unquote_plus(seen)
        if unquoted == seen:
            break
        seen = unquoted
        yield seen
    for match in _B64.findall(text):
        padded = match + "=" * (-len(match) % 4)
        for decode in (base64.b64decode, base64.urlsafe_b64decode):
            try:
                yield decode(padded).decode("utf-8")
                break
            except (binascii.Error, ValueError):
                continue
    for match in _HEX.findall(text):
        try:
            yield bytes.fromhex(match).decode("utf-8")
        except ValueError:
            continue


def probe(value: object) -> frozenset[int]:
    """The fingerprints to look for, of an argument value and its decodings."""
    out: set[int] = set()
    for text in texts_of(value):
        for decoded in _decodings(text):
            out.update(_tokens(decoded))
            out.update(_grams(decoded))
    return frozenset(out)


def carries(probed: frozenset[int], data: frozenset[int]) -> bool:
    """Whether an argument (its :func:`probe`) carries some of ``data`` (its
    :func:`of_data`)."""
    return not probed.isdisjoint(data)
