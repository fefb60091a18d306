"""What a session's earlier calls sent, kept just long enough to join to the next call:
a secret cut into pieces shorter than a gram and sent over several calls.

A ``flows_from`` test finds data an earlier step returned when a call's argument shares
a run of 16 normalised characters (a gram) or a whole specific token with it
(:mod:`interlock.session.fingerprints`). A 40-character key sent ten characters a call
shares neither with the key in any one call. So, for each session, the process keeps
the **tail** of what each top-level argument (by name) last sent — at most
:data:`TAIL` characters of its trailing run without whitespace, grown across calls
while each call's value is one such run (``"wJalrXUtnF"``, then ``"EMI-K7MDEN"``: the
tail is ``"wJalrXUtnFEMI-K7MDEN"``). The next call's value of that argument is probed
joined to it (its first :data:`TAIL` characters, and its first and last runs):
:func:`~interlock.session.fingerprints.probe_across` — the grams and the whole token
across the seam, and the decodings of a run across it that may be an encoding (a
base64 encoding cut into pieces); never what the tail holds alone (judged with its own
call: the data may hold it since, as when a value sent is read back, and that is no
new flow).

Kept in this process's memory only, never in a store: a tail is the argument's own
text, and a session's store keeps no argument text (the audit record keeps it, under
its redaction). So the pieces of one session judged in one process are joined; pieces
spread over the replicas of a shared server (or the worker processes of
``interlock serve --workers``), each judging some, are not. Bounded: the tails of at
most :data:`MAX_SESSIONS` sessions (the least recently advanced leave first) and
:data:`MAX_NAMES` argument names a session.

An argument that is an ``http(s)`` URL is read as a server reads it
(``urllib.parse``), and each part a piece may ride keeps a tail of its own (the URL
as a whole keeps none): each query
parameter's value (``?t=<piece>``, decoded), the last path segment, the fragment and
the first label of the host (``<piece>.collector.example``).

Only a call a ``flows_from`` test reads advances its session's tails (once a check,
whatever number of tests read it), and only its string and number arguments; pieces
sent in different arguments (or query parameters), in calls no such test reads, or
interleaved with another value in the same argument are not joined.
"""

from __future__ import annotations

import threading
import weakref
from typing import TYPE_CHECKING, Any, Final
from urllib.parse import parse_qsl, unquote, urlsplit

from interlock.session.fingerprints import probe_across
from interlock.session.history import untracked

if TYPE_CHECKING:
    from interlock.session.fingerprints import Probe

__all__ = ["MAX_NAMES", "MAX_SESSIONS", "TAIL", "ArgumentTails", "Joined", "Tails", "tails_of"]

#: Characters of an argument's tail kept, and of the next value joined to it: enough
#: for 15 normalised characters either side of the seam (a gram across it) when a
#: third of the text is punctuation, and for a short token whole.
TAIL: Final = 48
#: Sessions whose tails are kept in one process.
MAX_SESSIONS: Final = 10_000
#: Argument names whose tails are kept a session.
MAX_NAMES: Final = 32
#: The seams of short texts already probed, by (tail, head): an agent sends the same
#: value again and again (bounded as the probes of values seen before).
_SEAMS_KEPT: Final = 1024

#: A session's tails: (stream, tail) pairs — a tuple, so that the same tails and the
#: same arguments again find what they joined (:meth:`ArgumentTails.advance`).
Tails = tuple[tuple[str, str], ...]
#: What a call's values joined to the tails: (argument name, probe) pairs.
Joined = tuple[tuple[str, "Probe"], ...]
_NO_TAILS: Final[Tails] = ()

#: The longest text a call's arguments may hold for what it joined to be kept by its
#: values (a memo of long values would hold them).
_MEMO_LONGEST: Final = 256

#: Query parameters of one URL given a stream each.
_MAX_QUERY: Final = 8

_PARTS: dict[tuple[str, str], tuple[tuple[str, str], ...] | None] = {}


def _url_parts(name: str, url: str) -> tuple[tuple[str, str], ...] | None:
    """The parts of ``url`` a server receives that a piece of data may ride, as
    (stream name, text): each query parameter's value (``name?key``, decoded), the
    last path segment (``name/``), the fragment (``name#``) and the first label of a
    host of three or more (``name@``: ``<piece>.collector.example``); None when it
    cannot be read as a URL after all (an unclosed IPv6 bracket...). Cached."""
    key = (name, url)
    if key in _PARTS:
        return _PARTS[key]
    parts: list[tuple[str, str]] = []
    out: tuple[tuple[str, str], ...] | None
    try:
        split = urlsplit(url)
        host = split.hostname or ""
    except ValueError:
        out = None
    else:
        for query, value in parse_qsl(split.query, keep_blank_values=True)[:_MAX_QUERY]:
            parts.append((f"{name}?{query[:TAIL]}", value))
        segment = split.path.rsplit("/", 1)[-1]
        if segment:
            parts.append((f"{name}/", unquote(segment)))
        if split.fragment:
            parts.append((f"{name}#", unquote(split.fragment)))
        labels = host.split(".")
        if len(labels) >= 3 and labels[0]:
            parts.append((f"{name}@", labels[0]))
        out = tuple(parts)
    if len(_PARTS) >= _SEAMS_KEPT:
        _PARTS.clear()
    _PARTS[(name, url)] = out
    return out


