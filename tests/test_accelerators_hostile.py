"""The C accelerators given what Interlock's own Python never gives them.

Each case is an input an attacker, a corrupted database row or a careless caller could
put in front of C code in the decision path — a set read into itself, an iterable that
empties or grows the very set being read (the classic use-after-free of a C loop that
keeps a pointer across a call back into Python), ragged or unsorted stored bytes,
fingerprints out of range, cyclic and very deep arguments, lone surrogates, str
subclasses whose methods raise. Each must end as its Python reference ends (the same
contents, the same answer, or an exception of the same kind) and never crash the
process. ``make test-sanitized`` runs this file, and the other tests of the C paths,
with the extensions built under AddressSanitizer and UndefinedBehaviorSanitizer, where
a read past a buffer or of a freed object aborts the run instead of passing silently.
"""

from __future__ import annotations

import base64
import pickle
from collections.abc import Callable, Iterator
from decimal import Decimal
from typing import Any

import pytest
from tests.core.redaction_paths import on_path
from tests.session.speedups_paths import both

from interlock.core.redaction import Redactor
from interlock.session import fingerprints

try:
    from interlock.session import _history
except ImportError:  # pragma: no cover - only where no compiler was at install time
    _history = None  # type: ignore[assignment]
try:
    from interlock.core import _redaction
except ImportError:  # pragma: no cover - only where no compiler was at install time
    _redaction = None  # type: ignore[assignment]

needs_history = pytest.mark.skipif(_history is None, reason="the C accelerator is not built")
U64 = 1 << 64


def _u64(*values: int) -> bytes:
    return b"".join(v.to_bytes(8, "little") for v in values)


# -- PrintSet: an index's set, against a plain set doing the same -------------------

#: (name, the operation on a fresh target holding 0..9): each runs on a PrintSet and on
#: a set; the target's contents and the operation's answer (or its exception's type)
#: must agree. The operations that call back into Python change the target while it is
#: being read or written.
Operation = Callable[[Any], object]


def _clearing_and_refilling(target: Any) -> Iterator[int]:
    for i in range(2_000):
        if i == 5:  # the table read so far is freed, a bigger one made
            target.clear()
            target.update(range(100_000, 120_000))
        yield i


def _growing(target: Any) -> Iterator[int]:
    for i in range(1_000):
        if i == 3:  # forces the table being tested against to be reallocated
            target.update(range(1_000, 60_000))
        yield i + 10**6


def _raising_midway(_target: Any) -> Iterator[int]:
    yield 11
    yield 12
    raise RuntimeError("the source failed")


def _emptying_then_testing(target: Any) -> Iterator[int]:
    target.clear()
    yield 3


PRINT_SET_CASES: list[tuple[str, Operation]] = [
    ("isdisjoint against an iterable that grows the target", lambda t: t.isdisjoint(_growing(t))),
    (
        "isdisjoint against an iterable that empties the target",
        lambda t: t.isdisjoint(_emptying_then_testing(t)),
    ),
    ("update with itself", lambda t: t.update(t)),
    ("update with itself twice", lambda t: t.update(t, t)),
    ("|= itself", lambda t: t.__ior__(t)),
    ("isdisjoint with itself", lambda t: t.isdisjoint(t)),
    ("subset of itself", lambda t: (t <= t, t < t, t >= t, t > t)),
    ("fingerprints out of 64 bits", lambda t: t.update([-1, U64, U64 + 5, 2**200, -(2**70)])),
    ("membership of out-of-range ints", lambda t: (U64 in t, -1 in t, 2**200 in t)),
    ("bools are the ints 0 and 1", lambda t: (t.update([True, False]), True in t, len(t))),
    ("an empty update", lambda t: t.update()),
    ("update from an empty generator", lambda t: t.update(x for x in ())),
    ("a huge update", lambda t: t.update(range(0, 3 * 10**5, 3))),
]


