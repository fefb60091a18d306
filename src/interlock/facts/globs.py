"""Reasoning about globs that stand for *sets* of strings.

A shell word such as ``*.pem`` or ``$DIR/.ssh/id_rsa`` does not name one file: it
names every file it could expand to. Judging it against a policy glob asks two
questions, answered here without expanding anything:

- :func:`could_match` — can some string match both the value's pattern and the
  rule's glob? (A deny rule that *could* apply leaves the verdict open.)
- :func:`covers` — does the rule's glob match *every* string of the value's
  pattern? (An allow rule holds for a pattern only when it covers it.)

Patterns use fnmatch's syntax as Interlock's globs do: ``*`` (any run, ``/``
included), ``?`` (one character) and ``[...]`` classes. A class is treated as "one
character" in :func:`could_match` (which may then say yes where the true answer is
no: the caller only ever becomes stricter) and must be matched by ``?`` or ``*`` in
:func:`covers` (which may then say no where the true answer is yes: likewise).

Both are dynamic programs over the two token lists, O(len(a) × len(b)).
"""

from __future__ import annotations

import fnmatch
from functools import lru_cache
from typing import Final

__all__ = ["SEGMENT_STAR", "could_match", "covers", "escape", "has_magic", "tokens"]

_STAR: Final = "\x00*"
_SEG: Final = "\x00/"  # a shell's `*`: any run of characters but `/`
_ONE: Final = "\x00?"
_CLASS: Final = "\x00["  # a class, opaque
#: The character a value pattern uses for a shell glob's ``*`` (which stays within
#: one name); a policy glob's ``*`` crosses ``/`` (fnmatch).
SEGMENT_STAR: Final = "\ufdd0"


def has_magic(text: str) -> bool:
    """Whether ``text`` has a glob wildcard."""
    return "*" in text or "?" in text or "[" in text


def escape(text: str) -> str:
    """``text`` as a glob that matches only itself."""
    out = []
    for ch in text:
        out.append(f"[{ch}]" if ch in "*?[" + SEGMENT_STAR else ch)
    return "".join(out)


@lru_cache(maxsize=4096)
def tokens(pattern: str) -> tuple[str, ...]:
    """The glob as tokens: literal characters, and the markers for ``*``, ``?`` and
    a class (runs of ``*`` folded into one)."""
    out: list[str] = []
    i, n = 0, len(pattern)
    while i < n:
        ch = pattern[i]
        if ch == "*":
            if not out or out[-1] != _STAR:
                out.append(_STAR)
            i += 1
        elif ch == SEGMENT_STAR:
            if not out or out[-1] not in (_STAR, _SEG):
                out.append(_SEG)
            i += 1
        elif ch == "?":
            out.append(_ONE)
            i += 1
        elif ch == "[":
            end = _class_end(pattern, i)
            if end is None:  # fnmatch reads an unclosed [ as a literal
                out.append("[")
                i += 1
            else:
                body = pattern[i + 1 : end]
                if len(body) == 1 and body not in "!^":  # [*] — an escaped character
                    out.append(body)
                else:
                    out.append(_CLASS + body)  # the class, with its members
                i = end + 1
        else:
            out.append(ch)
            i += 1
    return tuple(out)


def _class_end(pattern: str, start: int) -> int | None:
    j = start + 1
    if j < len(pattern) and pattern[j] in "!^":
        j += 1
    if j < len(pattern) and pattern[j] == "]":
        j += 1
    end = pattern.find("]", j)
    return None if end < 0 else end


def _single(token: str) -> bool:
    return token == _ONE or token.startswith(_CLASS) or not token.startswith("\x00")


def _in_class(char: str, token: str) -> bool:
    return fnmatch.fnmatchcase(char, "[" + token[len(_CLASS) :] + "]")


def _stars(token: str | None) -> bool:
    return token in (_STAR, _SEG)


def _seg_takes(token: str | None) -> bool:
    """Whether a shell ``*`` can stand for (part of) what ``token`` matches: anything
    but a ``/``."""
    return (
        token is not None
        and token != "/"
        and not (token.startswith(_CLASS) and not _in_class_other_than_slash(token))
    )


def _in_class_other_than_slash(token: str) -> bool:
    """Whether a class matches some character other than ``/`` (approximately: any
    class but ``[/]``)."""
    return token[len(_CLASS) :] != "/"


@lru_cache(maxsize=8192)
def could_match(a: str, b: str) -> bool:
    """Whether some string matches both globs ``a`` and ``b``."""
    ta, tb = tokens(a), tokens(b)
    la, lb = len(ta), len(tb)
    # reach[i][j]: the first i tokens of a and the first j of b can match one string.
    reach = [[False] * (lb + 1) for _ in range(la + 1)]
    reach[0][0] = True
    for i in range(la + 1):
        for j in range(lb + 1):
            if not reach[i][j]:
                continue
            x = ta[i] if i < la else None
            y = tb[j] if j < lb else None
            if x == _STAR:
                reach[i + 1][j] = True  # a's star matches nothing more
                if y is not None:
                    reach[i][j + 1] = True  # a's star swallows b's next token
            elif x == _SEG:
                reach[i + 1][j] = True
                if _seg_takes(y):
                    reach[i][j + 1] = True
            if y == _STAR:
                reach[i][j + 1] = True
                if x is not None:
                    reach[i + 1][j] = True
            elif y == _SEG:
                reach[i][j + 1] = True
                if _seg_takes(x):
                    reach[i + 1][j] = True
            both = x is not None and y is not None and not _stars(x) and not _stars(y)
            if both and _one_char_overlap(x, y):  # type: ignore[arg-type]
                reach[i + 1][j + 1] = True
    return reach[la][lb]


def _one_char_overlap(x: str, y: str) -> bool:
    if _ONE in (x, y):
        return True
    x_class, y_class = x.startswith(_CLASS), y.startswith(_CLASS)
    if x_class and y_class:
        return True  # two classes: assume they share a member (a sound yes)
    if x_class:
        return _in_class(y, x)
    if y_class:
        return _in_class(x, y)
    return x == y


@lru_cache(maxsize=8192)
def covers(rule: str, value: str) -> bool:
    """Whether glob ``rule`` matches every string glob ``value`` matches (sound: a
    ``True`` is always right; some true cases with classes answer ``False``)."""
    tr, tv = tokens(rule), tokens(value)
    lr, lv = len(tr), len(tv)
    reach = [[False] * (lv + 1) for _ in range(lr + 1)]
    reach[0][0] = True
    for i in range(lr + 1):
        for j in range(lv + 1):
            if not reach[i][j]:
                continue
            x = tr[i] if i < lr else None
            y = tv[j] if j < lv else None
            if x == _STAR:
                reach[i + 1][j] = True
                if y is not None:
                    reach[i][j + 1] = True  # the rule's star takes any value token
            elif x == _SEG:
                reach[i + 1][j] = True
                if y is not None and y not in ("/", _STAR):
                    reach[i][j + 1] = True  # a name-star covers what stays in a name
            elif (
                x is not None
                and y is not None
                and not _stars(y)
                and ((x == _ONE and _single(y)) or (x == y and not x.startswith(_CLASS)))
            ):
                reach[i + 1][j + 1] = True
    return reach[lr][lv]
