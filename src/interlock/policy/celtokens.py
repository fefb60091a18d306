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
_IDENT = r"[A-Za-z_][A-Za-z0-9_]*"
_NUMBER = r"0[xX][0-9a-fA-F]+[uU]?|(?:\d+\.\d*|\.\d+|\d+)(?:[eE][+-]?\d+)?[uU]?"
_TOKEN: Final = re.compile(
    r"(?P<skip>\s+|//[^\n]*)"
    r"|(?P<string>(?i:[rb]{0,2})(?P<quote>\'\'\'|\"\"\"|\'|\"))"
    rf"|(?P<ident>{_IDENT})"
    rf"|(?P<number>{_NUMBER})"
)


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
    match = _TOKEN.match
    while i < n:
        # One regex tries, in order, what the scanner looks for at each position:
        # space or a comment, a string's opening, an identifier, a number.
        token = match(source, i)
        kind = token.lastgroup if token is not None else None
        if token is None or kind is None:
            found.append(Token("punct", source[i], i, i + 1))
            i += 1
        elif kind == "skip":
            i = token.end()
        elif kind == "string":
            end = _string_end(source, token)
            found.append(Token("string", source[i:end], i, end))
            i = end
        else:
            found.append(Token(kind, token.group(), i, token.end()))
            i = token.end()
    return tuple(found)


def _string_end(source: str, start: re.Match[str]) -> int:
    quote = start.group("quote")
    raw = "r" in source[start.start() : start.start("quote")].lower()
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
