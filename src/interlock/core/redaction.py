"""Redact secrets from text and nested values before they are logged or recorded.

Everything Interlock writes where a person or a file can see it — log lines, error
messages, audit records — passes through a :class:`Redactor` first. It knows the common
credential shapes (bearer tokens, cloud and SaaS API keys, JWTs, PEM private keys,
``password=...`` style pairs, auth headers, credentials in URLs) and replaces the
secret part with :data:`REDACTED`, keeping a short non-secret hint so a reader can
still tell what kind of secret was there.

Example::

    >>> from interlock.core.redaction import redact, redact_value
    >>> redact("curl -H 'Authorization: Bearer abc.def-123' https://api.example.com")
    "curl -H 'Authorization: [REDACTED]' https://api.example.com"
    >>> redact("GET /cb?token=abc123&page=2")
    'GET /cb?token=[REDACTED]&page=2'
    >>> redact_value({"user": "bob", "api_key": "anything", "raw": b"\\x00\\x01"})
    {'user': 'bob', 'api_key': '[REDACTED]', 'raw': '<bytes len=2>'}

All built-in patterns are linear-time: every unbounded repetition either always
succeeds or is anchored so that no two failing attempts rescan the same text.
Patterns passed as ``extra_patterns`` are the caller's responsibility in that respect.
"""

from __future__ import annotations

__all__ = ["REDACTED", "Redactor", "redact", "redact_value"]

import functools
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Final

REDACTED: str = "[REDACTED]"
"""The marker that replaces every secret."""

_TRUNCATED: Final = "<truncated: depth>"
_CYCLE: Final = "<cycle>"
_REPR_LIMIT: Final = 200
# A repr is redacted before it is cut to _REPR_LIMIT (cutting first could shorten a
# secret below its pattern's minimum length); only this much of it is scanned.
_REPR_SCAN_LIMIT: Final = 8192
# Ints this wide cannot be printed under Python's default int-to-str digit limit
# (4300 digits), so json.dumps would raise on them: they are described instead.
_INT_MAX_BITS: Final = 13_000


@dataclass(frozen=True, slots=True)
class _Rule:
    """One built-in secret shape.

    A match is ``first`` (a one-character class) followed by ``rest``; ``rest`` has
    exactly one capturing group, named ``s``: the secret. Text the match covers
    before and after that group is kept as the hint (before it only if
    ``keep_prefix``). Splitting off the first character lets the combined regex
    start with a character set, which the engine scans for without trying every
    rule at every position. Word-boundary checks are therefore written after the
    first character, as ``(?<!X.)``. ``triggers`` are lowercase literals at least
    one of which occurs in every possible match: text containing no trigger of any
    rule skips the regex altogether.
    """

    name: str
    first: str
    rest: str
    triggers: tuple[str, ...]
    keep_prefix: bool = True
    rescan_prefix: bool = False  # redact the kept prefix too (it may hold a token)


# -- building blocks ---------------------------------------------------------------

# An optional quote (possibly backslash-escaped, as in JSON inside a JSON string).
_OPT_QUOTE = r"""(?:\\?["'])?"""
# A quoted value's content; which branch applies is decided by the quote just consumed.
_QUOTED = (
    r'(?<=\\")[^"\\\r\n]+'  # \"...\"  (escaped JSON): stop at the next backslash
    r"|(?<=\\')[^'\\\r\n]+"
    r'|(?<=")(?:[^"\\\r\n]|\\.)+'  # "..." with backslash escapes
    r"|(?<=')(?:[^'\\\r\n]|\\.)+"
)
# A value never starts a PEM block: the PEM rule must see the BEGIN line to redact
# the whole key, so key=value and header rules step aside for it.
_NOT_PEM = r"(?!-----BEGIN )"
# After a key: optional closing quote, ':' or '=', optional opening quote.
_SEP = rf"{_OPT_QUOTE}[ \t]{{0,8}}[:=][ \t]{{0,8}}{_OPT_QUOTE}"
_HEADER_SEP = rf"{_OPT_QUOTE}[ \t]{{0,8}}:[ \t]{{0,8}}{_OPT_QUOTE}"
_PEM_LABEL = r"(?:[A-Z0-9]+ ){0,3}PRIVATE KEY(?: BLOCK)?"

