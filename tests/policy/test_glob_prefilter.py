"""A glob set tests its globs' required literals before its regex
(``matchers._prefiltered``): it must answer as the regex does for every glob and
text — random globs over wildcards, classes (closed, open, negated) and literals,
random texts built from the same characters and from the globs' own pieces."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from interlock.policy.matchers import GlobSet

PIECES = ["*", "**", "?", "/", ".", "a", "b", "ab", ".ssh", "[ab]", "[!a]", "[", "]", "x/", "-"]
globs = st.lists(st.sampled_from(PIECES), min_size=1, max_size=7).map("".join)
texts = st.lists(
    st.sampled_from(["a", "b", "/", ".", "x", "ab", ".ssh", "-", "[", "]"]), max_size=12
)


@settings(max_examples=1500, deadline=None)
@given(st.lists(globs, min_size=1, max_size=4), texts, st.booleans())
def test_the_prefilter_answers_as_the_regex(patterns: list[str], text: list[str], ic: bool) -> None:
    glob_set = GlobSet.of(patterns, ignore_case=ic)
    joined = "".join(text)
    assert (glob_set.match(joined) is not None) == (glob_set._regex.match(joined) is not None)


@settings(max_examples=500, deadline=None)
@given(st.lists(globs, min_size=1, max_size=3), st.data())
def test_texts_made_from_the_globs_own_pieces(patterns: list[str], data: st.DataObject) -> None:
    """Texts likely to match: a glob with its wildcards filled in."""
    glob_set = GlobSet.of(patterns)
    source = data.draw(st.sampled_from(patterns))
    filler = data.draw(st.sampled_from(["", "a", "x/y", "/.ssh/"]))
    text = source.replace("**", filler).replace("*", filler).replace("?", "a")
    assert (glob_set.match(text) is not None) == (glob_set._regex.match(text) is not None)


def test_the_usual_secret_paths() -> None:
    secrets = GlobSet.of(["**/.ssh/**", "**/.env", "**/*.pem"])
    assert secrets.match is not secrets._regex.match  # prefiltered
    for path in ("/home/u/.ssh/id_rsa", "/srv/app/.env", "/etc/tls/server.pem"):
        assert secrets.matches(path)
    for path in ("/home/u/project/main.py", "/srv/app/.envrc.bak/x", "/etc/tls/pem", ".env"):
        assert not secrets.matches(path)


def test_sets_without_a_usable_literal_use_the_regex_alone() -> None:
    for patterns in (["*"], ["*.py", "a?"], ["exact_name"], ["[ab]*"]):
        glob_set = GlobSet.of(patterns)
        assert glob_set.match == glob_set._regex.match, patterns
    assert GlobSet.of(["**/.env"], ignore_case=True).match == (
        GlobSet.of(["**/.env"], ignore_case=True)._regex.match
    )
