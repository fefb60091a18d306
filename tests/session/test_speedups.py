"""The C accelerator (``interlock.session._speedups``) computes exactly what the
pure-Python reference in ``fingerprints`` computes: each C function against its
``_py_*`` reference on random input, and ``of_data`` / ``probe`` / ``probe_seams`` end
to end on both paths. Where the extension is not built these are skipped (the Python
path is a legitimate install); where it is built, it is the path taken."""

from __future__ import annotations

import base64
import os
import string
import subprocess
import sys
from collections.abc import Callable
from typing import Any, TypeVar
from urllib.parse import quote, quote_plus

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
PRIME = (1 << 61) - 1
B64 = string.ascii_letters + string.digits + "+/"
B64URL = string.ascii_letters + string.digits + "-_"
HEX = "0123456789abcdefABCDEF"
SECRET = "sk_live_4f9Qz2LmX8pRt6Vw1YbN3cKd"
NON_ASCII = "Grüße, naïve café — 東京の秘密 ＡＰＩ鍵 ß İ ﬁ 🙂 "


def by_definition(data: bytes, step: int) -> list[int]:
    return [
        int.from_bytes(data[i : i + 16], "big") % PRIME
        for i in range(0, len(data) - 15, step)
        if 0 not in data[i : i + 16]
    ]


# -- grams ---------------------------------------------------------------------------

#: bytes with NULs (the cut mark), ASCII and 0x80-0xFF, and long runs of one byte
grams_data = st.one_of(
    st.binary(max_size=400),
    st.lists(st.sampled_from([0, 0x41, 0x61, 0x7F, 0x80, 0xC3, 0xFF]), max_size=400).map(bytes),
    st.text(string.ascii_lowercase + string.digits + "_@.\x00", max_size=600).map(str.encode),
)


@settings(max_examples=400, deadline=None)
@given(data=grams_data, step=st.sampled_from([1, 2, 4, 8, 16]))
@example(data=b"", step=1)
@example(data=b"a" * 15, step=1)
@example(data=b"\xff" * 16, step=1)
@example(data=b"a" * 16 + b"\x00" + b"b" * 16, step=1)
def test_grams_are_the_reference_grams(data: bytes, step: int) -> None:
    c = _speedups.grams(data, step)
    assert sorted(c) == sorted(fingerprints._py_grams(data, step))
    assert c == by_definition(data, step)


@settings(max_examples=100, deadline=None)
@given(data=grams_data, step=st.integers(1, 50))
def test_grams_take_every_step_th_window(data: bytes, step: int) -> None:
    assert _speedups.grams(data, step) == by_definition(data, step)


def test_grams_of_a_large_input_and_of_any_buffer() -> None:
    data = os.urandom(fingerprints.MAX_SCAN + 4099).replace(b"\x00", b"\x01")
    data = data[:5000] + b"\x00" + data[5000:]
    assert _speedups.grams(data, 1) == by_definition(data, 1)
    assert _speedups.grams(bytearray(data), 4) == by_definition(data, 4)
    assert _speedups.grams(memoryview(data)[3:900], 1) == by_definition(data[3:900], 1)
    assert _speedups.grams(data, sys.maxsize) == [int.from_bytes(data[:16], "big") % PRIME]


def test_grams_refuse_what_is_not_bytes_or_a_step() -> None:
    with pytest.raises(ValueError):
        _speedups.grams(b"a" * 32, 0)
    with pytest.raises(ValueError):
        _speedups.grams(b"a" * 32, -4)
    with pytest.raises(TypeError):
        _speedups.grams("a" * 32, 1)  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        _speedups.grams(b"a" * 32)  # type: ignore[call-arg]


# -- base64 and hex runs --------------------------------------------------------------

text_bytes = st.one_of(
    st.binary(max_size=120),
    st.text(max_size=60).map(str.encode),
    st.text(string.printable, max_size=120).map(str.encode),
)


