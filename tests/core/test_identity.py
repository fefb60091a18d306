"""Identities: names written differently, or only looking alike, are one identity;
names that differ in what a reader sees stay two."""

from __future__ import annotations

import sys
import unicodedata

import pytest

from interlock.core import identity
from interlock.core.identity import (
    DEFAULT_IGNORABLE_RANGES,
    identity_forms,
    same_identity,
    skeleton,
    visible_name,
)

SAME = {
    "identical": ("alice", "alice"),
    "fullwidth": ("alice", "\uff41\uff4c\uff49\uff43\uff45"),
    "fullwidth capitals": ("ops-bot", "\uff2f\uff30\uff33-\uff22\uff2f\uff34"),
    "zero width space U+200B": ("alice", "al\u200bice"),
    "zero width joiner U+200D": ("alice", "a\u200dlice"),
    "byte order mark U+FEFF": ("alice", "alice\ufeff"),
    "soft hyphen U+00AD": ("alice", "ali\u00adce"),
    "combining grapheme joiner": ("alice", "al\u034fice"),
    "bidi override": ("alice", "\u202ealice\u202c"),
    "variation selector": ("alice", "a\ufe0flice"),
    "tag characters": ("alice", "alice\U000e0061\U000e007f"),
    "hangul filler": ("alice", "alice\u3164"),
    "control character": ("alice", "ali\x85ce"),
    "cyrillic a": ("alice", "\u0430lice"),
    "cyrillic e": ("alice", "alic\u0435"),
    "cyrillic o": ("bob", "b\u043eb"),
    "cyrillic er": ("pat", "\u0440at"),
    "cyrillic es": ("alice", "ali\u0441e"),
    "greek capital alpha": ("alice", "\u0391LICE"),
    "mixed case": ("Ops-Bot", "oPS-bOT"),
    "whitespace": ("ops bot", "  ops\u00a0\u2003bot\t"),
    "composed and decomposed": ("ren\u00e9e", "rene\u0301e"),
    "ligature fi": ("file-bot", "\ufb01le-bot"),
    "capital I for l": ("alice", "aIice"),
    "digit one for l": ("bill", "bi11"),
    "digit zero for o": ("bob", "b0b"),
    "digit zero for capital O": ("BOB", "B0B"),
    "rn for m": ("mary", "rnary"),
    "hyphen look-alike": ("ops-bot", "ops\u2010bot"),
    "sharp s": ("strasse", "Stra\u00dfe"),
    "mathematical letters": ("alice", "\U0001d41a\U0001d425\U0001d422\U0001d41c\U0001d41e"),
}

DISTINCT = {
    "a longer name": ("alice", "alicia"),
    "another letter": ("bob", "rob"),
    "i and l": ("neil", "nell"),
    "capital I and capital L": ("Ian", "Lan"),
    "a visible accent": ("rene", "ren\u00e9e"),
    "underscore and hyphen": ("ops-bot", "ops_bot"),
    "a suffix": ("ops-bot", "ops-bot-2"),
    "a space inside": ("opsbot", "ops bot"),
}


@pytest.mark.parametrize("pair", SAME.values(), ids=list(SAME))
def test_names_written_another_way_are_one_identity(pair: tuple[str, str]) -> None:
    first, second = pair
    assert same_identity(first, second)
    assert same_identity(second, first)


@pytest.mark.parametrize("pair", DISTINCT.values(), ids=list(DISTINCT))
def test_names_a_reader_tells_apart_stay_two(pair: tuple[str, str]) -> None:
    first, second = pair
    assert not same_identity(first, second)
    assert not same_identity(second, first)


@pytest.mark.parametrize("name", ["", "   ", "\u200b\u200d", "\u00ad\ufeff", "\U000e0020\x07"])
def test_a_name_with_nothing_visible_is_nobody(name: str) -> None:
    assert identity_forms(name) == frozenset()
    assert not same_identity(name, name)


