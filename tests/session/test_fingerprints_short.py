"""``of_data`` answers at once for a value whose every text is ASCII and shorter than
``MIN_TOKEN`` (a tool's "ok", ``{"ok": True}``): the same empty set the full reading
gives — held here on random values around the bound, non-ASCII texts and escapes
included (a short non-ASCII text can fold into a longer one)."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from interlock.session.fingerprints import MAX_FINGERPRINTS, MIN_TOKEN, _of_data, of_data

ASCII = st.text(alphabet=st.sampled_from("abcXYZ019 _-=%\\+/.:&;#\t\n"), max_size=2 * MIN_TOKEN + 2)
ANY = st.text(max_size=MIN_TOKEN + 2)
FOLDING = st.sampled_from(["\ufdfa", "\ufdfa\ufdfa", "\ufb03" * 7, "\u2460\u2461", "\u3300", "é"])
texts = st.one_of(ASCII, ANY, FOLDING)
values = st.recursive(
    st.one_of(texts, st.none(), st.booleans(), st.integers()),
    lambda inner: st.one_of(
        st.dictionaries(texts, inner, max_size=10), st.lists(inner, max_size=4)
    ),
    max_leaves=12,
)


@settings(max_examples=1500, deadline=None)
@given(values)
def test_the_short_answer_is_the_full_readings(value: Any) -> None:
    assert of_data(value) == _of_data(value, MAX_FINGERPRINTS)


def test_the_usual_short_results_are_answered_at_once() -> None:
    for value in ("ok", "done", "a b c", {"ok": True}, {"status": "sent"}, None, False):
        assert of_data(value) == frozenset() == _of_data(value, MAX_FINGERPRINTS)
    # a word of MIN_TOKEN characters is read in full (a key-like one is kept whole)
    assert of_data("sk_9f8e7") == _of_data("sk_9f8e7", MAX_FINGERPRINTS) != frozenset()
    # a short text that folds into a long one is read in full: two characters, 5 kept
    assert of_data("\ufdfa\ufdfa") == _of_data("\ufdfa\ufdfa", MAX_FINGERPRINTS) != frozenset()
