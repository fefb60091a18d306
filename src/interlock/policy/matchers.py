"""Compiled matchers: glob sets, regex sets and parameter conditions.

Everything here is compiled once, when a policy loads; matching does no compiling.
"""

from __future__ import annotations

import fnmatch
import math
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any, Final

from interlock.core.redaction import Redactor
from interlock.errors import EvaluationError
from interlock.facts.globs import could_match, covers
from interlock.facts.paths import PathPattern
from interlock.policy import fastpath
from interlock.policy.conditiontests import condition_test

__all__ = [
    "MISSING",
    "CompiledCondition",
    "GlobSet",
    "RegexError",
    "RegexSet",
    "compile_re2",
    "lookup",
]

MISSING: Final = object()


@dataclass(frozen=True, slots=True)
class GlobSet:
    """Any-of fnmatch globs, compiled into one anchored regex. Case-sensitive unless
    built with ``ignore_case``."""

    patterns: tuple[str, ...]
    _regex: re.Pattern[str]
    ignore_case: bool = False
    #: the regex's ``match``, behind a test of the globs' required literals when each
    #: glob has one (see :func:`_prefiltered`)
    _match: Callable[[str], re.Match[str] | None] = field(
        default=None,
        compare=False,
        repr=False,  # type: ignore[assignment]
    )

    @classmethod
    def of(cls, globs: str | Sequence[str], *, ignore_case: bool = False) -> GlobSet:
        patterns = (globs,) if isinstance(globs, str) else tuple(globs)
        return _glob_set(patterns, ignore_case)

    @property
    def literal(self) -> frozenset[str] | None:
        """The exact names, when no pattern uses a wildcard."""
        if any(ch in p for p in self.patterns for ch in "*?["):
            return None
        return frozenset(self.patterns)

    def matches(self, text: str) -> bool:
        return self.match(text) is not None

    @property
    def match(self) -> Callable[[str], re.Match[str] | None]:
        """The regex's ``match`` (prefiltered by the globs' literals where each has one):
        bound once by a hot caller, it saves the Python call through :meth:`matches`
        on every test."""
        return self._match if self._match is not None else self._regex.match


# A large policy names the same globs in many rules; a GlobSet is immutable, so one
# built once is shared (ADR 0014).
@lru_cache(maxsize=8192)
def _glob_set(patterns: tuple[str, ...], ignore_case: bool) -> GlobSet:
    body = "|".join(f"(?:{_translate(p)})" for p in patterns)
    flags = re.DOTALL | (re.IGNORECASE if ignore_case else 0)
    regex = re.compile(body, flags)
    return GlobSet(patterns, regex, ignore_case, _prefiltered(patterns, regex, ignore_case))


# A run of at least this many literal characters makes a useful prefilter.
_LITERAL_MIN: Final = 2
_WILD: Final = re.compile(r"[*?]")


def _prefiltered(
    patterns: tuple[str, ...], regex: re.Pattern[str], ignore_case: bool
) -> Callable[[str], re.Match[str] | None]:
    """``regex.match``, or a function that first tests whether the text holds any of
    the globs' required literals — the longest run of characters outside wildcards
    of each glob (before any ``[``: a class's characters are alternatives, and where
    it ends is fnmatch's to say), which every text the glob matches holds as it is —
    and answers None at once when it holds none. Each alternative of ``regex``
    otherwise scans the whole text (≈ 1–2 µs a path for five ``**/...`` globs; with
    the literals ≈ 0.25 µs, and ≈ 0.15 µs more for a text that holds one). Plain
    ``regex.match`` when a glob has no such run (``*``), when a glob names no
    wildcard (its literal is the whole text), or for case-insensitive sets (Unicode
    case folding is the regex's). Held equal to ``regex.match`` by a property test
    (tests/policy/test_glob_prefilter.py)."""
    match = regex.match
    if ignore_case:
        return match
    literals: list[str] = []
    for glob in patterns:
        runs = _WILD.split(glob.partition("[")[0])  # what follows a class: not parsed here
        if len(runs) == 1 and "[" not in glob:
            return match  # an exact name: the regex is as quick
        longest = max(runs, key=len)
        if len(longest) < _LITERAL_MIN:
            return match
        literals.append(longest)
    needles = tuple(dict.fromkeys(literals))

    def prefiltered(text: str) -> re.Match[str] | None:
        for needle in needles:
            if needle in text:
                return match(text)
        return None

    return prefiltered


