"""Fingerprints of data, to tell when a call's argument carries data an earlier step
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
  the data (a run without whitespace: keys, passwords, addresses, base64) is kept; of
  prose, the gram at every :data:`WINDOW`-th position (the probe takes every gram), so
  any shared run of ``GRAM + WINDOW - 1`` (19) normalised characters is found. A
  **whole token** of at least 8 characters that looks specific (letters and digits,
  an ``@``, or 12+ characters that do not read as words) matches on its own.
- **Not a flow on its own** (``test_fingerprints_precision.py``): the data's
  boilerplate is cut before it is kept — keys of ``KEY=value`` / ``key: value``
  lines and ``_``-joined or camel-case identifiers (``AWS_SECRET_ACCESS_KEY``), so a
  script naming the same variables as a ``.env`` file read earlier is no flow.
- **Encodings** (on both sides: an argument is decoded when probed, and encoded runs
  in the data are decoded when it is kept): base64 (standard and URL-safe, with or
  without padding, re-wrapped, and cut at any offset: each run is decoded at its four
  alignments, so a piece cut from a longer encoding is read too), hex (either
  nibble alignment). On the argument's side only (the data's own text is kept as it
  is: a secret in a result is plain, and three more forms of every result would
  triple what a session keeps): URL-encoding (nested, ``+`` for space), JSON string
  escapes (``\\n``, ``\\u0041``), HTML entities (``&#65;``, ``&#x41;``, ``&amp;``:
  ``html.unescape``, tried when the text holds ``&#`` or ``&name;``), ``\\xNN``
  escapes (a run of them read as UTF-8), and base32 (RFC 4648, either case, with or
  without padding; its DNS labels joined — ``<label>.<label>.attacker.example``, the
  trailing labels without a digit 2-7 taken for the domain and dropped — and runs of
  one case, or of both with a digit 2-7 (an encoding whose case was turned: prose
  joined has no digit); each run decoded at its eight alignments, as a character holds 5
  bits and only one start in 8 begins a byte). All up to three layers deep (base64
  inside URL-encoding, base32 of base64...).
- **Turned tokens** (the argument's side): the specific whole tokens (as above: what
  could be a secret on its own — a key, a password, an address, a compact IBAN) of
  each form of the argument (itself and what it decodes to, the deepest layer aside)
  are also probed reversed and ROT13 — what a prompt injection asks a model for; an
  argument that is one such token is turned whole. A turned token is not decoded
  further: a secret reversed then base64-encoded is found, one base64-encoded then
  reversed is not. **Turned prose is not found**: a paragraph (or an IBAN written in
  groups of four, whose words are too short to be tokens) reversed or ROT13 — turning
  every form whole tripled every probe and slowed every session check by a fifth or
  more. Neither is a form turned twice (reversed and ROT13), another Caesar shift,
  base32's hex alphabet, base85 or a cipher of the model's own.

Bounds: at most :data:`MAX_FINGERPRINTS` (4096, 32 KiB packed) per result, with
:data:`FORMAT_MARK`; below it about 0.25 per normalised character of prose and 1 per
character of long tokens (~200 per KiB of ordinary text). Past the cap the
whole-token fingerprints are kept first, then every gram of the long tokens of
ordinary words (keys, passwords, addresses); then every gram of the blobs (words of
more than 256 characters: certificates, encoded files) when they fit, else the grams
at every WINDOW-th position of the whole text (blobs included: any shared run of 19
normalised characters of a blob is still found, and a key after large certificate
blobs keeps all its grams); then a consistent sample (the smallest hashes) of the
rest. A result whose WINDOW-th grams alone pass the cap (about 16 KiB of text) is only
partly covered. At most :data:`MAX_SCAN` (256 Ki) characters of a result are read. A probe
is not capped (an argument is small; its decodings are bounded by
:data:`_MAX_DECODINGS`).

The hashes are not keyed: a remote agent computes its results' fingerprints itself
(the result never leaves it), so a key would have to be handed to every agent. Short
low-entropy values (under 8 characters) are never fingerprinted at all. A gram's
fingerprint is its UTF-8 as an integer modulo 2**61 - 1; a whole token's, 64 bits of
BLAKE2b.

Speed: the hot loops (the grams of ASCII text, its specific whole tokens and their
BLAKE2b, every decoding of a text, the data's boilerplate, and the whole probe of an
argument whose forms are ASCII: :func:`probe`, :func:`probe_seams`, :func:`probe_across`
with its decodings) run in the optional C extension ``interlock.session._speedups``
when it was built (a compiler at install time), else here in Python: :data:`ACCELERATED`
says which. Forms that are not ASCII are probed here either way (NFKC and case
folding), and HTML entities are read by ``html.unescape`` on both paths (C calls it:
its entity table is the reference). Both give the same fingerprints bit for bit
(``tests/session/test_speedups.py``, ``tests/session/test_speedups_probe.py``;
``docs/adr/0031-a-c-accelerator-for-fingerprints.md``); the Python functions
(``_py_*``) are the reference. Setting the environment variable
``INTERLOCK_NO_SPEEDUPS=1`` (any value but empty or ``0``) before this module is
imported forces the Python path.
"""

from __future__ import annotations

import binascii
import hashlib
import html
import re
import struct
import sys
import unicodedata
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from itertools import chain, filterfalse, repeat
from operator import itemgetter, methodcaller, mod
from typing import TYPE_CHECKING, Final, TypeAlias
from urllib.parse import unquote_plus

from interlock._extension import switched_off

if TYPE_CHECKING:
    from interlock.session._history import FrozenPrints, PrintSet

#: An argument's probe: a frozenset, or the extension's packed set (:func:`packed_probe`).
Probe: TypeAlias = "frozenset[int] | PrintSet"

