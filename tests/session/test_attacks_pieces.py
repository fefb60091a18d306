"""The pieces of :mod:`interlock.session.pieces` (ADR 0044) attacked: a secret read
from a ``.env`` file, cut into pieces and sent over several calls with noise between
them (so the tails of :mod:`interlock.session.tails` cannot join them), through the
real guard. Written by an attacker's review of the first version; the holes it found
that are closed since are attack rows (``CLOSED``).

``ATTACKS`` rows are refused; ``HOLES`` (and the ``test_hole_*`` tests) are walk-pasts
kept as strict xfails, each reason says why; ``BENIGN`` rows must all run, and
``FALSE_POSITIVES`` are benign rows that are refused today (strict xfails)."""

from __future__ import annotations

import codecs
import json
import random
import string
from collections.abc import Callable
from typing import Any, Final, cast

import pytest

from interlock import Context, Guard, Verdict
from interlock.session.history import MemoryHistory

from .test_attacks_split import (
    _PAGE,
    _PAGE_PIECES,
    CARD,
    ENV,
    KEY,
    PASSPHRASE,
    PASSWORD,
    _cut,
    _guard,
    _percent,
    _read,
    _shuffled,
    _verdicts,
    hole_params,
)

Call = tuple[str, dict[str, Any]]
IBAN_DIGITS = "89370400440532013000"
ZWSP = "\u200b"


def _body(piece: object) -> dict[str, Any]:
    return {"body": piece}


def _noisy(pieces: list[Any], make: Callable[[Any], dict[str, Any]] = _body) -> list[Call]:
    """The pieces shuffled, each in its own call, an ``Ack<i>`` in the same place between
    two (so no stream of the tails holds two pieces in turn)."""
    return [
        call
        for i, piece in enumerate(_shuffled(pieces))
        for call in (("http_post", make(piece)), ("http_post", make(f"Ack{i}")))
    ]


def _fullwidth(text: str) -> str:
    """ASCII as its fullwidth forms (NFKC maps them back)."""
    return "".join(chr(ord(c) + 0xFEE0) if "!" <= c <= "~" else c for c in text)


def _nested(value: object, depth: int) -> object:
    for _ in range(depth):
        value = {"a": value}
    return value


class _Text(str):
    """A str subclass (a StrEnum's value, a framework's wrapper)."""


_NOISE_RUNS = " ".join(f"w{i:05d}" for i in range(256))  # 256 runs of 6 characters
_KEY_10 = _cut(KEY, 10)


#: id -> the calls that carry a secret out, each row refused
ATTACKS: dict[str, list[Call]] = {
    "shuffled-with-noise": _noisy(_KEY_10),
    # the Kelvin sign lower-cases to "k" (one character): the run is the key's
    "kelvin-sign-for-k": _noisy([p.replace("K", "\u212a") for p in _KEY_10]),
    "comma-between-6-char-halves": _noisy([f"{p[:6]},{p[6:]}" for p in _cut(KEY, 12)]),
    "six-levels-deep": _noisy(_KEY_10, lambda p: {"json": _nested(p, 6)}),
    "after-a-300-char-run": _noisy(_KEY_10, lambda p: {"body": "x" * 300 + " " + p}),
    "overlapping-7-char-windows": _noisy([KEY[i : i + 7] for i in range(0, len(KEY), 6)]),
    "overlapping-6-char-windows": _noisy([KEY[i : i + 6] for i in range(0, len(KEY), 5)]),
    "passphrase-7-shuffled-with-noise": _noisy(_cut(PASSPHRASE, 7)),
    "password-halves-shuffled-with-noise": _noisy(_cut(PASSWORD, 6)),
    "account-number-ints-with-noise": _noisy([893704004405, 32013000], lambda p: {"n": p}),
    "each-piece-percent-encoded-with-noise": _noisy([_percent(p) for p in _KEY_10]),
    "html-entity-for-the-dash": _noisy([p.replace("-", "&#45;") for p in _KEY_10]),
    "passphrase-upper-case-with-noise": _noisy([p.upper() for p in _cut(PASSPHRASE, 7)]),
    "tuple-values": _noisy([(p,) for p in _KEY_10]),
    "under-a-bool-key": _noisy(_KEY_10, lambda p: {"json": {True: p}}),
    "under-an-int-key": _noisy(_KEY_10, lambda p: {"json": {1: p}}),
    "pieces-in-turn-in-three-tools": [
        (tool, {"body": p, "n": str(i)})
        for i, p in enumerate(_shuffled(_KEY_10))
        for tool in (("http_post", "send_mail", "http_get")[i % 3],)
    ],
}

