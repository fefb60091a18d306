"""A small CEL tokenizer: enough to rewrite and pre-evaluate ``when:`` expressions
without ever touching the inside of a string literal or a comment."""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache
from typing import Final

__all__ = ["MACRO_BINDING", "ROOTS", "Token", "roots_shadowed", "tokens"]

#: The variables a ``when:`` expression may use.
ROOTS: Final[frozenset[str]] = frozenset({"action", "args", "params", "context", "shell"})

MACRO_BINDING: Final = re.compile(
    r"\.\s*(?:all|exists|exists_one|map|filter)\s*\(\s*([A-Za-z_]\w*)\s*,"
)
_IDENT: Final = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_NUMBER: Final = re.compile(r"0[xX][0-9a-fA-F]+[uU]?|(?:\d+\.\d*|\.\d+|\d+)(?:[eE][+-]?\d+)?[uU]?")
_SPACE: Final = re.compile(r"\s+")
_COMMENT: Final = re.compile(r"//[^\n]*")
_STRING_START: Final = re.compile(r"(?i:[rb]{0,2})('''|\"\"\"|'|\")")


@dataclass(frozen=True, slots=True)
class Token:
    kind: str  # "ident", "number", "string", "punct"
    text: str
    start: int
    end: int


def tokens(source: str) -> list[Token]:
    """The tokens of ``source`` (a new list: the caller may change it)."""
    return list(_tokens(source))


# Loading an expression tokenizes it three times (the rewrite, the Python tree, the
# arguments it reads); tokens are immutable, so each text is scanned once.
@lru_cache(maxsize=4096)
def _tokens(source: str) -> tuple[Token, ...]:
    found: list[Token] = []
    i, n = 0, len(source)
    while i < n:
        skip = _SPACE.match(source, i) or _COMMENT.match(source, i)
        if skip:
            i = skip.end()
            continue
        string = _STRING_START.match(source, i)
        if string:
            end = _string_end(source, string)
            found.append(Token("string", source[i:end], i, end))
            i = end
            continue
        ident = _IDENT.match(source, i)
        if ident:
            found.append(Token("ident", ident.group(), i, ident.end()))
            i = ident.end()
            continue
        number = _NUMBER.match(source, i)
        if number:
            found.append(Token("number", number.group(), i, number.end()))
            i = number.end()
            continue
        found.append(Token("punct", source[i], i, i + 1))
        i += 1
    return tuple(found)


def _string_end(source: str, start: re.Match[str]) -> int:
    quote = start.group(1)
    raw = "r" in start.group(0)[: start.start(1) - start.start()].lower()
    i = start.end()
    while i < len(source):
        if not raw and source[i] == "\\":
            i += 2
            continue
        if source.startswith(quote, i):
            return i + len(quote)
        i += 1
    return len(source)  # unterminated: the CEL compiler reports it


def roots_shadowed(source: str) -> bool:
    """Whether a comprehension macro binds a variable named like a root."""
    return bool(set(MACRO_BINDING.findall(source)) & ROOTS)
