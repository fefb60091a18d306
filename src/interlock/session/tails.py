"""What a session's earlier calls sent, kept just long enough to join to the next call:
a secret cut into pieces shorter than a gram and sent over several calls.

A ``flows_from`` test finds data an earlier step returned when a call's argument shares
a run of 16 normalised characters (a gram) or a whole specific token with it
(:mod:`interlock.session.fingerprints`). A 40-character key sent ten characters a call
shares neither with the key in any one call. So, for each session, the process keeps
what each argument (by name: a *stream*; a value in a dict or a list by its path,
``json.data``, ``items[]``) last sent:

- its **tail** — at most :data:`TAIL` characters of its trailing run without
  whitespace, grown across calls while each call's value is one such run
  (``"wJalrXUtnF"``, then ``"EMI-K7MDEN"``: the tail is ``"wJalrXUtnFEMI-K7MDEN"``);
- its **head** — how its values start, grown to the left the same way (pieces sent
  last to first);
- the **first run** of its last value when that was not one run (``"<piece> (part 1)"``).

The next call's value of that argument is probed joined to them — the tail to the
value's start and to its last run, the value's end to the head, the first run to the
value's first run: :func:`~interlock.session.fingerprints.probe_across`, the grams and
the whole token across the seam, and the decodings of a run across it that may be an
encoding (a base64 encoding cut into pieces); never what either side holds alone (the
earlier value was judged with its own call: the data may hold it since, as when a value
sent is read back, and that is no new flow).

Kept in this process's memory only, never in a store: a tail is the argument's own
text, and a session's store keeps no argument text (the audit record keeps it, under
its redaction). So the pieces of one session judged in one process are joined; pieces
spread over the replicas of a shared server (or the worker processes of
``interlock serve --workers``), each judging some, are not. Bounded: the tails of at
most :data:`MAX_SESSIONS` sessions (the least recently advanced leave first) and
:data:`MAX_NAMES` streams a session (the least recently stepped leaves for a new one:
streams filled once do not keep the next argument out; :data:`ACROSS` always stays).

An argument that is an ``http(s)`` URL is read as a server reads it
(``urllib.parse``), and each part a piece may ride is a stream of its own (the URL as
a whole is none): :func:`_url_parts` (query keys and values, path segments, the
fragment, host labels, the user and password).

Pieces sent in turn in different arguments (``{"a": <piece 1>}``, ``{"b": <piece 2>}``)
or query parameters are joined by one more stream, :data:`ACROSS`: every *piece* — a
value of one run of at most :data:`TAIL` characters that is not its stream's last
value sent again (an unchanged recipient is no piece) and has a digit, a capital or a
sign (lowercase names, paths and addresses are none: :data:`_PLAIN`) — in the order
the calls sent them. While the pieces all come from one stream it is that stream's
state, and makes no seams of its own.

Only a call a ``flows_from`` test reads advances its session's tails (once a check,
whatever number of tests read it), and only its string and number values (at most
:data:`MAX_VALUES` a call, :data:`MAX_DEPTH` levels down in dicts and lists); pieces
sent in calls no such test reads, or with another changing value between them (in the
same argument, or, for :data:`ACROSS`, a piece-like value of any argument: a counter
sent beside each piece), and lowercase words sent in turn in two arguments, are not
joined.
"""

from __future__ import annotations

import base64
import re
import threading
import weakref
from typing import TYPE_CHECKING, Any, Final
from urllib.parse import parse_qsl, unquote, unquote_plus, urlsplit

from interlock._extension import switched_off
from interlock.session import fingerprints
from interlock.session.fingerprints import _json_unescape, probe_across
from interlock.session.history import untracked
from interlock.session.pieces import _WORD, Pieces

if TYPE_CHECKING:
    from interlock.session.fingerprints import Probe

__all__ = [
    "ACCELERATED",
    "ACROSS",
    "MAX_DEPTH",
    "MAX_NAMES",
    "MAX_SESSIONS",
    "MAX_VALUES",
    "TAIL",
    "ArgumentTails",
    "Joined",
    "tails_of",
]