__all__ = [
    "ACCELERATED",
    "FORMAT_MARK",
    "GRAM",
    "MAX_FINGERPRINTS",
    "WINDOW",
    "Probe",
    "carries",
    "of_data",
    "packed_probe",
    "packed_seams",
    "probe",
    "probe_across",
    "probe_seams",
    "texts_of",
]

#: k-gram length in normalised characters; the stride of the grams kept of prose; the
#: most fingerprints kept of one result.
GRAM: Final = 16
WINDOW: Final = 4
MAX_FINGERPRINTS: Final = 4096
MIN_TOKEN: Final = 8
#: A word longer than this is a blob (a certificate, an encoded file): its every gram
#: is kept after the other tokens' and, past the cap, after the prose grams.
_BLOB: Final = 256
#: Characters of one result read, at most.
MAX_SCAN: Final = 256 * 1024
#: Decoded forms of one text looked at, at most (a probe of hostile input stays bounded).
_MAX_DECODINGS: Final = 64
_DEPTH: Final = 3
#: Kept in every non-empty :func:`of_data` set: the format of its gram hashes (2).
#: A set without it came from an older version (an agent not upgraded): every
#: argument is taken to carry it (fail closed) — its grams would never match.
FORMAT_MARK: Final = 0x1F9E_7A11_0000_0002
_PRIME: Final = (1 << 61) - 1
#: ``hash`` of an int is the int modulo this same prime on 64-bit CPython (and PyPy):
#: the language's numeric hash, not randomised per process.
_NATIVE_MOD: Final = sys.hash_info.modulus == _PRIME

_SEP: Final = "\x00"  # where boilerplate was cut out of the data
_SPLIT: Final = re.compile(r"[\"'`<>()\[\]{},;|\\\x00]+")
_SUBSPLIT: Final = re.compile(r"[=&?#:/]+")
_DROP: Final = re.compile(r"[^\w@.]+")
_DROP_KEEP_SEP: Final = re.compile(r"[^\w@.\x00]+")
#: ASCII bytes normalisation deletes (all but a-z 0-9 _ @ . once lower-cased).
_ASCII_DROP: Final = bytes(
    c for c in range(256) if not (c < 128 and (chr(c).isalnum() or chr(c) in "_@."))
)
_ASCII_DROP_KEEP_SEP: Final = _ASCII_DROP.replace(b"\x00", b"")
_GRAM_BYTES: Final = struct.Struct(f"{GRAM}s")
#: Up to this many bytes, grams are cut by slices made once (no setup per alignment).
_SHORT: Final = 128
_SLICES: Final = tuple(slice(i, i + GRAM) for i in range(_SHORT - GRAM + 1))
_FIRST: Final = itemgetter(0)
_HAS_SEP: Final = methodcaller("__contains__", 0)
#: Boilerplate of the data, found in its long words, that never carries a flow on
#: its own: the key of a ``KEY=value`` / ``key: value`` line, and identifiers
#: (``AWS_SECRET_ACCESS_KEY``, ``getSecretValue``, ``ApiClient``): words of one case
#: each (a word may end in up to 2 digits) joined by ``_``, or camel humps. Dotted
#: names are kept: a host names where data goes, and provenance rules need it.
_WORD: Final = r"(?:[a-z]+|[A-Z]+|[A-Z][a-z]+)\d{0,2}"
_BOILERPLATE: Final = re.compile(
    r"^(?:export)?[A-Za-z_][\w.\-]*(?=[=:])"
    rf"|(?<![\w@\-+]){_WORD}(?:_{_WORD})+(?![\w@\-+=])"
    # camel humps not after / or + nor before / + =: inside base64 they are chance
    r"|(?<![\w.@\-+/])(?:[a-z]+(?:[A-Z][a-z]+)+|(?:[A-Z][a-z]+){2,})(?![\w@\-+/=])"
)
_B64_RUN: Final = re.compile(r"[A-Za-z0-9+/_\-]{16,}={0,2}")
_HEX_RUN: Final = re.compile(r"[0-9a-fA-F]{16,}")
_JSON_ESCAPE: Final = re.compile(r"\\(u[0-9a-fA-F]{4}|[nrtbf\"\\/])")
_DIGIT: Final = re.compile(r"\d")
_LETTER: Final = re.compile(r"[^\W\d_]")
_URLSAFE: Final = str.maketrans("-_", "+/")
#: A run of base32 (RFC 4648, either case) as DNS labels: letters and 2-7, split by dots.
_B32_LABELS: Final = re.compile(r"[A-Za-z2-7]+(?:\.[A-Za-z2-7]+)*")
_B32_DIGIT: Final = re.compile(r"[2-7]")
#: base32's alphabet (A-Z 2-7, either case) onto ``int(..., 32)``'s digits (0-9 a-v).
_B32_TO_INT: Final = str.maketrans(
    "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz234567",
    "0123456789abcdefghijklmnop0123456789abcdefghijklmnopqrstuv",
)
_ROT13: Final = str.maketrans(
    "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz",
    "NOPQRSTUVWXYZABCDEFGHIJKLMnopqrstuvwxyzabcdefghijklm",
)
#: What HTML-unescaping is tried on: a numeric reference or a named one with its ``;``
#: (a ``&`` of a URL's query alone is not worth ``html.unescape``'s time).
_HTML_ENTITY: Final = re.compile(r"&(?:#|[A-Za-z][A-Za-z0-9]*;)")
#: C / Python ``\xNN`` escapes, a run of them read as the bytes of one UTF-8 text.
_X_ESCAPES: Final = re.compile(r"(?:\\x[0-9a-fA-F]{2})+")
_ESCAPES: Final = {"n": "\n", "r": "\r", "t": "\t", "b": "\b", "f": "\f"}
#: ASCII control bytes but tab, line feed and carriage return.
_CONTROL: Final = bytes([*range(9), 11, 12, *range(14, 32), 127])


