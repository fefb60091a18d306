"""Pieces of a token the session's data holds, sent in any order, in any arguments, with
anything between them: a secret cut into pieces that the tails cannot join.

:mod:`interlock.session.tails` joins a piece to what the *same* stream (or, for pieces
sent in turn in different arguments, the stream of every piece) sent just before it.
Anything sent between two pieces ends that join: a counter beside each piece, an
``Ack`` after it, forty new arguments that push the piece's stream out, a lowercase
passphrase that is no piece for the stream across arguments. This module joins pieces
by *what they spell together* instead of by the order they came.

When a step's result (or an outside input) is recorded in this process, the
:data:`GRAM`-character grams of each of its *tokens* are kept, as the process's keyed
string hashes (the token's text is not kept). A token is a run between separators
(white space, quotes, brackets, ``,;|\\=:``; in a result's JSON-escaped text, between
its unescaped separators too) that has a digit, a capital or a sign, or is
:data:`MIN_PLAIN_TOKEN` lowercase letters or more (a passphrase, not a word),
*normalised* as the fingerprints normalise (NFKC, case-folded, every character but
letters, digits, ``_``, ``@`` and ``.`` dropped: a dash, a zero-width space or a
full-width form inside changes nothing) and :data:`MIN_TOKEN` characters or more; of a
token past :data:`MAX_TOKEN` characters, its start and its end.

When a call that a ``flows_from`` test reads is checked, each of its values (strings,
bytes, numbers of :data:`GRAM` digits or more — a float's and a Decimal's digits without
the exponent too, whatever their size —, anything else by its text, in dicts, lists,
tuples and sets;
dict keys and argument names too; percent-decoded, HTML entities decoded) is cut at the
same separators into *runs*, normalised the same way: a run, each part of it between a
URL's delimiters (``/?&#+``; with a ``+`` in it, between ``/?&#`` too: a space in a
query), and a value without white space whole (so a separator put inside a piece does
not cut it; one whose decoding has white space, ``%20``, also with that dropped); a run
with ``._@`` in it in its parts between them but words (``<piece>@x.example``,
``<piece>.x.example``, ``<piece>.png``: not ``example`` nor ``png``) and without them as
well; a run with any character that is not a letter or a digit in its parts between
those but words too (the normalisation drops ``~!*$-``, which would glue ``<piece>~x``
to its neighbour); a float written with an exponent (``8.937040044e-05``) by its digits
without it too. In a value with white space (prose) a word — lowercase letters, or a
capital then lowercase letters, whatever marks its ends — is not read. A
run of at least :data:`GRAM` characters whose every gram is kept is a *piece* of some
token. The session keeps the pieces its *allowed* calls sent as *chains* (a refused
call's pieces did not leave: they never join, :meth:`Pieces.sent`): a piece joins a
chain when one holds the other, or one ends where the other starts — appended,
prepended or overlapping, every gram across the seam kept too — and the chain it made
then meets the others (pieces sent last to first, shuffled, far apart, or several in
one call). When this call's piece makes a chain that holds another piece and is longer
than this piece and than each chain it joined, at least :data:`MIN_TOKEN` characters,
the chain is probed like an argument (:func:`~interlock.session.fingerprints.probe`),
under the name of the argument that sent the piece. The probe decides, against the
session's fingerprints, with the ``flows_from`` test's selector: a chain the data does
not hold (two tokens whose seam grams happen to be kept) finds nothing.

What it does not join: pieces shorter than :data:`GRAM` characters normalised; a piece
glued to other letters or digits (``Q<piece>``); pieces transformed one by one (base64,
hex, reversed: the tails join those sent in turn); a lowercase passphrase's words in
prose; a secret whose pieces repeat (a chain is placed at the largest overlap); data
recorded in another process (a shared server receives a result's fingerprints, never
its text, so its calls' pieces are joined where the result was); grams pushed out by
:data:`MAX_GRAMS` newer ones, a session pushed out by :data:`MAX_SESSIONS` newer ones, a
chain by :data:`MAX_CHAINS` newer ones, pieces past :data:`MAX_PIECES` in one call.
Bounded: :data:`MAX_SESSIONS` sessions; :data:`MAX_GRAMS` grams a session in each of two
generations (when the newer is full, the older is dropped: the most recent data is
kept); :data:`MAX_CHAINS` chains of at most :data:`MAX_CHAIN` characters a session;
:data:`MAX_RUNS` runs read and :data:`MAX_PIECES` pieces joined a call; the merges a
piece tries. Each session has its own lock: a hostile call's merges hold up its own
session only.
"""