def b64_runs() -> st.SearchStrategy[str]:
    """Runs as ``_B64_RUN`` finds them: encodings of text or bytes cut at any offset,
    URL-safe or not, padded or not; and random runs of either alphabet."""
    encoded = st.tuples(text_bytes, st.booleans(), st.integers(0, 5), st.booleans()).map(
        lambda t: (
            (base64.urlsafe_b64encode if t[1] else base64.b64encode)(t[0])
            .decode()[t[2] :]
            .rstrip("=" if t[3] else "")
        )
    )
    random_run = st.tuples(
        st.text(st.sampled_from(B64), max_size=90)
        | st.text(st.sampled_from(B64URL + "+/"), max_size=90),
        st.integers(0, 2),
    ).map(lambda t: t[0] + "=" * t[1])
    return encoded | random_run


@settings(max_examples=500, deadline=None)
@given(run=b64_runs())
@example(run="")
@example(run="====")
@example(run="QUJD")
@example(run=base64.b64encode(SECRET.encode()).decode())
@example(run=base64.b64encode(b"\xef\xbf\xbd" * 9).decode())  # a real U+FFFD counts too
def test_b64_forms_are_the_reference_forms(run: str) -> None:
    assert _speedups.b64_forms(run) == list(fingerprints._py_b64_forms(run))


def hex_runs() -> st.SearchStrategy[str]:
    encoded = st.tuples(text_bytes, st.integers(0, 3), st.booleans()).map(
        lambda t: (t[0].hex().upper() if t[2] else t[0].hex())[t[1] :]
    )
    return encoded | st.text(st.sampled_from(HEX), max_size=90)


@settings(max_examples=500, deadline=None)
@given(run=hex_runs())
@example(run="")
@example(run="4")
@example(run=SECRET.encode().hex())
def test_hex_forms_are_the_reference_forms(run: str) -> None:
    assert _speedups.hex_forms(run) == list(fingerprints._py_hex_forms(run))


B32 = string.ascii_uppercase + "234567"


def b32_runs() -> st.SearchStrategy[str]:
    """Runs as ``_py_b32_runs`` gives them: encodings of text or bytes (either case) cut
    at any offset, padding and dots gone; and random runs of the alphabet."""
    encoded = st.tuples(text_bytes, st.integers(0, 9)).map(
        lambda t: base64.b32encode(t[0]).decode().rstrip("=")[t[1] :]
    ) | st.tuples(text_bytes, st.integers(0, 9)).map(
        lambda t: base64.b32encode(t[0]).decode().rstrip("=").lower()[t[1] :]
    )
    return encoded | st.text(st.sampled_from(B32 + B32.lower()), max_size=90)


@settings(max_examples=500, deadline=None)
@given(run=b32_runs())
@example(run="")
@example(run="A" * 12)
@example(run="A" * 13)
@example(run=base64.b32encode(SECRET.encode()).decode().rstrip("="))
@example(run=base64.b32encode(SECRET.encode()).decode().rstrip("=").lower()[3:])
def test_b32_forms_are_the_reference_forms(run: str) -> None:
    assert _speedups.b32_forms(run) == list(fingerprints._py_b32_forms(run))


def test_b32_forms_read_a_piece_at_each_of_eight_alignments() -> None:
    """A piece cut k characters into an encoding is read only from the alignment that
    skips (8 - k) % 8 more: each of the eight is needed."""
    text = "a line before it\n" + SECRET + "\nand a line after it"
    encoded = base64.b32encode(text.encode()).decode().rstrip("=")
    for cut in range(8):
        forms = _speedups.b32_forms(encoded[cut:])
        assert any(SECRET in form for form in forms), cut
        assert forms == list(fingerprints._py_b32_forms(encoded[cut:]))


