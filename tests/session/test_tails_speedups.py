"""The loop of ``ArgumentTails.advance`` in C (``_history.advance_tails``) is the
Python reference value for value: the same seams in the same order and the same
streams' states after every call, on random sessions of random arguments (unicode
whitespace, URLs, numbers, values that are not text), on hostile ones, and under the
bounds (``MAX_NAMES``); and it refuses what it was not made for with a ``TypeError``."""

from __future__ import annotations

import base64
import string
from typing import Any
from urllib.parse import quote, unquote_plus, urlsplit

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from interlock.session import tails as tails_module
from interlock.session.tails import ACCELERATED, ACROSS, TAIL, ArgumentTails, _decoded

pytestmark = pytest.mark.skipif(not ACCELERATED, reason="the C loop is not built")

#: characters the streams tell apart: runs, every kind of whitespace str.split knows,
#: what _PLAIN lets through, URL syntax, and text that is not ASCII
ALPHABET = (
    string.ascii_letters
    + string.digits
    + " \t\n\r\x0b\x0c\x1c\x1f\x85\xa0\u1680\u2003\u2028\u3000"
    + ".@/_:-+=%&?#"
    + "İéß東😀\ud800"
)
TEXT = st.text(alphabet=ALPHABET, max_size=120)
URL = st.builds(
    lambda scheme, sep, rest, tail: scheme + sep + rest + tail,
    st.sampled_from(["http", "HTTP", "https", "hTtPs", "ftp", "İttp", "htt"]),
    st.sampled_from(["://", ":/", "//", ":///"]),
    st.text(alphabet=ALPHABET, max_size=30),
    st.sampled_from(["", "?a=1&b=x%20y", "?q=&page=2", "#frag", "/p/q%2Dr", "?a=%20"]),
)
#: short values of few characters: pieces, plain names, whitespace, repeats
PIECE = st.text(alphabet="abzAQ19.@/_:- \u3000", min_size=1, max_size=12)
#: values longer than a tail: a run that fills it, with or without whitespace before,
#: between and after (where the first and last TAIL characters are read apart)
LONG = st.builds(
    lambda lead, run, middle, end: lead + run + middle + run + end,
    st.sampled_from(["", " ", "\u3000"]),
    st.text(alphabet="aB1-", min_size=TAIL - 8, max_size=TAIL + 8),
    st.sampled_from(["", " ", "x"]),
    st.sampled_from(["", " ", "Z"]),
)
#: pieces encoded on their own: what tails._decoded reads (or declines to)
ENCODED = st.builds(
    lambda piece, how: how(piece),
    st.one_of(PIECE, st.text(alphabet=ALPHABET, max_size=12)),
    st.sampled_from(
        [
            lambda p: base64.b64encode(p.encode("utf-8", "surrogatepass")).decode(),
            lambda p: base64.urlsafe_b64encode(p.encode("utf-8", "surrogatepass")).decode(),
            lambda p: p.encode("utf-8", "surrogatepass").hex(),
            lambda p: quote(p.encode("utf-8", "surrogatepass")),
            lambda p: "".join(f"\\u{ord(c):04x}" for c in p),
            lambda p: p + "%",
            lambda p: p + "\\x",
            # an encoding behind a label or before one: its first or last run decoded
            lambda p: "part 1: " + base64.b64encode(p.encode("utf-8", "surrogatepass")).decode(),
            lambda p: p.encode("utf-8", "surrogatepass").hex() + " (part 2)\u3000",
            lambda p: "\u2003" + base64.b32encode(p.encode("utf-8", "surrogatepass")).decode(),
        ]
    ),
)
VALUE = st.one_of(
    PIECE,
    PIECE,
    ENCODED,
    LONG,
    TEXT,
    URL,
    st.integers(min_value=-(10**30), max_value=10**30),
    st.floats(allow_nan=True),
    st.booleans(),
    st.none(),
    st.lists(st.integers(), max_size=2),
    st.sampled_from(["", "ok", "Ack1", "wJalrXUtnF", "EMI-K7MDEN", "views.py", "x" * (TAIL + 1)]),
)
#: values in dicts and lists (a JSON body), nested past MAX_DEPTH too
NESTED = st.recursive(
    VALUE,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4),
        st.lists(inner, max_size=3).map(tuple),
        st.dictionaries(
            st.one_of(st.sampled_from(["d", "k", "x" * 60]), st.integers(0, 1)), inner, max_size=3
        ),
    ),
    max_leaves=12,
)
NAME = st.one_of(st.sampled_from(["a", "b", "body", "url", "to", "*", ACROSS]), st.integers(0, 2))
ARGS = st.one_of(st.dictionaries(NAME, NESTED, max_size=5), NESTED)
CALLS = st.lists(st.tuples(st.sampled_from(["s", "t"]), ARGS), min_size=1, max_size=14)


