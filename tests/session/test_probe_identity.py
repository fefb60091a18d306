"""The C probe is the Python reference bit for bit on a large generated corpus (issue
18: the C probe was made faster, its output must not move by one fingerprint).

The corpus is seeded, so a failure reproduces: every decoder (URL, JSON, ``\\x``, HTML,
base64 standard and URL-safe, hex, base32 with DNS labels, turned tokens), its edges
(each alignment and cut, padding, case, lengths around GRAM, MIN_TOKEN and the run
minimums, decodings right at the 15% noise bound, stray and truncated UTF-8, non-ASCII),
nested layers, and the seams between texts. ``probe``, ``probe_seams``, the decodings
and each decoder on its own are compared between the two paths."""

from __future__ import annotations

import base64
import codecs
import html
import random
import string
from collections.abc import Callable, Iterator
from urllib.parse import quote, quote_plus

import pytest
from tests.session.speedups_paths import path

from interlock.session import fingerprints

try:
    from interlock.session import _speedups
except ImportError:  # pragma: no cover - only where no compiler was at install time
    _speedups = None  # type: ignore[assignment]

pytestmark = pytest.mark.skipif(_speedups is None, reason="the C accelerator is not built")

SEED = 18
CASES = 2500
WORDS = [
    "the",
    "revenue",
    "grew",
    "twelve",
    "percent",
    "quarter",
    "customers",
    "region",
    "costs",
    "flat",
    "team",
    "expects",
    "growth",
    "launch",
    "product",
    "hiring",
    "demand",
    "invoice",
    "account",
    "transfer",
    "password",
    "token",
]
ALPHABETS = (
    string.ascii_letters + string.digits,
    string.ascii_lowercase,
    string.ascii_uppercase + "234567",
    string.hexdigits,
    string.ascii_letters + string.digits + "+/=_-",
    string.printable,
    "abc\u00e9\u00df\u6771\u4eac\U0001f642 ",
)


def _token(rng: random.Random) -> str:
    size = rng.choice([0, 1, 7, 8, 9, 11, 12, 13, 15, 16, 17, 18, 19, 20, 24, 31, 32, 33, 40])
    alphabet = rng.choice(ALPHABETS)
    return "".join(rng.choice(alphabet) for _ in range(size))


def _noisy_bytes(rng: random.Random) -> bytes:
    """Bytes around the 15% bound of noise: control bytes, stray continuation bytes,
    bytes never in UTF-8, truncated sequences among text and valid multi-byte text."""
    size = rng.randint(1, 48)
    bad_share = rng.choice([0.0, 0.1, 0.14, 0.15, 0.16, 0.2, 0.5, 1.0])
    out = bytearray()
    for _ in range(size):
        if rng.random() < bad_share:
            out += rng.choice(
                [b"\x00", b"\x07", b"\x1b", b"\x7f", b"\x80", b"\xbf", b"\xc0", b"\xc1",
                 b"\xf5", b"\xff", b"\xe2\x82", b"\xf0\x9f", b"\xc3"]
            )  # fmt: skip
        elif rng.random() < 0.1:
            out += rng.choice(["é", "€", "🙂", "東"]).encode()
        else:
            out += rng.choice(string.printable).encode()
    return bytes(out)


def _payload(rng: random.Random) -> bytes:
    kind = rng.randrange(4)
    if kind == 0:
        return _noisy_bytes(rng)
    if kind == 1:
        return bytes(rng.randrange(256) for _ in range(rng.randint(0, 40)))
    if kind == 2:
        return " ".join(rng.choice(WORDS) for _ in range(rng.randint(1, 8))).encode()
    return _token(rng).encode("utf-8", "surrogatepass")


def _b32_labels(encoded: str, rng: random.Random) -> str:
    size = rng.choice([8, 13, 16, 63])
    labels = [encoded[i : i + size] for i in range(0, len(encoded), size)]
    return ".".join(labels) + rng.choice(["", ".attacker.example", ".x7.example", "."])


def _encode(raw: bytes, rng: random.Random) -> str:
    how = rng.randrange(12)
    if how == 0:
        return base64.b64encode(raw).decode()
    if how == 1:
        return base64.urlsafe_b64encode(raw).decode().rstrip("=")
    if how == 2:
        return raw.hex()
    if how == 3:
        return raw.hex().upper()
    if how == 4:
        text = base64.b32encode(raw).decode()
        text = text.rstrip("=") if rng.random() < 0.5 else text
        return text.lower() if rng.random() < 0.5 else text
    if how == 5:
        return _b32_labels(base64.b32encode(raw).decode().rstrip("=").lower(), rng)
    if how == 6:
        return quote(raw, safe=rng.choice(["", "/", "@:"]))
    if how == 7:
        return quote_plus(raw)
    if how == 8:
        return "".join(f"\\x{b:02x}" for b in raw)
    text = raw.decode("utf-8", "replace")
    if how == 9:
        return "".join(f"\\u{ord(c):04x}" if ord(c) < 0x10000 else c for c in text)
    if how == 10:
        return "".join(rng.choice([f"&#{ord(c)};", f"&#x{ord(c):x};", c]) for c in text)
    return html.escape(text) + rng.choice(["", "&amp;", "&lt;x&gt;", "&copy;", "&nosuch;"])


def _cut(text: str, rng: random.Random) -> str:
    """A piece of a text: cut at any offset, re-wrapped, or turned."""
    how = rng.randrange(6)
    if how == 0 and text:
        return text[rng.randrange(len(text)) :]
    if how == 1 and text:
        return text[: rng.randrange(len(text) + 1)]
    if how == 2:
        width = rng.choice([4, 16, 19, 76])
        return "\n".join(text[i : i + width] for i in range(0, len(text), width))
    if how == 3:
        return text[::-1]
    if how == 4:
        return codecs.encode(text, "rot13")
    return text