def texts_of(value: object) -> Iterator[str]:
    """Every string leaf of a JSON-like value (keys too); anything else by ``str``. A
    str subclass is read as the text it holds (its own methods are not asked, as the C
    walk does not ask them: a subclass whose ``lower`` or ``__str__`` said something
    else must not change what is fingerprinted)."""
    if isinstance(value, str):
        yield value if type(value) is str else str.__str__(value)
    elif isinstance(value, (bytes, bytearray, memoryview)):
        yield bytes(value).decode("utf-8", "replace")
    elif isinstance(value, Mapping):
        for k, v in value.items():
            yield k if type(k) is str else str.__str__(k) if isinstance(k, str) else str(k)
            yield from texts_of(v)
    elif isinstance(value, (list, tuple, set, frozenset)):
        for item in value:
            yield from texts_of(item)
    elif value is not None:
        yield str(value)


def _fold(text: str) -> str:
    """NFKC and case-folded (for ASCII: lower-cased, the same and much faster)."""
    if text.isascii():
        return text.lower()
    return unicodedata.normalize("NFKC", text).casefold()


def _norm(text: str) -> str:
    if text.isascii():  # the same as below, by byte tables
        return text.lower().encode().translate(None, _ASCII_DROP).decode("ascii")
    return _DROP.sub("", _fold(text))


def _token_hash(norm: str) -> int:
    return _bytes_hash(norm.encode())


def _bytes_hash(norm: bytes) -> int:
    return int.from_bytes(hashlib.blake2b(norm, digest_size=8).digest(), "big")


def _hash(chunks: Iterator[bytes] | list[bytes]) -> Iterator[int]:
    """A gram's fingerprint: its UTF-8 read as a big-endian integer, modulo the
    Mersenne prime 2**61 - 1 (a polynomial hash; a collision only ever makes a false
    match, which refuses, never allows). Two C calls a gram, through ``map``."""
    if _NATIVE_MOD:
        return map(hash, map(int.from_bytes, chunks))
    return map(mod, map(int.from_bytes, chunks), repeat(_PRIME))