@needs_history
@pytest.mark.parametrize(
    ("name", "operation"), PRINT_SET_CASES, ids=[c[0] for c in PRINT_SET_CASES]
)
def test_print_set_ends_as_a_set_ends(name: str, operation: Operation) -> None:
    ends = []
    for target in (set(range(10)), _history.PrintSet(range(10))):
        try:
            answer: object = operation(target)
        except Exception as exc:  # the same kind of failure, and the same contents after
            answer = type(exc)
        ends.append((answer, sorted(target), len(target), [v in target for v in sorted(target)]))
    assert ends[1] == ends[0]


@needs_history
def test_print_set_update_takes_all_of_a_source_or_none_of_it() -> None:
    """Where a set adds as it reads, a ``PrintSet`` reads a source whole first, then adds
    it (``_history.c``: all of it or none of it): a source that fails adds nothing, and
    one that changes the set while it is read has all it gave added afterwards."""
    prints = _history.PrintSet(range(10))
    with pytest.raises(RuntimeError):
        prints.update(_raising_midway(prints))
    assert sorted(prints) == list(range(10))
    prints.update(_clearing_and_refilling(prints))
    assert sorted(prints) == [*range(2_000), *range(100_000, 120_000)]
    prints = _history.PrintSet(range(10))
    with pytest.raises(TypeError):
        prints.update([30], [31, 1.5])  # type: ignore[list-item]
    assert sorted(prints) == [*range(10), 30]  # each source whole or not at all


@needs_history
@pytest.mark.parametrize("value", [1.5, "7", None, b"\x07", object(), 3j])
def test_print_set_refuses_what_is_not_an_int_and_keeps_its_contents(value: object) -> None:
    prints = _history.PrintSet(range(10))
    with pytest.raises(TypeError):
        prints.add(value)  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        prints.update([20, value])  # type: ignore[list-item]
    assert sorted(prints) == list(range(10))
    assert value not in prints


@needs_history
def test_only_ints_are_members_of_the_packed_sets() -> None:
    """A fingerprint is an int: a number of another type equal to one is not found
    (a frozenset would find ``1.0``), as ``StepPrints`` says."""
    for prints in (_history.PrintSet([1, 2**64 - 1]), _history.frozen(frozenset([1, 2**64 - 1]))):
        assert 1 in prints
        assert True in prints  # a bool is an int
        assert 1.0 not in prints
        assert "1" not in prints
        assert float(2**64 - 1) not in prints


# -- packed and stored bytes ----------------------------------------------------------

RAW_CASES: list[tuple[str, bytes]] = [
    ("empty", b""),
    ("one", _u64(7)),
    ("unsorted", _u64(9, 1, 5)),
    ("duplicated", _u64(5, 5, 5, 1)),
    ("the extremes", _u64(0, U64 - 1)),
    ("many", _u64(*range(10_000, 0, -3))),
]


@needs_history
@pytest.mark.parametrize(("name", "raw"), RAW_CASES, ids=[c[0] for c in RAW_CASES])
def test_packed_bytes_read_as_the_set_of_their_values(name: str, raw: bytes) -> None:
    values = {int.from_bytes(raw[i : i + 8], "little") for i in range(0, len(raw), 8)}
    assert set(_history.packed(raw)) == values
    stored = _history.frozen_from_bytes(raw)
    assert stored == frozenset(values)
    assert hash(stored) == hash(frozenset(values))
    assert list(stored) == sorted(values)
    assert pickle.loads(pickle.dumps(stored)) == frozenset(values)


@needs_history
@pytest.mark.parametrize("raw", [b"\x01", b"1234567", _u64(1) + b"\x00", memoryview(b"\x00" * 8)])
def test_ragged_or_foreign_bytes_are_refused(raw: Any) -> None:
    for read in (_history.packed, _history.frozen_from_bytes):
        with pytest.raises((TypeError, ValueError)):
            read(raw)