from __future__ import annotations

import html
import math
import re
import threading
from collections.abc import Mapping
from decimal import Decimal
from itertools import islice
from typing import TYPE_CHECKING, Any, Final
from urllib.parse import unquote

from interlock.session import fingerprints
from interlock.session.fingerprints import MAX_SCAN, _json_unescape, _norm, probe, texts_of
from interlock.session.history import new_prints, untracked

try:
    from interlock.session import _speedups
except ImportError:  # not built: the Python reference (fingerprints.ACCELERATED is off)
    _speedups = None  # type: ignore[assignment]

if TYPE_CHECKING:
    from collections.abc import Iterator

    from interlock.session.fingerprints import Probe
    from interlock.session.history import Prints

__all__ = [
    "GRAM",
    "MAX_CHAIN",
    "MAX_CHAINS",
    "MAX_GRAMS",
    "MAX_PIECES",
    "MAX_RUNS",
    "MAX_SESSIONS",
    "MAX_TOKEN",
    "MIN_PLAIN_TOKEN",
    "MIN_TOKEN",
    "Pieces",
]

#: Characters of a gram, and the shortest piece.
GRAM: Final = 5
#: The shortest token kept, normalised (the fingerprints keep a token of 8 whole), and
#: the shortest chain probed; the shortest run of lowercase letters alone kept as a
#: token (a word is shorter: a passphrase is not).
MIN_TOKEN: Final = 8
MIN_PLAIN_TOKEN: Final = 16
#: Characters of a token kept (a longer one, a blob, by its start).
MAX_TOKEN: Final = 256
#: Bounds: sessions kept in one process; grams (and tokens) a session in each
#: generation; chains a session and characters a chain; runs read and pieces joined a
#: call; values walked a call and how deep.
MAX_SESSIONS: Final = 1_000
MAX_GRAMS: Final = 16_384
MAX_CHAINS: Final = 64
MAX_CHAIN: Final = 256
MAX_RUNS: Final = 65_536
MAX_PIECES: Final = 128
_MAX_VALUES: Final = 65_536
#: The smallest number read (a number of GRAM digits).
_SMALLEST_NUMBER: Final = 10 ** (GRAM - 1)
_MAX_DEPTH: Final = 32
#: Overlaps a seam tries (the largest first), and passes over the chains a piece makes.
_MAX_OVERLAPS: Final = 8
_PASSES: Final = 2
_PARTS: Final = 8
_MASK: Final = (1 << 64) - 1

#: The separators but white space, each made a space (then ``str.split`` cuts the runs:
#: at what ``\\s`` matches, the separators, in one pass of C each)
_SEPARATORS: Final = str.maketrans(dict.fromkeys("\"'`<>()[]{},;|\\=:", " "))
#: Inside a run of an argument: where a URL's parts end (a piece in a path segment or a
#: query parameter is a run of its own too).
_SUBRUN: Final = re.compile("[^/?&#+]+")
#: ... and its parts between them but ``+`` (a space in a query: it may be put inside
#: a piece, as a separator may be put inside a value read whole).
_PART: Final = re.compile("[^/?&#]+")
_DELIMITED: Final = re.compile("[/?&#+]").search
_PLAIN_WORDS: Final = re.compile(r"[a-z]*").fullmatch
_SPACE: Final = re.compile(r"\s").search
#: In prose (a text with white space), a run of lowercase letters, or one capital and
#: lowercase letters, is a word: not read (the words of a passphrase are words too).
_WORD: Final = re.compile("[A-Z]?[a-z]+").fullmatch
#: What the normalisation drops, at a run's ends (read before the word test).
_EDGES: Final = re.compile(r"^[^\w@.]+|[^\w@.]+$")
#: What the normalisation keeps that an attacker may put inside a piece: a run with one
#: of them is read without them as well.
_INNER: Final = re.compile("[._@]")
#: Inside a run, what is not a letter or a digit (what the normalisation drops, and
#: ``._@``): a run with one of them is read in its parts between them as well, so that
#: a piece glued to others by a character the normalisation drops (``<piece>~x``,
#: ``v1!<piece>``) is a piece of its own.
_CUT: Final = re.compile(r"[\W_]")
#: A float written with an exponent (``8.937040044e-05``): its digits are read without
#: it, as a float's are.
_FLOAT_TEXT: Final = re.compile(r"[+-]?([0-9]+)\.([0-9]+)[eE][+-]?[0-9]+").fullmatch