def _both(calls: list[tuple[str, Any]]) -> None:
    c = ArgumentTails()
    python = ArgumentTails(accelerated=False)
    for session, args in calls:
        outcomes = []
        for tails in (c, python):
            try:
                outcomes.append(tails.advance("T", session, args))
            except Exception as exc:  # the same error on both paths
                outcomes.append(type(exc))
        assert outcomes[0] == outcomes[1], args
        assert c._sessions == python._sessions, args


@settings(max_examples=400, deadline=None)
@given(CALLS)
def test_random_sessions_end_as_the_reference_ends(calls: list[tuple[str, Any]]) -> None:
    _both(calls)


@settings(max_examples=100, deadline=None)
@given(CALLS, st.integers(min_value=0, max_value=3))
def test_the_bound_on_streams_is_the_reference_bound(
    calls: list[tuple[str, Any]], bound: int
) -> None:
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(tails_module, "MAX_NAMES", bound)
        patch.setattr(tails_module, "MAX_DEPTH", bound)
        patch.setattr(tails_module, "MAX_VALUES", bound * 2)
        _both(calls)


KEY = "wJalrXUtnFEMI-K7MDENG-bPxRfiCYEXAMPLEKEY"


class Text(str):
    """A str subclass whose methods raise: neither path reads it (not exact str)."""

    def __str__(self) -> str:
        raise RuntimeError("read")

    def lower(self) -> str:  # type: ignore[override]
        raise RuntimeError("read")


def _loop() -> list[Any]:
    loop: list[Any] = ["Ab1"]
    loop.append(loop)
    return loop


def _cycle() -> dict[str, Any]:
    cycle: dict[str, Any] = {"a": "Ab1"}
    cycle["self"] = cycle
    return cycle


def _deep(depth: int) -> list[Any]:
    deep: list[Any] = ["Zz9"]
    for _ in range(depth):
        deep = [deep]
    return deep


CASES: dict[str, list[Any]] = {
    "a key in pieces, in turn in two arguments": [
        {"ab"[i % 2]: KEY[i * 10 : i * 10 + 10]} for i in range(4)
    ],
    "an empty query value": [{"u": "https://x.example/s?q=&page=2"}, {"u": "https://x/?q="}],
    "unicode whitespace between runs": [{"b": "part\u20031: wJalr"}, {"b": "XUtn\u3000(2)"}],
    "a value of whitespace only": [{"b": " \u2028 "}, {"b": "wJalr"}],
    "a 2 MB value": [{"b": "Q" * 2_000_000}, {"b": "R" * 2_000_000 + " end"}],
    "an int too long to print": [{"n": 10**5000}],
    "lone surrogates": [{"b": "wJalr\ud800"}, {"b": "\udfffXUtn"}],
    "str subclasses as values and names": [{"b": Text("wJalrXUtnF")}, {Text("k"): "EMI-K7"}],
    "not a dict": ["wJalrXUtnF", 12345, [KEY], None],
    "a URL with many queries": [
        {"u": "https://x.example/?" + "&".join(f"k{i}=V{i}" for i in range(20))}
    ],
    "ACROSS as an argument's name": [{ACROSS: "Ab1"}, {"b": "Cd2"}, {ACROSS: "Ef3"}],
    "the same value again": [{"to": "A1@x.example", "b": "Q1"}] * 4,
    "pieces encoded on their own": [
        {"b": base64.b64encode(KEY[:10].encode()).decode()},
        {"b": KEY[10:20].encode().hex()},
        {"b": quote(KEY[20:30], safe="")},
        {"u": "https://x.example/?d=" + base64.b64encode(KEY[30:].encode()).decode()},
        {"b": "%ZZ%", "c": "\\ud800", "d": "00ff00ff", "e": "////////"},
    ],
    "a float and a bool": [{"f": 1.5e300, "t": True}, {"f": float("nan")}],
    "a JSON body": [{"json": {"d": KEY[:10], "n": 1}}, {"json": {"d": KEY[10:20], "n": 2}}],
    "a list of pieces": [{"items": [KEY[:10], KEY[10:20]]}, ["Ab1", ("Cd2", {"e": "Fg3"})]],
    "a list that holds itself": [{"l": _loop()}],
    "a dict that holds itself": [{"d": _cycle()}],
    "a million items": [{"l": ["Ab1"] * 1_000_000}],
    "a 100,000-deep list": [{"l": _deep(100_000)}],
}


@pytest.mark.parametrize("row", sorted(CASES))
def test_hostile_and_odd_sessions_end_as_the_reference_ends(row: str) -> None:
    _both([("s", args) for args in CASES[row]])