#: The stream of the pieces every argument sent, in the order they came: a piece (a
#: value of one run, at most :data:`TAIL` characters, that is not its stream's last
#: value again) of one argument joins the piece another argument sent before it.
ACROSS: Final = "\x00across"
#: The same for what pieces each encoded on their own decode to (:func:`_decoded`).
ACROSS_DECODED: Final = ACROSS + "~"
_ACROSSES: Final = (ACROSS, ACROSS_DECODED)
#: A value of lowercase letters and the punctuation of names, paths and addresses alone
#: (``views.py``, ``carol@corp.example``) is no piece for :data:`ACROSS`: a piece of a
#: specific token has a digit, a capital or another sign (what makes it specific), and
#: an agent's ordinary short values, changing all the time, would be joined for nothing.
#: Nor is such a name stepped at all (an argument's name, a dict's key, a query's key:
#: ``subject``, ``page``), or every call would join its names.
_PLAIN: Final = re.compile(r"[a-z.@/_:-]*").fullmatch
#: How deep in an argument's dicts and lists values are stepped (``{"json": {"d":
#: <piece>}}`` is the stream ``json.d``; a list's items, in order, ``items[]``), and how
#: many values of one call at most.
MAX_DEPTH: Final = 6
MAX_VALUES: Final = 256
#: Characters of an argument's tail kept, and of the next value joined to it: enough
#: for 15 normalised characters either side of the seam (a gram across it) when a
#: third of the text is punctuation, and for a short token whole.
TAIL: Final = 48
#: Sessions whose tails are kept in one process.
MAX_SESSIONS: Final = 10_000
#: Streams kept a session (an argument is one, a URL argument one a part).
MAX_NAMES: Final = 32
#: Entries of each cache here (the seams probed, by their two texts; a stream's steps,
#: by state and value; a URL's parts, by its text), each emptied whole when full: an
#: agent sends the same values again and again (bounded as the probes of values seen
#: before).
_KEPT: Final = 1024

#: What a call's values joined to the tails: (argument name, probe) pairs.
Joined = tuple[tuple[str, "Probe"], ...]
#: A stream's state: its tail, the first run of its last value (None when that was one
#: run) and its head.
_State = tuple[str, "str | None", str]
_NEW: Final[_State] = ("", None, "")
#: A piece for ACROSS: the argument's name, the piece, its stream's state before and after.
_Piece = tuple[str, str, _State, _State]
#: A stream's state after a value, and the seams the value made.
_Stepped = tuple[_State, tuple[tuple[str, str], ...]]

#: The longest value whose step is kept by its text (a memo of long values would
#: hold them).
_MEMO_LONGEST: Final = 256

#: Query parameters of one URL given a stream each; path segments and host labels.
_MAX_QUERY: Final = 8
_MAX_SEGMENTS: Final = 8

_PARTS: dict[tuple[str, str], tuple[tuple[str, str], ...] | None] = {}
_UNREAD: Final = object()
#: The longest URL whose parts are kept by its text.
_URL_KEPT_LONGEST: Final = 2048


#: What :func:`_split_plainly` leaves to ``urlsplit``: a control character or a space
#: (stripped or dropped there), a bracket (an IPv6 host, validated there).
_NOT_PLAIN_URL: Final = re.compile(r"[\x00-\x20\[\]\x7f]").search
_NETLOC_END: Final = re.compile(r"[/?#]").search
#: A host (and port) whose parts are read without ``urlsplit``: no user, no zone.
_PLAIN_NETLOC: Final = re.compile(r"[^@%]*").fullmatch


def _split_plainly(url: str) -> tuple[str, str, str, str, str] | None:
    """``tuple(urlsplit(url))`` of an ASCII ``http(s)://`` URL without white space,
    control characters or brackets — what ``urlsplit`` does to such a URL, without its
    cache (an agent's new URL misses it: 4–5 µs); None for any other URL."""
    if not url.isascii() or _NOT_PLAIN_URL(url):
        return None
    start = url[:8].lower()
    if start == "https://":
        scheme, rest = "https", url[8:]
    elif start[:7] == "http://":
        scheme, rest = "http", url[7:]
    else:
        return None
    end = _NETLOC_END(rest)
    netloc, rest = (rest, "") if end is None else (rest[: end.start()], rest[end.start() :])
    rest, _, fragment = rest.partition("#")
    path, _, query = rest.partition("?")
    return scheme, netloc, path, query, fragment


