"""The probe in C (``_speedups.probe``, ``_speedups.decodings``, ``_speedups.token_hash``)
is the pure-Python reference bit for bit: the decodings of a text in the same order
(URL- and JSON-unescaping, base64 and hex runs, the cap of forms and layers), BLAKE2b of a
whole token, and ``probe`` / ``probe_seams`` end to end on random text — unicode, odd code
points, lone surrogates, NULs, encoded secrets, empty and huge — and on every shape of
value ``texts_of`` walks (docs/adr/0031-a-c-accelerator-for-fingerprints.md)."""

from __future__ import annotations

import base64
import codecs
import hashlib
import os
import string
from collections import UserDict
from typing import TypeVar
from urllib.parse import quote, quote_plus, unquote_plus

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st
from tests.session.speedups_paths import both, path

from interlock.session import fingerprints

try:
    from interlock.session import _speedups
except ImportError:  # pragma: no cover - only where no compiler was at install time
    _speedups = None  # type: ignore[assignment]

pytestmark = pytest.mark.skipif(_speedups is None, reason="the C accelerator is not built")

T = TypeVar("T")
SECRET = "sk_live_4f9Qz2LmX8pRt6Vw1YbN3cKd"
ODD = "Grüße naïve café 東京の秘密 ＡＰＩ鍵 ß İ ﬁ 🙂 \u0085\u00a0\u2028\u3000\u1680\x1c\x1f\x0b\x0c"


def py_decodings(text: str, plain: bool) -> list[str]:
    with path(False):
        return list(fingerprints._py_decodings(text, plain))


# -- strategies ---------------------------------------------------------------------