def test_the_c_loop_refuses_what_it_was_not_made_for() -> None:
    from interlock.session._history import advance_tails

    def parts(name: str, text: str) -> Any:
        return (("n/", "x"),)

    for call in (
        lambda: advance_tails([], {}, parts, 4, ACROSS, 6, 9, _decoded),  # tails not a dict
        lambda: advance_tails({}, {}, parts, 4, ACROSS, 6, 9),  # too few
        lambda: advance_tails({}, {}, parts, 4, b"across", 6, 9),  # across not text
        lambda: advance_tails({}, {}, parts, "4", ACROSS, 6, 9, _decoded),  # the bound not an int
        lambda: advance_tails({"b": ("x", 1, "y")}, {"b": "v"}, parts, 4, ACROSS, 6, 9, _decoded),
        lambda: advance_tails(
            {"b": ["x", None, "y"]}, {"b": "v"}, parts, 4, ACROSS, 6, 9, _decoded
        ),
        lambda: advance_tails(
            {}, {"u": "https://x/"}, lambda n, t: [("a", "b")], 4, ACROSS, 6, 9, _decoded
        ),
        lambda: advance_tails(
            {}, {"u": "https://x/"}, lambda n, t: (("a", 1),), 4, ACROSS, 6, 9, _decoded
        ),
    ):
        with pytest.raises(TypeError):
            call()
    # what url_parts raises comes through, and nothing is left half-made
    tails: dict[str, Any] = {}

    def raising(name: str, text: str) -> Any:
        raise ValueError("a URL")

    with pytest.raises(ValueError, match="a URL"):
        advance_tails(tails, {"a": "Ab1", "u": "https://x/"}, raising, 4, ACROSS, 6, 9, _decoded)
    assert list(tails) == ["a"]  # stepped before the URL ("a", "u": plain names); no ACROSS
    advance_tails(tails, {"u": "https://x/"}, parts, 4, ACROSS, 6, 9, _decoded)
    assert tails["n/"] == ("x", None, "x")  # the part url_parts gave


def test_the_loop_in_c_is_the_default() -> None:
    tails = ArgumentTails()
    assert tails._advance is not None
    assert ArgumentTails(accelerated=False)._advance is None


_URL_CHARS = "hHtTpPsS:/?#@[]%&=+.-_~ \t\x00\x7faZ09é"


@given(
    st.sampled_from(
        ["http://", "https://", "HTTPS://", "Http://", "https:/", "httpx://", ""]
    ).flatmap(
        lambda start: st.text(alphabet=_URL_CHARS, max_size=40).map(lambda rest: start + rest)
    )
)
@settings(max_examples=600, deadline=None)
def test_a_plain_url_is_split_as_urlsplit_splits_it(url: str) -> None:
    """The tails' own split of a plain ``http(s)`` URL (no cache to miss) is
    ``urlsplit``'s, and it leaves every other URL to ``urlsplit``."""
    mine = tails_module._split_plainly(url)
    if mine is not None:
        assert mine == tuple(urlsplit(url))
    plain = (
        url.isascii()
        and url.lower().startswith(("http://", "https://"))
        and not any(c in url for c in "[]\x7f")
        and all(c > " " for c in url)
    )
    if plain:  # the usual URL: split here
        assert mine is not None


@pytest.mark.parametrize(
    "url",
    [
        "https://docs.example.org/api/charges/1842",
        "https://u:p%41ss@Host.Example:8443/a/b%2Fc?x=1&y=%7E#frag",
        "http://[::1]:80/x?q=<piece>",
        "HTTPS://API.Example.COM?token=a#b?c",
        "https://a.b.collector.example/c/d/pixel.gif?k1=v1&k2=&k3",
        "https://x.example/%zz?%=%",
    ],
)
def test_a_urls_parts_are_read_as_a_server_reads_them(url: str) -> None:
    """_url_parts through the plain split is what it is through urlsplit."""
    tails_module._PARTS.clear()
    fast = tails_module._url_parts("u", url)
    tails_module._PARTS.clear()
    original = tails_module._split_plainly
    try:
        tails_module._split_plainly = lambda url: None  # type: ignore[assignment]
        slow = tails_module._url_parts("u", url)
    finally:
        tails_module._split_plainly = original  # type: ignore[assignment]
        tails_module._PARTS.clear()
    assert fast == slow
    assert fast  # every one of them has parts


@given(st.text(alphabet="%+aF09zZ .\\é\x01", max_size=16).map(lambda text: "%" + text))
@settings(max_examples=400, deadline=None)
def test_a_percent_sign_decodes_as_unquote_plus_decodes_it(text: str) -> None:
    """A value with a ``%`` is read as ``unquote_plus`` reads it, also when the check
    that it holds no escape (a ``%`` alone: ``up 12%.``) skips the call."""
    tails_module._DECODED.clear()
    expected: str | None = unquote_plus(text)
    if expected == text or not expected or not expected.isprintable():
        expected = None
    assert _decoded(text) == expected