@needs_history
def test_no_python_runs_while_c_reads_a_set_operand() -> None:
    """The window a use-after-free needs is Python code run in the middle of a C loop:
    a set operand (a subclass too) is read from its table as CPython's own set
    operations read it — its ``__iter__`` is never called — and a value that is not an
    int is refused before anything is read (no ``__index__`` asked). Where C must call
    back, into an iterable, the cases above change the set under it."""
    stored = _history.frozen(frozenset(range(100)))
    prints = _history.PrintSet(range(50))
    called: list[str] = []

    class Meddling(set[int]):
        def __iter__(self) -> Iterator[int]:
            called.append("__iter__")
            prints.clear()
            return super().__iter__()

    class Index:
        def __index__(self) -> int:
            called.append("__index__")
            prints.clear()
            return 7

    other = Meddling(range(40, 160))
    # the reference's operand is a plain set: CPython's own frozenset.isdisjoint
    # iterates a set subclass, so it would meddle
    plain = set(range(40, 160))
    reference = frozenset(range(100))
    assert stored & other == reference & plain
    assert stored | other == reference | plain
    assert stored - other == reference - plain
    assert other - stored == plain - reference
    assert stored.isdisjoint(other) is reference.isdisjoint(plain) is False
    assert (stored <= other, stored >= other) == (reference <= plain, reference >= plain)
    prints.update(other)
    assert prints.isdisjoint(other) is False
    for refused in (lambda: prints.add(Index()), lambda: prints.update([Index()])):  # type: ignore[arg-type]
        with pytest.raises(TypeError):
            refused()
    assert Index() not in prints
    assert Index() not in stored
    assert called == []
    assert sorted(prints) == sorted(set(range(50)) | set(range(40, 160)))


# -- an argument's probe ---------------------------------------------------------------


def _cycle() -> list[Any]:
    loop: list[Any] = ["sk_live_51HkQmXyZ0123456789abcdef"]
    loop.append(loop)
    return loop


def _cyclic_dict() -> dict[str, Any]:
    loop: dict[str, Any] = {"token": "ghp_16C7e42F292c6912E7710c838347Ae178B4a"}
    loop["self"] = loop
    return loop


def _deep(depth: int) -> Any:
    value: Any = "AKIAIOSFODNN7EXAMPLE"
    for _ in range(depth):
        value = [value]
    return value


class Raising(str):
    def lower(self) -> str:  # type: ignore[override]
        raise RuntimeError("no")

    def __str__(self) -> str:
        raise RuntimeError("no")


PROBE_CASES: list[tuple[str, Callable[[], object]]] = [
    ("a list that holds itself", _cycle),
    ("a dict that holds itself", _cyclic_dict),
    ("a list nested 100,000 deep", lambda: _deep(100_000)),
    ("a list nested 50 deep", lambda: _deep(50)),
    (
        "lone surrogates inside a secret",
        lambda: "wJalrXUtnFEMI\ud800K7MDENG\udfffbPxRfiCYEXAMPLEKEY",
    ),
    ("only surrogates", lambda: "\ud800\udc00\udbff" * 50),
    ("a str subclass whose methods raise", lambda: Raising("token sk_live_51HkQmXyZ0123456789")),
    (
        "a key that is a str subclass whose methods raise",
        lambda: {Raising("Authorization-Header-Value"): "x"},
    ),
    (
        "keys that are not text",
        lambda: {1: "abcdefghijklmnop", (2, 3): b"bytes value here!", None: 4},
    ),
    ("bytes that are not UTF-8", lambda: b"\xff\xfe" + b"AKIAIOSFODNN7EXAMPLE" + b"\x80" * 30),
    (
        "a bytearray and a memoryview",
        lambda: [bytearray(b"AKIAIOSFODNN7EXAMPLE"), memoryview(b"0123456789abcdef")],
    ),
    ("numbers of any size", lambda: [2**200, -(2**70), 1e308, float("nan"), True]),
    ("a 2 MB string", lambda: "QUJD" * 500_000),
    ("NUL bytes and controls", lambda: "\x00\x01secret\x00value\x1b[31m" * 20),
]


@pytest.mark.parametrize(("name", "make"), PROBE_CASES, ids=[c[0] for c in PROBE_CASES])
def test_an_argument_probe_and_a_result_fingerprints_end_as_the_reference_ends(
    name: str, make: Callable[[], object]
) -> None:
    for fingerprint in (fingerprints.probe, fingerprints.of_data):

        def ended(value: object) -> object:
            try:
                return fingerprint(value)  # noqa: B023 - called at once, in this iteration
            except Exception as exc:
                return type(exc)

        python, c = both(ended, make())
        assert c == python, fingerprint.__name__