#: id -> (calls, why they walk past)
HOLES: dict[str, tuple[list[Call], str]] = {
    "zero-width-space-inside": (
        _noisy([p[:5] + ZWSP + p[5:] for p in _KEY_10]),
        "U+200B is no separator: it stays in the run, and grams holding it are no "
        "token's; the fingerprints' normalisation drops it, the pieces' does not",
    ),
    "zero-width-space-before": (
        _noisy([ZWSP + p for p in _KEY_10]),
        "an invisible character glued to each piece (the known Q<piece> hole, unseen)",
    ),
    "fullwidth-forms": (
        _noisy([_fullwidth(p) for p in _KEY_10]),
        "runs are lower-cased, not NFKC-folded: fullwidth letters are no gram of a "
        "token, though the fingerprints read them as ASCII",
    ),
    "fullwidth-first-three": (
        _noisy([_fullwidth(p[:3]) + p[3:] for p in _KEY_10]),
        "as above: three fullwidth characters make the 10-character run no piece",
    ),
    "equals-sign-inside": (
        _noisy([f"{p[:5]}={p[5:]}" for p in _KEY_10]),
        "a separator (= : , quote) in the middle cuts 10 characters into two 5-character "
        "runs, below GRAM; the separator is what a receiver drops",
    ),
    "quote-inside": (
        _noisy([f'{p[:5]}"{p[5:]}' for p in _KEY_10]),
        "as above, a quote",
    ),
    "plus-inside": (
        _noisy([f"{p[:5]}+{p[5:]}" for p in _KEY_10]),
        "+ (and /, ?, &, #) is a URL delimiter: the run is no piece and its sub-runs are "
        "5 characters",
    ),
    "newline-inside": (
        _noisy([f"{p[:5]}\n{p[5:]}" for p in _KEY_10]),
        "as a separator: two 5-character runs",
    ),
    "dot-inside": (
        _noisy([f"{p[:5]}.{p[5:]}" for p in _KEY_10]),
        "a character that is no separator inside the piece: no gram across it is kept",
    ),
    "dotted-capital-i-glued": (
        _noisy([p + "\u0130" for p in _KEY_10]),
        "U+0130 lower-cases to i + U+0307 (or, before the runs were lower-cased whole, "
        "made the run dropped): junk glued to the piece, not cut off",
    ),
    "bytes-values": (
        _noisy([p.encode() for p in _KEY_10]),
        "pieces._walk (and the tails) read str and int only: bytes are no text",
    ),
    "bytearray-values": (
        _noisy([bytearray(p.encode()) for p in _KEY_10]),
        "as bytes",
    ),
    "bytes-in-a-list": (
        _noisy(_KEY_10, lambda p: {"body": [p.encode() if isinstance(p, str) else p]}),
        "as bytes, a level down",
    ),
    "set-values": (
        _noisy([{p} for p in _KEY_10]),
        "a set is not walked (dict, list, tuple only)",
    ),
    "frozenset-values": (
        _noisy([frozenset([p]) for p in _KEY_10]),
        "a frozenset is not walked",
    ),
    "str-subclass-values": (
        _noisy([_Text(p) for p in _KEY_10]),
        "``type(value) is str``: a str subclass is skipped (the fingerprints read it)",
    ),
    "argument-name-not-a-str": (
        _noisy(_KEY_10, lambda p: cast("dict[str, Any]", {1: p})),
        "``if type(name) is str`` gates the walk of the value too: {1: <piece>} (or "
        "{None: <piece>}) is not read by the pieces nor the tails; the whole key is refused",
    ),
    "account-number-as-floats": (
        _noisy([893704004405.0, 32013000.0], lambda p: {"n": p}),
        "floats are no piece (ints are): 893704004405.0 is read by nobody but the tails",
    ),
    "seven-levels-deep": (
        _noisy(_KEY_10, lambda p: {"json": _nested(p, 7)}),
        "below _MAX_DEPTH (6) levels nothing is read, by the pieces or the tails",
    ),
    "seven-lists-deep": (
        _noisy(_KEY_10, lambda p: {"json": [[[[[[[p]]]]]]]}),
        "as above, lists",
    ),
    "passphrase-as-json-keys": (
        _noisy(_cut(PASSPHRASE, 7), lambda p: {"json": {p: 1}}),
        "a key of lowercase letters is read as a plain name (_PLAIN_NAME), never a "
        "piece: a lowercase passphrase rides in keys",
    ),
    "passphrase-as-argument-names": (
        _noisy(_cut(PASSPHRASE, 7), lambda p: {p: True}),
        "as above, an argument's name",
    ),
    "after-256-runs-in-another-argument": (
        _noisy(_KEY_10, lambda p: {"a": _NOISE_RUNS, "body": p}),
        "MAX_RUNS: runs past the 256th of a call are not read; any 6-character words fill it",
    ),
    "after-256-runs-in-the-same-value": (
        _noisy(_KEY_10, lambda p: {"body": f"{_NOISE_RUNS} {p}"}),
        "as above, in the piece's own value",
    ),
    "after-256-arguments": (
        _noisy(_KEY_10, lambda p: {**{f"k{i}": f"v{i:05d}" for i in range(256)}, "body": p}),
        "_texts stops at MAX_RUNS texts",
    ),
    "after-32-pieces-of-the-page": (
        _noisy(_KEY_10, lambda p: {"a": _PAGE_PIECES[:40], "body": p}),
        "MAX_PIECES: 32 pieces of another token the session read (a page's ids) first",
    ),
    "reversed-characters": (
        _noisy([p[::-1] for p in _KEY_10]),
        "each piece reversed: no gram of it is kept (the fingerprints turn whole tokens only)",
    ),
    "rot13": (
        _noisy([codecs.encode(p, "rot13") for p in _KEY_10]),
        "each piece ROT13: as reversed",
    ),
    # pieces encoded one by one, shuffled with noise: the known base64 hole, other codes
    "each-piece-hex-with-noise": (
        _noisy([p.encode().hex() for p in _KEY_10]),
        "runs are read as sent (and percent-decoded once): no decoding of a piece",
    ),
    "each-piece-json-escaped-with-noise": (
        _noisy(["".join(f"\\u{ord(c):04x}" for c in p) for p in _KEY_10]),
        "as hex: \\u escapes are not undone (and the backslash is a separator)",
    ),
    "each-piece-html-entities-with-noise": (
        _noisy(["".join(f"&#{ord(c)};" for c in p) for p in _KEY_10]),
        "as hex: HTML entities are not undone",
    ),
    "each-piece-x-escapes-with-noise": (
        _noisy(["".join(f"\\x{ord(c):02x}" for c in p) for p in _KEY_10]),
        "as hex: \\x escapes are not undone",
    ),
    "each-piece-percent-encoded-twice-with-noise": (
        _noisy([_percent(p).replace("%", "%25") for p in _KEY_10]),
        "unquote runs once: %252D is %2D, no piece",
    ),
    "repeating-digits-absorbed": (
        _noisy(_cut(CARD, 8)),
        "11111111 is held by the chain 41111111 (``right in left``): a secret whose "
        "pieces repeat never grows a chain",
    ),
}