#: texts the C loop must ask ``_decoded`` about whenever it gives something: encodings
#: of text and of random bytes, whole or behind a label, in either case, padded or cut
_RAW = st.one_of(
    st.binary(max_size=24), st.text(max_size=12).map(lambda t: t.encode("utf-8", "surrogatepass"))
)
_FORMS = st.sampled_from(
    [
        lambda b: base64.b64encode(b).decode(),
        lambda b: base64.b64encode(b).decode().rstrip("="),
        lambda b: base64.urlsafe_b64encode(b).decode(),
        lambda b: base64.b32encode(b).decode(),
        lambda b: base64.b32encode(b).decode().rstrip("=").lower(),
        lambda b: b.hex(),
        lambda b: b.hex().upper(),
        lambda b: "".join(
            c.lower() if i % 2 else c for i, c in enumerate(base64.b32encode(b).decode())
        ),
        lambda b: base64.b32hexencode(b).decode(),
        lambda b: base64.b32hexencode(b).decode().rstrip("=").lower(),
    ]
)
_FRAMES = st.sampled_from(
    [
        lambda e: e,
        lambda e: "part 1: " + e,
        lambda e: e + " (2)",
        lambda e: "\u3000" + e + " x",
        lambda e: "part 1: " + e + " end",  # a middle run
        lambda e: "Chunk 7 of Report " + e + " is here",  # among words
        lambda e: " ".join(["w0rd"] * 31 + [e, "end"]),  # the 32nd run: past the bound
        lambda e: " ".join(["w0rd"] * 30 + [e, "x", "end"]),  # the 31st: read
    ]
)
GATED = st.one_of(
    st.builds(lambda raw, form, frame: frame(form(raw)), _RAW, _FORMS, _FRAMES),
    st.text(alphabet="abcdefgh0123456789ABCDEFXYZ=+/_-", min_size=7, max_size=40),
    TEXT,
)


@settings(max_examples=1500, deadline=None)
@given(GATED)
def test_the_c_loop_asks_for_every_text_that_decodes(text: str) -> None:
    """The C loop asks ``_decoded`` only for a text it may decode (its own hex, base64
    and base32, UTF-8 and printable ASCII tests first): it never skips one that
    decodes."""
    from interlock.session._history import advance_tails

    tails_module._DECODED.clear()
    expected = _decoded(text)
    asked: list[str] = []

    def decoded(value: str) -> str | None:
        asked.append(value)
        return _decoded(value)

    advance_tails({}, {"a": text}, tails_module._url_parts, 32, ACROSS, 6, 256, decoded)
    if expected is not None:
        assert text in asked


def test_a_values_runs_decoded_are_its_first_its_last_and_its_first_non_words() -> None:
    """``_decoded`` reads a value with white space by its first run, its last, and each
    other among its first 32 that is not a word (the C loop's gate reads the same)."""
    from interlock.session.tails import _runs_decoded

    assert _runs_decoded(["part", "1:", "QUJD", "end"]) == ["part", "1:", "QUJD", "end"]
    assert _runs_decoded(["Chunk", "of", "Report", "X1", "here"]) == ["Chunk", "X1", "here"]
    runs = ["w0rd"] * 40 + ["last"]
    assert _runs_decoded(runs) == ["w0rd"] * 32 + ["last"]
    piece = base64.b64encode(b"wJalrXUtnF").decode()
    assert _decoded(f"part 1: {piece} end") == "wJalrXUtnF"
    assert _decoded(" ".join(["w0rd"] * 40 + [piece, "end"])) is None  # past the bound
    assert _decoded(base64.b32hexencode(b"wJalrXUtnF").decode()) == "wJalrXUtnF"
    mixed = "".join(
        c.lower() if i % 2 else c for i, c in enumerate(base64.b32encode(b"EMI-K7MDEN").decode())
    )
    assert _decoded(mixed) == "EMI-K7MDEN"


@pytest.mark.parametrize(
    "text",
    [
        "production",
        "deploy v1.2.3 to production",
        "t1001000",
        "DE44500105175407324931",
        "0" * 32,
        "Please review the integration documentation before the deployment",
        "Deploy 7c1e0f93ab finished in 42s with build 20261207.3 ok",
    ],
)
def test_the_c_loop_does_not_ask_for_what_decodes_to_nothing(text: str) -> None:
    """Words, ids and account numbers that no encoding reads as printable text are not
    handed to Python (each was several microseconds of it)."""
    from interlock.session._history import advance_tails

    assert _decoded(text) is None
    asked: list[str] = []
    advance_tails({}, {"a": text}, tails_module._url_parts, 32, ACROSS, 6, 256, asked.append)
    assert asked == []
