"""The chains of pieces (:mod:`interlock.session.pieces`): pieces of a token the data
holds joined by what they spell together, whatever came between them. The attack rows
and their benign look-alikes, through a real guard, are in ``test_attacks_split.py``;
here the mechanism itself: what it keeps, what it joins, its bounds and its false
positives."""

from __future__ import annotations

import gc
import random
import re
import threading
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from interlock.session import fingerprints
from interlock.session import pieces as pieces_module
from interlock.session.fingerprints import _norm, carries, of_data
from interlock.session.pieces import GRAM, MAX_CHAINS, MAX_GRAMS, MAX_PIECES, Pieces

KEY = "wJalrXUtnFEMI-K7MDENG-bPxRfiCYEXAMPLEKEY"
DATA = f"AWS_SECRET_ACCESS_KEY={KEY}\nregion = eu-west-1\n"


class _Allowed(Pieces):
    """Every call observed is allowed (sent): its pieces join the chains."""

    def observe(self, tenant: str, session_id: str, args: Any) -> list[Any]:
        found = super().observe(tenant, session_id, args)
        self.sent(tenant, session_id)
        return found


def _cut(text: str, size: int) -> list[str]:
    return [text[i : i + size] for i in range(0, len(text), size)]


def _joined(pieces: Pieces, calls: list[dict[str, Any]], session: str = "s") -> list[bool]:
    """For each call: whether a chain it made carries the data."""
    data = of_data(DATA)
    return [
        any(carries(probe, data) for _, probe in pieces.observe("t", session, args))
        for args in calls
    ]