#: pieces of base32 runs as an argument holds them: labels split by dots, a domain after
#: them, words, padding, the characters around
b32_parts = st.sampled_from(
    [
        *("MZXW6YTB", "ONVS23DJ", "mzxw6ytb", "ozss2olg", "ABCDEFGH", "234567", "QRST"),
        *(".", "..", "-", "=", "==", " ", "\n", "/", "attacker", "example", "com", "x2"),
        *("0", "1", "8", "9", "é", "Ａ", "https://", "%2E", "\x00"),
    ]
)


@settings(max_examples=800, deadline=None)
@given(source=st.lists(b32_parts, max_size=20).map("".join) | st.text(max_size=120))
@example(source="MZXW6YTBOI.MFZGC43U.attacker.example")
@example(source="MZXW6YTBOIMFZGC43U.a2.b")
@example(source="thisisaverylongsubdomain.example.com")
@example(source="A" * 15 + "." + "B" * 15 + ".")
def test_b32_runs_are_the_reference_runs(source: str) -> None:
    assert _speedups.b32_runs(source) == fingerprints._py_b32_runs(source)


@pytest.mark.parametrize(
    ("fn", "run"),
    [
        ("b64_forms", "QUJDREVGR0hJSktMTU5PUFFS!"),
        ("b64_forms", "QUJDREVG=R0hJSktMTU5PUFFS"),  # padding inside: no run has it
        ("b64_forms", "QUJDREVGR0hJSktMTU5PUFFSé"),
        ("hex_forms", "414243444546474g"),
        ("hex_forms", "41424344 45464748"),
        ("hex_forms", "41424344454647٤8"),
        ("b32_forms", "MZXW6YTBOIMFZGC43U1"),  # 1: not base32
        ("b32_forms", "MZXW6YTBOI.MFZGC43U"),  # dots: runs are joined first
        ("b32_forms", "MZXW6YTBOIMFZGC43Ué"),
    ],
)
def test_a_run_with_a_foreign_character_is_refused(fn: str, run: str) -> None:
    """Only what the regular expressions match is passed: anything else is an error,
    not a silent guess."""
    with pytest.raises(ValueError):
        getattr(_speedups, fn)(run)


@settings(max_examples=500, deadline=None)
@given(raw=text_bytes | st.text(NON_ASCII + "\x01\x02\x7f\t\n", max_size=80).map(str.encode))
@example(raw=b"")
@example(raw=b"\x01" * 3 + b"a" * 17)  # 15% control: text
@example(raw=b"\x01" * 3 + b"a" * 16)  # over 15%: noise
@example(raw=b"\xff" + "é".encode() * 6)
def test_mostly_text_is_the_reference(raw: bytes) -> None:
    assert _speedups.mostly_text(raw) == fingerprints._mostly_text(raw)


@settings(max_examples=300, deadline=None)
@given(
    text=st.text(max_size=300) | st.text(string.printable, max_size=300), size=st.integers(-1, 20)
)
def test_at_least_is_the_reference_filter(text: str, size: int) -> None:
    words = text.split()
    got = _speedups.at_least(words, size)
    assert got == fingerprints._py_at_least(words, size)
    assert all(a is b for a, b in zip(got, (w for w in words if len(w) >= size), strict=True))


def test_at_least_refuses_what_is_not_a_list_of_str() -> None:
    with pytest.raises(TypeError):
        _speedups.at_least(("a", "b"), 1)  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        _speedups.at_least(["a", b"bb"], 1)  # type: ignore[list-item]


@settings(max_examples=300, deadline=None)
@given(
    values=st.sets(st.integers(0, (1 << 64) - 1)) | st.sets(st.integers(0, 300)),
    count=st.integers(0, 40),
)
@example(values={0, 1 << 63, (1 << 64) - 1, 255, 256, 65535, 65536}, count=5)
def test_smallest_is_sorted_then_cut(values: set[int], count: int) -> None:
    assert _speedups.smallest(values, count) == sorted(values)[:count]
    assert _speedups.smallest(list(values), count) == sorted(values)[:count]