def _translate(glob: str) -> str:
    """:func:`fnmatch.translate`, the same text; a glob with no wildcard (most names in
    a policy) is escaped whole instead of character by character."""
    if "*" in glob or "?" in glob or "[" in glob:
        return fnmatch.translate(glob)
    return rf"(?s:{re.escape(glob)})\Z"


class RegexError(ValueError):
    """A pattern RE2 does not accept (a backreference, a lookaround...)."""


@lru_cache(maxsize=1)
def _re2_options() -> Any:
    import re2

    options = re2.Options()
    options.never_capture = True  # a match is a yes/no: no groups to fill
    options.log_errors = False  # errors are raised, not printed
    return options


# A compiled RE2 is immutable and safe to share between threads, and a large policy
# repeats its patterns: each distinct text is compiled once (ADR 0014). A pattern RE2
# refuses raises and is not cached, so every rule that names it is reported. The
# caches are smaller than the glob one: an RE2 keeps the DFA states its searches built,
# and a cached one outlives the policy that a reload replaced.
@lru_cache(maxsize=2048)
def compile_re2(pattern: str) -> Any:
    """``pattern`` compiled by RE2 (linear time in the text, whatever the pattern).
    Raises :class:`RegexError` naming what RE2 refuses."""
    import re2

    try:
        return re2.compile(pattern, _re2_options())._regexp
    except re2.error as exc:
        message = str(exc.args[0].decode() if exc.args and isinstance(exc.args[0], bytes) else exc)
        raise RegexError(
            f"{message} (policy regexes use RE2 syntax, which runs in linear time: no "
            "backreferences or lookarounds)"
        ) from None


@dataclass(frozen=True, slots=True)
class RegexSet:
    """Any-of regexes, searched (not anchored), on RE2: the cost of a search is linear
    in the text whatever the patterns, so no pattern can stall a check."""

    patterns: tuple[str, ...]
    _regex: Any  # re2._re2.RE2

    @classmethod
    def of(cls, regexes: str | Sequence[str]) -> RegexSet:
        patterns = (regexes,) if isinstance(regexes, str) else tuple(regexes)
        return _regex_set(patterns)

    def matches(self, text: str) -> bool:
        data = text.encode("utf-8", "surrogatepass")
        return bool(self._regex.Match(_unanchored(), data, 0, len(data))[0][0] >= 0)

    @property
    def search(self) -> Callable[[str], object | None]:
        """A search for a hot caller to bind once: a truthy value when found."""
        match = self._regex.Match
        anchor = _unanchored()

        def search(text: str) -> object | None:
            data = text.encode("utf-8", "surrogatepass")
            return True if match(anchor, data, 0, len(data))[0][0] >= 0 else None

        return search


# Immutable, so shared by every rule that names the same patterns (as GlobSet).
@lru_cache(maxsize=2048)
def _regex_set(patterns: tuple[str, ...]) -> RegexSet:
    for pattern in patterns:
        compile_re2(pattern)  # raise on the one that is wrong, by itself
    body = "|".join(f"(?:{p})" for p in patterns)
    return RegexSet(patterns, compile_re2(body))


@lru_cache(maxsize=1)
def _unanchored() -> Any:
    from re2 import _re2

    return _re2.RE2.Anchor.UNANCHORED