def _url_parts(name: str, url: str) -> tuple[tuple[str, str], ...] | None:
    """The parts of ``url`` a server receives that a piece of data may ride, as
    (stream name, text): the query's keys (``name?``) and each parameter's value
    (``name?key``, decoded), each path segment but the last by its place (``name/1``...)
    and the last (``name/``), the fragment (``name#``), each label of the host before
    its last two (``name@``, ``name@1``...: ``<piece>.collector.example``) and the user
    and password (``name:``); None when it cannot be read as a URL after all (an
    unclosed IPv6 bracket...). Cached."""
    key = (name, url)
    found = _PARTS.get(key, _UNREAD)  # one lookup: another thread may empty the cache
    if found is not _UNREAD:
        return found  # type: ignore[return-value]
    parts: list[tuple[str, str]] = []
    out: tuple[tuple[str, str], ...] | None
    plainly = _split_plainly(url)
    if plainly is not None and not _PLAIN_NETLOC(plainly[1]):
        plainly = None  # a user, a zone: urlsplit's hostname, username and password
    try:
        split = urlsplit(url) if plainly is None else None
    except ValueError:
        out = None
    else:
        users: tuple[str | None, ...] = ()
        if split is None:
            assert plainly is not None
            # split.hostname, its usual case: the host before any port, lower-cased
            _, netloc, path, query_text, fragment = plainly
            host = netloc.partition(":")[0].lower()
        else:
            path, query_text, fragment = split.path, split.query, split.fragment
            host = split.hostname or ""
            users = (split.username, split.password)
        if query_text:
            for query, value in parse_qsl(query_text, keep_blank_values=True)[:_MAX_QUERY]:
                if not _PLAIN(query):  # the keys, in order, one stream: "?<piece>=1"
                    parts.append((name + "?", query))
                if value:  # "?q=&page=2": an empty value sends nothing
                    parts.append((f"{name}?{query[:TAIL]}", value))
        segments = path.split("/")
        for at, segment in enumerate(segments[1:-1][:_MAX_SEGMENTS], 1):
            if segment:  # "/c/<piece>/pixel.gif": each segment but the last by its place
                parts.append((f"{name}/{at}", unquote(segment)))
        if segments[-1]:
            parts.append((name + "/", unquote(segments[-1])))
        if fragment:
            parts.append((name + "#", unquote(fragment)))
        labels = host.split(".")
        for at, label in enumerate(labels[:-2][:_MAX_SEGMENTS]):
            if label:  # "<piece>.collector.example", "a.<piece>.collector.example"
                parts.append((f"{name}@{at or ''}", label))
        for user in users:
            if user:  # "https://u:<piece>@collector.example/"
                parts.append((name + ":", unquote(user)))
        out = tuple(parts)
    if len(url) <= _URL_KEPT_LONGEST:
        if len(_PARTS) >= _KEPT:
            _PARTS.clear()
        _PARTS[key] = out
    return out


_DECODED: dict[str, str | None] = {}
#: A value wholly in hex, or in base64 (either alphabet): what :func:`_decoded` reads.
_HEX_WHOLE: Final = re.compile(r"(?:[0-9a-fA-F]{2}){4,}").fullmatch
_B64_WHOLE: Final = re.compile(r"[A-Za-z0-9+/_-]{8,}={0,2}").fullmatch
#: ... or in base32, of either case or both (a host name's label is read lower-cased),
#: padded or not; or in base32's extended hex alphabet (RFC 4648: ``0-9A-V``).
_B32_WHOLE: Final = re.compile(r"[A-Za-z2-7]{8,}={0,6}").fullmatch
_B32HEX_WHOLE: Final = re.compile(r"[0-9A-Va-v]{8,}={0,6}").fullmatch
#: The runs of a text with white space :func:`_decoded` reads (:func:`_runs_decoded`):
#: the first, the last, and each other among the first this many that is not a word.
_DECODED_RUNS: Final = 32
#: What ``unquote`` decodes: a ``%`` and two hex digits (a ``%`` alone stays).
_ESCAPE: Final = re.compile("%[0-9A-Fa-f]{2}").search