class _EveryGram:
    """The grams a session kept: all of them (every run of a call is a piece)."""

    def __contains__(self, value: object) -> bool:
        return True


#: what the chains of pieces walk beyond an argument probe's cases (sets, keys at
#: every level, numbers at the edges, many values)
PIECE_CASES: list[tuple[str, Callable[[], object]]] = [
    *PROBE_CASES,
    (
        "a set and a frozenset of pieces",
        lambda: {"a": {"wJalrXUtnF", 12345}, "b": frozenset({"EMIK7MDEN"})},
    ),
    ("a dict of 100,000 keys", lambda: {f"key{i:06d}": i for i in range(100_000)}),
    ("a list of 100,000 values", lambda: [f"v{i:07d}" for i in range(100_000)]),
    ("ints at 64 bits", lambda: [2**63 - 1, -(2**63), 2**63, -(2**63) - 1, 9999, -10000]),
    ("floats at the edges", lambda: [1e38, -1e38, 9.99e37, 10000.0, -9999.9, float("inf")]),
    (
        "an int subclass and a float subclass",
        lambda: [type("I", (int,), {})(123456), type("F", (float,), {})(1e6)],
    ),
    ("a dict subclass", lambda: {"a": type("D", (dict,), {})(k="wJalrXUtnFEMI")}),
    ("a str subclass key inside", lambda: {"a": {Raising("wJalrXUtnFEMI"): 1}}),
    # the parts between what is not a letter or a digit, and floats written as text
    ("a 2 MB run of five-letter parts cut by tildes", lambda: "~".join(["wJalr"] * 350_000)),
    ("cut characters only", lambda: ["~!*$^" * 1_000, "-" * 70_000, "~a~" * 20]),
    (
        "float texts at the edges",
        lambda: ["1.0e5", "-9.99999e-999", "+1.2E+", "1.e5", ".5e5", "1.5e", "9" * 300 + ".1e1"],
    ),
    ("a float text of 100,000 digits", lambda: "1." + "7" * 100_000 + "e-5"),
    (
        "Decimals at the edges",
        lambda: [
            Decimal("NaN"),
            Decimal("-Infinity"),
            Decimal("1E-999999"),
            Decimal("8.937040044E-5"),
            Decimal("0." + "0" * 5_000 + "1"),
            Decimal("7" * 100_000),
        ],
    ),
]


@pytest.mark.parametrize(("name", "make"), PIECE_CASES, ids=[c[0] for c in PIECE_CASES])
def test_a_calls_pieces_end_as_the_reference_ends(name: str, make: Callable[[], object]) -> None:
    """The chains of pieces' scan of a call (``_speedups.piece_scan``, or the Python
    path it leaves a value to) against the reference, every gram kept."""
    from interlock.session import pieces

    def ended(value: object) -> object:
        try:
            return pieces._scan(value, _EveryGram(), None)  # type: ignore[arg-type]
        except Exception as exc:
            return type(exc)

    python, c = both(ended, make())
    assert c == python


_B64_KEY = base64.b64encode(b"aws_secret_access_key = wJalrXUtnFEMI/K7MDENG/bPxRfiCY").decode()
_B64_KEYS = base64.b64encode(b"key=wJalrXUtnFEMI/K7MDENG/bPxRfiCY00007 " * 3750).decode()
_B64_ACCENTED = base64.b64encode("Grüße aus München, café crème".encode()).decode()
_HEX_KEY = b"wJalrXUtnFEMI/K7MDENG".hex()


def _cut(text: str, at: int, kind: type[str] = str) -> tuple[str, str]:
    return kind(text[:at]), kind(text[at:])