def glob_to_re2(glob: str, *, fold: bool = False) -> str:
    """An fnmatch glob as an RE2 pattern matching exactly the same strings (for a full
    match): ``*`` any run (``/`` included), ``?`` one character, ``[seq]`` /
    ``[!seq]`` classes, an unclosed ``[`` a literal — as :func:`fnmatch.translate`."""
    out: list[str] = ["(?s)"]
    if fold:
        out.append("(?i)")
    i, n = 0, len(glob)
    while i < n:
        ch = glob[i]
        i += 1
        if ch == "*":
            out.append(".*")
        elif ch == "?":
            out.append(".")
        elif ch == "[":
            j = i
            if j < n and glob[j] == "!":
                j += 1
            if j < n and glob[j] == "]":
                j += 1
            while j < n and glob[j] != "]":
                j += 1
            if j >= n:
                out.append("\\[")
                continue
            body = glob[i:j]
            i = j + 1
            negate = body.startswith("!")
            if negate:
                body = body[1:]
            members = _class_members(body)
            if not members:
                out.append("[^\\x{0}-\\x{10FFFF}]" if not negate else ".")
                continue
            out.append(("[^" if negate else "[") + members + "]")
        else:
            out.append(_re2_escape(ch))
    return "".join(out)


def _class_members(body: str) -> str:
    """An fnmatch class body (ranges, literal characters) as RE2 class members."""
    members: list[str] = []
    i, n = 0, len(body)
    while i < n:
        if i + 2 < n and body[i + 1] == "-":
            low, high = body[i], body[i + 2]
            if low <= high:  # fnmatch drops a range that runs backwards
                members.append(f"{_class_escape(low)}-{_class_escape(high)}")
            i += 3
            continue
        members.append(_class_escape(body[i]))
        i += 1
    return "".join(members)


def _class_escape(ch: str) -> str:
    return f"\\x{{{ord(ch):x}}}"


def _re2_escape(ch: str) -> str:
    return ch if ch.isalnum() or ch == "_" else f"\\x{{{ord(ch):x}}}"


class Re2Set:
    """Many RE2 patterns matched in one pass: ``match(text)`` gives the indexes of
    those that match (fully, when ``anchored``; found anywhere otherwise).

    Raises :class:`RegexError` when RE2 refuses the set: a pattern it does not
    accept, or patterns that together exceed its memory budget (each may fit alone)."""

    __slots__ = ("_match",)

    def __init__(self, patterns: Sequence[str], *, anchored: bool) -> None:
        import re2

        made = (re2.Set.FullMatchSet if anchored else re2.Set.SearchSet)(_re2_options())
        try:
            for pattern in patterns:
                made.Add(pattern)
            made.Compile()
        except re2.error as exc:
            count = len(patterns)
            raise RegexError(f"RE2 cannot compile a set of {count} pattern(s): {exc}") from exc
        self._match = made._set.Match

    def match(self, text: str) -> list[int]:
        found = self._match(text.encode("utf-8", "surrogatepass"))
        return found or []

    @property
    def match_bytes(self) -> Callable[[bytes], list[int] | None]:
        """RE2's own match on UTF-8 text (``None`` or empty when nothing matches), for
        a hot caller that encodes a value once for several sets."""
        return self._match  # type: ignore[no-any-return]


def compile_re2_set(patterns: Sequence[str], *, anchored: bool) -> Re2Set:
    return Re2Set(patterns, anchored=anchored)


def lookup(key: str, params: Mapping[str, Any], args: Mapping[str, Any]) -> Any:
    """An extracted parameter, or ``args.a.b`` walked through the arguments."""
    if not key.startswith("args."):
        return params.get(key, MISSING)
    value: Any = args
    for part in key[5:].split("."):
        if isinstance(value, Mapping):
            value = value.get(part, MISSING)
        elif isinstance(value, (list, tuple)) and part.isdigit():
            index = int(part)
            value = value[index] if index < len(value) else MISSING
        else:
            return MISSING
        if value is MISSING:
            return MISSING
    return value


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _equal(a: Any, b: Any) -> bool:
    if isinstance(a, bool) or isinstance(b, bool):
        return type(a) is type(b) and a == b
    if _is_number(a) and _is_number(b):
        return bool(a == b)
    if isinstance(a, str) and isinstance(b, str):
        # Text is text, of a subclass too (a str enum member is sent as its value; a
        # glob already reads it so): its real contents, whatever its own __eq__ says.
        return str.__eq__(a, b) is True
    return type(a) is type(b) and bool(a == b)