def _decoded(text: str) -> str | None:
    """What ``text`` reads as when the whole of it is in one encoding, one layer down
    — URL-encoding (``%77%4A``), JSON escapes (``\\u0077``), hex, base64, base32 (of
    either case or both, or in its extended hex alphabet) — as printable text other
    than itself; in a text with white space that is not (and has no ``%`` or ``\\``:
    those are decoded whole), what its runs read as in hex, base64 or base32, each
    (``part 1: <base64 of piece 1> end``), one space between — its first run, its
    last, and each other among its first :data:`_DECODED_RUNS` that is not a word
    (:func:`_runs_decoded`); else None. Each piece of a secret encoded on its own
    (``base64(piece 1)``, ``base64(piece 2)``) joins no better than the encodings do;
    what they decode to is a stream of its own (``name~``). Cached. The C loop asks
    only for a text with a ``%`` or a ``\\``, or one that (or one of whose runs read)
    it decodes itself in hex, base64 or base32 to what may be printable text
    (``_history.c``, ``tails_may_decode``): for any other, this is None."""
    found = _DECODED.get(text, _UNREAD)
    if found is not _UNREAD:
        return found  # type: ignore[return-value]
    out = _decoded_whole(text)
    if out is None and "%" not in text and "\\" not in text:  # (those: decoded whole)
        runs = text.split()
        if runs and runs != [text]:  # white space: its runs (_runs_decoded)
            decodings = [
                found for run in _runs_decoded(runs) if (found := _decoded_whole(run)) is not None
            ]
            out = " ".join(decodings) if decodings else None
    if len(text) <= _MEMO_LONGEST:
        if len(_DECODED) >= _KEPT:
            _DECODED.clear()
        _DECODED[text] = out
    return out


def _runs_decoded(runs: list[str]) -> list[str]:
    """Of a text's runs (more than one, or one between white space), those
    :func:`_decoded` reads: the first, the last, and each other among the first
    :data:`_DECODED_RUNS` that is not a word (``[A-Z]?[a-z]+``: an encoding of a piece
    has digits, signs or both cases; prose's words would be read as base32)."""
    last = len(runs) - 1
    read = [run for at, run in enumerate(runs[:_DECODED_RUNS]) if at in (0, last) or not _WORD(run)]
    if last >= _DECODED_RUNS:
        read.append(runs[last])
    return read


def _decoded_whole(text: str) -> str | None:
    """What ``text`` reads as when the whole of it is in one encoding (:func:`_decoded`)."""
    out: str | None = None
    if "%" in text:
        # "up 12%." decodes to itself (no escape, no "+"): None, without unquote_plus
        out = unquote_plus(text) if "+" in text or _ESCAPE(text) else None
    elif "\\" in text:
        out = _json_unescape(text)
    else:
        if _HEX_WHOLE(text):
            out = _text_of(bytes.fromhex(text))
        if out is None and _B64_WHOLE(text):
            out = _text_of(_b64(text))
        if out is None and _B32_WHOLE(text):  # a DNS label carries base32 (either case)
            out = _text_of(_b32(text))
        if out is None and _B32HEX_WHOLE(text):
            out = _text_of(_b32(text, hexed=True))
    if out is not None and (out == text or not out or not out.isprintable()):
        out = None
    return out


def _b64(text: str) -> bytes | None:
    """``text`` decoded as base64 (the URL-safe alphabet too, padding restored), or
    None when it is not."""
    run = text.rstrip("=").replace("-", "+").replace("_", "/")
    if len(run) % 4 == 1:
        return None
    try:
        return base64.b64decode(run + "=" * (-len(run) % 4), validate=True)
    except ValueError:
        return None


#: U+FFFD, the character a replaced byte decodes to, and its own UTF-8 bytes.
_REPLACED: Final = "\ufffd"
_REPLACED_BYTES: Final = _REPLACED.encode()


def _b32(text: str, hexed: bool = False) -> bytes | None:
    """``text`` decoded as base32 (its extended hex alphabet when ``hexed``; either
    case; padding restored), or None when it is not."""
    run = text.rstrip("=").upper()
    if len(run) % 8 in (1, 3, 6):  # no number of bytes encodes to these
        return None
    decode = base64.b32hexdecode if hexed else base64.b32decode
    try:
        return decode(run + "=" * (-len(run) % 8))
    except ValueError:
        return None