def test_smallest_leaves_what_is_not_a_64_bit_fingerprint_to_python() -> None:
    assert _speedups.smallest({-1, 5}, 1) is None
    assert _speedups.smallest({1 << 64, 5}, 1) is None
    assert _speedups.smallest([1.5, 2], 1) is None
    assert fingerprints._c_smallest({-1, 5, 1 << 70}, 2) == [-1, 5]
    big = set(range(100_000, 0, -7))
    assert _speedups.smallest(big, 4095) == sorted(big)[:4095]
    with pytest.raises(ValueError):
        _speedups.smallest({1, 2}, -1)
    with pytest.raises(TypeError):
        _speedups.smallest(5, 1)  # type: ignore[arg-type]


@settings(max_examples=500, deadline=None)
@given(
    text=st.text(st.sampled_from([*B64URL, "+", "/", "=", " ", "\n", "é", "Ａ", "%", "\x00"]))
    | st.lists(
        st.sampled_from(["QUJDREVGR0hJSktMTU5P", "==", "=", "0123456789abcdef", " ", "é"])
    ).map("".join)
    | st.text(max_size=100),
    hex_=st.booleans(),
)
@example(text="a" * 15 + "=" + "b" * 16 + "===", hex_=False)
@example(text="0123456789abcdeF0" + "é" + "0" * 15, hex_=True)
def test_runs_are_what_the_regular_expressions_find(text: str, hex_: bool) -> None:
    assert _speedups.runs(text, hex_) == fingerprints._py_runs(text, hex_)


# -- whole tokens ----------------------------------------------------------------------

#: pieces of ASCII words: letters of each case, digits, the characters tokens are cut at
#: (quoting, ``= & ? # : /``), ``@ . - _ +``, and a NUL (the cut mark)
word_parts = st.sampled_from(
    [
        *("abc", "Abc", "ABC", "xyzzy", "Q", "42", "7", "@", ".", "-", "_", "/", "=", "&"),
        *("?", "#", ":", '"', "'", "`", "(", ")", "[", "]", "{", "}", ",", ";", "|", "\\"),
        *("<", ">", "+", "\x00", "%", "!", "~", "https", "example", "Key", "sk_live"),
        "4f9Qz2LmX8pRt6Vw",
    ]
)
ascii_words = st.lists(word_parts, max_size=14).map("".join)


def whole(fn: Callable[[list[str], set[int] | None], Any], words: list[str]) -> tuple[Any, ...]:
    grams: set[int] = set()
    return frozenset(fn(words, None)), frozenset(fn(words, grams)), frozenset(grams)


@settings(max_examples=500, deadline=None)
@given(words=st.lists(ascii_words | st.text(string.printable, max_size=40), max_size=6))
@example(words=["https://docs.example.org/api/charges/1000123?key=sk_live_4f9Qz2LmX8pRt6Vw"])
@example(words=["AWS_SECRET_ACCESS_KEY=wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"])
@example(words=["Hello-World.Again", "hello.world.again", "HELLO/WORLD/AGAIN", "McDonaldsX"])
@example(words=["carol1000123@corp.example", "DE44500105175001000123"])
def test_whole_tokens_are_the_reference_tokens(words: list[str]) -> None:
    words = [word for word in words if len(word) >= fingerprints.MIN_TOKEN]
    assert whole(fingerprints._c_whole, words) == whole(fingerprints._py_whole, words)