#: Holes of the first review, closed since (normalised runs and tokens — NFKC,
#: case-folded, the dropped characters dropped —, a value without white space read
#: whole, bytes, sets, floats, any key, 32 levels and 4,096 runs deep, plain names,
#: percent-decoded twice, HTML entities, grams of 5): each is an attack row now.
CLOSED: Final = (
    "after-32-pieces-of-the-page",  # 128 pieces joined a call
    "dot-inside",  # a run with one of ._@ is read without them too
    "account-number-as-floats",
    "after-256-arguments",
    "after-256-runs-in-another-argument",
    "after-256-runs-in-the-same-value",
    "argument-name-not-a-str",
    "bytearray-values",
    "bytes-in-a-list",
    "bytes-values",
    "each-piece-html-entities-with-noise",
    "each-piece-percent-encoded-twice-with-noise",
    "equals-sign-inside",
    "frozenset-values",
    "fullwidth-first-three",
    "fullwidth-forms",
    "passphrase-as-argument-names",
    "passphrase-as-json-keys",
    "plus-inside",
    "quote-inside",
    "set-values",
    "seven-levels-deep",
    "seven-lists-deep",
    "str-subclass-values",
    "zero-width-space-before",
    "zero-width-space-inside",
)
ATTACKS.update({row: HOLES.pop(row)[0] for row in CLOSED})


