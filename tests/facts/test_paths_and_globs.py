"""Paths as a policy sees them, and globs that stand for sets of strings."""

from __future__ import annotations

import fnmatch

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from interlock.facts.globs import could_match, covers
from interlock.facts.paths import PathError, PathPattern, normalise_path


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("/workspace/../etc/passwd", "/etc/passwd"),
        ("//etc//passwd", "/etc/passwd"),
        ("///etc/./passwd", "/etc/passwd"),
        ("a/./b/../c", "a/c"),
        ("$HOME/.ssh/id_rsa", "~/.ssh/id_rsa"),
        ("${HOME}/.aws/credentials", "~/.aws/credentials"),
        ("~/.ssh/id_rsa", "~/.ssh/id_rsa"),
        ("notes.txt", "notes.txt"),
    ],
)
def test_paths_name_one_file(text: str, expected: str) -> None:
    found = normalise_path(text)
    assert (type(found), found) == (str, expected)


@pytest.mark.parametrize(
    ("text", "pattern"),
    [
        ("../../etc/passwd", "*/etc/passwd"),
        ("..", "*"),
        ("../..", "*"),
        ("$DIR/key.pem", "*/key.pem"),
        ("${X:-/}etc/shadow", "*etc/shadow"),
        ("%APPDATA%/secrets", "*/secrets"),
        ("$D/../x", "*"),
        ("../a*b", "*/a[*]b"),
    ],
)
def test_paths_that_could_be_anywhere_are_patterns(text: str, pattern: str) -> None:
    found = normalise_path(text)
    assert (type(found), str(found)) == (PathPattern, pattern)


def test_a_nul_byte_is_refused() -> None:
    with pytest.raises(PathError, match="NUL"):
        normalise_path("/workspace/a\x00/etc/passwd")


@pytest.mark.parametrize(
    ("a", "b", "expected"),
    [
        ("*/etc/passwd", "/etc/*", True),
        ("*.pem", "*/.ssh/*", True),  # /.ssh/x.pem
        ("*.txt", "*.pem", False),
        ("/workspace/*", "/etc/*", False),
        ("*", "/etc/*", True),
        ("a?c", "abc", True),
        ("a[bc]d", "axd", False),
        ("a[bc]d", "a?d", True),
        ("[!/]*", "/etc/*", False),  # a relative tree is never absolute
        ("[!/]*", "*/.env", True),
        ("abc", "abd", False),
    ],
)
def test_could_match(a: str, b: str, expected: bool) -> None:
    assert could_match(a, b) is expected
    assert could_match(b, a) is expected


@pytest.mark.parametrize(
    ("rule", "value", "expected"),
    [
        ("*", "*/etc/passwd", True),
        ("*/passwd", "*/etc/passwd", True),
        ("/etc/*", "*/etc/passwd", False),  # the pattern may be /x/etc/passwd
        ("*.pem", "*.pem", True),
        ("*.pem", "key*", False),
        ("?", "*", False),
        ("/workspace/*", "/workspace/a*", True),
    ],
)
def test_covers(rule: str, value: str, expected: bool) -> None:
    assert covers(rule, value) is expected


_CHARS = st.sampled_from(list("ab/.*?"))


@settings(max_examples=300, deadline=None)
@given(
    rule=st.text(_CHARS, max_size=6),
    value=st.text(_CHARS, max_size=6),
    probe=st.text(st.sampled_from(list("ab/.")), max_size=6),
)
def test_covers_and_could_match_are_sound(rule: str, value: str, probe: str) -> None:
    """A string both globs match proves could_match; a string the value matches and
    the rule does not disproves covers."""
    in_value = fnmatch.fnmatchcase(probe, value)
    in_rule = fnmatch.fnmatchcase(probe, rule)
    if in_value and in_rule:
        assert could_match(rule, value)
    if in_value and not in_rule:
        assert not covers(rule, value)