_RULES: Final[tuple[_Rule, ...]] = (
    _Rule(
        # BEGIN line, body, END line (optional, so a truncated key is still covered).
        # The body stops at a quote or at a run of five dashes.
        "pem_private_key",
        "-",
        rf"----BEGIN {_PEM_LABEL}-----(?P<s>(?:[^\-\"']|-(?!----))*)"
        rf"(?:-----END {_PEM_LABEL}-----)?",
        ("private key",),
    ),
    _Rule(
        # Authorization / x-api-key / cookie headers: the value to the end of the line
        # (or to a closing quote followed by a delimiter, as in curl -H '...').
        # Listed before key_value, which would stop "api-key: a b" at the space.
        "http_header",
        "[aAcC]",
        r"(?:(?<=[aA])(?i:uthorization|pi-key|uth-token)|(?<=[cC])(?i:ookie))"
        rf"{_HEADER_SEP}(?P<s>{_NOT_PEM}(?:{_QUOTED}"
        r"|(?i:digest)[ \t][^\r\n]*"
        r"""|[^\s"'\\](?:[^\r\n"']|["'](?![\s,;)\]}]|\Z))*))""",
        ("authorization", "key", "token", "cookie"),
    ),
    _Rule(
        # password=..., "token": "...", ?access_token=...&x=1: any key ending in
        # password, passwd, passphrase, pwd, secret, token, api_key / apikey,
        # access_key, private_key or authorization.
        "key_value",
        "[pPsStTaA]",
        r"(?:(?<=[pP])(?i:assw(?:or)?d|assphrase|wd|rivate[_-]?key)|(?<=[sS])(?i:ecret)"
        r"|(?<=[tT])(?i:oken)|(?<=[aA])(?i:pi[_-]?key|ccess[_-]?key|uthorization))"
        rf"{_SEP}(?P<s>{_NOT_PEM}(?:{_QUOTED}"
        r"""|(?:(?i:bearer|basic)[ \t]+)?[^\s&"',;\\][^\s&"',;]*))""",
        ("pass", "pwd", "secret", "token", "key", "authorization"),
    ),
    _Rule(
        # scheme://user:password@host -- the password, up to the last '@'. The match
        # starts at "://" (the scheme stays outside it, untouched).
        "url_credentials",
        ":",
        r"""(?<=[A-Za-z0-9+.\-]:)//[^\s:/?#@"'<>]{0,256}:(?P<s>[^\s/?#"'<>]+)@""",
        ("@",),
        rescan_prefix=True,  # the kept user name may itself be a token
    ),
    _Rule(
        # RFC 6750 b64token, 8+ chars, not all lowercase after its first character
        # (so "Bearer authentication failed" is left alone).
        "bearer_token",
        "[bB]",
        r"(?<![A-Za-z0-9_\-].)(?i:earer)[ \t]+"
        r"(?P<s>(?=[A-Za-z0-9._~+/\-][a-z]*[A-Z0-9._~+/=\-])[A-Za-z0-9._~+/\-]{8,}=*)",
        ("bearer",),
    ),
    _Rule(
        "aws_access_key_id",
        "A",
        r"(?<![A-Za-z0-9].)(?:KIA|SIA)(?P<s>[A-Z0-9]{16})(?![A-Za-z0-9])",
        ("akia", "asia"),
    ),
    _Rule(
        "openai_anthropic_key",
        "s",
        r"(?<![A-Za-z0-9_\-].)k-(?:(?:proj|ant|svcacct|admin)-)?(?P<s>[A-Za-z0-9_\-]{20,})",
        ("sk-",),
    ),
    _Rule(
        "github_token",
        "g",
        r"(?<![A-Za-z0-9_].)(?:h[pousr]_(?=[A-Za-z0-9]{36})|ithub_pat_(?=[A-Za-z0-9_]{22}))"
        r"(?P<s>[A-Za-z0-9_]+)",
        ("ghp_", "gho_", "ghu_", "ghs_", "ghr_", "github_pat_"),
    ),
    _Rule(
        "slack_token",
        "x",
        r"(?<![A-Za-z0-9_\-].)ox[abprs]-(?P<s>[A-Za-z0-9\-]{10,})",
        ("xox",),
    ),
    _Rule(
        "google_api_key",
        "A",
        r"(?<![A-Za-z0-9_\-].)Iza(?P<s>[A-Za-z0-9_\-]{35,})",
        ("aiza",),
    ),
    _Rule(
        # header.payload.signature (the signature may be empty; JWE's five parts too).
        # The whole token is the secret: no hint is kept.
        "jwt",
        "e",
        r"(?<![A-Za-z0-9_\-].)(?P<s>yJ[A-Za-z0-9_\-]+\.[A-Za-z0-9_\-]+\.[A-Za-z0-9_\-]*"
        r"(?:\.[A-Za-z0-9_\-]+){0,2})",
        ("eyj",),
        keep_prefix=False,
    ),
)


