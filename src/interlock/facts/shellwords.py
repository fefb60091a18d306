"""Shell words: the value bash gives a word — quotes, escapes, ``$'…'``, known
variables — and, where it is only known when the command runs, a glob of what it could
be (``$DIR/x`` is ``*/x``; a substitution is ``*``)."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import TYPE_CHECKING, Final

from interlock.facts.argv import Word
from interlock.facts.globs import SEGMENT_STAR, escape

if TYPE_CHECKING:
    from tree_sitter import Node

__all__ = [
    "PIPE",
    "WordError",
    "concat",
    "join_continued_lines",
    "node_text",
    "read_word",
    "substitution_markers",
]

#: The word a process substitution becomes (a pipe, not a file anyone could name).
PIPE: Final = "/dev/fd/<process substitution>"
#: What splits an unquoted expansion's value into words, or globs it.
_SPLITS: Final = re.compile(r"[\s*?\[]")

_QUOTED_ESCAPES: Final = frozenset('$`"\\\n')


def node_text(node: Node) -> str:
    data = node.text
    return data.decode("utf-8", "surrogatepass") if data is not None else ""


class WordError(ValueError):
    """A word the parser read differently from bash."""


Loops = Mapping[str, tuple[str, ...]]
_NO_LOOPS: Final[Loops] = {}


def read_word(node: Node, variables: Mapping[str, str | None], loops: Loops = _NO_LOOPS) -> Word:
    """A word's value: static text where it is known, a glob where it is not."""
    kind = node.type
    if kind == "command_name":
        parts = [read_word(child, variables, loops) for child in node.children]
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
        return _double_quoted(node, variables, loops)
    if kind == "concatenation":
        return concat([_part(child, variables, loops) for child in node.children])
    if kind in {"simple_expansion", "expansion"}:
        return _expansion(node, variables, loops, quoted=False, alone=True)
    if kind == "process_substitution":
        # <(cmd) is a pipe's name, /dev/fd/N: the command in it is judged on its own
        return Word(PIPE, PIPE, True, False)
    if kind in ("string_content", "heredoc_content"):
        text = node_text(node)
        return Word(text, escape(text), True, False)
    # command_substitution, process_substitution, arithmetic_expansion, brace
    # expressions, extglobs...: only known when it runs.
    return Word(node_text(node), "*", False, False)


def _part(node: Node, variables: Mapping[str, str | None], loops: Loops) -> Word:
    """A part of a concatenation: an expansion there that is empty leaves the word."""
    if node.type in ("simple_expansion", "expansion"):
        return _expansion(node, variables, loops, quoted=False, alone=False)
    return read_word(node, variables, loops)


def _bare(raw: str) -> Word:
    if "\n" in raw:
        # An unquoted newline always ends a word in bash: a word holding one is a
        # parse that differs from what bash runs (`ls⏎\rm -rf /`).
        raise WordError("a line break inside a word: the string is not read as bash reads it")
    if "\\" not in raw and "{" not in raw:  # the usual word: nothing to undo
        magic = "*" in raw or "?" in raw or "[" in raw
        if magic and "*" in raw:
            return Word(raw, raw.replace("*", SEGMENT_STAR), True, True)
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
            pattern.append(SEGMENT_STAR if ch == "*" else ch)  # a shell * stays in a name
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


def _double_quoted(node: Node, variables: Mapping[str, str | None], loops: Loops) -> Word:
    parts: list[Word] = []
    for child in node.children:
        kind = child.type
        if kind in {'"', '$"'}:
            continue
        if kind == "string_content":
            text = _unescape_double(node_text(child))
            parts.append(Word(text, escape(text), True, False))
        elif kind in {"simple_expansion", "expansion"}:
            parts.append(_expansion(child, variables, loops, quoted=True, alone=False))
        else:
            parts.append(read_word(child, variables, loops))
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


def _expansion(
    node: Node, variables: Mapping[str, str | None], loops: Loops, *, quoted: bool, alone: bool
) -> Word:
    text = node_text(node)
    match = re.fullmatch(r"\$\{?([A-Za-z_][A-Za-z0-9_]*)\}?", text)
    if match is not None:
        name = match.group(1)
        if name == "HOME" and "HOME" not in variables:
            return Word("~", "~", True, False)
        value = variables.get(name)
        if value is not None:
            if not quoted and (_SPLITS.search(value) or (alone and not value)):
                # unquoted, a value with blanks or glob characters becomes several words
                # (an empty one alone, none): `X="x -r"; rm $X` is `rm x -r`
                return Word(text, "*", False, True)
            return Word(value, escape(value), True, False)
        if name in loops:
            values = loops[name]
            if quoted or not any(_SPLITS.search(v) for v in values):
                return Word(text, _alternatives(values), False, False)
    return Word(text, "*", False, False)


