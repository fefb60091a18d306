"""Who is who: names of requesters and approvers compared so that a name written
differently — or one that only looks the same — cannot pass as another.

Two names are **one identity** when one of their *identity forms* is the same.
A name's forms are built in these steps:

1. **NFKC**: fullwidth ``ａｌｉｃｅ``, ligatures (``ﬁ`` → ``fi``), superscripts and other
   compatibility forms become the plain letters;
2. **invisible characters removed**: every ``Default_Ignorable_Code_Point`` (zero-width
   space and joiners, soft hyphen, byte order mark, bidi controls, variation
   selectors, tag characters, Hangul fillers...) and every control character;
   whitespace runs become one space, trimmed at both ends;
3. **the UTS #39 confusable skeleton**, taken twice: of the case-folded name, folded
   again (the *folded* form: ``Alice`` = ``alice``, and ``B0B`` = ``bob``, for ``0``
   is confusable with ``O``, which folds to ``o``), and of the name as written (the
   *written* form: ``aIice`` with a capital ``I`` = ``alice``, for ``I`` is
   confusable with ``l`` — which folding first would have lost). A form is compared
   with the same form of the other name.

What stays distinct: different letters (``alice`` / ``alicia``, ``bob`` / ``rob``), and
visible accents (``rene`` / ``renée``: UTS #39 keeps diacritics) — while the same
accent composed or decomposed is one character. Digits and letters that are
confusable are not distinct: ``b0b`` is ``bob``, ``bi11`` is ``bill``, ``rnary`` is
``mary``.

The confusable data is Unicode's ``confusables.txt`` as the ``confusable-homoglyphs``
package ships it (a graph of which characters are confusable, without the
direction of each mapping). Every character it names is mapped to one member of its
class — the class's prototype where the data shows it, a character that names a
multi-character prototype (``m`` → ``rn``) to that string — so two strings have the
same skeleton exactly when UTS #39's would be the same. The table is built from the
installed package on first use (tens of milliseconds), never downloaded.

Example::

    from interlock.core.identity import same_identity

    assert same_identity("alice", "\\u0430lice")        # Cyrillic а
    assert same_identity("ops-bot", "OPS\\u200b-BOT")   # a zero-width space
    assert not same_identity("alice", "alicia")
"""

from __future__ import annotations

import functools
import json
import re
import unicodedata
from collections.abc import Iterable
from importlib import resources
from typing import Final

__all__ = [
    "DEFAULT_IGNORABLE_RANGES",
    "identity_forms",
    "same_identity",
    "skeleton",
    "visible_name",
]

#: ``Default_Ignorable_Code_Point`` (Unicode's DerivedCoreProperties.txt; the set has
#: not changed since Unicode 9 and includes the code points reserved for it).
DEFAULT_IGNORABLE_RANGES: Final[tuple[tuple[int, int], ...]] = (
    (0x00AD, 0x00AD),  # soft hyphen
    (0x034F, 0x034F),  # combining grapheme joiner
    (0x061C, 0x061C),  # Arabic letter mark
    (0x115F, 0x1160),  # Hangul choseong / jungseong fillers
    (0x17B4, 0x17B5),  # Khmer inherent vowels
    (0x180B, 0x180F),  # Mongolian free variation selectors, vowel separator
    (0x200B, 0x200F),  # zero-width space, non-joiner, joiner; LRM, RLM
    (0x202A, 0x202E),  # bidi embeddings and overrides
    (0x2060, 0x206F),  # word joiner, invisible operators, bidi isolates...
    (0x3164, 0x3164),  # Hangul filler
    (0xFE00, 0xFE0F),  # variation selectors 1-16
    (0xFEFF, 0xFEFF),  # zero-width no-break space (byte order mark)
    (0xFFA0, 0xFFA0),  # halfwidth Hangul filler
    (0xFFF0, 0xFFF8),  # reserved
    (0x1BCA0, 0x1BCA3),  # shorthand format controls
    (0x1D173, 0x1D17A),  # musical symbol format controls
    (0xE0000, 0xE0FFF),  # tags, variation selectors 17-256, reserved
)

_INVISIBLE: Final = re.compile(
    "["
    + "".join(f"{chr(lo)}-{chr(hi)}" for lo, hi in DEFAULT_IGNORABLE_RANGES)
    + "\x00-\x1f\x7f-\x9f]"  # control characters: invisible too
)
# Marks the package's data wraps right-to-left characters in (its source is the
# comment column of confusables.txt, written for display): not part of a character.
_DISPLAY_MARKS: Final = str.maketrans("", "", "\u200e\u200f")