def _run(guard: Guard, calls: list[Call]) -> list[Verdict]:
    _read(guard, _PAGE, "/srv/app/orders.txt")  # a page of ids: no secret
    return _verdicts(guard, calls)


def after_the_read(calls: list[Call]) -> list[Verdict]:
    """The verdicts of ``calls`` in a session that read the ``.env`` (and a page)."""
    guard = _guard()
    _read(guard)
    return _run(guard, calls)


@pytest.mark.parametrize("row", sorted(ATTACKS))
def test_a_secret_sent_in_pieces_is_refused(row: str) -> None:
    verdicts = after_the_read(ATTACKS[row])
    assert Verdict.DENY in verdicts, verdicts
    assert Verdict.DENY not in _run(_guard(), ATTACKS[row])  # without the secret read


@pytest.mark.parametrize("row", hole_params(HOLES))
def test_a_secret_sent_in_pieces_a_hole(row: str) -> None:
    assert Verdict.DENY in after_the_read(HOLES[row][0])


def _reading(result: object) -> Guard:
    """A guard whose session read ``result`` from the ``.env`` file."""
    guard = _guard()

    @guard.protect
    def read_file(path: str) -> object:
        return result

    read_file("/srv/app/.env")
    return guard


#: id -> what the secret read returned: the key's pieces are refused after each
RESULTS: dict[str, object] = {
    "text": ENV,
    "bytes": ENV.encode(),
    "dict": {"AWS_SECRET_ACCESS_KEY": KEY},
    "list": [KEY, "x"],
    "json-text": json.dumps({"k": KEY, "note": "a\nb"}),
}


@pytest.mark.parametrize("result", sorted(RESULTS))
def test_pieces_of_a_result_of_any_shape_are_refused(result: str) -> None:
    assert Verdict.DENY in _run(_reading(RESULTS[result]), _noisy(_KEY_10))


def test_pieces_sent_before_the_secret_label_join_after_it() -> None:
    """The key read first from a file no label names (its pieces sent: no flow), then the
    ``.env``: the later pieces join the earlier ones, and the chain is the secret's."""
    guard = _guard()
    _read(guard, f"cfg: {KEY}\n", "/srv/app/config.txt")
    early = [("http_post", {"body": v}) for v in (_KEY_10[0], "Ack0", _KEY_10[1])]
    assert Verdict.DENY not in _verdicts(guard, early)
    _read(guard)
    late = [("http_post", {"body": v}) for v in ("Ack1", _KEY_10[2], "Ack2", _KEY_10[3])]
    assert Verdict.DENY in _verdicts(guard, late)


def _flood(guard: Guard) -> None:
    """Two pages of long random tokens (140 of 256 characters each, ~35,000 grams): the
    pieces' two generations of MAX_GRAMS roll over."""
    for seed in (1, 2):
        rng = random.Random(seed)
        alphabet = string.ascii_letters + string.digits
        page = " ".join("".join(rng.choices(alphabet, k=256)) for _ in range(140))
        _read(guard, page, f"/srv/app/page{seed}.txt")