#: two values a seam joins (tail, head): what probe_across reads in C
ACROSS_CASES: list[tuple[str, Callable[[], tuple[str, str]]]] = [
    ("empty either side", lambda: ("", "wJalrXUtnFEMI")),
    ("a 2 MB tail and a 2 MB head", lambda: ("QUJD" * 500_000, "RUZH" * 500_000)),
    ("runs of separators only", lambda: ("\x00" * 40, "|(){}" * 10)),
    ("a run across 2 MB", lambda: ("x" * 2_000_000, "y" * 2_000_000)),
    ("lone surrogates", lambda: ("wJalrX\ud800", "\udfffUtnFEMI")),
    ("str subclasses whose methods raise", lambda: (Raising("wJalrXUtnF"), Raising("EMIK7MDEN"))),
    ("controls at the seam", lambda: ("key=\x1c\x1dwJalr", "XUtn\x1e\x1fFEMI")),
    ("one character each", lambda: ("a", "1")),
    ("padding and base32 at the seam", lambda: ("MFRGGZDFMZTW", "Q2LKNNWG2===")),
    # the run across the seam decoded in C (decoded_across), or left to Python
    ("a 200 KB base64 run cut in two", lambda: _cut(_B64_KEYS, 100_001)),
    ("str subclasses holding a cut base64 key", lambda: _cut(_B64_KEY, 21, Raising)),
    ("a cut base64 key, then a lone surrogate", lambda: _cut(_B64_KEY + "\udfff", 30)),
    ("base64 of text that is not ASCII, cut", lambda: _cut(_B64_ACCENTED, 17)),
    ("a cut hex key in a str subclass", lambda: _cut(_HEX_KEY, 9, Raising)),
]


@pytest.mark.parametrize(("name", "make"), ACROSS_CASES, ids=[c[0] for c in ACROSS_CASES])
def test_a_seam_between_two_values_ends_as_the_reference_ends(
    name: str, make: Callable[[], tuple[str, str]]
) -> None:
    def ended(pair: tuple[str, str]) -> object:
        try:
            return fingerprints.probe_across(*pair)
        except Exception as exc:
            return type(exc)

    python, c = both(ended, make())
    assert c == python


def test_a_seam_refuses_what_is_not_text() -> None:
    from interlock.session import _speedups

    if _speedups is None:
        pytest.skip("the C accelerator is not built")
    for args in ((b"ab", "cd"), ("ab", None), ("ab",), ("ab", "cd", True, "ef")):
        with pytest.raises(TypeError):
            _speedups.across(*args)

    class Untruthful:
        def __bool__(self) -> bool:
            raise TypeError("no truth")

    with pytest.raises(TypeError, match="no truth"):  # the packed flag's truth raising
        _speedups.across("ab", "cd", Untruthful())


def test_a_secret_split_by_a_lone_surrogate_is_still_found() -> None:
    secret = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"
    data = fingerprints.of_data(f"aws_secret_access_key = {secret}")
    for sent in (
        secret + "\ud800",
        "\udc80" + secret,
        {"body": f"see {secret[:20]}\ud800{secret[20:]}"},
    ):
        python, c = both(fingerprints.probe, sent)
        assert c == python
        assert fingerprints.carries(c, data), sent


# -- a record's redaction --------------------------------------------------------------

REDACTION_CASES: list[tuple[str, Callable[[], object]]] = [
    ("a list that holds itself", _cycle),
    ("a dict that holds itself", _cyclic_dict),
    ("a list nested 100,000 deep", lambda: _deep(100_000)),
    ("lone surrogates", lambda: {"note": "key=\ud800sk_live_51HkQmXyZ0123456789\udfff"}),
    ("keys that are not text", lambda: {1: "x", None: "y", (1, 2): "z", b"password": "hunter2"}),
    ("a str subclass whose methods raise", lambda: {"note": Raising("Bearer abc.def.ghi")}),
]


@pytest.mark.skipif(_redaction is None, reason="the C accelerator is not built")
@pytest.mark.parametrize(("name", "make"), REDACTION_CASES, ids=[c[0] for c in REDACTION_CASES])
def test_a_record_redaction_ends_as_the_reference_ends(
    name: str, make: Callable[[], object]
) -> None:
    def redacted(accelerated: bool) -> object:
        with on_path(accelerated):
            try:
                return repr(Redactor().redact_value(make()))
            except Exception as exc:
                return type(exc)

    assert redacted(True) == redacted(False)
