"""The fingerprints of issue 18 wave 1 (frozen copy, for bench/fingerprints.py to
measure the current module against).

Fingerprints of data, to tell when a call's argument carries data an earlier step
returned: robust to the data being cut into pieces, re-wrapped or re-encoded.

- :func:`of_data` — the fingerprints kept of a tool result (or an input).
- :func:`probe` — the fingerprints of an argument value under every decoding an
  exfiltration might use.
- :func:`carries` — whether an argument's probe shares a fingerprint with the data's.

What is found (``tests/session/test_fingerprints*.py`` holds the table):

- **Normalised text**: NFKC, case-folded, every character but letters, digits, ``@``
  and ``.`` dropped — so whitespace, line breaks, re-wrapping, quoting, JSON
  punctuation and case changes do not matter.
- **Substrings**: any run of :data:`GRAM` (16) normalised characters of a *token* of
  the data (a run without whitespace: keys, passwords, addresses, base64) is kept; in
  prose, grams are winnowed (window :data:`WINDOW`), so any shared run of
  ``GRAM + WINDOW - 1`` (19) normalised characters is found. A **whole token** of at
  least 8 characters that looks specific (a digit, an ``@``, a ``.``/``_``/``-``/``/``
  inside, or 12+ characters; a plain dictionary word is not) matches on its own.
- **Encodings** (on both sides: an argument is decoded when probed, and encoded runs
  in the data are decoded when it is kept): URL-encoding (nested, ``+`` for space),
  JSON string escapes (``\\n``, ``\\u0041``), base64 (standard and URL-safe, with or
  without padding, re-wrapped, and cut at any offset: each run is decoded at its four
  alignments, so a piece cut from a longer encoding is read too), hex (either
  nibble alignment), up to three layers deep (base64 inside URL-encoding...).

Bounds: at most :data:`MAX_FINGERPRINTS` (4096, 32 KiB packed) per result; below it
about 0.4 per normalised character of prose and 1 per character of long tokens
(~250 per KiB of ordinary text). Past the cap the whole-token fingerprints and the
grams of tokens are kept first, then a consistent sample (the smallest hashes) of the
prose grams: a large result is only partly covered. At most :data:`MAX_SCAN` (256 Ki)
characters of a result are read. A probe is not capped (an argument is
small; its decodings are bounded by :data:`_MAX_DECODINGS`).

The hashes are not keyed: a remote agent computes its results' fingerprints itself
(the result never leaves it), so a key would have to be handed to every agent. Short
low-entropy values (under 8 characters) are never fingerprinted at all, and a
fingerprint is 64 bits of a 16-character gram or of a whole token.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import re
import unicodedata
import zlib
from collections.abc import Iterator, Mapping
from typing import Final
from urllib.parse import unquote_plus

__all__ = ["GRAM", "MAX_FINGERPRINTS", "WINDOW", "carries", "of_data", "probe", "texts_of"]

#: k-gram length in normalised characters; the winnowing window over prose; the most
#: fingerprints kept of one result.
GRAM: Final = 16
WINDOW: Final = 4
MAX_FINGERPRINTS: Final = 4096
MIN_TOKEN: Final = 8
#: Characters of one result read, at most (its time bounded too: ~2 ms per KiB).
MAX_SCAN: Final = 256 * 1024
#: Decoded forms of one text looked at, at most (a probe of hostile input stays bounded).
_MAX_DECODINGS: Final = 64
_DEPTH: Final = 3

_SPLIT: Final = re.compile(r"[\s\"'`<>()\[\]{},;|\\]+")
_SUBSPLIT: Final = re.compile(r"[=&?#:/]+")
_DROP: Final = re.compile(r"[^\w@.]+")
_B64_RUN: Final = re.compile(r"[A-Za-z0-9+/_\-]{16,}={0,2}")
_HEX_RUN: Final = re.compile(r"[0-9a-fA-F]{16,}")
_JSON_ESCAPE: Final = re.compile(r"\\(u[0-9a-fA-F]{4}|[nrtbf\"\\/])")
_DIGIT: Final = re.compile(r"\d")
_LETTER: Final = re.compile(r"[^\W\d_]")
_WS: Final = re.compile(r"\s+")
_ESCAPES: Final = {"n": "\n", "r": "\r", "t": "\t", "b": "\b", "f": "\f"}


def texts_of(value: object) -> Iterator[str]:
    """Every string leaf of a JSON-like value (keys too); anything else by ``str``."""
    if isinstance(value, str):
        yield value
    elif isinstance(value, (bytes, bytearray, memoryview)):
        yield bytes(value).decode("utf-8", "replace")
    elif isinstance(value, Mapping):
        for k, v in value.items():
            yield str(k)
            yield from texts_of(v)
    elif isinstance(value, (list, tuple, set, frozenset)):
        for item in value:
            yield from texts_of(item)
    elif value is not None:
        yield str(value)


def _norm(text: str) -> str:
    return _DROP.sub("", unicodedata.normalize("NFKC", text).casefold())


def _token_hash(norm: str) -> int:
    return int.from_bytes(hashlib.blake2b(norm.encode(), digest_size=8).digest(), "big")


def _gram_hashes(norm: str) -> list[int]:
    """The hash of every GRAM-long run of ``norm`` (crc32 and adler32 of its UTF-8:
    two C calls a gram, ~3x faster than a cryptographic hash; a collision only ever
    makes a false match, which refuses, never allows)."""
    data = norm.encode()
    if len(norm) == len(data):  # ASCII: a byte is a character
        return [
            zlib.crc32(data[i : i + GRAM]) << 32 | zlib.adler32(data[i : i + GRAM])
            for i in range(len(data) - GRAM + 1)
        ]
    out = []
    for i in range(len(norm) - GRAM + 1):
        chunk = norm[i : i + GRAM].encode()
        out.append(zlib.crc32(chunk) << 32 | zlib.adler32(chunk))
    return out


def _tokens(text: str) -> Iterator[tuple[str, bool]]:
    """The tokens of ``text`` at least MIN_TOKEN long: runs without whitespace or
    quoting, and the pieces of each between ``= & ? # : /`` (a key in a URL's query,
    a value after ``KEY=`` in a ``.env`` file), each with whether it is a piece."""
    for raw in _SPLIT.split(text):
        if len(raw) >= MIN_TOKEN:
            yield raw, False
            if _SUBSPLIT.search(raw):
                for piece in _SUBSPLIT.split(raw):
                    if len(piece) >= MIN_TOKEN:
                        yield piece, True


def _specific(raw: str, norm: str, piece: bool) -> bool:
    """Whether a whole token is specific enough to match on its own: letters and
    digits mixed, or an ``@``; a whole run of 12+ characters too (not a piece: a
    host name or a path segment alone is common to unrelated pages)."""
    if "@" in norm:
        return True
    if _DIGIT.search(norm) is not None and _LETTER.search(norm) is not None:
        return True
    return not piece and len(norm) >= 12


def _winnow(hashes: list[int]) -> set[int]:
    """The least hash of every WINDOW consecutive ones (a shared run of GRAM + WINDOW
    - 1 characters shares a window, so its least hash)."""
    if len(hashes) <= WINDOW:
        return {min(hashes)} if hashes else set()
    shifted = [hashes[i:] for i in range(WINDOW)]
    return set(map(min, zip(*shifted, strict=False)))


def of_data(value: object, *, limit: int = MAX_FINGERPRINTS) -> frozenset[int]:
    """The fingerprints kept of a result (or an input): see the module docstring."""
    whole: set[int] = set()  # whole tokens, then every gram of long tokens
    token_grams: set[int] = set()
    prose: set[int] = set()
    scanned = 0
    for leaf in texts_of(value):
        text = leaf[: MAX_SCAN - scanned]
        scanned += len(text)
        for form in _decodings(text, decode_plain=False):
            for raw, piece in _tokens(form):
                norm = _norm(raw)
                if len(norm) >= MIN_TOKEN and _specific(raw, norm, piece):
                    whole.add(_token_hash(norm))
                if len(norm) >= GRAM:
                    token_grams.update(_gram_hashes(norm))
            prose |= _winnow(_gram_hashes(_norm(form)))
        if len(whole) + len(token_grams) >= limit or scanned >= MAX_SCAN:
            break
    out = whole
    for part in (token_grams, prose):
        room = limit - len(out)
        extra = part - out
        if len(extra) <= room:
            out |= extra
        else:
            out |= set(sorted(extra)[: max(room, 0)])
    if len(out) > limit:
        out = set(sorted(out)[:limit])
    return frozenset(out)


def _json_unescape(text: str) -> str:
    def one(match: re.Match[str]) -> str:
        code = match.group(1)
        if code[0] == "u":
            return chr(int(code[1:], 16))
        return _ESCAPES.get(code, code)

    return _JSON_ESCAPE.sub(one, text)


def _b64_forms(run: str) -> Iterator[str]:
    """A base64 run decoded at each of its four alignments (a piece cut from a longer
    encoding starts anywhere), standard and URL-safe alphabets."""
    core = run.rstrip("=")
    urlsafe = "-" in core or "_" in core
    for start in range(4):
        piece = core[start:]
        rest = len(piece) % 4  # a last group of 2 or 3 characters still holds bytes
        piece = piece[:-1] if rest == 1 else piece + "=" * (-rest % 4)
        if len(piece) < 12:
            continue
        try:
            raw = (
                base64.urlsafe_b64decode(piece)
                if urlsafe
                else base64.b64decode(piece, validate=True)
            )
        except (binascii.Error, ValueError):
            continue
        decoded = raw.decode("utf-8", "replace")
        if _mostly_text(decoded):
            yield decoded


def _hex_forms(run: str) -> Iterator[str]:
    for start in (0, 1):
        piece = run[start:]
        piece = piece[: len(piece) - len(piece) % 2]
        try:
            decoded = bytes.fromhex(piece).decode("utf-8", "replace")
        except ValueError:
            continue
        if _mostly_text(decoded):
            yield decoded


def _mostly_text(decoded: str) -> bool:
    """Whether a decoding reads as text (most decodings of a run that was not
    encoded are binary noise, and would only add fingerprints)."""
    if not decoded:
        return False
    printable = sum(1 for ch in decoded if ch.isprintable() or ch in "\n\r\t")
    return printable >= 0.85 * len(decoded)


def _looks_encoded(run: str) -> bool:
    """Whether a run of the data looks like base64 (upper and lower case and a digit:
    an identifier of a source file does not, and is not worth four decodings)."""
    return _DIGIT.search(run) is not None and run.lower() != run and run.upper() != run


def _decodings(text: str, *, decode_plain: bool = True) -> Iterator[str]:
    """``text`` and what it decodes to, up to _DEPTH layers and _MAX_DECODINGS forms.
    ``decode_plain=False`` (the data side) skips URL- and JSON-unescaping: the data's
    own text is kept as it is; only encoded runs in it are decoded."""
    seen = {text}
    queue = [(text, 0)]
    yield text
    while queue:
        current, depth = queue.pop()
        if depth >= _DEPTH:
            continue
        found: list[str] = []
        if decode_plain:
            if "%" in current or "+" in current:
                found.append(unquote_plus(current))
            if "\\" in current:
                found.append(_json_unescape(current))
        squeezed = _WS.sub("", current) if any(c.isspace() for c in current) else current
        for source in (current, squeezed) if squeezed is not current else (current,):
            for run in _B64_RUN.findall(source):
                if decode_plain or _looks_encoded(run):
                    found.extend(_b64_forms(run))
            for run in _HEX_RUN.findall(source):
                found.extend(_hex_forms(run))
        for form in found:
            if form not in seen and len(seen) < _MAX_DECODINGS:
                seen.add(form)
                queue.append((form, depth + 1))
                yield form


def probe(value: object) -> frozenset[int]:
    """The fingerprints to look for, of an argument value and its decodings: its
    specific whole tokens and every gram (not winnowed, so any gram the data kept is
    found)."""
    out: set[int] = set()
    for text in texts_of(value):
        for form in _decodings(text):
            for raw, piece in _tokens(form):
                norm = _norm(raw)
                if len(norm) >= MIN_TOKEN and _specific(raw, norm, piece):
                    out.add(_token_hash(norm))
            out.update(_gram_hashes(_norm(form)))
    return frozenset(out)


def carries(probed: frozenset[int], data: frozenset[int]) -> bool:
    """Whether an argument (its :func:`probe`) carries some of ``data`` (its
    :func:`of_data`)."""
    return not probed.isdisjoint(data)