class _Chain:
    """Pieces joined: their text (normalised), and the pieces, each with the call that
    sent it (the latest few)."""

    __slots__ = ("parts", "text")

    def __init__(self, text: str, parts: frozenset[tuple[int, str]]) -> None:
        self.text = text
        self.parts = parts


class _Session:
    __slots__ = ("calls", "chains", "grams", "lock", "older", "seen", "trial")

    def __init__(self) -> None:
        #: held while the session's grams or chains change (a hostile call's merges
        #: hold up its own session, no other)
        self.lock = threading.Lock()
        self.grams: Prints = new_prints()
        self.older: Prints | None = None
        #: the hashes of the tokens whose grams are kept (a token again is not hashed)
        self.seen: set[int] = set()
        self.chains: list[_Chain] = []
        self.calls = 0
        #: the chains with the last call's pieces, until it is known to be sent
        self.trial: tuple[int, list[_Chain]] | None = None

    def kept(self, gram: str) -> bool:
        return _kept(gram, self.grams, self.older)


def _kept(gram: str, grams: Prints, older: Prints | None) -> bool:
    """Whether ``gram`` (by its hash, as kept) is in ``grams`` or ``older``."""
    value = hash(gram) & _MASK
    return value in grams or (older is not None and value in older)


def _tokens(data: object) -> Iterator[str]:
    """The tokens of ``data``'s texts, normalised, in its first ``MAX_SCAN`` characters
    (as its fingerprints)."""
    scanned = 0
    for leaf in texts_of(data):
        text = leaf[: MAX_SCAN - scanned]
        scanned += len(text)
        forms = (text, _json_unescape(text)) if "\\" in text else (text,)
        for form in forms:
            for token in form.translate(_SEPARATORS).split():
                if len(token) < MIN_TOKEN or (len(token) < MIN_PLAIN_TOKEN and _PLAIN_WORDS(token)):
                    continue
                normal = _norm(token[: MAX_TOKEN * 2])[:MAX_TOKEN]
                if len(normal) >= MIN_TOKEN:
                    yield normal
                if len(token) > MAX_TOKEN:  # a long token's end too (a JWT's signature)
                    yield _norm(token[-MAX_TOKEN * 2 :])[-MAX_TOKEN:]
        if scanned >= MAX_SCAN:
            return


def _grams_of(token: str) -> list[int]:
    """The hashes of ``token``'s grams as kept (``_speedups.piece_grams`` for ASCII)."""
    if fingerprints.ACCELERATED and _speedups is not None:
        made = _speedups.piece_grams(token, GRAM)
        if made is not None:
            return made
    return _py_grams_of(token)


def _py_grams_of(token: str) -> list[int]:
    return [hash(token[at : at + GRAM]) & _MASK for at in range(len(token) - GRAM + 1)]


def _texts(args: Any) -> list[tuple[str, str]]:
    """The texts of ``args``' values (strings, bytes, numbers; in dicts — their keys
    too —, lists, tuples and sets) and names, each under its top-level argument's name
    (``"*"`` for a call of one value): at most ``_MAX_VALUES`` values walked,
    ``_MAX_DEPTH`` levels down."""
    out: list[tuple[str, str]] = []
    budget = [_MAX_VALUES]
    if isinstance(args, Mapping):
        for name, value in args.items():
            top = name if type(name) is str else str(name)
            _walk(top, name, 0, out, budget)
            _walk(top, value, 0, out, budget)
    else:
        _walk("*", args, 0, out, budget)
    return out