def _encode(value: str, how: int) -> str:
    raw = value.encode("utf-8", "surrogatepass")
    if how == 0:
        return base64.b64encode(raw).decode()
    if how == 1:
        return base64.urlsafe_b64encode(raw).decode().rstrip("=")
    if how == 2:
        return raw.hex()
    if how == 3:
        return quote(raw, safe="")
    if how == 4:
        return quote_plus(raw)
    if how == 5:  # JSON string escapes of every character
        return "".join(f"\\u{ord(c):04x}" if ord(c) < 0x10000 else c for c in value)
    if how == 6:  # re-wrapped
        return "\n".join(value[i : i + 20] for i in range(0, len(value), 20))
    if how == 7:
        return value[len(value) // 3 :]  # cut at an offset
    if how == 8:  # base32 as DNS labels under a domain, lower-case, unpadded
        encoded = base64.b32encode(raw).decode().rstrip("=").lower()
        return ".".join(encoded[i : i + 63] for i in range(0, len(encoded), 63)) + ".a.example"
    if how == 9:
        return base64.b32encode(raw).decode()[len(raw) % 8 :]  # cut at an alignment
    if how == 10:
        return value[::-1]
    if how == 11:
        return codecs.encode(value, "rot13")
    if how == 12:  # HTML entities, decimal and hex
        return "".join(f"&#{ord(c)};" if i % 2 else f"&#x{ord(c):X}" for i, c in enumerate(value))
    return "".join(f"\\x{b:02x}" for b in raw)  # \xNN escapes


def encoded() -> st.SearchStrategy[str]:
    """Secrets and text in up to three layers of encodings (cut, re-wrapped)."""
    inner = st.text(string.ascii_letters + string.digits, min_size=8, max_size=60) | st.text(
        ODD + string.printable, max_size=40
    )
    return st.tuples(inner, st.lists(st.integers(0, 13), max_size=4)).map(
        lambda t: _apply(t[0], t[1])
    )


def _apply(value: str, hows: list[int]) -> str:
    for how in hows:
        value = _encode(value, how)
    return value


#: the characters the decodings treat specially, in any mix
special = st.lists(
    st.sampled_from(
        [
            *("%", "%2", "%41", "%c3", "%C3%A9", "%e2%82", "%zz", "%%", "+", "++", "\\"),
            *("\\u00e9", "\\u0041", "\\ud800", "\\uDC00", "\\u12", "\\uZZZZ", "\\n", "\\\\"),
            *('\\"', "\\/", "\\x", "\\t\\r\\b\\f", "=", "==", "===", " ", "\n", "\t"),
            *("QUJDREVGR0hJSktMTU5P", "0123456789abcdef", "c2tfbGl2ZV80Zjl", "-_", "é"),
            *("Ａ", "\u0085", "\u3000", "\x00", "\x1c", SECRET, "🙂", "\udcff"),
            *("&", "&#65;", "&#x42", "&#xD800;", "&#0;", "&#1114112;", "&#128;", "&amp;", "&amp"),
            *("&notit;", "&copy=", "&nbsp;", "&#", "\\x41", "\\xc3\\xa9", "\\xe2\\x82", "\\xZZ"),
            *("\\x4", "\\\\x41", "MZXW6YTBOI", "ONVS23DJOZSS2", "mzxw6ytb", ".", "a2.", "7"),
        ]
    ),
    max_size=30,
).map("".join)


def texts() -> st.SearchStrategy[str]:
    return st.one_of(
        st.text(max_size=300),
        st.text(string.printable + "\x00\x1c\x1f", max_size=300),
        st.text(ODD + string.ascii_letters + string.digits + "%+\\/=", max_size=300),
        st.lists(encoded() | st.sampled_from(["the", "KEY=", " ", "\n", "é"]), max_size=8).map(
            " ".join
        ),
        special,
        # long words split by every kind of ASCII whitespace str.split knows
        st.lists(
            st.tuples(
                st.text(string.ascii_letters + string.digits + "@._-", min_size=6, max_size=20),
                st.sampled_from(" \t\n\x0b\x0c\r\x1c\x1d\x1e\x1f"),
            ).map("".join),
            max_size=8,
        ).map("".join),
        st.binary(max_size=300).map(lambda b: b.decode("utf-8", "replace")),
        # odd code points, surrogates too (text a JSON escape can make)
        st.text(st.characters(min_codepoint=0, max_codepoint=0x10FFFF), max_size=80),
        st.lists(st.integers(0, 0x10FFFF).map(chr), max_size=60).map("".join),
    )


# -- decodings ----------------------------------------------------------------------


@settings(max_examples=800, deadline=None)
@given(text=texts(), plain=st.booleans())
@example(text="", plain=True)
@example(text="%", plain=True)
@example(text="abc%4", plain=True)
@example(text="%C3é%A9+x+%2B", plain=True)  # a non-ASCII character between escapes
@example(text="%e2%82%ac and %ff%fe", plain=True)
@example(text="\\ud83d\\ude00 \\u00E9\\\\n \\u12 \\", plain=True)
@example(text=quote(quote(base64.b64encode(SECRET.encode()).decode())), plain=True)
@example(text=" ".join(base64.b64encode(os.urandom(30)).decode() for _ in range(40)), plain=True)
@example(text=" ".join(base64.b64encode(os.urandom(30)).decode() for _ in range(40)), plain=False)
def test_decodings_are_the_reference_decodings(text: str, plain: bool) -> None:
    assert _speedups.decodings(text, plain) == py_decodings(text, plain)


def test_decodings_stop_at_the_cap_in_the_same_order() -> None:
    """A text with more decodings than the cap: the same 64 forms, in the same order."""
    runs = [base64.b64encode(f"form {n} of many {SECRET}".encode()).decode() for n in range(80)]
    text = " ".join(runs)
    got = _speedups.decodings(text, True)
    assert len(got) == fingerprints._MAX_DECODINGS
    assert got == py_decodings(text, True)
    layered = _apply(SECRET, [0, 0, 0, 0, 0])  # five layers: three are read
    assert _speedups.decodings(layered, True) == py_decodings(layered, True)
    chain = [_apply(SECRET, [0] * layers) for layers in (5, 4, 3, 2, 1)]
    got = _speedups.decodings(layered, True)  # with the turned forms of each layer
    assert [form for form in got if form in chain] == chain[:4]  # three layers read


@settings(max_examples=300, deadline=None)
@given(text=st.text(string.printable + ODD + "%" * 10, max_size=120))
def test_the_url_decoding_is_unquote_plus(text: str) -> None:
    forms = _speedups.decodings(text, True)
    if "%" in text or "+" in text:
        assert unquote_plus(text) in forms or unquote_plus(text) == text


def test_decodings_refuse_what_is_not_a_str() -> None:
    with pytest.raises(TypeError):
        _speedups.decodings(b"abc", True)  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        _speedups.decodings("abc")  # type: ignore[call-arg]


# -- boilerplate -----------------------------------------------------------------------

#: pieces of identifiers, keys and the characters around them the expression looks at
identifier_parts = st.sampled_from(
    [
        *("AWS", "SECRET", "ACCESS", "KEY", "Key", "key", "get", "Api", "Value", "Client"),
        *("_", "__", "=", ":", "export", ".", "-", "+", "/", "@", "1", "22", "333", "x"),
        *("Ab", "aB", "ABc", "s3", "ID2", "é", "\x00", '"', "'", "(", "=="),
        *("Secretvalue", "aBkey", "AWS_SECRET_KEY", "getApiKey"),
    ]
)


@settings(max_examples=800, deadline=None)
@given(
    words=st.lists(
        st.lists(identifier_parts, min_size=1, max_size=12).map("".join)
        | st.text(string.ascii_letters + string.digits + "_=:.-+/@", max_size=40),
        max_size=6,
    )
)
@example(words=["AWS_SECRET_ACCESS_KEY=wJalrXUtnFEMI/K7MDENG", "getSecretValue()"])
@example(words=["exportAWS_KEY=1", "export=value12", "_private.key-name:value"])
@example(words=["a.getApiKey", "x/ApiClient", "ApiClient/x", "ApiClient=", "ApiClientX"])
@example(words=["ABC_DEF12_GH3", "ABC_DEF123_GH", "Abc_Def_Ghij", "AbC_DEF_GHIJ", "+AWS_KEY_ID"])
@example(words=["x=Abcdefghij", "x=AbcDefghij", "aBkey_KEY", "AWS_SECRET_KEY.region=eu"])
@example(words=["/AWS_SECRET_KEY=1", "/ApiClientFoo=1", "/ApiClientFoo+1", "1+AWS_KEY_ID"])
def test_boilerplate_is_what_the_expression_finds(words: list[str]) -> None:
    got = _speedups.boilerplate(words)
    if any(not word.isascii() for word in words):
        assert got is None
    else:
        assert got == fingerprints._py_boilerplate(words)


# -- whole-token hash ----------------------------------------------------------------


@settings(max_examples=300, deadline=None)
@given(data=st.binary(max_size=600))
@example(data=b"")
@example(data=b"a" * 127)
@example(data=b"a" * 128)
@example(data=b"a" * 129)
@example(data=b"a" * 256)
@example(data=b"a" * 257)
def test_token_hash_is_blake2b_64(data: bytes) -> None:
    expected = int.from_bytes(hashlib.blake2b(data, digest_size=8).digest(), "big")
    assert _speedups.token_hash(data) == expected == fingerprints._bytes_hash(data)


def test_token_hash_of_a_large_input() -> None:
    data = os.urandom(100_003)
    assert _speedups.token_hash(data) == fingerprints._bytes_hash(data)
    assert _speedups.token_hash(memoryview(data)[5:700]) == fingerprints._bytes_hash(data[5:700])


# -- mostly text: the early refusal of noise -------------------------------------------


@settings(max_examples=500, deadline=None)
@given(
    text=st.text(string.ascii_letters + "é東🙂\x01", max_size=60),
    noise=st.lists(st.sampled_from([0x80, 0xBF, 0xC0, 0xC1, 0xC3, 0xE2, 0xF5, 0xFF]), max_size=12),
    at=st.integers(0, 60),
)
def test_mostly_text_near_the_threshold_is_the_reference(
    text: str, noise: list[int], at: int
) -> None:
    """Bytes mixing text and invalid UTF-8 around the 15% line: the lower bound that
    refuses noise early never refuses what the reference keeps."""
    raw = text.encode()
    raw = raw[:at] + bytes(noise) + raw[at:]
    assert _speedups.mostly_text(raw) == fingerprints._mostly_text(raw)


# -- probe end to end ----------------------------------------------------------------


class Text(str):
    """A str subclass: C reads it as the str it holds."""


def values() -> st.SearchStrategy[object]:
    leaf = st.one_of(
        texts(),
        st.none(),
        st.integers(),
        st.booleans(),
        st.floats(allow_nan=False),
        st.binary(max_size=80),
        texts().map(Text),
    )
    return st.recursive(
        leaf,
        lambda inner: st.one_of(
            st.lists(inner, max_size=4),
            st.lists(inner, max_size=4).map(tuple),
            st.dictionaries(st.text(max_size=12) | special, inner, max_size=4),
            st.dictionaries(st.integers(), inner, max_size=2),
            st.frozensets(st.text(max_size=20), max_size=3),
        ),
        max_leaves=10,
    )


@settings(max_examples=500, deadline=None)
@given(value=values())
@example(value="")
@example(value={"to": "bob@corp.example", "body": f"see {SECRET} and {SECRET.encode().hex()}"})
@example(value=[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[["deep " + SECRET]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]])
@example(value={"a": UserDict({"b": SECRET})})
@example(value="\\ud800\\udfff" + SECRET + "\udcff")
@example(value="key12345678\x1csecret987654\x1dtoken4567890\x1ewhat1234567\x1fend")
def test_probe_is_the_same_on_both_paths(value: object) -> None:
    python, c = both(fingerprints.probe, value)
    assert python == c
    assert type(c) is frozenset


@settings(max_examples=200, deadline=None)
@given(parts=st.lists(texts(), max_size=4))
def test_probe_seams_is_the_same_on_both_paths(parts: list[str]) -> None:
    python, c = both(fingerprints.probe_seams, parts)
    assert python == c


#: pieces whose joins make words across seams, some equal to a text's own word, and
#: escapes cut by a seam (the joined text decodes to what no text does)
seam_pieces = st.lists(
    st.sampled_from(
        [
            *("abcd1234", "efgh5678", "abcd1234efgh5678", " ", "\n", "", "x", "%C3", "%A9"),
            *("QUJDREVG", "R0hJSktM", "TU5PUFFS", "\\u00", "e9", "key=", SECRET[:12]),
            *(SECRET[12:], "the report ", "é", "Ａ", "=", "\x1c"),
        ]
    ),
    max_size=8,
)


@settings(max_examples=500, deadline=None)
@given(parts=seam_pieces | st.lists(seam_pieces.map("".join), max_size=4))
@example(parts=["abcd1234", "efgh5678 abcd1234efgh5678"])
@example(parts=["abcdefgh1", "2 more"])  # a word one character past its text's end
@example(parts=["see %C3", "%A9" + "x" * 20])
@example(parts=["", "", ""])
@example(parts=[SECRET[:10], SECRET[10:20], SECRET[20:]])
def test_probe_seams_across_cut_words_is_the_same_on_both_paths(parts: list[str]) -> None:
    python, c = both(fingerprints.probe_seams, parts)
    assert python == c
    assert fingerprints.probe_seams(tuple(parts)) == c


@settings(max_examples=300, deadline=None)
@given(tail=seam_pieces.map("".join) | texts(), head=seam_pieces.map("".join) | texts())
@example(tail=SECRET[:10], head=SECRET[10:20])
@example(tail="x=" + SECRET[:6], head=SECRET[6:14] + "&y=1")
@example(tail=base64.b64encode(SECRET.encode()).decode()[:20], head="QUJDREVG")
@example(tail="é" + SECRET[:8], head=SECRET[8:16])
def test_probe_across_is_the_same_on_both_paths(tail: str, head: str) -> None:
    python, c = both(fingerprints.probe_across, tail, head)
    assert python == c


def _cut(encoded: str, at: int, before: str, after: str) -> tuple[str, str]:
    at = min(at, len(encoded))
    return before + encoded[:at], encoded[at:] + after


#: an encoding (base64 either alphabet, hex, base32 either case, URL-encoding; nested
#: up to twice) cut in two, with text before and after: the run across the seam is
#: decoded (C's decoded_across, or Python's when a decoding is not ASCII)
cut_encodings = st.builds(
    _cut,
    st.tuples(
        st.text(string.ascii_letters + string.digits, min_size=8, max_size=60)
        | st.sampled_from([SECRET, "Grüße aus München, café", "東京の秘密 " + SECRET]),
        st.lists(st.sampled_from([0, 1, 2, 3, 8, 9, 11]), min_size=1, max_size=2),
    ).map(lambda t: _apply(t[0], t[1])),
    st.integers(0, 200),
    st.sampled_from(["", "x=", "see ", "key=abc&tok=", "é ", "\\n"]),
    st.sampled_from(["", " more", "&y=1", "==", "\\u00e9", " é"]),
)


@settings(max_examples=400, deadline=None)
@given(pair=cut_encodings)
def test_probe_across_a_cut_encoding_is_the_same_on_both_paths(pair: tuple[str, str]) -> None:
    python, c = both(fingerprints.probe_across, *pair)
    assert python == c


KEY_B64 = base64.b64encode(f"aws_secret_access_key = {SECRET}".encode()).decode()
KEY_HEX = SECRET.encode().hex()
KEY_B32 = base64.b32encode(SECRET.encode()).decode()
ACCENTED_B64 = base64.b64encode("Grüße aus München, café crème brûlée".encode()).decode()


@pytest.mark.parametrize(
    ("tail", "head"),
    [
        *((KEY_B64[:at], KEY_B64[at:]) for at in (1, 7, 8, 9, 10, 11, 16, 30, len(KEY_B64) - 1)),
        ("token=" + KEY_B64[:21], KEY_B64[21:] + "&next=2"),
        (KEY_B64[:20].replace("+", "-").replace("/", "_"), KEY_B64[20:].rstrip("=")),
        *((KEY_HEX[:at], KEY_HEX[at:]) for at in (1, 5, 15, 16, 17, 40)),
        (KEY_HEX.upper()[:24], KEY_HEX.upper()[24:]),
        ("deadbeef" * 2, "cafebabe" * 2),  # hex of letters only: no whole token
        *((KEY_B32[:at], KEY_B32[at:]) for at in (3, 13, 20, 33)),
        (KEY_B32.lower()[:25], KEY_B32.lower()[25:].rstrip("=")),
        ("q=" + quote(KEY_B64, safe="")[:30], quote(KEY_B64, safe="")[30:]),
        (quote_plus("see " + SECRET)[:12], quote_plus("see " + SECRET)[12:]),
        (ACCENTED_B64[:17], ACCENTED_B64[17:]),  # decodes to text that is not ASCII
        ("é " + KEY_B64[:20], KEY_B64[20:]),
        (KEY_B64[:20], KEY_B64[20:] + " é"),
        ("", KEY_B64),
        (KEY_B64, ""),
        ("", ""),
        ("Q1001Q1002Q1003", "Q1004Q1005Q1006"),  # joined ids: not decoded
        ("order-1234", "order-5678"),
        ("the report for", " march was sent"),
        (KEY_B64 * 300, KEY_B64 * 300),  # a very long run across the seam
        ("x " * 5000 + KEY_HEX[:30], KEY_HEX[30:] + " y" * 5000),
        (SECRET[:10] + "\\x", "41" + SECRET[10:]),
    ],
)
def test_probe_across_of_each_encoding_cut_is_the_same_on_both_paths(tail: str, head: str) -> None:
    python, c = both(fingerprints.probe_across, tail, head)
    assert python == c


def test_c_probes_the_decodings_across_a_seam_python_those_not_ascii() -> None:
    """``_speedups.across`` probes the decodings of the run across a seam itself, and
    hands Python what it found when some of them are not ASCII (Python probes those:
    NFKC and case folding) — the same fingerprints either way."""
    found, rest = _speedups.across(KEY_B64[:20], KEY_B64[20:])
    assert rest is None
    assert found == fingerprints.probe_across(KEY_B64[:20], KEY_B64[20:])
    assert found - _speedups.across(KEY_B64[:20], " " + KEY_B64[20:])[0]  # decodings kept
    tail, head = ACCENTED_B64[:17], ACCENTED_B64[17:]
    found, rest = _speedups.across(tail, head)
    _, seam_others, _, own_others = rest
    assert seam_others or own_others
    with path(False):
        assert found | fingerprints._decoded_rest(*rest) == fingerprints.probe_across(tail, head)


def test_probe_of_huge_and_empty_values_is_the_same() -> None:
    line = f"row 17 key={SECRET} {base64.b64encode(SECRET.encode()).decode()} %41%42 é\n"
    for value in ("", [], {}, None, line * 3000, [line] * 500, "x" * 100_000):
        python, c = both(fingerprints.probe, value)
        assert python == c


def test_probe_of_plain_values_finds_a_secret_c_walks_them() -> None:
    """The C walk of a dict / list / tuple: the same texts as ``texts_of``, keys too."""
    stored = fingerprints.of_data(f"KEY={SECRET}\n")
    for value in (
        {"body": quote(base64.b64encode(f"see {SECRET}".encode()).decode())},
        ["x", ("y", {SECRET: None})],
        {"n": [1, {"k": SECRET.encode().hex()}]},  # an int: texts_of walks it
    ):
        with path(True):
            probed = fingerprints.probe(value)
        assert fingerprints.carries(probed, stored)
    assert _speedups.probe({"n": 1}, True) is None  # left to texts_of
    assert _speedups.probe({1: "x"}, True) is None
    assert _speedups.probe({Text("k"): "x"}, True) is None  # texts_of: str(key)
    assert _speedups.probe(Text(SECRET), True) == _speedups.probe(SECRET, True)
    text = "é" * 20 + SECRET
    found, others = _speedups.probe({"k": [text, None, SECRET]}, True) or ((), ())
    # the non-ASCII forms (the text, its one token reversed and ROT13) are left to Python
    assert others == [text, text[::-1], text.translate(fingerprints._ROT13)]
    assert found


def test_a_fresh_frozenset_each_call() -> None:
    """The probe fills a brand-new frozenset: never a shared one (the empty one too)."""
    a = fingerprints.probe("")
    b = fingerprints.probe(f"{SECRET} and more")
    c = fingerprints.probe(f"{SECRET} and more")
    assert a == frozenset() and b == c and b is not c
    assert frozenset() == frozenset(())  # the interpreter's empty frozenset is intact


def _rss_kib() -> int:
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") // 1024


@pytest.mark.skipif(not os.path.exists("/proc/self/statm"), reason="needs /proc")
def test_the_c_probe_does_not_leak() -> None:
    values: list[object] = [
        {"to": "bob@corp.example", "body": "the report for march " * 10 + SECRET},
        quote(base64.b64encode(f"see {SECRET} é".encode()).decode()),
        "\\u00e9\\ud800 %C3%A9 " + SECRET.encode().hex(),
        ["a" * 40, ("b" * 40, {"c": "é" * 30})],
        {"n": 5},
        # base32 as DNS labels, HTML entities, \xNN escapes, turned forms
        "https://onvs23djozss2olghbstozbwmm2wendbgm4teobr.g4ydmzrvmu2gim3dgjrd.a.example/x",
        "&#115;&#107;&amp;&copy; \\x73\\x6b\\xc3\\xa9 " + SECRET[::-1],
    ]

    def run(times: int) -> None:
        for _ in range(times):
            for value in values:
                fingerprints.probe(value)
                _speedups.decodings(str(value), False)
            fingerprints.probe_seams(["ab" * 20, "é" + SECRET])

    with path(True):
        run(2000)  # warm: caches, free lists, arenas
        before = _rss_kib()
        run(20_000)
        grown = _rss_kib() - before
    assert grown < 2048, f"RSS grew by {grown} KiB over 20000 rounds"