def test_no_name_is_nobody() -> None:
    assert not same_identity(None, "alice")
    assert not same_identity("alice", None)
    assert not same_identity(None, None)


def test_the_visible_name_keeps_what_a_reader_sees() -> None:
    assert visible_name("  \uff41li\u200bce\u00a0 \ufb01 ") == "alice fi"


def test_the_default_ignorables_hold_every_format_control_the_formula_names() -> None:
    # Default_Ignorable_Code_Point = Other_DI + Cf + Variation_Selector − White_Space −
    # FFF9..FFFB − Egyptian format controls − Prepended_Concatenation_Mark.
    excluded = {0xFFF9, 0xFFFA, 0xFFFB, *range(0x13430, 0x13440)}
    excluded |= {*range(0x0600, 0x0606), 0x06DD, 0x070F, 0x0890, 0x0891, 0x08E2}
    excluded |= {0x110BD, 0x110CD}

    def ignorable(code: int) -> bool:
        return any(lo <= code <= hi for lo, hi in DEFAULT_IGNORABLE_RANGES)

    for code in range(sys.maxunicode + 1):
        char = chr(code)
        if unicodedata.category(char) == "Cf" and code not in excluded:
            assert ignorable(code), f"U+{code:04X} {unicodedata.name(char, '')}"
        if unicodedata.category(char) == "Mn" and "VARIATION SELECTOR" in unicodedata.name(
            char, ""
        ):
            assert ignorable(code), f"U+{code:04X}"
        if char.isspace():
            assert not ignorable(code) or code == 0x180E, f"U+{code:04X}"


def test_every_prototype_is_its_own_skeleton() -> None:
    table = identity._prototypes()
    # confusables.txt maps about 6,300 characters; the ~1,000 that decompose in NFD
    # are met through their parts.
    assert len(table) > 5000
    for char, prototype in table.items():
        assert skeleton(prototype) == unicodedata.normalize("NFD", prototype), (char, prototype)
        assert skeleton(char) == skeleton(prototype), char


def test_a_class_prototype_is_its_multi_character_member_else_its_centre() -> None:
    edges = [("m", "rn"), ("1", "l"), ("I", "l"), ("|", "l"), ("x", "y"), ("r", "\u0433")]
    table = identity._prototype_table(edges)
    assert table == {"m": "rn", "1": "l", "I": "l", "|": "l", "y": "x", "\u0433": "r"}


def test_a_multi_character_prototype_is_spelled_in_prototypes() -> None:
    # "rn" is written in characters that have classes of their own (here r's
    # prototype is R): spelled in them, so that the string typed and "m" meet.
    table = identity._prototype_table([("m", "rn"), ("r", "R"), ("Q", "R")])
    assert table == {"m": "Rn", "r": "R", "Q": "R"}


def test_the_table_is_built_once() -> None:
    identity_forms.cache_clear()
    assert same_identity("ops-bot", "\u043eps-bot")
    assert same_identity("root", "r\u043e\u043et")
    assert identity._prototypes.cache_info().misses <= 1


def test_the_shipped_confusable_data_is_a_star_around_each_prototype() -> None:
    # What the prototype table rests on: each class has at most one member with more
    # than one confusable (confusables.txt maps every character to one prototype).
    import json
    from importlib import resources

    source = resources.files("confusable_homoglyphs").joinpath("confusables.json")
    data = json.loads(source.read_text(encoding="utf-8"))
    neighbours: dict[str, set[str]] = {}
    for key, entries in data.items():
        for entry in entries:
            first = unicodedata.normalize("NFD", key.translate(identity._DISPLAY_MARKS))
            second = unicodedata.normalize("NFD", entry["c"].translate(identity._DISPLAY_MARKS))
            if first != second:
                neighbours.setdefault(first, set()).add(second)
                neighbours.setdefault(second, set()).add(first)
    for node, linked in neighbours.items():
        if len(linked) > 1:  # a centre: its neighbours are leaves
            assert all(len(neighbours[leaf]) == 1 for leaf in linked), node