def _value(rng: random.Random) -> str:
    raw = _payload(rng)
    text = raw.decode("utf-8", "replace")
    for _ in range(rng.choice([0, 1, 1, 2, 3, 4])):
        text = _encode(text.encode("utf-8", "surrogatepass"), rng)
        if rng.random() < 0.3:
            text = _cut(text, rng)
    parts = [text]
    for _ in range(rng.randrange(3)):
        parts.append(rng.choice([_token(rng), rng.choice(WORDS), "KEY=" + _token(rng)]))
    rng.shuffle(parts)
    return rng.choice([" ", "", "\t", "/", "=", "&q=", "\n", "%20"]).join(parts)


def corpus(count: int = CASES, seed: int = SEED) -> Iterator[str]:
    rng = random.Random(seed)
    yield from ("", "a", "Revenue up twelve", "alice.johnson@example.com", "DE89370400440532013000")
    for _ in range(count):
        yield _value(rng)


def _both(fn: Callable[[], object]) -> tuple[object, object]:
    with path(False):
        python = fn()
    with path(True):
        c = fn()
    return python, c


def test_probe_is_the_reference_on_the_corpus() -> None:
    differ = []
    for text in corpus():
        python, c = _both(lambda text=text: fingerprints.probe(text))
        if python != c:
            differ.append(text)
    assert differ == []


def test_decodings_are_the_reference_on_the_corpus() -> None:
    assert _speedups is not None
    for text in corpus(CASES // 2, SEED + 1):
        for plain in (True, False):
            with path(False):
                python = list(fingerprints._py_decodings(text, plain))
            assert _speedups.decodings(text, plain) == python, text


def test_each_decoder_is_the_reference_on_every_run() -> None:
    assert _speedups is not None
    for text in corpus(CASES // 2, SEED + 2):
        for word in [text, *text.split()]:
            for run in fingerprints._py_runs(word, False):
                assert _speedups.b64_forms(run) == list(fingerprints._py_b64_forms(run)), run
            for run in fingerprints._py_runs(word, True):
                assert _speedups.hex_forms(run) == list(fingerprints._py_hex_forms(run)), run
            for run in fingerprints._py_b32_runs(word):
                assert _speedups.b32_forms(run) == list(fingerprints._py_b32_forms(run)), run


def test_mostly_text_is_the_reference_around_the_bound() -> None:
    assert _speedups is not None
    rng = random.Random(SEED + 3)
    for _ in range(CASES * 4):
        raw = _noisy_bytes(rng)
        assert _speedups.mostly_text(raw) == fingerprints._mostly_text(raw), raw


def _at_the_bound() -> Iterator[bytes]:
    """Decodings of every length up to 64 bytes with as many noise bytes as the 15%
    bound allows, one more and one fewer (control bytes, stray continuation bytes, bytes
    never in UTF-8), placed first, last or spread: where a decoder that drops noise
    early must drop exactly what the reference drops."""
    for size in range(1, 65):
        allowed = int(0.15 * size)
        for count in {max(0, allowed - 1), allowed, allowed + 1}:
            for noise in (b"\x01", b"\x80", b"\xff", b"\xc3"):
                text = bytearray(b"secret value " * 5)[:size]
                for spots in (range(count), range(size - count, size), range(0, size, 7)):
                    raw = bytearray(text)
                    for at in list(spots)[:count]:
                        raw[at : at + 1] = noise
                    yield bytes(raw[:size])


def test_decoders_drop_noise_exactly_at_the_bound() -> None:
    assert _speedups is not None
    for raw in _at_the_bound():
        assert _speedups.mostly_text(raw) == fingerprints._mostly_text(raw), raw
        for pad in (b"", b"x", b"xy", b"xyz"):  # each alignment of the decoding
            b64 = base64.b64encode(pad + raw).decode()
            b32 = base64.b32encode(pad + raw).decode().rstrip("=")
            hexed = (pad + raw).hex()
            for run, c, python in (
                (b64, _speedups.b64_forms, fingerprints._py_b64_forms),
                (b64.rstrip("=").translate(str.maketrans("+/", "-_")), _speedups.b64_forms,
                 fingerprints._py_b64_forms),
                ("A" + hexed, _speedups.hex_forms, fingerprints._py_hex_forms),
                (b32, _speedups.b32_forms, fingerprints._py_b32_forms),
                (b32.lower()[3:], _speedups.b32_forms, fingerprints._py_b32_forms),
            ):  # fmt: skip
                assert c(run) == list(python(run)), (run, raw)


def test_seams_are_the_reference_on_the_corpus() -> None:
    rng = random.Random(SEED + 4)
    values = list(corpus(CASES // 2, SEED + 5))
    for _ in range(CASES // 2):
        texts = rng.sample(values, rng.randint(1, 4))
        if rng.random() < 0.5:  # one value cut into pieces at random points
            whole = "".join(texts)
            cuts = sorted(rng.sample(range(len(whole) + 1), min(3, len(whole) + 1)))
            texts = [whole[a:b] for a, b in zip([0, *cuts], [*cuts, len(whole)], strict=True)]
        python, c = _both(lambda texts=texts: fingerprints.probe_seams(texts))
        assert python == c, texts


def test_of_data_is_the_reference_on_the_corpus() -> None:
    """The gram hash, BLAKE2b and the base64 and hex decoders are shared with
    :func:`of_data`: stored fingerprints must stay valid."""
    values = list(corpus(CASES // 2, SEED + 6))
    for at in range(0, len(values), 3):
        data = "\n".join(values[at : at + 3])
        python, c = _both(lambda data=data: fingerprints.of_data(data))
        assert python == c, data