@pytest.fixture(params=["packed", "set"])
def pieces(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Pieces:
    """A fresh index, its grams in the extension's packed set and in a plain set (the
    reference, as without the extension)."""
    if request.param == "set":
        monkeypatch.setattr(pieces_module, "new_prints", set)
    found = _Allowed()
    found.learn("t", "s", DATA)
    return found


def test_pieces_in_any_order_with_noise_between_make_the_token(pieces: Pieces) -> None:
    cut = _cut(KEY, 10)
    order = [2, 0, 3, 1]
    calls = [c for i in order for c in ({"body": cut[i]}, {"body": f"Ack{i}", "n": i})]
    found = _joined(pieces, calls)
    assert found[0] is False  # one piece alone is nothing
    assert any(found)
    assert pieces.chains("t", "s")[-1] == _norm(KEY)  # the dashes dropped, as fingerprints do


def test_the_token_text_is_not_kept() -> None:
    """What a session keeps of its data is the grams' keyed hashes: no text of it."""
    pieces = _Allowed()
    pieces.learn("t", "s", DATA)
    session = pieces._sessions[("t", "s")]
    kept = [session.grams, session.older, session.seen, session.chains]
    for value in kept:
        for item in value or ():
            assert not isinstance(item, str)
    referred = gc.get_referents(session.grams, session.seen)
    assert not any(isinstance(item, str) and KEY.lower()[:GRAM] in item for item in referred)


def test_a_piece_sent_before_the_data_came_is_no_piece() -> None:
    """The chains hold what was sent after the data was brought in: a value sent
    before it cannot have carried it."""
    pieces = _Allowed()
    first, second = _cut(KEY, 20)[0][:10], _cut(KEY, 20)[0][10:]
    pieces.learn("t", "s", "an unrelated page with Token-7Hq2xK9pLm-2026 in it")
    assert _joined(pieces, [{"body": first}]) == [False]
    pieces.learn("t", "s", DATA)
    assert _joined(pieces, [{"body": second}]) == [False]  # the first was no piece
    assert _joined(pieces, [{"body": first}]) == [True]  # now it is, beside the second


def test_pieces_of_one_call_are_joined_too() -> None:
    """Pieces of one call join as pieces of several do (a list of the key's pieces with
    noise between them, one mail naming them all)."""
    pieces = _Allowed()
    pieces.learn("t", "s", DATA)
    assert _joined(pieces, [{"a": KEY[:10], "n": "Ack1", "b": KEY[10:20]}]) == [True]
    assert _joined(pieces, [{"c": KEY[20:30]}]) == [True]  # joined to the earlier call's


def test_only_what_was_sent_joins_the_chains() -> None:
    """A refused call's pieces never join the chains (they did not leave): the whole key
    refused, then its pieces one by one, are joined among themselves, as in a session
    that never sent the key; a piece a chain of sent pieces holds adds nothing."""
    pieces = Pieces()
    pieces.learn("t", "s", DATA)
    data = of_data(DATA)
    pieces.observe("t", "s", {"b": KEY})  # refused: no sent() for it
    assert pieces.chains("t", "s") == []
    assert pieces.observe("t", "s", {"b": KEY[:10]}) == []
    pieces.sent("t", "s")
    found = pieces.observe("t", "s", {"b": KEY[10:20]})
    assert any(carries(probe, data) for _, probe in found)  # refused: not sent
    assert pieces.chains("t", "s") == [_norm(KEY[:10])]
    sent = _Allowed()
    sent.learn("t", "s", DATA)
    assert _joined(sent, [{"b": KEY[:20]}, {"b": KEY[:10]}, {"b": KEY[5:15]}], "s") == [
        False,
        False,
        False,
    ]
    assert sent.chains("t", "s") == [_norm(KEY[:20])]


def test_two_tokens_that_meet_make_a_chain_the_data_does_not_hold() -> None:
    """A chain is a guess that the probe settles: two pieces of different tokens whose
    seam grams the data happens to hold are joined, and their probe finds nothing."""
    pieces = _Allowed()
    pieces.learn("t", "s", "Alpha-123456 and 123456-Omega9")
    found = pieces.observe("t", "s", {"a": "Alpha-123456"}) + pieces.observe(
        "t", "s", {"a": "123456-Omega9"}
    )
    assert pieces.chains("t", "s") == ["alpha123456omega9"]
    data = of_data("Alpha-123456 and 123456-Omega9")
    assert found and not any(carries(probe, data) for _, probe in found)


def test_the_sessions_are_apart_and_tenant_scoped() -> None:
    pieces = _Allowed()
    for tenant, session in (("t", "a"), ("t", "b"), ("u", "a")):
        pieces.learn(tenant, session, DATA)
    cut = _cut(KEY, 10)
    assert pieces.observe("t", "a", {"b": cut[0]}) == []
    assert pieces.observe("t", "b", {"b": cut[1]}) == []
    assert pieces.observe("u", "a", {"b": cut[1]}) == []
    assert pieces.observe("t", "a", {"b": cut[1]}) != []
    assert pieces.observe("t", "zzz", {"b": cut[1]}) == []  # never learned: nothing kept


def test_names_keys_numbers_urls_and_encodings_are_read() -> None:
    pieces = _Allowed()
    pieces.learn("t", "s", DATA + "IBAN DE89370400440532013000\n")
    cut = _cut(KEY, 10)
    assert pieces.observe("t", "s", {cut[0]: True}) == []  # an argument's name
    assert pieces.observe("t", "s", {"j": {"k": [{cut[1]: 1}]}}) != []  # a nested key
    assert pieces.observe("t", "s", {"u": f"https://x.example/{cut[2]}/a.gif"}) != []
    assert pieces.observe("t", "s", {"u": f"https://x.example/?d={cut[3].replace('-', '%2D')}"})
    assert pieces.observe("t", "s", {"ref": "DE89370400"}) == []
    assert pieces.observe("t", "s", {"n": 440532013000}) != []  # a number's digits


def test_what_a_call_is_read_as() -> None:
    texts = pieces_module._texts
    assert texts({"subject": "x", "page_size": 12, "to": "abc"}) == [
        ("subject", "subject"),
        ("page_size", "page_size"),
    ]
    assert texts({1: b"bytes-value", "f": 123456.0, "s": {"Abcdefg"}}) == [
        ("1", "bytes-value"),
        ("f", "123456.0"),
        ("f", "123456"),
        ("s", "Abcdefg"),
    ]
    runs = [run for run, _ in pieces_module._runs_of("Saw a meadowlark, Key7Xq-Z9 ok")]
    # words of prose are not read; the rest normalised, and its parts between what is
    # not a letter or a digit but words ("Z9" is too short)
    assert runs == ["key7xqz9", "key7xq"]
    runs = [run for run, _ in pieces_module._runs_of("wJalr=XUtnF")]
    assert runs == ["wjalr", "xutnf", "wjalrxutnf"]  # a value whole, its separator dropped


def test_bounds_a_call(monkeypatch: pytest.MonkeyPatch) -> None:
    """A million short items, a value 100,000 levels deep, a thousand pieces: each call
    reads at most MAX_RUNS runs and joins at most MAX_PIECES pieces."""
    pieces = _Allowed()
    pieces.learn("t", "s", DATA)
    deep: Any = KEY[:10]
    for _ in range(100_000):
        deep = [deep]
    assert pieces.observe("t", "s", {"d": deep}) == []  # past the depth read
    assert pieces.observe("t", "s", {"a": ["x"] * 1_000_000}) == []
    placed: list[str] = []
    real = pieces_module._place

    def counted(found: Any, chains: Any, run: str, call: int) -> str | None:
        placed.append(run)
        return real(found, chains, run, call)

    monkeypatch.setattr(pieces_module, "_place", counted)
    pieces.observe("t", "s", {"a": [KEY[i : i + 8] for i in range(30)] * 40})
    assert len(placed) == MAX_PIECES  # of 1,200 pieces sent


def test_bounds_a_session() -> None:
    """Grams in two generations (the older dropped: the most recent data kept), chains
    at most MAX_CHAINS, the oldest leaving first."""
    rng = random.Random(5)
    pieces = _Allowed()
    pieces.learn("t", "s", DATA)
    session = pieces._sessions[("t", "s")]
    page = " ".join(f"Id{rng.getrandbits(64):016x}" for _ in range(MAX_GRAMS // 11))
    pieces.learn("t", "s", page)
    assert session.older is not None  # the key's grams, in the older generation
    assert pieces.observe("t", "s", {"a": KEY[:10]}) == []
    assert pieces.observe("t", "s", {"a": KEY[10:20]}) != []
    pieces.learn("t", "s", page.replace("Id", "Jd"))
    pieces.learn("t", "s", page.replace("Id", "Kd"))
    assert len(session.grams) <= MAX_GRAMS and len(session.older or ()) <= MAX_GRAMS
    assert pieces.observe("t", "s", {"a": KEY[20:30]}) == []  # the key's grams dropped
    tokens = page.split()
    for token in tokens[: MAX_CHAINS + 10]:
        pieces.observe("t", "s", {"a": token[:8].replace("Id", "Kd")})
    assert len(session.chains) <= MAX_CHAINS


def test_sessions_are_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(pieces_module, "MAX_SESSIONS", 3)
    pieces = _Allowed()
    for n in range(5):
        pieces.learn("t", f"s{n}", DATA)
    assert len(pieces) == 3
    assert ("t", "s0") not in pieces._sessions and ("t", "s4") in pieces._sessions


def test_under_threads() -> None:
    pieces = _Allowed()
    errors: list[BaseException] = []

    def work(n: int) -> None:
        try:
            for i in range(200):
                session = f"s{(n + i) % 7}"
                pieces.learn("t", session, DATA if i % 3 else f"Other-{n}-{i}-Token")
                pieces.observe("t", session, {"b": _cut(KEY, 10)[i % 4], "n": i})
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(n,)) for n in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    assert all(len(s.chains) <= MAX_CHAINS for s in pieces._sessions.values())


def test_false_positive_rate_of_the_chains_on_ordinary_arguments() -> None:
    """The corpus of ordinary arguments sent one after another in one session that read
    ~76 texts they did not come from: the chains their pieces make, and how many of
    their probes those texts hold. The bound is the fingerprints' (1 pair in 100, 5%
    of the calls); the measured figure is printed."""
    from .fp_corpus import benign_arguments, unrelated_results

    arguments = benign_arguments()
    texts = unrelated_results()
    pieces = _Allowed()
    for text in texts:
        pieces.learn("t", "fp", text)
    kept = [of_data(text) for text in texts]
    chained_calls = flagged_pairs = 0
    flagged: list[Any] = []
    for i, argument in enumerate(arguments):
        args = argument if isinstance(argument, dict) else {"ab"[i % 2]: argument}
        joined = [probe for _, probe in pieces.observe("t", "fp", args)]
        if not joined:
            continue
        chained_calls += 1
        hits = sum(any(carries(probe, data) for probe in joined) for data in kept)
        flagged_pairs += hits
        if hits:
            flagged.append(argument)
    session = pieces._sessions[("t", "fp")]
    print(
        f"\nchains: {chained_calls} of {len(arguments)} calls made a chain; "
        f"{len(session.chains)} chains kept; false positives {flagged_pairs} pairs "
        f"of {chained_calls * len(kept)}; calls flagged {len(flagged)}: {flagged}"
    )
    assert len(arguments) >= 100
    assert flagged_pairs <= max(1, chained_calls * len(kept) // 100)
    assert len(flagged) <= max(1, len(arguments) // 20)


def test_a_result_is_read_as_far_as_its_fingerprints() -> None:
    """A token past the first MAX_SCAN characters of a result is not kept (as its
    fingerprints do not keep it): a huge result costs a bounded scan."""
    from interlock.session.fingerprints import MAX_SCAN

    pieces = _Allowed()
    pieces.learn("t", "s", ["y " * (MAX_SCAN // 2), DATA])
    assert ("t", "s") not in pieces._sessions
    pieces.learn("t", "s", ["y " * (MAX_SCAN // 2 - 100), DATA])
    assert pieces.observe("t", "s", {"a": KEY[:10]}) == []
    assert pieces.observe("t", "s", {"a": KEY[10:20]}) != []


_speedups = pytest.importorskip("interlock.session._speedups")
_ALPHABET = "aAzZ09fF-_./?&#+=:;,|@\\\"'`<>()[]{} \t\n\x0b\x1c\x1f%%é"


@given(st.text(alphabet=_ALPHABET, max_size=80) | st.text(max_size=40))
@settings(max_examples=400, deadline=None)
def test_the_c_runs_are_the_python_runs(text: str) -> None:
    """``_speedups.piece_runs`` makes what the Python reference makes of an ASCII text
    without a percent-escape (a ``%`` alone reads as itself), and leaves every other
    text to it (None)."""
    made = _speedups.piece_runs(text, GRAM, pieces_module.MAX_CHAIN)
    escaped = re.search("%[0-9A-Fa-f]{2}", text) is not None  # what unquote decodes
    if not text.isascii() or escaped or ("&" in text and ";" in text):
        assert made is None
    else:
        assert made == pieces_module._py_runs_of(text)


@given(st.text(alphabet=_ALPHABET, max_size=40) | st.text(max_size=12))
@settings(max_examples=300, deadline=None)
def test_the_c_grams_are_the_python_grams(token: str) -> None:
    made = _speedups.piece_grams(token, GRAM)
    if token.isascii():
        assert made == pieces_module._py_grams_of(token)
    else:
        assert made is None
    with pytest.raises(ValueError):
        _speedups.piece_grams(token, 0)


def test_the_c_runs_bounds_and_refusals() -> None:
    long = "A" * 300 + "/" + "b" * 10
    assert _speedups.piece_runs(long, GRAM, 256) == pieces_module._py_runs_of(long)
    assert [run for run, _ in _speedups.piece_runs(long, GRAM, 256) or ()] == ["b" * 10]
    with pytest.raises(TypeError):
        _speedups.piece_runs(b"bytes", GRAM, 256)
    with pytest.raises(TypeError):
        _speedups.piece_runs("text", GRAM)
    with pytest.raises(ValueError):
        _speedups.piece_runs("text", 0, 256)
    with pytest.raises(ValueError):
        _speedups.piece_runs("text", 8, 4)
    with pytest.raises(OverflowError):
        _speedups.piece_runs("text", 10**30, 256)


class _Text(str):
    """A str subclass: read by the Python path (its methods may run)."""


def _scan_values() -> st.SearchStrategy[Any]:
    """Arguments as agents send them, and the values only the Python path reads."""
    cuts = st.sampled_from(
        [KEY[i : i + size] for size in (5, 7, 10, 16) for i in range(0, len(KEY) - size, 3)]
    )
    texts = (
        st.text(alphabet=_ALPHABET, max_size=40)
        | st.builds(
            lambda a, b, c: f"{a} {b}{c}", cuts, st.text(alphabet="xY-/ %", max_size=4), cuts
        )
        | cuts
    )
    leaves = (
        texts
        | st.integers(min_value=-(2**70), max_value=2**70)
        | st.sampled_from([12345, -98765, 2**63, 2**127, 2**128, 9999, -9999, 10000, -10000])
        | st.sampled_from([True, False, None, -(2**63), 2**63 - 1])
        | st.floats(allow_nan=True, allow_infinity=True)
        | st.sampled_from([1e5, -123456.0, 1.5e40, 3e37, 0.25, 10000.0, -10000.0, 9999.5, 1e38])
        | st.sampled_from([b"bytes" + KEY[:10].encode(), _Text(KEY[:12]), bytearray(b"abcdefg")])
    )
    hashable = texts | st.integers(min_value=-(2**40), max_value=2**40) | st.none()
    return st.recursive(
        leaves,
        lambda inner: (
            st.lists(inner, max_size=4)
            | st.lists(inner, max_size=3).map(tuple)
            | st.frozensets(hashable, max_size=3)
            | st.sets(hashable, max_size=3)
            | st.dictionaries(texts | st.integers(0, 99999), inner, max_size=4)
        ),
        max_leaves=12,
    )


class _Everything:
    """A set of grams that holds every gram."""

    def __contains__(self, value: object) -> bool:
        return True


def _learned() -> tuple[Any, Any]:
    found = Pieces()
    found.learn("t", "s", DATA)
    session = found._sessions[("t", "s")]
    return session.grams, session.older


@given(
    st.dictionaries(st.text(alphabet=_ALPHABET, max_size=12), _scan_values(), max_size=4)
    | _scan_values(),
    st.sampled_from(["learned", "older", "everything"]),
)
@settings(max_examples=600, deadline=None)
def test_the_c_scan_is_the_python_scan(args: Any, grams_are: str) -> None:
    """``_speedups.piece_scan`` finds what the Python reference finds in the values it
    reads (plain str, int, float, bool, None, dict, list, tuple, set), and leaves the
    rest (a subclass, bytes, an int past 64 bits, a dict key not a str) to it. With
    every gram kept, every run is a piece: the two walks must read the same texts."""
    grams, older = _learned()
    if grams_are == "older":  # two generations: the pieces' later grams in the newer
        older, grams = grams, pieces_module.new_prints()
    elif grams_are == "everything":
        grams, older = _Everything(), None
    made = _speedups.piece_scan(
        args, grams, older, pieces_module._RUNS, pieces_module._runs_of, pieces_module._SCAN_LIMITS
    )
    expected = pieces_module._py_scan(args, grams, older)
    if made is not None:
        assert made == expected
    else:
        assert any(
            type(value)
            not in (str, int, float, bool, type(None), dict, list, tuple, set, frozenset)
            or (type(value) is int and not -(2**63) <= value < 2**63)
            or (type(value) is dict and any(type(key) is not str for key in value))
            for value in _values_of(args)
        ) or (type(args) is dict and any(type(key) is not str for key in args))


def _values_of(value: Any) -> list[Any]:
    out = [value]
    if type(value) is dict:
        for key, item in value.items():
            out += _values_of(key) + _values_of(item)
    elif type(value) in (list, tuple, set, frozenset):
        for item in value:
            out += _values_of(item)
    return out


def test_the_c_scan_finds_the_pieces_and_keeps_the_bounds(monkeypatch: pytest.MonkeyPatch) -> None:
    grams, older = _learned()
    args = {"a": KEY[:10], "b": [KEY[10:20], {"c": KEY[20:30]}], "n": 1234567}
    found = _speedups.piece_scan(
        args, grams, older, {}, pieces_module._runs_of, pieces_module._SCAN_LIMITS
    )
    assert found is not None
    assert found == pieces_module._py_scan(args, grams, older)
    # "EMI-K7MDEN" and "G-bPxRfiCY": each whole and its part after the dash
    assert found[1] == [
        ("a", "wjalrxutnf"),
        ("b", "emik7mden"),
        ("b", "k7mden"),
        ("b", "gbpxrficy"),
        ("b", "bpxrficy"),
    ]
    assert _speedups.piece_scan(
        {}, grams, None, {}, pieces_module._runs_of, pieces_module._SCAN_LIMITS
    ) == (False, [])
    assert _speedups.piece_scan(
        {"x": True}, grams, None, {}, pieces_module._runs_of, pieces_module._SCAN_LIMITS
    ) == (False, [])
    # each bound, as the reference keeps it
    for name, limit, at in (
        ("MAX_PIECES", 2, 4),
        ("MAX_RUNS", 2, 3),
        ("_MAX_VALUES", 3, 1),
        ("_MAX_DEPTH", 1, 2),
    ):
        with monkeypatch.context() as patch:
            patch.setattr(pieces_module, name, limit)
            limits = list(pieces_module._SCAN_LIMITS)
            limits[at] = limit
            made = _speedups.piece_scan(
                args, grams, older, {}, pieces_module._runs_of, tuple(limits)
            )
            assert made == pieces_module._py_scan(args, grams, older), name
            assert made is not None and len(made[1]) < len(found[1]), name
    with pytest.raises(TypeError):
        _speedups.piece_scan(
            args, grams, older, [], pieces_module._runs_of, pieces_module._SCAN_LIMITS
        )
    with pytest.raises(TypeError):
        _speedups.piece_scan(args, grams, older, {}, pieces_module._runs_of, (5, 1))
    with pytest.raises(ValueError):
        _speedups.piece_scan(args, grams, older, {}, pieces_module._runs_of, (0, 1, 1, 1, 1, 1))
    with pytest.raises(TypeError):  # runs_of must give what _runs_of gives
        _speedups.piece_scan(
            args, grams, older, {}, lambda text: [text], pieces_module._SCAN_LIMITS
        )
    with pytest.raises(ZeroDivisionError):  # what runs_of raises goes through
        _speedups.piece_scan(args, grams, older, {}, lambda text: 1 / 0, pieces_module._SCAN_LIMITS)


def test_a_names_parts_are_read_but_its_words() -> None:
    """A run with ``._@`` is read in its parts between them too, but a part spelled as a
    word (an extension, a domain's name): and every part when NFKC made a separator of
    another character (a full-width dot), where the raw parts cannot be matched up."""
    from interlock.session.fingerprints import _norm
    from interlock.session.pieces import _parts

    assert _parts("wJalrXUtnF@x.example", "wjalrxutnf@x.example") == ["wjalrxutnf"]
    assert _parts("/tmp/Battery.CSV", "tmpbattery.csv") == ["tmpbattery", "csv"]
    assert _parts("battery.csv", "battery.csv") == []
    run = "wJalrXUtnF\uff0epng.EXAMPLEKEY"
    assert _parts(run, _norm(run)) == ["wjalrxutnf", "png", "examplekey"]


def test_a_runs_parts_between_what_the_normalisation_drops_are_read_but_words() -> None:
    """A run is read in its parts between the characters that are not letters or digits
    too (``<piece>~x``, ``v1!<piece>``: the normalisation drops ``~`` and ``!``, which
    would glue the piece to its neighbours), but a part spelled as a word; the C loop
    makes the same of it."""
    from interlock.session.pieces import _cuts

    assert _cuts("wJalrXUtnF~x") == ["wjalrxutnf"]  # "x" spelled as a word
    assert _cuts("v1!EMI-K7MDEN") == ["v1", "emi", "k7mden"]
    assert _cuts("read-me~now") == []  # words
    assert _cuts("Ｋ7ＭＤＥＮ～AB") == ["k7mden", "ab"]  # full-width: NFKC'd part by part
    for run, read in (
        ("a!wJalrXUtnF*b", ["awjalrxutnfb", "wjalrxutnf"]),
        ("x$K7MDENG$y", ["xk7mdengy", "k7mdeng"]),
        # whole, its part between "._@" but words, its part between the rest, without "."
        (
            "p.q~wJalrXUtnF~Readme",
            ["p.qwjalrxutnfreadme", "qwjalrxutnfreadme", "wjalrxutnf", "pqwjalrxutnfreadme"],
        ),
    ):
        assert [text for text, _ in pieces_module._py_runs_of(run)] == read, run
        if fingerprints.ACCELERATED:
            made = _speedups.piece_runs(run, pieces_module.GRAM, pieces_module.MAX_CHAIN)
            assert made == pieces_module._py_runs_of(run), run