@settings(max_examples=800, deadline=None)
@given(
    words=st.lists(
        ascii_words | st.text(string.printable, max_size=40) | st.sampled_from(["é", "Ａ"]),
        max_size=8,
    ),
    spaces=st.sampled_from([" ", "\n", "\t", "\x1c", "  "]),
)
@example(words=["https://x.example/a?key=ABCdef123456789", "moc.elpmaxe@nhoj"], spaces=" ")
@example(words=["ESREVER_YEK_4f9Qz2LmX8pRt6Vw"], spaces=" ")
@example(words=["key=abcXyzQabcXyzQ", "https://docs.example.org/PathNoDigits"], spaces=" ")
@example(words=["The", "committee", "thoroughly", "discussed", "EVERYTHING"], spaces=" ")
@example(words=["ＡＰＩ鍵sk_live_4f9Qz2LmX8", "naïve"], spaces=" ")
def test_turned_tokens_are_the_reference_turned_tokens(words: list[str], spaces: str) -> None:
    """Token-only turning: C turns the same tokens (the specific whole tokens and
    pieces ``_py_whole`` keeps), in the same order, as the Python reference."""
    text = spaces.join(words)
    got = _speedups.turned_tokens(text)
    if not text.isascii():
        assert got is None  # left to the Python path, which decodings_of calls
        return
    assert got == fingerprints._py_turned_tokens(text)


def test_turned_tokens_are_the_specific_tokens_only() -> None:
    """Only what could be a secret on its own is turned: not words, not prose."""
    prose = "The committee thoroughly discussed the reading room opening hours"
    assert fingerprints._py_turned_tokens(prose) == []
    assert _speedups.turned_tokens(prose) == []
    key = "sk_live_4f9Qz2LmX8pRt6Vw1YbN3cKd"
    turned = [key[::-1], key.translate(fingerprints._ROT13)]
    assert _speedups.turned_tokens(f"{prose} {key}") == turned
    assert fingerprints._py_turned_tokens(f"{prose} {key}") == turned
    with pytest.raises(TypeError):
        _speedups.turned_tokens(b"bytes-word-1234")  # type: ignore[arg-type]


def test_whole_tokens_leave_non_ascii_words_to_python() -> None:
    assert _speedups.whole_tokens(["straße_key_1234567", "plainascii99"], False) is None
    words = ["ＡＰＩ鍵sk_live_4f9Qz2LmX8", "token_value_1234567890"]
    assert whole(fingerprints._c_whole, words) == whole(fingerprints._py_whole, words)
    with pytest.raises(TypeError):
        _speedups.whole_tokens(("tuple", "of", "words"), False)  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        _speedups.whole_tokens([b"bytes-word-1234"], False)  # type: ignore[list-item]


# -- end to end ------------------------------------------------------------------------


def encoded_secrets() -> st.SearchStrategy[str]:
    encoders: list[Callable[[str], str]] = [
        lambda s: base64.b64encode(s.encode()).decode(),
        lambda s: base64.urlsafe_b64encode(s.encode()).decode().rstrip("="),
        lambda s: s.encode().hex(),
        lambda s: quote(s, safe=""),
        lambda s: quote_plus(base64.b64encode(s.encode()).decode()),
        lambda s: "\n".join(s[i : i + 20] for i in range(0, len(s), 20)),
    ]
    secret = st.text(string.ascii_letters + string.digits, min_size=8, max_size=60)
    return st.tuples(secret, st.lists(st.sampled_from(encoders), max_size=3)).map(
        lambda t: _apply(t[0], t[1])
    )


def _apply(value: str, encoders: list[Callable[[str], str]]) -> str:
    for encode in encoders:
        value = encode(value)
    return value


def texts() -> st.SearchStrategy[str]:
    words = st.sampled_from(["the", "KEY=", "value:", "AWS_SECRET_ACCESS_KEY", "getApiKey", "\n"])
    return st.one_of(
        st.text(string.printable, max_size=300),
        st.text(string.printable + "\x00", max_size=300),
        st.text(max_size=200),
        st.text(NON_ASCII + string.ascii_letters + " ", max_size=300),
        st.lists(words | encoded_secrets(), max_size=12).map(" ".join),
        st.binary(max_size=300).map(lambda b: b.decode("utf-8", "replace")),
    )