def _text_of(raw: bytes | None) -> str | None:
    """``raw`` as text when it is UTF-8 (what a piece of a secret decodes to). Most
    values read as hex or base64 are not (an id, an account number, a hash): decoded
    with replacement, a U+FFFD that ``raw`` does not spell is a byte that was not
    UTF-8 — None without raising (the exception cost more than the rest of the work)."""
    if raw is None:
        return None
    if raw.isascii():
        return raw.decode("ascii")
    text = raw.decode("utf-8", "replace")
    if _REPLACED not in text:
        return text
    if _REPLACED_BYTES not in raw:
        return None
    try:  # a U+FFFD of its own, and maybe a replaced byte too: strictly
        return raw.decode()
    except UnicodeDecodeError:
        return None


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


try:
    from interlock.session._history import TAILS_KEPT, advance_tails, probe_joined
except ImportError:  # not built: the Python below
    advance_tails = None  # type: ignore[assignment]
    probe_joined = None  # type: ignore[assignment]
else:
    if switched_off() or TAILS_KEPT != TAIL:
        advance_tails = None  # type: ignore[assignment]
        probe_joined = None  # type: ignore[assignment]
try:
    from interlock.session._speedups import across as _c_across
except ImportError:  # not built: _seam probes the seams
    _c_across = None  # type: ignore[assignment]
#: The C probe of a seam whose decodings are ASCII (what probe_across asks first), for
#: ``_history.probe_joined``; None where either is not built (``_seam`` probes them).
#: Used only while ``fingerprints.ACCELERATED`` (read at each call: tests turn it off).
_ACROSS_IN_C: Final = _c_across if probe_joined is not None else None

#: Whether :meth:`ArgumentTails.advance` runs its loop in C (``_history.advance_tails``)
#: by default.
ACCELERATED: Final = advance_tails is not None