def _combine(rules: Sequence[_Rule]) -> re.Pattern[str]:
    """``[all first chars](?:(?<=first_0)rest_0|...)``; rule i's group becomes ``s{i}``."""
    firsts = "".join(sorted({c for rule in rules for c in _chars(rule.first)}))
    branches = [
        f"(?<={rule.first}){rule.rest.replace('(?P<s>', f'(?P<s{i}>', 1)}"
        for i, rule in enumerate(rules)
    ]
    return re.compile(f"[{re.escape(firsts)}](?:{'|'.join(branches)})", re.ASCII)


def _chars(first: str) -> str:
    """The characters of a rule's ``first``: one literal, or a simple ``[...]`` class."""
    return first[1:-1] if first.startswith("[") else first


_COMBINED: Final = _combine(_RULES)
_TRIGGERS: Final = tuple(sorted({t for rule in _RULES for t in rule.triggers}))
# One C-level search instead of a Python loop over the triggers: same answer.
_TRIGGER_RE: Final = re.compile("|".join(re.escape(t) for t in _TRIGGERS))
_RESCAN: Final = tuple(rule.rescan_prefix for rule in _RULES)
_KEEP_PREFIX: Final = tuple(rule.keep_prefix for rule in _RULES)

# -- dict keys that name a secret ------------------------------------------------------

_SECRET_KEYS: Final = frozenset(
    {
        "password",
        "passwd",
        "pwd",
        "passphrase",
        "secret",
        "token",
        "api_key",
        "apikey",
        "access_key",
        "private_key",
        "authorization",
        "proxy_authorization",
        "x_api_key",
        "client_secret",
        "credential",
        "credentials",
        "cookie",
        "set_cookie",
    }
)
_SECRET_KEY_SUFFIXES: Final = (
    "_token",
    "_secret",
    "_password",
    "_passwd",
    "_key",
    "_credentials",
    "_apikey",
)
#: Names that end like a secret's but are identifiers, which a record must keep.
_NOT_SECRET_KEYS: Final = frozenset(
    {
        "idempotency_key",
        "primary_key",
        "foreign_key",
        "sort_key",
        "partition_key",
        "cache_key",
        "dedup_key",
        "dedupe_key",
    }
)
_CAMEL_RE: Final = re.compile(r"(?<=[a-z0-9])(?=[A-Z])")
_KEY_SEPARATORS_RE: Final = re.compile(r"[-\s.]+")