def _walk(name: str, value: Any, depth: int, out: list[tuple[str, str]], budget: list[int]) -> None:
    if budget[0] <= 0:
        return
    budget[0] -= 1
    if isinstance(value, str):
        text = value if type(value) is str else str.__str__(value)
        if len(text) >= GRAM:
            out.append((name, text))
    elif isinstance(value, (bytes, bytearray, memoryview)):
        if len(value) >= GRAM:
            out.append((name, bytes(value).decode("utf-8", "replace")))
    elif isinstance(value, bool) or value is None:
        return
    elif isinstance(value, int):
        if abs(value) >= _SMALLEST_NUMBER and value.bit_length() < 128:
            out.append((name, str(int(value))))
    elif isinstance(value, float):
        if math.isfinite(value):
            text = repr(value)
            large = abs(value) >= _SMALLEST_NUMBER
            if large:
                out.append((name, text))
            # its digits without the exponent, whatever its size (8.937040044e-05)
            mantissa = text.partition("e")[0]
            if (mantissa != text or not large) and sum(map(str.isdigit, mantissa)) >= GRAM:
                out.append((name, mantissa))
            if large and value.is_integer() and abs(value) < 1e38:
                out.append((name, str(int(value))))
    elif isinstance(value, Mapping):
        if depth < _MAX_DEPTH:
            for key, item in islice(value.items(), budget[0]):
                _walk(name, key, depth + 1, out, budget)
                _walk(name, item, depth + 1, out, budget)
    elif isinstance(value, (list, tuple, set, frozenset)):
        if depth < _MAX_DEPTH:
            for item in islice(value, budget[0]):
                _walk(name, item, depth + 1, out, budget)
    else:  # anything else by its text, as the fingerprints read it (a Decimal, a path);
        # a text that cannot be read raises: the check is undetermined, as its probe's
        text = str(value)
        if len(text) >= GRAM:
            out.append((name, text[:MAX_SCAN]))
        if isinstance(value, Decimal) and value.is_finite():
            # its digits without leading zeros ("0.00008937040044"), as a float's
            mantissa = format(value, "e").partition("e")[0]
            if mantissa != text and sum(map(str.isdigit, mantissa)) >= GRAM:
                out.append((name, mantissa[:MAX_SCAN]))


#: A text's runs, each with its first gram's hash.
_Runs = tuple[tuple[str, int], ...]
#: text -> its runs (an agent sends the same values again and again); emptied whole
#: when full
_RUNS: dict[str, _Runs] = {}
_RUNS_KEPT: Final = 1024
_RUNS_LONGEST: Final = 256


def _runs_of(text: str) -> _Runs:
    """The runs of ``text``: see the module docstring."""
    found = _RUNS.get(text)
    if found is None:
        made = (
            _speedups.piece_runs(text, GRAM, MAX_CHAIN)
            if fingerprints.ACCELERATED and _speedups is not None
            else None
        )
        found = _py_runs_of(text) if made is None else made
        if len(text) <= _RUNS_LONGEST:
            if len(_RUNS) >= _RUNS_KEPT:
                _RUNS.clear()
            _RUNS[text] = found
    return found