@dataclass(frozen=True, slots=True)
class CompiledCondition:
    """All tests on one parameter; matching raises EvaluationError when the value
    cannot be judged (a number test on text, a glob on a list, a NaN)."""

    key: str
    glob: GlobSet | None = None
    not_glob: GlobSet | None = None
    regex: RegexSet | None = None
    not_regex: RegexSet | None = None
    eq: Any = MISSING
    ne: Any = MISSING
    in_: tuple[Any, ...] | None = None
    not_in: tuple[Any, ...] | None = None
    bounds: tuple[tuple[str, float], ...] = ()
    exists: bool | None = None
    #: A deny or approval rule's condition ("could the call be this?"); an allow
    #: rule's is False ("is the call certainly this?"). Decides values known only as
    #: a pattern, and the case of paths (see docs/policy.md, "Paths").
    possible: bool = False

    # The per-check test, specialised to this condition's key and tests (built once).
    test: Callable[[Any], bool] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "test", self._build())

    def _build(self) -> Callable[[Any], bool]:
        key = self.key
        if not key.startswith("args."):
            getter = "param"  # the most common kind
        elif "." not in key[5:] and not key[5:].isdigit():
            getter, key = "flat", key[5:]
        else:
            getter = "path"
        options: dict[str, Any] = {}
        if self.exists is False:
            kind = "absent"
        elif not fastpath.SPECIALISED:
            kind = "general"
        elif (text_test := self._text_only()) is not None:
            kind = "text"
            options["match"], options["wanted"] = text_test
        elif (literal_test := self._literal_only()) is not None:
            kind = "literal"
            options["texts"], options["wanted"] = literal_test
        elif self._tests() == {"bounds"}:
            kind = "bounds"
            options["bounds"] = self.bounds
        else:
            kind = "general"
        return condition_test(
            getter, key, kind, self._judge, missing=MISSING, lookup=lookup, **options
        )

    def _literal_only(self) -> tuple[frozenset[str], bool] | None:
        """When the condition is one ``eq``, ``ne``, ``in`` or ``not_in`` of literals
        that are all exactly ``str``: the literals and the outcome a text among them
        gives (a text equals exactly the texts of the same contents, see
        :func:`_equal`)."""
        tests = self._tests()
        if tests in ({"eq"}, {"ne"}):
            literals: tuple[Any, ...] = (self.eq if self.ne is MISSING else self.ne,)
        elif tests in ({"in_"}, {"not_in"}):
            literals = self.in_ if self.in_ is not None else self.not_in or ()
        else:
            return None
        if not all(type(literal) is str for literal in literals):
            return None
        return frozenset(literals), tests <= {"eq", "in_"}

    def _text_only(self) -> tuple[Callable[[str], object | None], bool] | None:
        """When the condition is one glob or regex test (negated or not) and nothing
        else: the compiled regex's own match or search and the outcome that passes."""
        tests = self._tests()
        if tests == {"glob"}:
            return (self.glob.match, True)  # type: ignore[union-attr]
        if tests == {"not_glob"}:
            return (self.not_glob.match, False)  # type: ignore[union-attr]
        if tests == {"regex"}:
            return (self.regex.search, True)  # type: ignore[union-attr]
        if tests == {"not_regex"}:
            return (self.not_regex.search, False)  # type: ignore[union-attr]
        return None

    def _tests(self) -> set[str]:
        present = {
            name
            for name in ("glob", "not_glob", "regex", "not_regex", "in_", "not_in")
            if getattr(self, name) is not None
        }
        if self.eq is not MISSING:
            present.add("eq")
        if self.ne is not MISSING:
            present.add("ne")
        if self.bounds:
            present.add("bounds")
        return present

    def _judge(self, value: Any) -> bool:
        """The tests on a present value."""
        if type(value) is PathPattern:
            return self._judge_pattern(value)
        if self.glob or self.not_glob or self.regex or self.not_regex:
            text = self._text(value)
            if self.glob is not None and not self.glob.matches(text):
                return False
            if self.not_glob is not None and self.not_glob.matches(text):
                return False
            if self.regex is not None and not self.regex.matches(text):
                return False
            if self.not_regex is not None and self.not_regex.matches(text):
                return False
        if self.eq is not MISSING and not _equal(value, self.eq):
            return False
        if self.ne is not MISSING and _equal(value, self.ne):
            return False
        if self.in_ is not None and not any(_equal(value, v) for v in self.in_):
            return False
        if self.not_in is not None and any(_equal(value, v) for v in self.not_in):
            return False
        return not self.bounds or self._within(value)

    def _judge_pattern(self, value: PathPattern) -> bool:
        """The tests on a value known only as a glob (``*/etc/passwd``, ``*.pem``).
        For an allow rule they hold only when certain; for a deny or approval rule a
        test that only *may* hold leaves the rule unevaluable (the verdict open)."""
        unsure: str | None = None
        others = self._tests() - {"glob", "not_glob"}
        if others:
            unsure = f"a {'/'.join(sorted(others))} test cannot judge it"
        fold = self.key == "path"
        if self.glob is not None:
            inside, maybe = _glob_relation(self.glob.patterns, value, fold and self.possible)
            if not inside:
                if not maybe or not self.possible:
                    return False
                unsure = unsure or f"it could match {_any_of(self.glob.patterns)}"
        if self.not_glob is not None:
            inside, maybe = _glob_relation(
                self.not_glob.patterns, value, fold and not self.possible
            )
            if inside:
                return False
            if maybe:
                if not self.possible:
                    return False
                unsure = unsure or f"it could match {_any_of(self.not_glob.patterns)}"
        if unsure is None:
            return True
        if not self.possible:
            return False
        raise EvaluationError(
            f"parameter {self.key!r} is only known as the pattern {str(value)!r} (it "
            f"depends on what the call expands or where it runs), and {unsure}"
        )

    def _text(self, value: Any) -> str:
        if isinstance(value, str):
            return value
        raise EvaluationError(
            f"parameter {self.key!r} is a {type(value).__name__}, not text; a glob or regex "
            "cannot judge it (use a CEL `when:` for lists and objects)"
        )

    def _within(self, value: Any) -> bool:
        if not _is_number(value) or not math.isfinite(value):
            raise EvaluationError(
                f"parameter {self.key!r} is {_short(value)}, not a finite number; cannot compare it"
            )
        for op, bound in self.bounds:
            if op == "gt" and not value > bound:
                return False
            if op == "gte" and not value >= bound:
                return False
            if op == "lt" and not value < bound:
                return False
            if op == "lte" and not value <= bound:
                return False
        return True


def _glob_relation(globs: tuple[str, ...], value: str, fold: bool) -> tuple[bool, bool]:
    """(every string of the pattern ``value`` matches some glob, some string may)."""
    if fold:
        value = value.casefold()
        globs = tuple(g.casefold() for g in globs)
    if any(covers(glob, value) for glob in globs):
        return True, True
    return False, any(could_match(glob, value) for glob in globs)


def _any_of(globs: tuple[str, ...]) -> str:
    return repr(globs[0]) if len(globs) == 1 else f"one of {list(globs)!r}"


_REDACTOR: Final = Redactor()


def _short(value: Any) -> str:
    """A short, never-raising description of a value for an error message."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        try:
            text = repr(value)
        except Exception:
            return f"a {type(value).__name__}"
        return text if len(text) <= 40 else f"a {type(value).__name__}"
    if isinstance(value, str):
        # Redacted before it is cut: a cut key would be too short to be recognised.
        return repr(_REDACTOR.cut(value, 40))
    return f"a {type(value).__name__}"
