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
string hashes (the token's text is not kept): a token is a run of at least
:data:`MIN_TOKEN` characters between separators (white space, quotes, brackets,
``,;|\\=:``) that has a digit, a capital or a sign, or a run of at least
:data:`MIN_PLAIN_TOKEN` lowercase letters (a passphrase, not a word), lowercased.

When a call that a ``flows_from`` test reads is checked, each of its string and number
values (nested, its dicts' keys and the arguments' names, a URL's parts, percent-decoded)
is cut at the same separators into *runs*. A run of at least :data:`GRAM` characters
whose every gram is kept is a *piece* of some token. The session keeps the pieces its
calls sent as *chains*: a piece joins a chain when one ends where the other starts —
appended, prepended or overlapping, and every gram across the seam kept too — and the
chains it joins are joined in turn (pieces sent last to first, shuffled, or far apart
meet). When this call's piece makes a chain that holds an earlier call's piece longer
than both were, at least :data:`MIN_TOKEN` characters, the chain is probed like an
argument (:func:`~interlock.session.fingerprints.probe`), under the name of the
argument that sent the piece. The probe decides, against the session's fingerprints,
as for any other argument, with the ``flows_from`` test's selector: a chain the data
does not hold (grams of two tokens that happen to meet) finds nothing.

What it does not join: pieces shorter than :data:`GRAM` characters; a piece glued to
other characters in one run (``x<piece>y``); pieces re-encoded one by one (base64 of
each: the tails join those sent in turn); tokens of lowercase words shorter than
:data:`MIN_PLAIN_TOKEN`; data recorded in another process (a shared server receives a
result's fingerprints, never its text, so its calls' pieces are joined where the result
was); a chain pushed out by :data:`MAX_CHAINS` newer ones (pieces of the session's
other tokens sent between). Bounded: :data:`MAX_SESSIONS` sessions; :data:`MAX_GRAMS`
grams a session in each of two generations (when the newer is full, the older is
dropped: the most recent data is kept); :data:`MAX_CHAINS` chains of at most
:data:`MAX_CHAIN` characters a session; :data:`MAX_RUNS` runs read and
:data:`MAX_PIECES` pieces joined a call.
"""

from __future__ import annotations

import re
import threading
from typing import TYPE_CHECKING, Any, Final
from urllib.parse import unquote

from interlock.session.fingerprints import MAX_SCAN, probe, texts_of
from interlock.session.history import new_prints, untracked

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
GRAM: Final = 6
#: The shortest token kept (a digit, a capital or a sign in it), and the shortest run of
#: lowercase letters alone kept (a word is shorter: a passphrase is not); the shortest
#: chain probed.
MIN_TOKEN: Final = 12
MIN_PLAIN_TOKEN: Final = 20
#: Characters of a token kept (a longer one, a blob, by its start).
MAX_TOKEN: Final = 256
#: Bounds: sessions kept in one process; grams a session in each generation; chains a
#: session and characters a chain; runs read and pieces joined a call.
MAX_SESSIONS: Final = 1_000
MAX_GRAMS: Final = 16_384
MAX_CHAINS: Final = 64
MAX_CHAIN: Final = 256
MAX_RUNS: Final = 256
MAX_PIECES: Final = 32
_MAX_DEPTH: Final = 6
_MASK: Final = (1 << 64) - 1

_SEPARATORS: Final = "\\s\"'`<>()\\[\\]{},;|\\\\=:"
_TOKEN: Final = re.compile(f"[^{_SEPARATORS}]{{{MIN_TOKEN},}}")
_RUN: Final = re.compile(f"[^{_SEPARATORS}]{{{GRAM},}}")
#: Inside a run of an argument: where a URL's parts end (a piece in a path segment or a
#: query parameter is a run of its own too).
_SUBRUN: Final = re.compile(f"[^/?&#+]{{{GRAM},}}")
_DELIMITED: Final = re.compile("[/?&#+]").search
_PLAIN_WORDS: Final = re.compile(r"[a-z]*").fullmatch
#: A name or a key of lowercase letters and ``_`` alone (``subject``, ``page_size``) is
#: read as no piece: an agent's calls name their arguments so all the time.
_PLAIN_NAME: Final = re.compile(r"[a-z_]*").fullmatch


class _Chain:
    """Pieces joined: their text (lowercased), and the calls that sent them."""

    __slots__ = ("calls", "text")

    def __init__(self, text: str, calls: frozenset[int]) -> None:
        self.text = text
        self.calls = calls


class _Session:
    __slots__ = ("calls", "chains", "grams", "older", "seen")

    def __init__(self) -> None:
        self.grams: Prints = new_prints()
        self.older: Prints | None = None
        #: the hashes of the tokens whose grams are kept (a token again is not hashed)
        self.seen: set[int] = set()
        self.chains: list[_Chain] = []
        self.calls = 0

    def kept(self, gram: str) -> bool:
        value = hash(gram) & _MASK
        older = self.older
        return value in self.grams or (older is not None and value in older)


def _tokens(data: object) -> Iterator[str]:
    """The tokens of ``data``'s texts, lowercased, in its first ``MAX_SCAN`` characters
    (as its fingerprints)."""
    scanned = 0
    for leaf in texts_of(data):
        text = leaf[: MAX_SCAN - scanned]
        scanned += len(text)
        for match in _TOKEN.finditer(text):
            token = match.group()
            if _PLAIN_WORDS(token) and len(token) < MIN_PLAIN_TOKEN:
                continue
            yield token[:MAX_TOKEN].lower()
        if scanned >= MAX_SCAN:
            return


def _texts(args: Any) -> list[tuple[str, str]]:
    """The texts of ``args``' string and number values (and dict keys, and the
    arguments' names), each under its top-level argument's name (``"*"`` for a call of
    one value), at most :data:`MAX_RUNS`."""
    out: list[tuple[str, str]] = []
    items = args.items() if type(args) is dict else (("*", args),)
    for name, value in items:
        if type(name) is str:
            if len(name) >= GRAM and not _PLAIN_NAME(name):
                out.append((name, name))  # the name too: {"<piece>": True}
            _walk(name, value, 0, out)
        if len(out) >= MAX_RUNS:
            break
    return out


def _walk(name: str, value: Any, depth: int, out: list[tuple[str, str]]) -> None:
    kind = type(value)
    if kind is str:
        if len(value) >= GRAM:
            out.append((name, value))
    elif kind is int:
        if value >= 100_000 or value <= -100_000:
            out.append((name, str(value) if -(10**40) < value < 10**40 else ""))
    elif depth < _MAX_DEPTH and (kind is dict or kind is list or kind is tuple):
        for item in value.items() if kind is dict else value:
            if len(out) >= MAX_RUNS:
                return
            if kind is dict:  # the key too: {"<piece>": 1}
                if type(item[0]) is not str or not _PLAIN_NAME(item[0]):
                    _walk(name, item[0], _MAX_DEPTH, out)
                _walk(name, item[1], depth + 1, out)
            else:
                _walk(name, item, depth + 1, out)


#: text -> its runs, lowercased (an agent sends the same values again and again);
#: emptied whole when full
_RUNS: dict[str, tuple[tuple[str, int], ...]] = {}
_RUNS_KEPT: Final = 1024
_RUNS_LONGEST: Final = 256


def _runs_of(text: str) -> tuple[tuple[str, int], ...]:
    """The runs of ``text`` (and of its percent-decoding; in a run, those between a
    URL's delimiters too), lowercased, of :data:`GRAM` to :data:`MAX_CHAIN`
    characters, each with its first gram's hash."""
    found = _RUNS.get(text)
    if found is not None:
        return found
    runs: list[str] = []
    for form in (text, unquote(text)) if "%" in text else (text,):
        for run in _RUN.findall(form):
            runs.append(run)
            if len(run) > GRAM and _DELIMITED(run):
                runs.extend(_SUBRUN.findall(run))
    lowered: dict[str, int] = {}
    for run in runs:
        low = run.lower()
        # a letter whose lower case is longer has no place in a token's grams
        if len(low) == len(run) and len(low) <= MAX_CHAIN and low not in lowered:
            lowered[low] = hash(low[:GRAM]) & _MASK
    found = tuple(lowered.items())
    if len(text) <= _RUNS_LONGEST:
        if len(_RUNS) >= _RUNS_KEPT:
            _RUNS.clear()
        _RUNS[text] = found
    return found


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
            for token in tokens:
                marker = hash(token)
                if marker in found.seen:
                    continue
                if len(found.grams) + len(token) > MAX_GRAMS:  # a new generation
                    found.older = found.grams
                    found.grams = new_prints()
                    found.seen.clear()
                found.seen.add(marker)
                found.grams.update(
                    [hash(token[at : at + GRAM]) & _MASK for at in range(len(token) - GRAM + 1)]
                )

    def observe(self, tenant: str, session_id: str, args: Any) -> list[tuple[str, Probe]]:
        """The probes of the chains this call's pieces join to pieces earlier calls sent,
        each under the argument's name; the chains kept. Call it once a check."""
        key = (tenant, session_id)
        sessions = self._sessions
        if key not in sessions:  # the usual case: no data brought in (no lock)
            return []
        texts = _texts(args)
        if not texts:
            return []
        joined: list[tuple[str, str]] = []
        with self._lock:
            found = sessions.get(key)
            if found is None:
                return []
            found.calls += 1
            call = found.calls
            kept = found.kept
            grams, older = found.grams, found.older
            pieces = runs = 0
            for name, text in texts:
                for run, first in _runs_of(text):
                    runs += 1
                    if runs > MAX_RUNS or pieces >= MAX_PIECES:
                        break
                    if (first not in grams and (older is None or first not in older)) or not all(
                        kept(run[at : at + GRAM]) for at in range(1, len(run) - GRAM + 1)
                    ):
                        continue
                    pieces += 1
                    placed = _place(found, run, call)
                    if placed is not None:
                        joined.append((name, placed))
        return [(name, untracked(probe(text))) for name, text in joined]


def _place(found: _Session, piece: str, call: int) -> str | None:
    """Join ``piece`` (sent by ``call``) to the session's chains: the chain it makes,
    when that holds an earlier call's piece and is longer than the piece and than the
    chains it joined, at least :data:`MIN_TOKEN` characters."""
    chains = found.chains
    text, calls = piece, frozenset((call,))
    longest = len(piece)
    grown = True
    while grown:
        grown = False
        for chain in chains:
            merged = _merge(chain.text, text, found)
            if merged is not None:
                chains.remove(chain)
                longest = max(longest, len(chain.text))
                text, calls = merged, calls | chain.calls
                grown = True
                break
    chains.append(_Chain(text, calls))
    if len(chains) > MAX_CHAINS:
        del chains[0]
    if len(calls) > 1 and len(text) > longest and len(text) >= MIN_TOKEN:
        return text
    return None


def _merge(left: str, right: str, found: _Session) -> str | None:
    """The text ``left`` and ``right`` make when one holds the other, or one ends where
    the other starts (overlapping or not) with every gram across the seam kept; None
    when they do not meet. At most :data:`MAX_CHAIN` characters."""
    if right in left:
        return left
    if left in right:
        return right
    for first, second in ((left, right), (right, left)):
        joined = _seam(first, second, found)
        if joined is not None:
            return joined
    return None


def _seam(first: str, second: str, found: _Session) -> str | None:
    """``first`` then ``second``, overlapping by as much as they can (the longest suffix
    of ``first`` that starts ``second``), with every gram across the seam kept."""
    kept = found.kept
    size = len(first)
    for overlap in range(min(size, len(second)) - 1, -1, -1):
        if overlap and not first.endswith(second[:overlap]):
            continue
        joined = first + second[overlap:]
        if len(joined) > MAX_CHAIN:
            return None
        start = size - overlap  # where ``second`` starts in ``joined``
        if all(kept(joined[at : at + GRAM]) for at in range(max(0, size - GRAM + 1), start)):
            return joined
    return None
