"""Shell words: the value bash gives a word — quotes, escapes, ``$'…'``, known
variables — and, where it is only known when the command runs, a glob of what it could
be (``$DIR/x`` is ``*/x``; a substitution is ``*``)."""

from __future__ import annotations

import codecs
import re
from collections.abc import Mapping
from typing import TYPE_CHECKING, Final

from interlock.facts.argv import Word
from interlock.facts.globs import escape

if TYPE_CHECKING:
    from tree_sitter import Node

__all__ = ["concat", "node_text", "read_word"]

_QUOTED_ESCAPES: Final = frozenset('$`"\\\n')


def node_text(node: Node) -> str:
    data = node.text
    return data.decode("utf-8", "surrogatepass") if data is not None else ""


def read_word(node: Node, variables: Mapping[str, str | None]) -> Word:
    """A word's value: static text where it is known, a glob where it is not."""
    kind = node.type
    if kind == "command_name":
        parts = [read_word(child, variables) for child in node.children]
        return parts[0] if len(parts) == 1 else concat(parts)
    if kind in {"word", "number"}:
        return _bare(node_text(node))
    if kind == "raw_string":
        inner = node_text(node)[1:-1]
        return Word(inner, escape(inner), True, False)
    if kind == "ansi_c_string":
        inner = _ansi_c(node_text(node)[2:-1])
        return Word(inner, escape(inner), True, False)
    if kind in ("string", "translated_string"):
        return _double_quoted(node, variables)
    if kind == "concatenation":
        return concat([read_word(child, variables) for child in node.children])
    if kind in {"simple_expansion", "expansion"}:
        return _expansion(node, variables)
    if kind in ("string_content", "heredoc_content"):
        text = node_text(node)
        return Word(text, escape(text), True, False)
    # command_substitution, process_substitution, arithmetic_expansion, brace
    # expressions, extglobs...: only known when it runs.
    return Word(node_text(node), "*", False, False)


def _bare(raw: str) -> Word:
    if "\\" not in raw and "{" not in raw:  # the usual word: nothing to undo
        magic = "*" in raw or "?" in raw or "[" in raw
        return Word(raw, raw, True, magic)
    text: list[str] = []
    pattern: list[str] = []
    magic = False
    i, n = 0, len(raw)
    while i < n:
        ch = raw[i]
        if ch == "\\" and i + 1 < n:
            nxt = raw[i + 1]
            i += 2
            if nxt == "\n":
                continue
            text.append(nxt)
            pattern.append(escape(nxt))
            continue
        if ch in "*?[":
            magic = True
            pattern.append(ch)
        else:
            pattern.append(ch)
        text.append(ch)
        i += 1
    value = "".join(text)
    static = True
    if "{" in value and "}" in value and re.search(r"\{[^{}]*(,|\.\.)[^{}]*\}", value):
        static = False  # brace expansion: one word becomes several
        return Word(value, "*", False, True)
    return Word(value, "".join(pattern), static, magic)


def _double_quoted(node: Node, variables: Mapping[str, str | None]) -> Word:
    parts: list[Word] = []
    for child in node.children:
        kind = child.type
        if kind in {'"', '$"'}:
            continue
        if kind == "string_content":
            text = _unescape_double(node_text(child))
            parts.append(Word(text, escape(text), True, False))
        else:
            parts.append(read_word(child, variables))
    if not parts:
        return Word("", "", True, False)
    return concat(parts, quoted=True)


def concat(parts: list[Word], quoted: bool = False) -> Word:
    """The word made of ``parts`` side by side (quoted: no glob is expanded)."""
    text = "".join(p.text for p in parts)
    pattern = "".join(p.pattern for p in parts)
    static = all(p.static for p in parts)
    magic = not quoted and any(p.magic for p in parts)
    if static and not quoted:
        joined = text
        if re.search(r"\{[^{}]*(,|\.\.)[^{}]*\}", joined) and any(
            "{" in p.text for p in parts if p.static
        ):
            return Word(text, "*", False, True)
    return Word(text, pattern, static, magic)


def _expansion(node: Node, variables: Mapping[str, str | None]) -> Word:
    text = node_text(node)
    match = re.fullmatch(r"\$\{?([A-Za-z_][A-Za-z0-9_]*)\}?", text)
    if match is not None:
        name = match.group(1)
        if name == "HOME":
            return Word("~", "~", True, False)
        value = variables.get(name)
        if value is not None:
            return Word(value, escape(value), True, False)
    return Word(text, "*", False, False)


def _unescape_double(text: str) -> str:
    out: list[str] = []
    i, n = 0, len(text)
    while i < n:
        ch = text[i]
        if ch == "\\" and i + 1 < n and text[i + 1] in _QUOTED_ESCAPES:
            if text[i + 1] != "\n":
                out.append(text[i + 1])
            i += 2
            continue
        out.append(ch)
        i += 1
    return "".join(out)


def _ansi_c(body: str) -> str:
    """The value of ``$'...'``."""
    body = re.sub(r"\\c(.)", lambda m: chr(ord(m.group(1).upper()) ^ 0x40), body)
    body = re.sub(r"\\([0-7]{1,3})", lambda m: chr(int(m.group(1), 8)), body)
    body = re.sub(r"\\e|\\E", "\x1b", body)
    body = body.replace("\\'", "'").replace('\\"', '"').replace("\\?", "?")
    try:
        return codecs.decode(body.encode("latin-1", "backslashreplace"), "unicode_escape")
    except (UnicodeDecodeError, ValueError):
        return body