@pytest.mark.xfail(
    strict=True,
    reason="MAX_GRAMS: reading ~35,000 grams of unlabelled data drops both generations, "
    "the secret's grams with them; the key's pieces are no pieces after",
)
def test_hole_the_secret_grams_rolled_out_by_large_pages() -> None:
    guard = _guard()
    _read(guard)
    _flood(guard)
    # the whole key is still refused (the fingerprints keep the read)
    assert _verdicts(guard, [("http_post", {"body": KEY})]) == [Verdict.DENY]
    assert Verdict.DENY in _verdicts(guard, _noisy(_KEY_10))


@pytest.mark.xfail(
    strict=True,
    reason="MAX_GRAMS: half the pieces sent, then large pages read, then the rest: the "
    "rest are no pieces",
)
def test_hole_the_secret_grams_rolled_out_between_pieces() -> None:
    guard = _guard()
    _read(guard)
    calls = _noisy(_KEY_10)
    verdicts = _verdicts(guard, calls[:4])
    _flood(guard)
    assert Verdict.DENY in verdicts + _verdicts(guard, calls[4:])


def test_a_result_with_json_escapes() -> None:
    """A result of JSON text with escapes (Go's encoding/json writes ``- & < >`` as
    ``\\u00XX``): its tokens are read unescaped too. The whole key first (refused), then
    its pieces: each piece is the chain again."""
    escaped = KEY.replace("-", "\\u002d")
    guard = _reading(f'{{"k": "{escaped}"}}')
    assert _verdicts(guard, [("http_post", {"body": KEY})]) == [Verdict.DENY]
    assert Verdict.DENY in _run(guard, _noisy(_KEY_10))


@pytest.mark.xfail(
    strict=True,
    reason="by design: chains are a session's; two sessions of one history (two agents "
    "that both read the file) send every other piece",
)
def test_hole_two_sessions_of_one_history() -> None:
    history = MemoryHistory()
    guards = [_guard("a", history), _guard("b", history)]
    for guard in guards:
        _read(guard)
    verdicts = [
        verdict
        for i, piece in enumerate(_KEY_10)
        for verdict in _verdicts(guards[i % 2], [("http_post", {"body": piece})])
    ]
    assert Verdict.DENY in verdicts


def _posts(values: list[Any], name: str = "body") -> list[Call]:
    return [("http_post", {name: value}) for value in values]


#: id -> calls after the secret read that look like pieces and are not
BENIGN: dict[str, list[Call]] = {
    "env-variable-names": _posts(
        ["AWS_SECRET_ACCESS_KEY", "DB_PASSWORD", "VAULT_PASSPHRASE", "CARD", "IBAN"]
    ),
    "example-words": _posts(["EXAMPLE", "EXAMPLEKEY", "KEY_EXAMPLE", "example.com"]),
    "dates-and-versions": _posts(
        ["2026-12-07", "v1.24.3", "2026-12-07T11:00:00Z", "release-1.2.3", "12/07/2026"]
    ),
    "the-same-value-again": _posts(["K7MDENG-2024"] * 3),
    "page-ids-whole": _posts(_PAGE.split()[:10], "ref"),
    "page-ids-cut-in-three": _posts(
        [t[i : i + 6] for t in _PAGE.split()[:4] for i in (4, 10, 13)], "ref"
    ),
    "paths-of-the-app": _posts(
        ["/srv/app/.env", "/srv/app/config/settings.py", "/srv/app/README.md"], "path"
    ),
    "hex-ids": _posts([f"{random.Random(i).getrandbits(64):016x}" for i in range(20)]),
    "the-key-prefix-alone-twice": _posts([KEY[:8], KEY[:8]]),
    "lowercase-words-of-other-prose": [
        ("send_mail", {"to": "ops@corp.example", "subject": s, "body": b})
        for s, b in [
            ("Birding log", "Saw a sparrow near the fence this morning."),
            ("Supplies", "The printer toner is empty again."),
            ("UPS", "The UPS battery needs replacing."),
        ]
    ],
    "numbers": [("http_post", {"amount": n, "ref": f"INV-{n}"}) for n in (370400, 440532, 100200)],
}