@settings(max_examples=300, deadline=None)
@given(value=texts() | st.binary(max_size=300) | st.dictionaries(st.text(max_size=5), texts()))
@example(value=f"token {SECRET} and {base64.b64encode(SECRET.encode()).decode()}")
@example(value="x" * 129)
@example(value=b"\x00" * 40 + SECRET.encode())
def test_of_data_and_probe_are_the_same_on_both_paths(value: object) -> None:
    python, c = both(fingerprints.of_data, value)
    assert python == c
    python, c = both(fingerprints.probe, value)
    assert python == c


@settings(max_examples=200, deadline=None)
@given(parts=st.lists(texts(), max_size=5))
def test_probe_seams_is_the_same_on_both_paths(parts: list[str]) -> None:
    python, c = both(fingerprints.probe_seams, parts)
    assert python == c


def test_results_past_max_scan_are_the_same_on_both_paths() -> None:
    line = f"row 17 of the ledger, key={SECRET} paid 4400.10 EUR to acct 99-1337\n"
    big = line * (fingerprints.MAX_SCAN // len(line) + 50)
    blob = base64.b64encode(os.urandom(fingerprints.MAX_SCAN)).decode()
    for value in (big, blob, [big[:1000], blob]):
        python, c = both(fingerprints.of_data, value)
        assert python == c
        assert fingerprints.FORMAT_MARK in c
    python, c = both(fingerprints.probe, big[:5000])
    assert python == c


def test_a_secret_is_found_across_the_paths() -> None:
    """Fingerprints stored by one path (an agent on an install without a compiler) match
    the probes of the other."""

    def carry(secret: str) -> str:
        return quote(base64.b64encode(f"see {secret}".encode()).decode(), safe="")

    carried = carry(SECRET)
    with path(False):
        stored = fingerprints.of_data(f"config:\nKEY={SECRET}\n")
        probed_python = fingerprints.probe(carried)
    with path(True):
        probed_c = fingerprints.probe(carried)
        unrelated = fingerprints.probe(carry("pk_test_7HbW0aTe5JsUo8Gi2XnC3aLd"))
    assert fingerprints.carries(probed_c, stored)
    assert fingerprints.carries(probed_python, stored)
    assert probed_c == probed_python
    assert not fingerprints.carries(unrelated, stored)


# -- which path is taken ----------------------------------------------------------------


def test_the_c_path_is_taken_when_the_extension_imports(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[str] = []

    class Spy:
        def __getattr__(self, name: str) -> Any:
            def call(*args: Any) -> Any:
                calls.append(name)
                return getattr(_speedups, name)(*args)

            return call

    monkeypatch.setattr(fingerprints, "_speedups", Spy())
    with path(True):
        fingerprints.of_data(f"KEY={SECRET}\n{base64.b64encode(SECRET.encode()).decode()}")
        fingerprints.probe(SECRET.encode().hex())
    assert {"grams", "whole_tokens", "at_least", "decodings", "probe"} <= set(calls)
    calls.clear()
    with path(True):
        capped = fingerprints.of_data(" ".join(f"w{n:05d}x" * 3 for n in range(3000)))
    assert "smallest" in calls
    assert len(capped) == fingerprints.MAX_FINGERPRINTS
    calls.clear()
    with path(False):
        fingerprints.of_data(f"KEY={SECRET}\n{base64.b64encode(SECRET.encode()).decode()}")
    assert calls == []


def _accelerated_in_a_new_process(**env: str) -> str:
    environ = {k: v for k, v in os.environ.items() if k != "INTERLOCK_NO_SPEEDUPS"}
    code = "from interlock.session import fingerprints as f; print(f.ACCELERATED)"
    done = subprocess.run(
        [sys.executable, "-c", code], env=environ | env, capture_output=True, text=True, check=True
    )
    return done.stdout.strip()


def test_the_module_takes_the_c_path_by_default_and_the_env_switch_turns_it_off() -> None:
    assert _accelerated_in_a_new_process() == "True"
    assert _accelerated_in_a_new_process(INTERLOCK_NO_SPEEDUPS="0") == "True"
    assert _accelerated_in_a_new_process(INTERLOCK_NO_SPEEDUPS="1") == "False"