@functools.lru_cache(maxsize=4096)
def _is_secret_key(key: str) -> bool:
    """Whether a mapping key (a plain str) names a secret: ``apiKey``, ``X-Api-Key``..."""
    norm = _KEY_SEPARATORS_RE.sub("_", _CAMEL_RE.sub("_", key)).lower()
    if norm in _NOT_SECRET_KEYS:
        return False
    return norm in _SECRET_KEYS or norm.endswith(_SECRET_KEY_SUFFIXES)


def _int(value: int) -> int | str:
    bits = int.bit_length(value)
    return value if bits <= _INT_MAX_BITS else f"<int bits={bits}>"


def _type_name(value: object) -> str:
    try:
        name = type(value).__name__
    except Exception:
        return "object"
    return name if isinstance(name, str) else "object"


def _unrepresentable(value: object) -> str:
    return f"<unrepresentable: {_type_name(value)}>"


class _Pending:
    """Marks a container whose redacted copy is still being built."""


_PENDING: Final = _Pending()


class _Frame:
    """One container on the explicit walk stack of :meth:`Redactor.redact_value`."""

    __slots__ = ("depth", "index", "kind", "out_keys", "out_values", "pairs", "source")

    def __init__(
        self, source: object, kind: type, pairs: list[tuple[object, object]], depth: int
    ) -> None:
        self.source = source  # held so its id() stays unique for the whole walk
        self.kind = kind
        self.pairs = pairs
        self.depth = depth
        self.index = 0
        self.out_keys: list[object] = []
        self.out_values: list[object] = []

    def finish(self) -> object:
        if self.kind is list:
            return self.out_values
        if self.kind is tuple:
            return tuple(self.out_values)
        out: dict[object, object] = {}
        for key, value in zip(self.out_keys, self.out_values, strict=True):
            unique = key
            if unique in out:  # two keys redacted to the same text: keep both
                base = key if isinstance(key, str) else repr(key)
                n = 2
                while f"{base}#{n}" in out:
                    n += 1
                unique = f"{base}#{n}"
            out[unique] = value
        return out


# The fast path of redact_value takes values up to this deep and this many nodes.
_FAST_DEPTH: Final = 8
_FAST_NODES: Final = 512


class _NotPlain(Exception):
    """The value needs the full, guarded walk."""