def _last_run(text: str) -> str | None:
    """The run without whitespace ``text`` ends with (at most its last :data:`TAIL`
    characters; empty when it ends with whitespace), or None when the text's last
    :data:`TAIL` characters are one run (the text may continue a tail)."""
    window = text[-TAIL:]
    if window[-1:].isspace():
        return ""
    parts = window.rsplit(None, 1)
    if len(parts) == 1 and len(parts[0]) == len(window):
        return None
    return parts[-1]


class ArgumentTails:
    """The tails of the arguments of the sessions one history judges in this process."""

    __slots__ = ("_lock", "_memo", "_seams", "_sessions")

    def __init__(self) -> None:
        self._sessions: dict[tuple[str, str], Tails] = {}
        self._seams: dict[tuple[str, str], Probe] = {}
        #: (tails, argument items) -> (the tails after, what they join)
        self._memo: dict[Any, tuple[Tails, Joined]] = {}
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._sessions)

    def tails(self, tenant: str, session_id: str) -> dict[str, str]:
        """The session's tails, by stream (for tests and tools)."""
        return dict(self._sessions.get((tenant, session_id), _NO_TAILS))

    def advance(self, tenant: str, session_id: str, args: Any) -> Joined:
        """The probes of ``args``' values joined to the session's tails, each with its
        argument's name (``"*"`` for arguments that are one value), and the tails
        advanced past them. Call it once a check."""
        items = tuple(args.items()) if type(args) is dict else (("*", args),)
        key = (tenant, session_id)
        with self._lock:
            sessions = self._sessions
            tails = sessions.pop(key, _NO_TAILS)  # put back last: the most recent
            memo_key: Any = None
            found = None
            if all(type(value) is not str or len(value) <= _MEMO_LONGEST for _, value in items):
                try:
                    memo_key = (tails, items)
                    found = self._memo.get(memo_key)
                except TypeError:  # an unhashable argument value (a list, a dict)
                    memo_key = None
            if found is None:
                found = self._advanced(tails, items)
                if memo_key is not None:
                    if len(self._memo) >= _SEAMS_KEPT:
                        self._memo.clear()
                    self._memo[memo_key] = found
            tails, joined = found
            if tails:
                sessions[key] = tails
                while len(sessions) > MAX_SESSIONS:
                    del sessions[next(iter(sessions))]
        return joined

    def _advanced(self, old: Tails, items: tuple[tuple[Any, Any], ...]) -> tuple[Tails, Joined]:
        """The tails after ``items`` and what they join: a function of its inputs (the
        same tails and values again — an agent's usual call — are one lookup)."""
        tails = dict(old)
        joined: list[tuple[str, str, str]] = []
        for name, value in items:
            kind = type(value)
            if kind is str:
                text = value
            elif kind is int or kind is float:
                text = str(value)
            else:
                continue
            if not text or type(name) is not str:
                continue
            parts = (
                _url_parts(name, text)
                if text[:4].lower() == "http" and "://" in text[4:8]
                else None
            )
            if parts is None:
                _step(tails, name, name, text, joined)
            else:  # its parts, not the whole: "...?d=<piece>https://..." joins nothing
                for part, piece in parts:
                    _step(tails, name, part, piece, joined)
        seam = self._seam
        return (
            tuple(tails.items()),
            tuple([(name, seam(tail, head)) for name, tail, head in joined]),
        )

    def _seam(self, tail: str, head: str) -> Probe:
        key = (tail, head)
        found = self._seams.get(key)
        if found is None:
            found = untracked(probe_across(tail, head))  # out of the collector's walk
            if len(self._seams) >= _SEAMS_KEPT:
                self._seams.clear()
            self._seams[key] = found
        return found


def _step(
    tails: dict[str, str], name: str, stream: str, text: str, joined: list[tuple[str, str, str]]
) -> None:
    """Join ``text`` to the tails of ``stream`` (in ``joined``, under the argument's
    ``name``) and advance them past it: the stream's tail, and the first run of its last
    value when that value was not one run ("<piece> (part 2)" after "<piece> (part 1)")."""
    tail = tails.get(stream)
    last = _last_run(text)
    if tail:
        joined.append((name, tail, text[:TAIL]))
        if last:  # "part 2: <piece>" after "part 1: <piece>"
            joined.append((name, tail, last))
    elif len(tails) >= MAX_NAMES:
        return
    # the tail grows while each value is one run, else restarts at the value's last run
    tails[stream] = ((tail or "") + text[-TAIL:])[-TAIL:] if last is None else last
    first_stream = stream + "^"
    if last is None:
        tails.pop(first_stream, None)
        return
    runs = text[:TAIL].split(None, 1)
    first = tails.pop(first_stream, None)
    if runs:
        if first:
            joined.append((name, first, runs[0]))
        tails[first_stream] = runs[0]


_BY_HISTORY: weakref.WeakKeyDictionary[object, ArgumentTails] = weakref.WeakKeyDictionary()
_BY_HISTORY_LOCK: Final = threading.Lock()


def tails_of(history: object) -> ArgumentTails:
    """The tails of the sessions ``history`` holds, in this process: shared by every
    guard of that history (a new set when it cannot be referred to weakly)."""
    with _BY_HISTORY_LOCK:
        try:
            found = _BY_HISTORY.get(history)
            if found is None:
                found = _BY_HISTORY[history] = ArgumentTails()
        except TypeError:
            return ArgumentTails()
        return found
