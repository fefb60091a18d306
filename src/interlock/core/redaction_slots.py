"""Whether a secret that is a word of its own may be hidden without hiding a command.

Most secrets sit inside a word: ``password=hunter2``, ``-phunter2``, ``sk_live_…``.
Some are a word of their own, after a label: ``Authorization: Bearer <word>``,
``--password <word>``, ``sshpass -p <word>``. In a shell command such a word can be
the command itself — in ``X=--password /tmp/evil`` the label ends an assignment and
``/tmp/evil`` runs — and hiding it would hide the program from the human who approves
the call. :class:`SlotReader` answers, for the position where such a word starts,
whether the word is an argument (safe to hide).

It reads the text as a shell would (quotes, escapes, operators, comments, words and
assignments) and answers *no* whenever it cannot be sure: after a construct it does
not model (``$(…)``, backquotes, ``${…}``, ``$'…'``, here-documents) the rest of the
text is treated as unknown. Inside quotes it also considers that the quoted text may be
handed to another shell (``sh -c "…"``): the word is then hidden only if nothing in
the quoted text before it could be an assignment.

What it does not model, and so cannot catch: a label that is the *argument of an
option* of a program that runs its remaining arguments (``sudo -u --password prog``).
"""

from __future__ import annotations

import re
from typing import Final

__all__ = ["SlotReader"]

_NORMAL: Final = 0
_SINGLE: Final = 1
_DOUBLE: Final = 2
_COMMENT: Final = 3

# Where something happens, per state (everything in between is plain word text).
_NORMAL_STOP: Final = re.compile(r"""[ \t\n;&|()<>'"\\`$#]""")
_DOUBLE_STOP: Final = re.compile(r'["\\`$]')
# Plain words, each followed by blanks (the last one is kept in group 1): unquoted
# text without expansions, and whole quoted strings without expansions or escapes.
_PLAIN_WORDS: Final = re.compile(
    r"""(?:((?:[^\s;&|()<>'"\\`$#]|'[^']*+'|"[^"\\`$]*+")"""
    r"""(?:[^\s;&|()<>'"\\`$]++|'[^']*+'|"[^"\\`$]*+")*+)[ \t]++)++"""
)
# A shell assignment word: NAME=, NAME+=, NAME[i]=.
_ASSIGNMENT: Final = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(?:\[[^\]]*\])?\+?=")
# The same, anywhere in quoted text and whatever quotes or escapes precede it.
_ASSIGNMENT_IN_QUOTES: Final = re.compile(r"""(?:^|[\s;&|(])["'\\]*[A-Za-z_][A-Za-z0-9_]*\+?=""")
# Words after which the next word is (again) in command position.
_COMMAND_WORDS: Final = frozenset(
    {"!", "{", "}", "then", "do", "else", "elif", "if", "while", "until", "time", "exec"}
)
_QUOTES_AND_ESCAPES: Final = "'\"\\"