class Redactor:
    """A compiled set of secret patterns: the built-ins plus optional extras.

    ``extra_patterns`` are user regexes, compiled once; a match is replaced whole by
    :data:`REDACTED`, or — if the pattern has a group named ``secret`` — only that
    group is. An invalid pattern raises :class:`ValueError` naming it. Instances are
    immutable and safe to share between threads.
    """

    __slots__ = ("_extra", "_extra_sources")

    def __init__(self, extra_patterns: Sequence[str] = ()) -> None:
        if isinstance(extra_patterns, str):
            raise TypeError("extra_patterns must be a sequence of regex strings, not one str")
        sources = tuple(extra_patterns)
        compiled: list[re.Pattern[str]] = []
        for pattern in sources:
            if not isinstance(pattern, str):
                raise TypeError(f"extra redaction pattern {pattern!r} is not a string")
            try:
                compiled.append(re.compile(pattern))
            except re.error as exc:
                raise ValueError(f"invalid extra redaction pattern {pattern!r}: {exc}") from exc
        self._extra: tuple[re.Pattern[str], ...] = tuple(compiled)
        self._extra_sources: tuple[str, ...] = sources

    @property
    def extra_patterns(self) -> tuple[str, ...]:
        """The extra patterns this redactor was built with."""
        return self._extra_sources

    def __repr__(self) -> str:
        return f"Redactor(extra_patterns={list(self._extra_sources)!r})"

    # -- text ------------------------------------------------------------------------

    def redact(self, text: str) -> str:
        """Return ``text`` with every secret replaced (hints such as ``Bearer `` kept)."""
        if not isinstance(text, str):
            raise TypeError(f"redact() takes a str, not {_type_name(text)}")
        lowered = str.lower(text)  # str.lower: a str subclass cannot lie about it
        if _TRIGGER_RE.search(lowered) is not None:
            text = _COMBINED.sub(_replace_builtin, text)
        for pattern in self._extra:
            text = pattern.sub(_replace_extra, text)
        return text

    # -- values ----------------------------------------------------------------------

    def redact_value(self, value: object, *, max_depth: int = 32) -> object:
        """Return a redacted, JSON-friendly copy of ``value``; never raises.

        Dicts, lists and tuples are copied with every string redacted; a dict value
        whose key names a secret (``password``, ``api_key``, ``X-Api-Key``,
        ``stripe_api_key``, ...) becomes :data:`REDACTED` whatever it is. Bytes become
        ``"<bytes len=N>"``; ``None``, bools, ints and floats are kept (ints too wide
        to print become ``"<int bits=N>"``); anything else
        becomes its redacted ``repr`` cut to 200 characters. Values nested deeper
        than ``max_depth`` become ``"<truncated: depth>"`` and a container inside
        itself becomes ``"<cycle>"``. The walk is iterative, so any depth is safe.
        """
        if max_depth >= _FAST_DEPTH:
            try:  # the usual record: plain dicts, lists and scalars, small and shallow
                return self._plain(value, 0, [_FAST_NODES])
            except _NotPlain:
                pass
            except Exception:
                pass  # the walk below guards each node and decides
        try:
            return _Walk(self, max_depth).run(value)
        except Exception:  # defensive: _Walk already guards each node
            return _unrepresentable(value)

    def _plain(self, value: Any, depth: int, budget: list[int]) -> object:
        """:meth:`redact_value` for exact builtin types only, by plain recursion; raises
        _NotPlain for anything else (a subclass, bytes, an object, a cycle, too deep,
        too big, two keys redacting alike), which the full walk then handles. Gives
        the walk's result for every input it accepts (tested)."""
        kind = type(value)
        if kind is str:
            return self.redact(value)
        if value is None or kind is bool or kind is float:
            return value
        if kind is int:
            return _int(value)
        if depth >= _FAST_DEPTH:
            raise _NotPlain
        if kind is dict:
            budget[0] -= len(value)
            if budget[0] < 0:
                raise _NotPlain
            out: dict[object, object] = {}
            for key, item in value.items():
                if type(key) is not str:
                    raise _NotPlain
                out_key = self.redact(key)
                if out_key in out:
                    raise _NotPlain
                out[out_key] = (
                    REDACTED if _is_secret_key(key) else self._plain(item, depth + 1, budget)
                )
            return out
        if kind is list or kind is tuple:
            budget[0] -= len(value)
            if budget[0] < 0:
                raise _NotPlain
            copied = [self._plain(item, depth + 1, budget) for item in value]
            return copied if kind is list else tuple(copied)
        raise _NotPlain

    def _key(self, key: object) -> tuple[object, bool]:
        """A JSON-compatible, redacted form of a mapping key, and whether it names a secret."""
        try:
            if isinstance(key, str):
                plain = str.__str__(key)  # a plain str hashes and compares predictably
                return self.redact(plain), _is_secret_key(plain)
            if key is None or type(key) in (bool, float):
                return key, False
            if type(key) is int:
                return _int(key), False
            if isinstance(key, bytes | bytearray):
                return f"<bytes len={len(key)}>", False
            return self._repr(key), False
        except Exception:
            return _unrepresentable(key), False

    def _repr(self, value: object) -> str:
        try:
            text = repr(value)
        except Exception:
            return _unrepresentable(value)
        text = self.redact(str.__str__(text)[:_REPR_SCAN_LIMIT])
        if len(text) > _REPR_LIMIT:
            text = text[: _REPR_LIMIT - 3] + "..."
        return text