def _py_grams(norm: str | bytes, step: int) -> Iterable[int]:
    """The fingerprints of the GRAM-long runs of ``norm`` at every ``step``-th
    position (0, step, 2*step...) but those across a cut (the ``\x00`` mark). With
    step WINDOW, a shared run of GRAM + WINDOW - 1 characters (no cut in it) holds
    one of them whole. ASCII is cut with ``struct`` at each alignment: no Python
    code runs a gram."""
    size = len(norm)
    if size < GRAM:
        return iter(())
    if isinstance(norm, str):
        if not norm.isascii():
            return _hash(
                [
                    gram.encode()
                    for gram in (norm[i : i + GRAM] for i in range(0, size - GRAM + 1, step))
                    if _SEP not in gram
                ]
            )
        norm = norm.encode()
    data = norm
    if size <= _SHORT and 0 not in data:  # each gram a slice: three C calls a gram
        return _hash(map(data.__getitem__, _SLICES[: size - GRAM + 1 : step]))
    chunks = chain.from_iterable(
        map(_FIRST, _GRAM_BYTES.iter_unpack(data[start : start + GRAM * ((size - start) // GRAM)]))
        for start in range(0, min(GRAM, size - GRAM + 1), step)
    )
    return _hash(filterfalse(_HAS_SEP, chunks) if 0 in data else chunks)


def _c_grams(norm: str | bytes, step: int) -> Iterable[int]:
    """:func:`_py_grams` in C (non-ASCII text stays on the Python path)."""
    if isinstance(norm, str):
        if not norm.isascii():
            return _py_grams(norm, step)
        norm = norm.encode()
    return _speedups.grams(norm, step)


def _wordlike(raw: str) -> bool:
    """Whether a token reads as words (one case, or capitalised; joined by ``. _ - /``
    at most): a common word, a host or a path, not a secret value."""
    plain = raw.replace(".", "").replace("-", "").replace("/", "").replace("_", "")
    return plain.isalpha() and (plain.islower() or plain.isupper() or raw.istitle())


def _py_at_least(words: list[str], size: int) -> list[str]:
    return [word for word in words if len(word) >= size]


def _py_smallest(values: Iterable[int], count: int) -> list[int]:
    """The ``count`` smallest of ``values``, in order (a consistent sample)."""
    return sorted(values)[:count]


def _c_smallest(values: Iterable[int], count: int) -> list[int]:
    got = _speedups.smallest(values, count)
    return _py_smallest(values, count) if got is None else got


def _long_words(text: str) -> list[str]:
    return _at_least(text.split(), MIN_TOKEN)


def _tokens(long_words: list[str]) -> Iterator[tuple[str, bool]]:
    """The tokens in ``long_words`` (a text's words at least MIN_TOKEN long): runs
    without whitespace or quoting, and the pieces of each between ``= & ? # : /`` (a
    key in a URL's query, a value after ``KEY=``), each with whether it is a piece."""
    for word in long_words:
        for raw in (word,) if word.isalnum() else _SPLIT.split(word):
            if len(raw) < MIN_TOKEN:
                continue
            yield raw, False
            if not raw.isalnum() and _SUBSPLIT.search(raw):
                for piece in _SUBSPLIT.split(raw):
                    if len(piece) >= MIN_TOKEN:
                        yield piece, True


def _specific(raw: str, norm: str, piece: bool) -> bool:
    """Whether a whole token is specific enough to match on its own: letters and
    digits mixed, or an ``@``; a whole run of 12+ characters too unless it reads as
    words (not a piece: a host name or a path segment alone is common to unrelated
    pages)."""
    if "@" in norm:
        return True
    if not norm.isalpha() and _DIGIT.search(norm) is not None and _LETTER.search(norm):
        return True
    return not piece and len(norm) >= 12 and not _wordlike(raw)


def _py_whole(long_words: list[str], grams: set[int] | None) -> Iterable[int]:
    """The hashes of the specific whole tokens in ``long_words``; with ``grams``,
    every gram of the long tokens that do not read as words is added there."""
    for raw, piece in _tokens(long_words):
        norm = _norm(raw)
        if len(norm) >= MIN_TOKEN and _specific(raw, norm, piece):
            yield _token_hash(norm)
        if grams is not None and not piece and len(norm) >= GRAM and not _wordlike(raw):
            grams.update(_grams(norm, 1))


def _c_whole(long_words: list[str], grams: set[int] | None) -> Iterable[int]:
    """:func:`_py_whole` in C (non-ASCII words stay on the Python path)."""
    found = _speedups.whole_tokens(long_words, grams is not None, True)
    if found is None:
        return _py_whole(long_words, grams)
    hashes, token_grams = found
    if grams is not None and token_grams:
        grams.update(token_grams)
    return hashes  # a set of ints (hashed in C)


def _py_boilerplate(long_words: list[str]) -> list[str]:
    """The boilerplate (identifiers, keys) of at least MIN_TOKEN characters in the
    long words of the data, in the order found."""
    found: list[str] = []
    for word in long_words:
        if not (word.isalnum() and (word.islower() or word.isupper() or word.istitle())):
            found.extend(m for m in _BOILERPLATE.findall(word) if len(m) >= MIN_TOKEN)
    return found


def _c_boilerplate(long_words: list[str]) -> list[str]:
    """:func:`_py_boilerplate` in C (words not ASCII: the Python path)."""
    found = _speedups.boilerplate(long_words)
    return _py_boilerplate(long_words) if found is None else found


def _longest_first(name: str) -> tuple[int, str]:
    return -len(name), name


def _cut_boilerplate(form: str, long_words: list[str]) -> str:
    """``form`` with its boilerplate (identifiers, keys) replaced by the mark that
    cuts grams."""
    # longest first, ties by text: the same order in every process (a set's order of
    # equal-length names follows the hash seed, and overlapping names cut differently)
    for name in sorted(set(_boilerplate(long_words)), key=_longest_first):
        form = form.replace(name, _SEP)
    return form  # the same object when nothing was cut


_NONE: Final[frozenset[int]] = frozenset()


def of_data(value: object, *, limit: int = MAX_FINGERPRINTS) -> frozenset[int]:
    """The fingerprints kept of a result (or an input): see the module docstring."""
    if _too_short(value):
        return _NONE
    return _of_data(value, limit)


def _too_short(value: object) -> bool:
    """Whether every text of ``value`` is ASCII and shorter than MIN_TOKEN (a tool's
    "ok", "done", ``{"ok": True}``): such a text has no word long enough to keep whole,
    is too short to decode (GRAM) and normalises to fewer than GRAM characters, so
    :func:`_of_data` keeps nothing of it (held equal by a property test)."""
    if type(value) is str:
        return len(value) < MIN_TOKEN and value.isascii()
    if value is None or type(value) is bool:
        return True  # "True" / "False" (None has no text)
    if type(value) is dict and len(value) <= 8:
        return all(
            type(k) is str and len(k) < MIN_TOKEN and k.isascii() and _too_short(v)
            for k, v in value.items()
        )
    return False


def _of_data(value: object, limit: int) -> frozenset[int]:
    limit -= 1  # room for FORMAT_MARK
    whole: set[int] = set()  # whole tokens, then every gram of long tokens
    token_grams: set[int] = set()  # every gram of the long tokens of ordinary words
    blob_grams: set[int] = set()  # every gram of the tokens of words past _BLOB
    prose: set[int] = set()
    scanned = 0
    for leaf in texts_of(value):
        text = leaf[: MAX_SCAN - scanned]
        scanned += len(text)
        for form in _decodings(text, False):
            long_words = _long_words(form)
            marked = _cut_boilerplate(form, long_words)
            if marked is not form:
                long_words = _long_words(marked)
            if any(len(word) > _BLOB for word in long_words):  # keys apart from blobs
                whole.update(_whole([w for w in long_words if len(w) <= _BLOB], token_grams))
                whole.update(_whole([w for w in long_words if len(w) > _BLOB], blob_grams))
            else:
                whole.update(_whole(long_words, token_grams))
            if marked.isascii():
                normalised: str | bytes = (
                    marked.lower().encode().translate(None, _ASCII_DROP_KEEP_SEP)
                )
            else:
                normalised = _DROP_KEEP_SEP.sub("", _fold(marked))
            prose.update(_grams(normalised, WINDOW))
        if len(whole) + len(prose) >= limit or scanned >= MAX_SCAN:
            break
    out = whole
    # Every gram of the long tokens first (any shared run of GRAM characters of a key
    # is found); then every gram of the blobs (words past _BLOB characters:
    # certificates, encoded files) when they fit, else the prose grams first — every
    # WINDOW-th position of the whole text, blobs included, so any shared run of
    # GRAM + WINDOW - 1 characters is still found, wherever it is — then a sample of
    # the rest. A key after large blobs is not sampled away.
    fits = len(out) + len(token_grams | blob_grams) <= limit
    parts = (token_grams, blob_grams, prose) if fits else (token_grams, prose, blob_grams)
    for part in parts:
        room = limit - len(out)
        extra = part - out
        if len(extra) <= room:
            out |= extra
        else:
            out |= set(_smallest(extra, max(room, 0)))
    if len(out) > limit:
        out = set(_smallest(out, limit))
    if out:
        out.add(FORMAT_MARK)
    return frozenset(out)


def _json_unescape(text: str) -> str:
    def one(match: re.Match[str]) -> str:
        code = match.group(1)
        if code[0] == "u":
            return chr(int(code[1:], 16))
        return _ESCAPES.get(code, code)

    return _JSON_ESCAPE.sub(one, text)


def _py_b64_forms(run: str) -> Iterable[str]:
    """A base64 run decoded at each of its four alignments (a piece cut from a longer
    encoding starts anywhere), standard and URL-safe alphabets."""
    core = run.rstrip("=")
    # what ``urlsafe_b64decode`` and ``b64decode(validate=True)`` do, without their
    # Python wrappers: URL-safe, its alphabet read as the standard one, not strict
    strict = not ("-" in core or "_" in core)
    if not strict:
        core = core.translate(_URLSAFE)
    a2b = binascii.a2b_base64
    for start in range(4):
        piece = core[start:]
        rest = len(piece) % 4  # a last group of 2 or 3 characters still holds bytes
        piece = piece[:-1] if rest == 1 else piece + "=" * (-rest % 4)
        if len(piece) < 12:
            continue
        try:
            raw = a2b(piece, strict_mode=strict)
        except (binascii.Error, ValueError):
            continue
        decoded = _mostly_text(raw)
        if decoded is not None:
            yield decoded


def _py_hex_forms(run: str) -> Iterable[str]:
    for start in (0, 1):
        piece = run[start:]
        piece = piece[: len(piece) - len(piece) % 2]
        try:
            decoded = _mostly_text(bytes.fromhex(piece))
        except ValueError:
            continue
        if decoded is not None:
            yield decoded


def _mostly_text(raw: bytes) -> str | None:
    """The text of a decoding if it reads as text: at most 15% of its bytes control
    characters (tab and line breaks aside) or undecodable (most decodings of a run
    that was not encoded are binary noise, and would only add fingerprints)."""
    if not raw:
        return None
    if raw.isascii():  # the usual text: nothing undecodable, and one character a byte
        bad = len(raw) - len(raw.translate(None, _CONTROL))
        return raw.decode("ascii") if bad <= 0.15 * len(raw) else None
    decoded = raw.decode("utf-8", "replace")
    bad = len(raw) - len(raw.translate(None, _CONTROL)) + decoded.count("\ufffd")
    return decoded if bad <= 0.15 * len(decoded) else None


def _py_runs(text: str, hex_: bool) -> list[str]:
    """The base64 runs in ``text`` (with ``hex_``, the hex runs)."""
    return (_HEX_RUN if hex_ else _B64_RUN).findall(text)


def _looks_encoded(run: str) -> bool:
    """Whether a run of the data looks like base64 (upper and lower case and a digit:
    an identifier of a source file does not, and is not worth four decodings)."""
    return _DIGIT.search(run) is not None and run.lower() != run and run.upper() != run


def _py_b32_runs(source: str) -> list[str]:
    """The base32 runs in ``source``: runs of ``A-Z 2-7`` (either case) as DNS labels
    split by dots, joined — less the trailing labels without a digit 2-7 (the domain
    after the data, ``.attacker.example``: base32 of text nearly always has one, a word
    seldom does); those of at least GRAM characters, of one case (an encoder writes
    one; DNS names are lower-cased whole), or of both with a digit 2-7 (an encoding
    whose case was turned on purpose): prose joined (capitals among small letters, no
    digit) is not worth eight decodings each."""
    found: list[str] = []
    for match in _B32_LABELS.findall(source):
        labels = match.split(".")
        while len(labels) > 1 and _B32_DIGIT.search(labels[-1]) is None:
            labels.pop()
        run = "".join(labels)
        if len(run) >= GRAM and (
            run.isupper() or run.islower() or (run.upper() != run and _B32_DIGIT.search(run))
        ):
            found.append(run)
    return found


def _py_b32_forms(run: str) -> Iterable[str]:
    """A base32 run (no padding, no dots; either case) decoded at each of its eight
    alignments: a character holds 5 bits, so a piece cut from a longer encoding starts
    at any of 8 bit offsets of a byte, and only one of them reads it. Each piece is
    read as one big number (``int`` in base 32, linear for a power of two) and cut into
    its whole bytes; a piece of fewer than 13 characters (8 bytes) is skipped."""
    for start in range(8):
        piece = run[start:]
        size = len(piece)
        if size < 13:
            break
        value = int(piece.translate(_B32_TO_INT), 32) >> (size * 5 % 8)
        decoded = _mostly_text(value.to_bytes(size * 5 // 8, "big"))
        if decoded is not None:
            yield decoded


def _x_bytes(match: re.Match[str]) -> str:
    return bytes.fromhex(match.group().replace("\\x", "")).decode("utf-8", "replace")


def _x_unescape(text: str) -> str:
    """``\\xNN`` escapes read: each run of them as the UTF-8 bytes of one text."""
    return _X_ESCAPES.sub(_x_bytes, text)


def _py_turned_tokens(text: str) -> list[str]:
    """Each specific whole token of ``text`` (what :func:`_py_whole` fingerprints on
    its own: a secret's shape) reversed, then ROT13 — the text's turned forms. Only
    tokens: a turned paragraph of prose would triple every probe (and every session
    check against it), a turned key, password or address costs two short forms. Not
    the pieces of a token (a value after ``KEY=``): a specific piece makes its token
    specific, and the turned token's probe holds the turned piece's (its pieces, and
    its grams, are the turned token's)."""
    turned: list[str] = []
    for raw, piece in _tokens(_long_words(text)):
        if piece:
            continue
        norm = _norm(raw)
        if len(norm) >= MIN_TOKEN and _specific(raw, norm, False):
            turned.append(raw[::-1])
            turned.append(raw.translate(_ROT13))
    return turned


def _c_turned_tokens(text: str) -> list[str]:
    """:func:`_py_turned_tokens` in C (a text not ASCII: the Python path)."""
    got = _speedups.turned_tokens(text)
    return _py_turned_tokens(text) if got is None else got


def _py_decodings(text: str, decode_plain: bool = True) -> Iterator[str]:
    """``text`` and what it decodes to, up to _DEPTH layers and _MAX_DECODINGS forms.
    ``decode_plain=False`` (the data side) skips URL-, JSON-, HTML- and ``\\x``-
    unescaping, base32 and the turned forms: the data's own text is kept as it is; only
    encoded runs in it (base64, hex) are decoded.

    The specific whole tokens of every form but the deepest are also turned —
    reversed, and ROT13 (:func:`_py_turned_tokens`) — first among what it decodes to
    (the cap never drops them). A turned token is probed, not decoded: a secret turned
    then encoded is found (the encoding decoded, then its token turned back), one
    encoded then turned is not (decoding every turned form would cost as much again as
    decoding the argument, twice)."""
    seen = {text}
    queue = [(text, 0)]
    yield text
    while queue:
        current, depth = queue.pop()
        if depth >= _DEPTH:
            continue
        found = _turned_tokens(current) if decode_plain else []
        turns = len(found)
        if decode_plain:
            if "%" in current or "+" in current:
                found.append(unquote_plus(current))
            if "\\" in current:
                found.append(_json_unescape(current))
                if "\\x" in current:
                    found.append(_x_unescape(current))
            if "&" in current and _HTML_ENTITY.search(current) is not None:
                found.append(html.unescape(current))
        if len(current) >= GRAM:  # else no run is long enough to decode
            words = current.split()
            long_words = _at_least(words, GRAM)
            sources = long_words
            if len(words) > 1 and (decode_plain or len(long_words) > 1):
                sources = [*long_words, "".join(words)]  # re-wrapped base64 or hex
            for source in sources:
                runs = _runs(source, False)
                if runs:  # a hex run is a base64 run too
                    for run in runs:
                        if decode_plain or _looks_encoded(run):
                            found.extend(_b64_forms(run))
                    for run in _runs(source, True):
                        found.extend(_hex_forms(run))
                if decode_plain:
                    for run in _b32_runs(source):
                        found.extend(_b32_forms(run))
        for at, form in enumerate(found):
            if form not in seen and len(seen) < _MAX_DECODINGS:
                seen.add(form)
                if at >= turns:  # a turned form is a leaf
                    queue.append((form, depth + 1))
                yield form


def _probe_form(form: str, out: set[int]) -> None:
    """Add the fingerprints a probe takes of one form of a text: its specific whole
    tokens and every gram."""
    long_words = _long_words(form)
    if long_words:
        out.update(_whole(long_words, None))
    if form.isascii():
        out.update(_grams(form.lower().encode().translate(None, _ASCII_DROP), 1))
    else:
        out.update(_grams(_norm(form), 1))


def _py_probe_texts(texts: str | list[str], with_text: bool) -> frozenset[int]:
    """The probe of every form of the texts' decodings (but the texts themselves,
    without ``with_text``: :func:`probe_seams` takes only what of those spans a seam)."""
    out: set[int] = set()
    for text in (texts,) if isinstance(texts, str) else texts:
        forms = iter(_decodings(text, True))
        if not with_text:
            next(forms)  # the text itself
        for form in forms:
            _probe_form(form, out)
    return frozenset(out)


def _c_probe_texts(texts: str | list[str], with_text: bool) -> frozenset[int]:
    """:func:`_py_probe_texts` in C: the decodings, and the probe of the ASCII forms
    (those that are not ASCII are probed here: NFKC and case folding)."""
    got = _speedups.probe(texts, with_text)
    if got is None:  # never for a str or a list of str (C walks those)
        return _py_probe_texts(texts, with_text)
    found, others = got
    return _probe_others(found, others) if others else found


def _probe_others(found: frozenset[int], others: list[str]) -> frozenset[int]:
    """``found`` and the probe of the forms (not ASCII) C left to Python."""
    out = set(found)
    for form in others:
        _probe_form(form, out)
    return frozenset(out)


def probe(value: object) -> frozenset[int]:
    """The fingerprints to look for, of an argument value and its decodings: its
    specific whole tokens and every gram (so whichever grams the data kept are
    found)."""
    if ACCELERATED:  # C walks plain values (str, dict, list, tuple) itself
        got = _speedups.probe(value, True)
        if got is not None:
            found, others = got
            return _probe_others(found, others) if others else found
    return _probe_texts(value if type(value) is str else list(texts_of(value)), True)


def packed_probe(value: object) -> Probe:
    """:func:`probe`, packed where the extensions are built: a ``PrintSet`` of the same
    fingerprints with no int object made (a probe of a value seen once is made, tested
    against a session's index and freed, and its ints were much of that). Read it as a
    set of ints — ``isdisjoint``, ``in``, iteration, ``len``, ``==`` — never with
    ``&``, ``|`` or ``-`` (``frozenset(p)`` first). A frozenset without the extensions."""
    if ACCELERATED and _packed is not None:
        got = _speedups.probe(value, True, True)
        if got is not None:
            return _unpacked(_packed, *got)
    return probe(value)


def packed_seams(texts: Sequence[str]) -> Probe:
    """:func:`probe_seams`, packed as :func:`packed_probe` is."""
    if ACCELERATED and _packed is not None:
        got = _speedups.seams(texts, True)
        if got is not None:
            return _unpacked(_packed, *got)
    return probe_seams(texts)


def _unpacked(packed: Callable[[bytes], PrintSet], raw: bytes, others: list[str]) -> PrintSet:
    """The ``PrintSet`` of C's packed fingerprints and the probe of the forms (not ASCII)
    it left to Python."""
    found = packed(raw)
    for form in others:
        out: set[int] = set()
        _probe_form(form, out)
        found.update(out)
    return found


def probe_seams(texts: Sequence[str]) -> frozenset[int]:
    """What ``probe("".join(texts))`` holds that the probes of the texts one by one
    lack, or more: the grams and whole tokens across a seam between two texts, and
    every fingerprint of the joined text's decodings. Together with
    ``probe(text)`` for each text it holds all of the joined text's probe — for a test
    that asks whether *any* probe meets the data (``flows_from``), not one that
    weighs how much of a probe is held (``provenance``)."""
    if ACCELERATED:
        got = _speedups.seams(texts)
        if got is not None:
            found, others = got
            return _probe_others(found, others) if others else found
    joined = "".join(texts)
    if not joined.isascii():  # normalising may join characters across a seam
        return _probe_texts(joined, True)
    # the joined text's decodings but itself (its turned tokens among them, whole):
    # of itself only what spans a seam, below (the rest is in the texts' own probes)
    out = set(_probe_texts(joined, False))
    own: set[str] = set()
    for text in texts:
        own.update(text.split())
    across = [word for word in _long_words(joined) if word not in own]
    out.update(_whole(across, None))
    norms = [text.lower().encode().translate(None, _ASCII_DROP) for text in texts]
    data = b"".join(norms)
    last = len(data) - GRAM  # the last start of a gram
    starts: set[int] = set()
    at = 0
    for norm in norms[:-1]:
        at += len(norm)  # a gram starting in (at - GRAM, at) spans this seam
        starts.update(range(max(0, at - GRAM + 1), min(at - 1, last) + 1))
    grams = [data[i : i + GRAM] for i in sorted(starts)]
    out.update(_hash(grams))
    return frozenset(out)


#: A run across a seam of these characters only may be an encoding cut in two — when
#: it also looks like base64 (both cases and a digit), hex (a fifth of it letters
#: a-f) or base32 (one case, a digit 2-7): its decodings are probed
#: (:func:`probe_across`). A run of joined ids (``Q1001Q1002``) is not decoded.
_ENCODED_ACROSS: Final = re.compile(r"[A-Za-z0-9+/=_-]{16,}")
_HEX_ACROSS: Final = re.compile(r"[0-9a-fA-F]+")
_HEX_LETTERS: Final = re.compile(r"[a-fA-F]")
_B32_ACROSS: Final = re.compile(r"(?=.*[2-7])(?:[A-Z2-7]+|[a-z2-7]+)=*")
#: Where a token ends (:func:`_tokens`: whitespace and quoting).
_RUN_EDGE: Final = re.compile(r"[\s\"'`<>()\[\]{},;|\\\x00]+")


def probe_across(tail: str, head: str) -> frozenset[int]:
    """What spans the seam between ``tail`` and ``head``, as if they were one text —
    and nothing either holds on its own: the grams across the seam; the whole token
    across it (the run without whitespace or quoting that ends ``tail`` joined to the
    one that starts ``head``, and its piece between ``= & ? # : /`` across the seam)
    when it is a specific token shorter than a gram (a longer one's grams across the
    seam are those the data kept of it); and, when the run across the seam may be an
    encoding cut in two (base64, hex, base32: :data:`_ENCODED_ACROSS`), the probe of
    that run's decodings less either half's. For pieces of data sent over several
    calls (:mod:`interlock.session.tails`), where one side is an earlier call's value:
    it was judged with its own call, and the data may hold it since (a value sent,
    then read back) without the next value being a flow."""
    if not (tail and head):
        return frozenset()
    # a str subclass is read by its text, as C reads it (its methods never run)
    tail = tail if type(tail) is str else str.__str__(tail)
    head = head if type(head) is str else str.__str__(head)
    if ACCELERATED:  # C probes the decodings too, all but those not ASCII
        got = _speedups.across(tail, head)
        if got is not None:
            found, rest = got
            return found if rest is None else found | _decoded_rest(*rest)
    if not (tail.isascii() and head.isascii()):  # normalising may join across the seam
        joined: set[int] = set()
        _probe_form(tail + head, joined)  # the joined text itself, no decodings
        return frozenset(joined) - probe(tail) - probe(head)
    near = tail.lower().encode().translate(None, _ASCII_DROP)[1 - GRAM :]
    far = head.lower().encode().translate(None, _ASCII_DROP)[: GRAM - 1]
    # every gram of at most 2 * (GRAM - 1) bytes spans the middle
    out = set(_grams(near + far, 1)) if near and far else set()
    left, right = _runs_at(tail, head)
    if left and right:
        across = left + right
        if len(across) >= MIN_TOKEN:
            _add_short_token(across, False, out)
            left_piece = _SUBSPLIT.split(left)[-1]
            right_piece = _SUBSPLIT.split(right, 1)[0]
            if left_piece and right_piece and len(left_piece) + len(right_piece) < len(across):
                _add_short_token(left_piece + right_piece, True, out)
            if len(across) >= GRAM and _encoded_across(across):
                out.update(_decoded_across(left, right))
    return frozenset(out)


def _runs_at(tail: str, head: str) -> tuple[str, str]:
    """The run without whitespace or quoting that ends ``tail``, and the one that
    starts ``head``: the two halves of the run across their seam."""
    return _RUN_EDGE.split(tail)[-1], _RUN_EDGE.split(head, 1)[0]


def _decoded_across(left: str, right: str) -> frozenset[int]:
    """The probe of the decodings of the run ``left + right`` across a seam (it may be
    an encoding cut in two), less what either half's probe holds."""
    return probe_seams((left, right)) - probe(left) - probe(right)


def _decoded_rest(
    seam: frozenset[int], seam_others: list[str], own: frozenset[int], own_others: list[str]
) -> frozenset[int]:
    """:func:`_decoded_across` from what C found when some decodings are not ASCII: the
    probe of the seam's (``probe_seams``) and of either half's (``probe``), each with
    its forms not ASCII probed here."""
    return _probe_others(seam, seam_others) - _probe_others(own, own_others)


def _add_short_token(raw: str, piece: bool, out: set[int]) -> None:
    """Add the hash of ``raw`` as :func:`of_data` keeps a whole token, when it keeps it
    and it is shorter than a gram (8 to 15 normalised characters)."""
    norm = _norm(raw)
    if MIN_TOKEN <= len(norm) < GRAM and _specific(raw, norm, piece):
        out.add(_token_hash(norm))


def _encoded_across(run: str) -> bool:
    """Whether a run across a seam may be an encoding cut in two (:data:`_ENCODED_ACROSS`)."""
    if _ENCODED_ACROSS.fullmatch(run) is None:
        return False
    if _looks_encoded(run) or _B32_ACROSS.fullmatch(run):
        return True
    # hex: a fifth of it letters a-f at least (an IBAN or an id of digits is not)
    return _HEX_ACROSS.fullmatch(run) is not None and 5 * len(_HEX_LETTERS.findall(run)) >= len(run)


def carries(probed: Probe, data: frozenset[int] | FrozenPrints) -> bool:
    """Whether an argument (its :func:`probe`) carries some of ``data`` (its
    :func:`of_data`, or a history's packed ``FrozenPrints`` of it). Data of an older
    format (no :data:`FORMAT_MARK`) is taken to be carried: its grams would not match,
    and a miss would allow."""
    if data and FORMAT_MARK not in data:
        return True
    if type(data) is frozenset:
        return not probed.isdisjoint(data)
    # packed: it looks the smaller side up in the other (a frozenset probe's
    # isdisjoint would make an int of each of the data's values)
    return not data.isdisjoint(probed)


try:
    from interlock.session import _speedups
except ImportError:  # not built (no compiler where installed): the Python reference
    _speedups = None  # type: ignore[assignment]

try:  # the packed set of the history's extension, made from _speedups' packed probes
    from interlock.session._history import packed as _packed_raw
except ImportError:  # not built: probes are frozensets
    _packed_raw = None  # type: ignore[assignment]

#: ``_history.packed`` when both extensions are built and not switched off
_packed: Callable[[bytes], PrintSet] | None = None if switched_off() else _packed_raw

#: Whether the C extension computes the hot loops (see the module docstring).
ACCELERATED: bool = False
_grams: Callable[[str | bytes, int], Iterable[int]] = _py_grams
_whole: Callable[[list[str], set[int] | None], Iterable[int]] = _py_whole
_at_least: Callable[[list[str], int], list[str]] = _py_at_least
_smallest: Callable[[Iterable[int], int], list[int]] = _py_smallest
_runs: Callable[[str, bool], list[str]] = _py_runs
_b64_forms: Callable[[str], Iterable[str]] = _py_b64_forms
_hex_forms: Callable[[str], Iterable[str]] = _py_hex_forms
_b32_runs: Callable[[str], list[str]] = _py_b32_runs
_b32_forms: Callable[[str], Iterable[str]] = _py_b32_forms
_turned_tokens: Callable[[str], list[str]] = _py_turned_tokens
_decodings: Callable[[str, bool], Iterable[str]] = _py_decodings
_boilerplate: Callable[[list[str]], list[str]] = _py_boilerplate
_probe_texts: Callable[[str | list[str], bool], frozenset[int]] = _py_probe_texts


def _accelerate(on: bool) -> bool:
    """Compute with the C extension (if it imports) or with the Python reference;
    whether the C extension is now used. Read at call time: every caller in this
    module looks these functions up when it runs."""
    global ACCELERATED, _grams, _whole, _at_least, _smallest  # noqa: PLW0603
    global _runs, _b64_forms, _hex_forms, _decodings, _probe_texts, _boilerplate
    global _b32_runs, _b32_forms, _turned_tokens  # noqa: PLW0603
    ACCELERATED = on and _speedups is not None
    if ACCELERATED:
        _grams, _whole, _at_least, _smallest = _c_grams, _c_whole, _speedups.at_least, _c_smallest
        _runs, _b64_forms, _hex_forms = _speedups.runs, _speedups.b64_forms, _speedups.hex_forms
        _b32_runs, _b32_forms = _speedups.b32_runs, _speedups.b32_forms
        _turned_tokens = _c_turned_tokens
        _decodings, _probe_texts, _boilerplate = _speedups.decodings, _c_probe_texts, _c_boilerplate
    else:
        _grams, _whole, _at_least, _smallest = _py_grams, _py_whole, _py_at_least, _py_smallest
        _runs, _b64_forms, _hex_forms = _py_runs, _py_b64_forms, _py_hex_forms
        _b32_runs, _b32_forms = _py_b32_runs, _py_b32_forms
        _turned_tokens = _py_turned_tokens
        _decodings, _probe_texts, _boilerplate = _py_decodings, _py_probe_texts, _py_boilerplate
    return ACCELERATED


_accelerate(not switched_off())