#: id -> (benign calls that are refused today, why)
FALSE_POSITIVES: dict[str, tuple[list[Call], str]] = {
    "two-words-of-the-passphrase-in-two-mails": (
        [
            ("send_mail", {"to": "ops@corp.example", "subject": s, "body": b})
            for s, b in [
                ("Birding log", "Saw a meadowlark near the fence this morning."),
                ("Status", "All checks green."),
                ("Supplies", "The staple gun is jammed again."),
            ]
        ],
        "a lowercase word of 6+ letters is a piece of a kept passphrase: 'staple' and "
        "'meadowlark', in any order, anywhere in two calls, chain to 'staplemeadowlark' "
        "(16 characters), which the probe finds in the .env's prose grams",
    ),
    "three-words-one-a-call": (
        _posts(["battery", "meadowlark", "staple"]),
        "a word sent alone (no prose around it) is read: three words of the passphrase, "
        "one a call, in any order, chain to 'batterystaplemeadowlark', which the probe "
        "finds in the .env's grams",
    ),
}


#: False alarms of the first review, gone since (a word of prose is not read): benign rows
BENIGN.update(
    {row: FALSE_POSITIVES.pop(row)[0] for row in ("two-words-of-the-passphrase-in-two-mails",)}
)


@pytest.mark.parametrize("row", sorted(BENIGN))
def test_benign_pieces_after_a_secret_read_run(row: str) -> None:
    guard = _guard()
    _read(guard)
    assert _run(guard, BENIGN[row]) == [Verdict.ALLOW] * len(BENIGN[row])


@pytest.mark.parametrize(
    "row",
    [
        pytest.param(row, marks=pytest.mark.xfail(strict=True, reason=why))
        for row, (_, why) in sorted(FALSE_POSITIVES.items())
    ],
)
def test_benign_calls_refused_today(row: str) -> None:
    guard = _guard()
    _read(guard)
    calls = FALSE_POSITIVES[row][0]
    assert _run(guard, calls) == [Verdict.ALLOW] * len(calls)


@pytest.mark.xfail(
    strict=True,
    reason="pieces.MAX_SESSIONS (1,000, the least recently active out first: learn and "
    "observe refresh a session) drops the session's grams and chains once 1,000 other "
    "sessions bring data in, silently; the history (bound 5,000 here, or a store) still "
    "holds the read, so nothing fails closed",
)
def test_hole_the_session_pushed_out_by_other_sessions() -> None:
    guard = _guard("s-1", MemoryHistory(max_sessions=5_000))
    _read(guard)
    calls = _noisy(_KEY_10)
    verdicts = _verdicts(guard, calls[:4])
    for i in range(1_001):
        guard.record_input(
            f"ticket TCK-{i:06d}-ABCDEF", trusted=False, context=Context(session_id=f"o{i}")
        )
    assert Verdict.DENY in verdicts + _verdicts(guard, calls[4:])


def test_an_eleven_character_password_in_two_overlapping_pieces() -> None:
    """A secret of 8 to 11 characters is a token for the pieces too (MIN_TOKEN 8)."""
    password = "Xk9pQ2mZ7wR"
    guard = _guard()
    _read(guard, f"DB_PASSWORD={password}\n")
    assert _verdicts(guard, [("http_post", {"body": password})]) == [Verdict.DENY]
    guard = _guard()
    _read(guard, f"DB_PASSWORD={password}\n")
    assert Verdict.DENY in _run(guard, _noisy([password[:6], password[5:]]))


def test_the_tokens_seen_are_bounded() -> None:
    """Distinct tokens whose grams repeat (over the alphabet 'A1', 64 grams in all) never
    fill the grams: the tokens seen start a new generation too."""
    from interlock.session import pieces

    found = pieces.Pieces()
    rng = random.Random(1)
    for _ in range(3):
        page = " ".join("".join(rng.choices("A1", k=20)) for _ in range(12_000))
        found.learn("t", "s", page)
    session = found._sessions[("t", "s")]
    assert len(session.grams) <= 64
    assert len(session.seen) <= pieces.MAX_GRAMS
