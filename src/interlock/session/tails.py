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
joined to it (:func:`~interlock.session.fingerprints.probe_seams` of the tail and the
value's first :data:`TAIL` characters): the grams and whole tokens across the seam, and
the decodings of the joined text (a base64 encoding cut into pieces) — less what the
tail alone holds (judged with its own call: the data may hold it since, as when a
value sent is read back, and that is no new flow).

Kept in this process's memory only, never in a store: a tail is the argument's own
text, and a session's store keeps no argument text (the audit record keeps it, under
its redaction). So the pieces of one session judged in one process are joined; pieces
spread over the replicas of a shared server (or the worker processes of
``interlock serve --workers``), each judging some, are not. Bounded: the tails of at
most :data:`MAX_SESSIONS` sessions (the least recently advanced leave first) and
:data:`MAX_NAMES` argument names a session.

An argument that is an ``http(s)`` URL is also read as a server reads it
(``urllib.parse``), and each part a piece may ride keeps a tail of its own: each query
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
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any, Final
from urllib.parse import parse_qsl, unquote, urlsplit

from interlock.session.fingerprints import probe, probe_seams

if TYPE_CHECKING:
    from interlock.session.fingerprints import Probe

__all__ = ["MAX_NAMES", "MAX_SESSIONS", "TAIL", "ArgumentTails", "tails_of"]

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

#: Query parameters of one URL given a stream each.
_MAX_QUERY: Final = 8

_NO_PROBES: Final[dict[str, Probe]] = {}
_PARTS: dict[tuple[str, str], tuple[tuple[str, str], ...]] = {}


def _text(value: Any) -> str | None:
    kind = type(value)
    if kind is str:
        return value  # type: ignore[no-any-return]
    if kind is int or kind is float:
        return str(value)
    return None


def _streams(items: list[tuple[Any, Any]]) -> Iterator[tuple[str, str]]:
    """The streams of a call's arguments: each string or number argument by its name,
    and the parts of one that is a URL (:func:`_url_parts`) each by a name of its own."""
    for name, value in items:
        text = _text(value)
        if not text or type(name) is not str:
            continue
        yield name, text
        if text[:4].lower() == "http" and "://" in text[:8]:
            yield from _url_parts(name, text)


def _url_parts(name: str, url: str) -> tuple[tuple[str, str], ...]:
    """The parts of ``url`` a server receives that a piece of data may ride, as
    (stream name, text): each query parameter's value (``name?key``, decoded), the
    last path segment (``name/``), the fragment (``name#``) and the first label of a
    host of three or more (``name@``: ``<piece>.collector.example``). Cached."""
    found = _PARTS.get((name, url))
    if found is not None:
        return found
    parts: list[tuple[str, str]] = []
    try:
        split = urlsplit(url)
        host = split.hostname or ""
    except ValueError:  # not a URL after all (an unclosed IPv6 bracket...)
        split = None
    if split is not None:
        for key, value in parse_qsl(split.query, keep_blank_values=True)[:_MAX_QUERY]:
            parts.append((f"{name}?{key[:TAIL]}", value))
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

    __slots__ = ("_lock", "_seams", "_sessions")

    def __init__(self) -> None:
        self._sessions: dict[tuple[str, str], dict[str, str]] = {}
        self._seams: dict[tuple[str, str], Probe] = {}
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._sessions)

    def tails(self, tenant: str, session_id: str) -> dict[str, str]:
        """A copy of the session's tails, by argument name (for tests and tools)."""
        return dict(self._sessions.get((tenant, session_id), {}))

    def advance(self, tenant: str, session_id: str, args: Any) -> dict[str, Probe]:
        """The probes of ``args``' values joined to the session's tails (by argument
        name; ``"*"`` for arguments that are one value), and the tails advanced past
        them. Call it once a check."""
        items = list(args.items()) if type(args) is dict else [("*", args)]
        key = (tenant, session_id)
        with self._lock:
            sessions = self._sessions
            old = sessions.pop(key, None)  # re-inserted last: the most recent
            tails = dict(old) if old else {}
            joined: list[tuple[str, str, str]] = []
            for name, text in _streams(items):
                tail = tails.get(name)
                last = _last_run(text)
                if tail:
                    joined.append((name, tail, text[:TAIL]))
                    if last:  # "part 2: <piece>" after "part 1: <piece>"
                        joined.append((name, tail, last))
                elif len(tails) >= MAX_NAMES:
                    continue
                # the tail grows while each value is one run, else restarts
                tails[name] = ((tail or "") + text[-TAIL:])[-TAIL:] if last is None else last
                # "<piece> (part 2)" after "<piece> (part 1)": the first runs, joined
                first_name = name + "^"
                first = tails.pop(first_name, None)
                if last is not None:
                    runs = text[:TAIL].split(None, 1)
                    if runs:
                        if first:
                            joined.append((name, first, runs[0]))
                        tails[first_name] = runs[0]
            if tails:
                sessions[key] = tails
                while len(sessions) > MAX_SESSIONS:
                    del sessions[next(iter(sessions))]
        if not joined:
            return _NO_PROBES
        out: dict[str, Probe] = {}
        for name, tail, head in joined:
            found = self._seam(tail, head)
            if name in out:  # its first run's and its last run's
                found = frozenset(out[name]).union(found)
            out[name] = found
        return out

    def _seam(self, tail: str, head: str) -> Probe:
        key = (tail, head)
        found = self._seams.get(key)
        if found is None:
            # what spans the seam: the tail alone was judged with its own call (and
            # the data may hold it since: a value read back is no new flow)
            found = probe_seams(key) - probe(tail)
            if len(self._seams) >= _SEAMS_KEPT:
                self._seams.clear()
            self._seams[key] = found
        return found


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