class _Walk:
    """One iterative, cycle-safe walk of a value for :meth:`Redactor.redact_value`."""

    __slots__ = ("active", "max_depth", "memo", "redactor", "stack")

    def __init__(self, redactor: Redactor, max_depth: int) -> None:
        self.redactor = redactor
        self.max_depth = max_depth
        self.memo: dict[int, tuple[object, object]] = {}  # id -> (source kept alive, copy)
        self.active: set[int] = set()  # ids of containers still being copied
        self.stack: list[_Frame] = []

    def run(self, root: object) -> object:
        result = self.enter(root, 0)
        stack = self.stack
        while stack:
            frame = stack[-1]
            if frame.index < len(frame.pairs):
                key, child = frame.pairs[frame.index]
                frame.index += 1
                if frame.kind is dict:
                    out_key, secret = self.redactor._key(key)
                    frame.out_keys.append(out_key)
                    if secret:
                        frame.out_values.append(REDACTED)
                        continue
                frame.out_values.append(None)
                child_result = self.enter(child, frame.depth + 1)
                if child_result is not _PENDING:
                    frame.out_values[-1] = child_result
                continue
            stack.pop()
            done = frame.finish()
            self.active.discard(id(frame.source))
            self.memo[id(frame.source)] = (frame.source, done)
            if stack:
                stack[-1].out_values[-1] = done
            else:
                result = done
        return result

    def enter(self, value: object, depth: int) -> object:
        """The redacted form of ``value``, or _PENDING after pushing a frame for it."""
        if depth > self.max_depth:
            return _TRUNCATED
        try:
            if isinstance(value, str):
                return self.redactor.redact(str.__str__(value))  # plain str out
            if value is None or isinstance(value, bool | float):
                return value
            if isinstance(value, int):
                return _int(value)
            if isinstance(value, bytes | bytearray):
                return f"<bytes len={len(value)}>"
            if isinstance(value, memoryview):
                return f"<bytes len={value.nbytes}>"
            if isinstance(value, dict | list | tuple):
                return self.push(value, depth)
            return self.redactor._repr(value)
        except Exception:
            return _unrepresentable(value)

    def push(
        self, value: dict[object, object] | list[object] | tuple[object, ...], depth: int
    ) -> object:
        key = id(value)
        if key in self.active:
            return _CYCLE
        seen = self.memo.get(key)
        if seen is not None:
            return seen[1]
        # The base-class methods read the real contents even when a subclass
        # overrides items() or __iter__.
        kind: type
        pairs: list[tuple[object, object]]
        if isinstance(value, dict):
            kind, pairs = dict, list(dict.items(value))
        elif isinstance(value, list):
            kind, pairs = list, [(None, item) for item in list.__iter__(value)]
        else:
            kind, pairs = tuple, [(None, item) for item in tuple.__iter__(value)]
        self.stack.append(_Frame(value, kind, pairs, depth))
        self.active.add(key)
        return _PENDING


def _replace_builtin(match: re.Match[str]) -> str:
    name = match.lastgroup
    if name is None:  # cannot happen: every rule has a mandatory secret group
        return REDACTED
    index = int(name[1:])
    start, end = match.span(name)
    whole_start, whole_end = match.span()
    text = match.string
    prefix = text[whole_start:start] if _KEEP_PREFIX[index] else ""
    if _RESCAN[index]:
        prefix = _COMBINED.sub(_replace_builtin, prefix)
    return prefix + REDACTED + text[end:whole_end]


def _replace_extra(match: re.Match[str]) -> str:
    if match.start() == match.end():  # a pattern that can match "" inserts nothing
        return ""
    if "secret" in match.re.groupindex:
        start, end = match.span("secret")
        if start >= 0 and end > start:
            text = match.string
            return text[match.start() : start] + REDACTED + text[end : match.end()]
    return REDACTED


_DEFAULT: Final = Redactor()


def redact(text: str) -> str:
    """Return ``text`` with every secret replaced; see :meth:`Redactor.redact`."""
    return _DEFAULT.redact(text)


def redact_value(value: object, *, max_depth: int = 32) -> object:
    """Return a redacted copy of ``value``; see :meth:`Redactor.redact_value`."""
    return _DEFAULT.redact_value(value, max_depth=max_depth)