def _py_runs_of(text: str) -> _Runs:
    """:func:`_runs_of`'s reference (``_speedups.piece_runs`` makes the same of an
    ASCII text without ``%``, and without ``&`` or without ``;``): for each form of
    ``text`` (and its percent-decodings, and its HTML entities decoded; in a text
    without white space, the last of those with the white space it made dropped),
    each run between separators, then its parts between a URL's delimiters (and, with a
    ``+`` in it, between those but ``+``), then (in a text without white space) the
    form whole; in prose a word (``[A-Z]?[a-z]+``) left out; normalised, then, with
    ``._@`` in it, its parts between them but words (:func:`_parts`), with a character
    that is not a letter or a digit, its parts between those but words (:func:`_cuts`),
    with ``._@``, it without them, and, a float written with an exponent, its digits
    without it (:data:`_FLOAT_TEXT`); at least GRAM, at most MAX_CHAIN characters; each
    once."""
    prose = _SPACE(text) is not None
    forms = [text]
    while "%" in forms[-1] and len(forms) < 3:
        decoded = unquote(forms[-1])
        if decoded == forms[-1]:
            break
        forms.append(decoded)
    if "&" in text and ";" in text:  # an HTML entity or more: &#45; is a dash
        forms.append(html.unescape(forms[-1]))
    if not prose and _SPACE(forms[-1]) is not None:
        # white space the decoding made ("%20" inside a piece) cuts no piece either
        forms.append("".join(forms[-1].split()))
    runs: list[str] = []
    for form in forms:
        for run in form.translate(_SEPARATORS).split():
            runs.append(run)
            if _DELIMITED(run):
                runs.extend(_SUBRUN.findall(run))
                if "+" in run:  # "?d=<half>+<half>&n=1": "+" inside a part, as a space
                    runs.extend(_PART.findall(run))
        if not prose:
            runs.append(form)
    out: dict[str, int] = {}
    for run in runs:
        if prose and _WORD(_EDGES.sub("", run)):
            continue  # a word of prose (``horse?``, ``Correct!``)
        normal = _norm(run)
        readings = [normal]
        inner = _INNER.search(normal) is not None
        if inner:  # "<piece>@x.example", "<piece>.png": each part too
            readings.extend(_parts(run, normal))
        if _CUT.search(run):  # "<piece>~x", "v1!<piece>": each part between them too
            readings.extend(_cuts(run))
        if inner:
            readings.append(_INNER.sub("", normal))
        number = _FLOAT_TEXT(run)
        if number is not None:  # "8.937040044e-05": its digits without the exponent
            readings.append(number[1] + number[2])
        for reading in readings:
            if GRAM <= len(reading) <= MAX_CHAIN and reading not in out:
                out[reading] = hash(reading[:GRAM]) & _MASK
    return tuple(out.items())


#: piece_scan's limits: (gram, values walked, depth, runs read, pieces found, the
#: smallest number read)
_SCAN_LIMITS: Final = (GRAM, _MAX_VALUES, _MAX_DEPTH, MAX_RUNS, MAX_PIECES, _SMALLEST_NUMBER)


def _plain_scan(
    args: Any, grams: Prints, older: Prints | None
) -> tuple[bool, list[tuple[str, str]]] | None:
    """Whether ``args`` holds a text (:func:`_texts`), and its pieces: the runs of its
    texts whose every gram is in ``grams`` or ``older`` (each under its argument's
    name, in order; at most :data:`MAX_PIECES`, from the first :data:`MAX_RUNS` runs)
    — ``_speedups.piece_scan``, for the plain values it reads without running any of
    their code; None for any other (:func:`_py_scan` then)."""
    if fingerprints.ACCELERATED and _speedups is not None:
        return _speedups.piece_scan(args, grams, older, _RUNS, _runs_of, _SCAN_LIMITS)
    return None


def _scan(args: Any, grams: Prints, older: Prints | None) -> tuple[bool, list[tuple[str, str]]]:
    """:func:`_plain_scan`, else :func:`_py_scan`."""
    found = _plain_scan(args, grams, older)
    return _py_scan(args, grams, older) if found is None else found


def _py_scan(args: Any, grams: Prints, older: Prints | None) -> tuple[bool, list[tuple[str, str]]]:
    """:func:`_plain_scan`'s reference, for any value."""
    return _py_pieces(_texts(args), grams, older)


def _py_pieces(
    texts: list[tuple[str, str]], grams: Prints, older: Prints | None
) -> tuple[bool, list[tuple[str, str]]]:
    """Whether there are ``texts``, and the pieces of them (as :func:`_plain_scan`)."""
    if not texts:
        return False, []
    found: list[tuple[str, str]] = []
    runs = 0
    for name, text in texts:
        for run, first in _runs_of(text):
            runs += 1
            if runs > MAX_RUNS or len(found) >= MAX_PIECES:
                return True, found
            if (first not in grams and (older is None or first not in older)) or not all(
                _kept(run[at : at + GRAM], grams, older) for at in range(1, len(run) - GRAM + 1)
            ):
                continue
            found.append((name, run))
    return True, found