class SlotReader:
    """Reads one text left to right, once, for slot positions asked in increasing
    order (a position before the last one asked restarts the reading).

    The state after reading up to a position: the quote the reader is in, where the
    current (outer) word began, and what the word before it was — ``None`` at the
    start of a command, ``"word"`` for a plain word, ``"assign"`` for an assignment.
    """

    __slots__ = ("_pos", "_prev", "_state", "_text", "_unknown", "_word_start")

    def __init__(self, text: str) -> None:
        self._text = text
        self._reset()

    @property
    def text(self) -> str:
        return self._text

    def _reset(self) -> None:
        self._pos = 0
        self._state = _NORMAL
        self._word_start = -1  # -1: between words
        self._prev: str | None = None
        self._unknown = False

    def is_argument(self, start: int) -> bool:
        """Whether the word that begins at ``start`` (a secret slot) is surely not a
        command, at this level or in a shell that quoted text may be handed to."""
        text = self._text
        before = start
        while before > 0 and text[before - 1] in _QUOTES_AND_ESCAPES:
            before -= 1
        if before > 0 and text[before - 1] not in " \t\n":
            return True  # glued to the word before it: part of that word, at every level
        if start < self._pos:
            self._reset()
        self._read_to(start)
        if self._unknown:
            return False
        if self._state == _COMMENT:
            return True  # nothing in a comment runs
        if self._state == _NORMAL and self._word_start == -1:
            return self._prev == "word"  # a word of its own: an argument after a plain word
        # Inside a word that began earlier (quoted, or after a closing quote): here the
        # slot is no word of this shell, but the quoted text may be handed to another
        # one (sh -c "..."), where nothing before the slot may be an assignment.
        return _ASSIGNMENT_IN_QUOTES.search(text[self._word_start : start]) is None

    def in_quotes(self, at: int) -> bool:
        """Whether position ``at`` is surely inside a quoted string."""
        if at < self._pos:
            self._reset()
        self._read_to(at)
        return not self._unknown and self._state in (_SINGLE, _DOUBLE)

    # -- the reader ------------------------------------------------------------------------

    def _read_to(self, end: int) -> None:
        text = self._text
        pos = self._pos
        while pos < end and not self._unknown:
            state = self._state
            if state == _SINGLE:
                close = text.find("'", pos, end)
                if close < 0:
                    pos = end
                else:
                    self._state = _NORMAL
                    pos = close + 1
            elif state == _DOUBLE:
                pos = self._read_double(pos, end)
            elif state == _COMMENT:
                newline = text.find("\n", pos, end)
                if newline < 0:
                    pos = end
                else:
                    self._state = _NORMAL
                    self._prev = None
                    pos = newline + 1
            else:
                pos = self._read_normal(pos, end)
        self._pos = pos

    def _read_double(self, pos: int, end: int) -> int:
        text = self._text
        found = _DOUBLE_STOP.search(text, pos, end)
        if found is None:
            return end
        at = found.start()
        char = text[at]
        if char == '"':
            self._state = _NORMAL
            return at + 1
        if char == "\\":
            return at + 2
        if char == "`" or _expands(text, at):
            self._unknown = True
        return at + 1

    def _read_normal(self, pos: int, end: int) -> int:
        text = self._text
        if self._word_start == -1:  # between words: take a run of plain ones at once
            run = _PLAIN_WORDS.match(text, pos, end)
            if run is not None:
                self._prev = _kind(run.group(1))
                return run.end()
        found = _NORMAL_STOP.search(text, pos, end)
        stop = end if found is None else found.start()
        if stop > pos and self._word_start == -1:
            self._word_start = pos
        if found is None:
            return end
        char = text[stop]
        if char in " \t":
            self._end_word(stop)
        elif char in "\n;&|()<>":
            if char == "<" and text.startswith("<<", stop):
                self._unknown = True  # a here-document: its lines are not shell text
            self._end_word(stop)
            self._prev = None  # what follows starts a command (or names a file)
        elif char in "'\"":
            if self._word_start == -1:
                self._word_start = stop
            self._state = _SINGLE if char == "'" else _DOUBLE
        elif char == "\\":
            if self._word_start == -1:
                self._word_start = stop
            return stop + 2
        elif char == "#" and self._word_start == -1:
            self._state = _COMMENT
        elif char == "`" or (char == "$" and _expands(text, stop)):
            self._unknown = True
        elif self._word_start == -1:  # a '$' or '#' inside or starting a word
            self._word_start = stop
        return stop + 1

    def _end_word(self, at: int) -> None:
        if self._word_start == -1:
            return
        self._prev = _kind(self._text[self._word_start : at])
        self._word_start = -1


def _kind(word: str) -> str | None:
    """What a complete word is, for the word after it."""
    if _ASSIGNMENT.match(word):
        return "assign"
    return None if word in _COMMAND_WORDS else "word"


def _expands(text: str, dollar: int) -> bool:
    """Whether the ``$`` at ``dollar`` starts an expansion this reader does not model."""
    return text.startswith(("$(", "${", "$[", "$'", '$"'), dollar)