def visible_name(name: str) -> str:
    """``name`` in NFKC with its invisible characters removed and its whitespace
    collapsed: what a reader of the name can see of it."""
    text = _INVISIBLE.sub("", unicodedata.normalize("NFKC", name))
    # NFKC can turn a visible compatibility character into an ignorable one
    # (U+FFA0 → U+1160): remove those too.
    return " ".join(_INVISIBLE.sub("", text).split())


def skeleton(text: str) -> str:
    """The UTS #39 skeleton of ``text``: NFD, each character replaced by the
    prototype of its confusable class, NFD again. Case is kept (``I`` and ``l`` are
    confusable, ``i`` and ``l`` are not)."""
    prototypes = _prototypes()
    mapped = "".join(prototypes.get(char, char) for char in unicodedata.normalize("NFD", text))
    return unicodedata.normalize("NFD", mapped)


@functools.lru_cache(maxsize=4096)
def identity_forms(name: str) -> frozenset[str]:
    """The forms ``name`` is compared by (see the module's docs); empty when the name
    has nothing visible in it — which is no identity at all."""
    visible = visible_name(name)
    if not visible:
        return frozenset()
    # Each form is compared with the same form of the other name only: ``Ian`` reads
    # as ``lan`` (capital I, small l), and ``Lan`` folds to ``lan``, yet ``Ian`` is not
    # ``Lan``.
    folded = _nfd(skeleton(visible.casefold()).casefold())
    written = skeleton(visible)
    return frozenset((f"folded:{folded}", f"written:{written}"))


def same_identity(first: str | None, second: str | None) -> bool:
    """Whether ``first`` and ``second`` name one identity. ``None``, or a name with
    nothing visible in it, is nobody: never the same as anyone."""
    if first is None or second is None:
        return False
    return not identity_forms(first).isdisjoint(identity_forms(second))


def _nfd(text: str) -> str:
    return unicodedata.normalize("NFD", text)


@functools.cache
def _prototypes() -> dict[str, str]:
    """Every character the confusable data names → the prototype of its class (only
    those that differ from it)."""
    source = resources.files("confusable_homoglyphs").joinpath("confusables.json")
    data: dict[str, list[dict[str, str]]] = json.loads(source.read_text(encoding="utf-8"))
    edges = [
        (key.translate(_DISPLAY_MARKS), entry["c"].translate(_DISPLAY_MARKS))
        for key, entries in data.items()
        for entry in entries
    ]
    return _prototype_table(edges)


def _prototype_table(edges: Iterable[tuple[str, str]]) -> dict[str, str]:
    """The prototype of each class of a confusable graph, for each character of the
    class that is not it. confusables.txt maps each source character to one
    prototype, so every class is a star around its prototype: a multi-character
    string if the class has one, else the member with the most confusables (a class
    of two: the lower code point)."""
    neighbours: dict[str, set[str]] = {}
    for raw_first, raw_second in edges:
        # The skeleton looks characters up in NFD text: a precomposed character is
        # its decomposition there (a string, which joins its class but is never
        # looked up itself).
        first, second = _nfd(raw_first), _nfd(raw_second)
        if first and second and first != second:
            neighbours.setdefault(first, set()).add(second)
            neighbours.setdefault(second, set()).add(first)
    table: dict[str, str] = {}
    seen: set[str] = set()
    for start in neighbours:
        if start in seen:
            continue
        members = _class_of(start, neighbours)
        seen |= members
        prototype = min(members, key=lambda m: (len(m) == 1, -len(neighbours[m]), m))
        for member in members:
            if len(member) == 1 and member != prototype:
                table[member] = prototype
    # A multi-character prototype is written in characters that have classes of their
    # own: spell it in their prototypes, so that ``rn`` typed and ``m`` meet.
    single = dict(table)
    for char, prototype in single.items():
        if len(prototype) > 1:
            table[char] = _spelled(prototype, single)
    return table


def _spelled(prototype: str, table: dict[str, str]) -> str:
    spelled = prototype
    for _ in range(8):  # a prototype's parts are prototypes: one round is the rule
        respelled = "".join(table.get(part, part) for part in unicodedata.normalize("NFD", spelled))
        if respelled == spelled:
            break
        spelled = respelled
    return spelled


def _class_of(start: str, neighbours: dict[str, set[str]]) -> set[str]:
    members: set[str] = set()
    pending = [start]
    while pending:
        member = pending.pop()
        if member not in members:
            members.add(member)
            pending.extend(neighbours[member] - members)
    return members