def _placed(found: _Session, texts: bool, pieces: list[tuple[str, str]]) -> list[tuple[str, str]]:
    """A call of the session ``found`` (under its lock) with texts and ``pieces``: the
    chains its pieces made that join others, each under its argument's name; its
    chains kept for :meth:`Pieces.sent`."""
    if not texts:
        return []
    found.calls += 1
    call = found.calls
    found.trial = None  # an earlier call's chains, never sent: dropped
    if not pieces:
        return []
    joined: list[tuple[str, str]] = []
    chains = list(found.chains)  # this call's, kept if it is sent
    for name, run in pieces:
        placed = _place(found, chains, run, call)
        if placed is not None:
            joined.append((name, placed))
    found.trial = (call, chains)
    return joined


class Pieces:
    """The grams of the tokens the sessions of one history brought in, in this process,
    and the chains of pieces of them the sessions' calls sent."""

    __slots__ = ("_lock", "_sessions")

    def __init__(self) -> None:
        self._sessions: dict[tuple[str, str], _Session] = {}
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._sessions)

    def chains(self, tenant: str, session_id: str) -> list[str]:
        """The session's chains, oldest first (for tests and tools)."""
        found = self._sessions.get((tenant, session_id))
        return [] if found is None else [chain.text for chain in found.chains]

    def learn(self, tenant: str, session_id: str, data: object) -> None:
        """Keep the grams of the tokens of ``data``, a result or an input the session
        brought in."""
        tokens = list(_tokens(data))
        if not tokens:
            return
        key = (tenant, session_id)
        with self._lock:
            sessions = self._sessions
            found = sessions.pop(key, None)  # put back last: the most recent
            if found is None:
                found = _Session()
            sessions[key] = found
            while len(sessions) > MAX_SESSIONS:
                del sessions[next(iter(sessions))]
        with found.lock:
            for token in tokens:
                marker = hash(token)
                if marker in found.seen:
                    continue
                if (
                    len(found.grams) + len(token) > MAX_GRAMS
                    or len(found.seen) >= MAX_GRAMS // GRAM
                ):  # a new generation
                    found.older = found.grams
                    found.grams = new_prints()
                    found.seen.clear()
                found.seen.add(marker)
                found.grams.update(_grams_of(token))

    def observe(self, tenant: str, session_id: str, args: Any) -> list[tuple[str, Probe]]:
        """The probes of the chains this call's pieces join to pieces earlier calls sent,
        each under the argument's name; the chains kept. Call it once a check."""
        key = (tenant, session_id)
        sessions = self._sessions
        if key not in sessions:  # the usual case: no data brought in (no lock)
            return []
        with self._lock:
            found = sessions.pop(key, None)
            if found is None:
                return []
            sessions[key] = found  # the most recent: the least recently active leave first
        with found.lock:  # plain values: read in C, no code of theirs runs
            got = _plain_scan(args, found.grams, found.older)
            if got is not None:
                joined = _placed(found, *got)
        if got is None:
            # any other value is read by its own methods (__str__, items...): outside
            # the lock, so that one that checks this session again cannot deadlock it
            texts = _texts(args)
            with found.lock:
                joined = _placed(found, *_py_pieces(texts, found.grams, found.older))
        return [(name, untracked(probe(text))) for name, text in joined]

    def sent(self, tenant: str, session_id: str) -> None:
        """The session's call checked last was allowed: its pieces join the chains (a
        refused call's never do — they did not leave, and a piece of them sent later is
        no more than itself)."""
        found = self._sessions.get((tenant, session_id))
        if found is None or found.trial is None:
            return
        with found.lock:
            trial = found.trial
            if trial is not None and trial[0] == found.calls:
                found.chains = trial[1]
            found.trial = None