class ArgumentTails:
    """The tails of the arguments of the sessions one history judges in this process.
    ``accelerated=False`` runs the Python reference even where the C loop is built."""

    __slots__ = ("_advance", "_lock", "_memo", "_seams", "_sessions", "pieces")

    def __init__(self, *, accelerated: bool = True) -> None:
        self._sessions: dict[tuple[str, str], dict[str, _State]] = {}
        #: (tail, head) -> the seam's probe: a frozenset (``_seam``) or a PrintSet (C)
        self._seams: dict[tuple[str, str], Probe] = {}
        #: (a stream's state, a value) -> (the state after, the seams the value made)
        self._memo: dict[tuple[_State, str], _Stepped] = {}
        self._lock = threading.Lock()
        self._advance = advance_tails if accelerated else None
        #: the tokens the sessions' data brought in, and the stretches of them their
        #: calls sent (pieces joined by where they sit in the data)
        self.pieces = Pieces()

    def __len__(self) -> int:
        return len(self._sessions)

    def tails(self, tenant: str, session_id: str) -> dict[str, str]:
        """The session's streams (for tests and tools): each stream's tail under its
        name, its head under ``name<`` and its first run, when kept, under ``name^``."""
        out: dict[str, str] = {}
        for stream, (tail, first, head) in self._sessions.get((tenant, session_id), {}).items():
            out[stream] = tail
            if first is not None:
                out[stream + "^"] = first
            out[stream + "<"] = head
        return out

    def advance(self, tenant: str, session_id: str, args: Any) -> Joined:
        """The probes of ``args``' values joined to the session's tails, each with its
        argument's name (``"*"`` for arguments that are one value), and the tails
        advanced past them. Call it once a check. What it raises (an int too long to
        print) leaves the session's tails kept, advanced past the values before it."""
        key = (tenant, session_id)
        with self._lock:
            sessions = self._sessions
            tails = sessions.pop(key, None)  # put back last: the most recent
            if tails is None:
                tails = {}
            try:
                if self._advance is not None:
                    joined = self._advance(
                        tails, args, _url_parts, MAX_NAMES, ACROSS, MAX_DEPTH, MAX_VALUES, _decoded
                    )
                else:
                    joined = self._advanced(tails, args)
            finally:
                if tails:
                    sessions[key] = tails
                    while len(sessions) > MAX_SESSIONS:
                        del sessions[next(iter(sessions))]
        placed = self.pieces.observe(tenant, session_id, args)
        if not joined:
            return tuple(placed)
        # probed out of the lock: other sessions' checks go on
        if self._advance is not None and _ACROSS_IN_C is not None and fingerprints.ACCELERATED:
            # _seam's loop in C
            found_joined = probe_joined(joined, self._seams, _ACROSS_IN_C, probe_across, _KEPT)
        else:
            seam = self._seam
            found_joined = [
                (name, found) for name, left, right in joined if (found := seam(left, right))
            ]
        return tuple(found_joined + placed if placed else found_joined)

    def _advanced(self, tails: dict[str, _State], args: Any) -> list[tuple[str, str, str]]:
        """The Python reference of the C loop (``_history.advance_tails``): each string
        and number value stepped (an ``http(s)`` URL by its parts; in a dict or a list,
        by its path), then :data:`ACROSS` past the pieces; the seams made, as
        (name, left, right)."""
        items = args.items() if type(args) is dict else (("*", args),)
        joined: list[tuple[str, str, str]] = []
        pieces: list[_Piece] = []  # for ACROSS
        decoded: list[_Piece] = []  # for ACROSS_DECODED
        budget = [MAX_VALUES]
        for name, value in items:
            if type(name) is str:
                if type(args) is dict and not _PLAIN(name):  # the names too: {"<piece>": 1}
                    self._walk(tails, name, "{}", name, 0, budget, joined, (pieces, decoded))
                self._walk(tails, name, name, value, 0, budget, joined, (pieces, decoded))
        for piece in pieces:
            self._across(tails, piece, joined, ACROSS)
        for piece in decoded:
            self._across(tails, piece, joined, ACROSS_DECODED)
        return joined

    def _walk(
        self,
        tails: dict[str, _State],
        name: str,
        stream: str,
        value: Any,
        depth: int,
        budget: list[int],
        joined: list[tuple[str, str, str]],
        pieces: tuple[list[_Piece], list[_Piece]],
    ) -> None:
        """Step ``value``, the stream ``stream`` of the argument ``name``: a string or a
        number itself, a dict's values as ``stream.key``, a list's (or tuple's) items
        in order as ``stream[]`` — at most :data:`MAX_DEPTH` levels down and
        :data:`MAX_VALUES` values a call (``budget``)."""
        kind = type(value)
        if kind is str:
            text = value
        elif kind is int or kind is float:
            text = str(value)
        elif depth < MAX_DEPTH and (kind is dict or kind is list or kind is tuple):
            depth += 1
            if kind is dict:
                keys = stream + "{}"
                for key, item in value.items():
                    if budget[0] <= 0:
                        return
                    if type(key) is str:  # the key too: {"<piece>": 1}
                        if not _PLAIN(key):
                            self._walk(tails, name, keys, key, depth, budget, joined, pieces)
                        inner = f"{stream}.{key[:TAIL]}"
                        self._walk(tails, name, inner, item, depth, budget, joined, pieces)
            else:
                inner = stream + "[]"
                for item in value:
                    if budget[0] <= 0:
                        return
                    self._walk(tails, name, inner, item, depth, budget, joined, pieces)
            return
        else:
            return
        if not text or budget[0] <= 0:
            return
        budget[0] -= 1
        parts = (
            _url_parts(stream, text) if text[:4].lower() == "http" and "://" in text[4:8] else None
        )
        if parts is None:
            self._step(tails, name, stream, text, joined, pieces[0])
            if (decoded := _decoded(text)) is not None:
                self._step(tails, name, stream + "~", decoded, joined, pieces[1])
        else:  # its parts, not the whole: "...?d=<piece>https://..." joins nothing
            for part, value_of_part in parts:
                self._step(tails, name, part, value_of_part, joined, pieces[0])
                if (decoded := _decoded(value_of_part)) is not None:
                    self._step(tails, name, part + "~", decoded, joined, pieces[1])

    def _step(
        self,
        tails: dict[str, _State],
        name: str,
        stream: str,
        text: str,
        joined: list[tuple[str, str, str]],
        pieces: list[_Piece] | None = None,
    ) -> None:
        """Join ``text`` to the tails of ``stream`` (into ``joined``, under the
        argument's ``name``) and advance them past it: a function of the stream's state
        and the text, so the same again (an agent's usual call) is one lookup. A piece
        (one run of at most :data:`TAIL` characters) that is not the stream's last value
        again goes into ``pieces``, for :data:`ACROSS`."""
        if not text:
            return
        state = tails.pop(stream, _NEW)  # put back last: the most recently stepped
        kept = len(tails) - (ACROSS in tails) - (ACROSS_DECODED in tails)
        if state is _NEW and kept >= MAX_NAMES:
            if MAX_NAMES <= 0:
                return
            # the least recently stepped stream leaves (never ACROSS): streams filled
            # once with junk do not keep the next argument's pieces out
            del tails[next(other for other in tails if other not in _ACROSSES)]
        after = tails[stream] = self._next(state, text, name, joined)
        if (
            pieces is not None
            and len(text) <= TAIL
            and not state[0].endswith(text)  # its value before, sent again: no piece
            and _last_run(text) is None
            and not _PLAIN(text)
        ):
            pieces.append((name, text, state, after))

    def _next(
        self, state: _State, text: str, name: str, joined: list[tuple[str, str, str]]
    ) -> _State:
        """The state after ``text``, its seams put into ``joined`` under ``name``."""
        if len(text) > _MEMO_LONGEST:
            found = self._stepped(state, text)
        else:
            key = (state, text)
            kept = self._memo.get(key)
            found = kept if kept is not None else self._memo_put(key, self._stepped(state, text))
        for left, right in found[1]:
            joined.append((name, left, right))
        return found[0]

    def _across(
        self,
        tails: dict[str, _State],
        piece: _Piece,
        joined: list[tuple[str, str, str]],
        across: str,
    ) -> None:
        """Advance :data:`ACROSS` past a piece (the argument's name, the piece, its
        stream's state before it and after). While the pieces all come from one stream,
        ACROSS is in that stream's state, and its seams would be the stream's own: it
        takes the stream's state after and joins nothing more."""
        name, text, before, after = piece
        state = tails.get(across, _NEW)
        tails[across] = after if state == before else self._next(state, text, name, joined)

    def _memo_put(self, key: tuple[_State, str], found: _Stepped) -> _Stepped:
        memo = self._memo
        if len(memo) >= _KEPT:
            memo.clear()
        memo[key] = found
        return found

    @staticmethod
    def _stepped(state: _State, text: str) -> _Stepped:
        """The stream's state after ``text`` and the seams it makes with it (each a
        pair of texts for :func:`~interlock.session.fingerprints.probe_across`). The
        tail grows while each value is one run, else restarts at the value's last run;
        the head (how the values start) grows to the left the same way, so pieces sent
        last to first join too; the first run of a value that is not one run is kept
        ("<piece> (part 2)" after "<piece> (part 1)")."""
        tail, first, head = state
        seams: list[tuple[str, str]] = []
        last = _last_run(text)
        runs = text[:TAIL].split(None, 1)
        one_run = last is None and len(runs) == 1 and len(runs[0]) == len(text[:TAIL])
        if tail:
            seams.append((tail, text[:TAIL]))
            if last:  # "part 2: <piece>" after "part 1: <piece>"
                seams.append((tail, last))
        if head:  # the earlier piece came after this one
            seams.append((text[-TAIL:] if last is None else last, head))
        new_tail = (tail + text[-TAIL:])[-TAIL:] if last is None else last
        new_head = (text + head)[:TAIL] if one_run else (runs[0] if runs else "")
        new_first = None
        if last is not None and runs:
            if first:
                seams.append((first, runs[0]))
            new_first = runs[0]
        return (new_tail, new_first, new_head), tuple(seams)

    def _seam(self, tail: str, head: str) -> Probe:
        key = (tail, head)
        found = self._seams.get(key)
        if found is None:
            found = untracked(probe_across(tail, head))  # out of the collector's walk
            if len(self._seams) >= _KEPT:
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