def _alternatives(values: tuple[str, ...]) -> str:
    """A loop variable's values as one pattern: the common prefix and suffix kept, the
    rest ``*`` (``a.txt b.txt`` → ``*.txt``)."""
    prefix = values[0]
    suffix = values[0]
    for value in values[1:]:
        while not value.startswith(prefix):
            prefix = prefix[:-1]
        while not value.endswith(suffix):
            suffix = suffix[1:]
    if prefix == values[0] and len(set(values)) == 1:
        return escape(prefix)
    return (
        escape(prefix)
        + SEGMENT_STAR
        + escape(
            suffix[len(prefix) :]
            if len(suffix) > len(prefix) and suffix.startswith(prefix)
            else suffix
        )
    )


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


_ANSI_SIMPLE: Final = {
    "a": "\a",
    "b": "\b",
    "e": "\x1b",
    "E": "\x1b",
    "f": "\f",
    "n": "\n",
    "r": "\r",
    "t": "\t",
    "v": "\v",
    "\\": "\\",
    "'": "'",
    '"': '"',
    "?": "?",
}
_ANSI_ESCAPE: Final = re.compile(
    r"\\(?:x([0-9A-Fa-f]{1,2})|u([0-9A-Fa-f]{1,4})|U([0-9A-Fa-f]{1,8})|([0-7]{1,3})"
    r"|c(.)|(.))",
    re.DOTALL,
)


def _ansi_c(body: str) -> str:
    """The value of ``$'...'`` as bash decodes it (``\\u`` takes one to four hex
    digits, ``\\x`` one or two, an octal escape one to three)."""

    def decode(match: re.Match[str]) -> str:
        hex2, hex4, hex8, octal, control, other = match.groups()
        try:
            if hex2 is not None:
                return chr(int(hex2, 16))
            if hex4 is not None:
                return chr(int(hex4, 16))
            if hex8 is not None:
                return chr(int(hex8, 16))
            if octal is not None:
                return chr(int(octal, 8) & 0xFF)
        except (ValueError, OverflowError):
            return match.group(0)
        if control is not None:
            return chr(ord(control.upper()) ^ 0x40) if control != "?" else "\x7f"
        return _ANSI_SIMPLE.get(other, "\\" + other)

    return _ANSI_ESCAPE.sub(decode, body)


def join_continued_lines(text: str) -> str:
    """``text`` with each backslash-newline removed where bash removes it: everywhere
    but inside single quotes, ``$'…'`` strings and comments; and a blank before a
    line's leading backslash, which the parser would otherwise misread."""
    out: list[str] = []
    i, n = 0, len(text)
    quote = ""  # "'", '"', "$'" or "#"
    while i < n:
        ch = text[i]
        if quote == "'":
            out.append(ch)
            quote = "" if ch == "'" else quote
            i += 1
            continue
        if quote == "#":
            out.append(ch)
            quote = "" if ch == "\n" else quote
            i += 1
            continue
        if ch == "\\" and i + 1 < n:
            if text[i + 1] == "\n":
                i += 2  # removed: the line goes on
                continue
            if not quote and out and out[-1] == "\n":
                # A line that starts with a backslash (`\rm`): the parser glues it onto
                # the line before; a leading blank, which bash ignores, keeps it apart.
                out.append(" ")
            if quote == "$'" and text[i + 1] == "'":
                out.append(text[i : i + 2])
                i += 2
                continue
            out.append(text[i : i + 2])
            i += 2
            continue
        if quote == "$'":
            out.append(ch)
            quote = "" if ch == "'" else quote
            i += 1
            continue
        if quote == '"':
            out.append(ch)
            quote = "" if ch == '"' else quote
            i += 1
            continue
        if ch == "'":
            quote = "$'" if out and out[-1] == "$" else "'"
        elif ch == '"':
            quote = '"'
        elif ch == "#" and (not out or out[-1] in " \t\n;&|()"):
            quote = "#"
        out.append(ch)
        i += 1
    return "".join(out)


def substitution_markers(data: bytes) -> set[int]:
    """Byte offsets where bash would start a command substitution (a backtick,
    ``$(``, ``$[``, ``<(``, ``>(``), outside single quotes, escapes and comments; a
    closing backtick counts too."""
    found: set[int] = set()
    i, n = 0, len(data)
    quote = b""
    while i < n:
        ch = data[i : i + 1]
        if quote == b"'":
            quote = b"" if ch == b"'" else quote
            i += 1
            continue
        if quote == b"#":
            quote = b"" if ch == b"\n" else quote
            i += 1
            continue
        if ch == b"\\":
            i += 2
            continue
        if quote == b"$'":
            quote = b"" if ch == b"'" else quote
            i += 1
            continue
        following = data[i + 1 : i + 2]
        if ch == b"`" or (ch == b"$" and following in (b"(", b"[")):
            found.add(i)
        elif (
            ch in (b"<", b">")
            and following == b"("
            and quote != b'"'
            and not (i > 0 and data[i - 1 : i] in (b"<", b">", b"&"))
        ):
            found.add(i)  # <(cmd), >(cmd)
        if quote == b'"':
            quote = b"" if ch == b'"' else quote
        elif ch == b"'":
            quote = b"$'" if i > 0 and data[i - 1 : i] == b"$" else b"'"
        elif ch == b'"':
            quote = b'"'
        elif ch == b"#" and (i == 0 or data[i - 1 : i] in b" \t\n;&|()"):
            quote = b"#"
        i += 1
    return found