def _parts(run: str, normal: str) -> list[str]:
    """The parts of ``normal`` (``run`` normalised) between ``._@``, but those ``run``
    spells as a word (``[A-Z]?[a-z]+``, what the normalisation drops cut from its
    ends: ``battery.csv``, ``schmidt@corp.example``): a file's extension, a domain's
    name, a word, as in prose. Every part when the normalisation made a separator of
    another character (NFKC: a full-width dot), so that the two cannot be matched up
    (it never drops one, so the same number of parts is the same parts)."""
    parts = _INNER.split(normal)
    spelled = _INNER.split(run)
    if len(spelled) != len(parts):
        return parts
    pairs = zip(parts, spelled, strict=True)
    return [part for part, raw in pairs if not _WORD(_EDGES.sub("", raw))]


def _cuts(run: str) -> list[str]:
    """The parts of ``run`` between the characters that are not letters or digits
    (:data:`_CUT`), normalised, but those spelled as a word (``[A-Z]?[a-z]+``)."""
    if run.isascii():  # each part letters and digits: normalised, it is lower-cased
        return [part.lower() for part in _CUT.split(run) if not _WORD(part)]
    return [_norm(part) for part in _CUT.split(run) if not _WORD(part)]


def _place(found: _Session, chains: list[_Chain], piece: str, call: int) -> str | None:
    """Join ``piece`` (sent by ``call``) to ``chains``: the chain it makes, when that
    holds another piece (of an earlier call, or of this one) and is longer than the
    piece and than each chain it joined, at least :data:`MIN_TOKEN` characters. The
    chains hold only what allowed calls sent (:meth:`Pieces.sent`): a piece a chain
    holds already adds nothing that has not left."""
    text, parts = piece, frozenset(((call, piece),))
    longest = len(piece)
    for _ in range(_PASSES):
        merged_any = False
        for chain in list(chains):
            merged = _merge(chain.text, text, found)
            if merged is not None:
                chains.remove(chain)
                longest = max(longest, len(chain.text))
                text, parts = merged, _bounded(parts | chain.parts)
                merged_any = True
        if not merged_any:
            break
    chains.append(_Chain(text, parts))
    if len(chains) > MAX_CHAINS:
        del chains[0]
    if len(parts) > 1 and len(text) > longest and len(text) >= MIN_TOKEN:
        return text
    return None


def _bounded(parts: frozenset[tuple[int, str]]) -> frozenset[tuple[int, str]]:
    """At most :data:`_PARTS` of a chain's pieces kept (two tell it is joined)."""
    return parts if len(parts) <= _PARTS else frozenset(sorted(parts)[-_PARTS:])


def _merge(left: str, right: str, found: _Session) -> str | None:
    """The text ``left`` and ``right`` make when one holds the other, or one ends where
    the other starts (overlapping or not) with every gram across the seam kept; None
    when they do not meet. At most :data:`MAX_CHAIN` characters."""
    if right in left:
        return left
    if left in right:
        return right
    return _seam(left, right, found) or _seam(right, left, found)


def _seam(first: str, second: str, found: _Session) -> str | None:
    """``first`` then ``second``, overlapping by as much as they can (the longest suffix
    of ``first`` that starts ``second``, at most :data:`_MAX_OVERLAPS` tried), with
    every gram across the seam kept."""
    size = len(first)
    if size + len(second) > MAX_CHAIN + min(size, len(second)):
        return None  # too long whatever the overlap
    overlaps: list[int] = []
    head = second[:GRAM]
    at = first.find(head)
    while at != -1 and len(overlaps) < _MAX_OVERLAPS:  # overlaps of a gram or more
        if first.endswith(second[: size - at]):
            overlaps.append(size - at)
        at = first.find(head, at + 1)
    overlaps.extend(
        overlap
        for overlap in range(min(GRAM - 1, size, len(second) - 1), 0, -1)
        if first.endswith(second[:overlap])
    )
    overlaps.append(0)
    kept = found.kept
    for overlap in overlaps[: _MAX_OVERLAPS + GRAM]:
        joined = first + second[overlap:]
        if len(joined) > MAX_CHAIN:
            continue
        start = size - overlap  # where ``second`` starts in ``joined``
        if all(kept(joined[at : at + GRAM]) for at in range(max(0, size - GRAM + 1), start)):
            return joined
    return None
