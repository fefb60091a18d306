"""The union filter of a call's argument probes (``sessionrules._union_of``) covers
short numbers, bools and None beside strings (an amount, an id, a flag), and a
number's probe comes from the cache of texts: the same fingerprints as probing each
value on its own, never fewer (a filter that missed one would hide a flow)."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from interlock.policy import sessionrules
from interlock.policy.sessionrules import _argument_probes, _union_of, probed
from interlock.session.fingerprints import probe

SCALARS = st.one_of(
    st.integers(-(10**12), 10**12),
    st.floats(allow_nan=True),
    st.booleans(),
    st.none(),
    st.sampled_from(["DE44500105175407324931", "carol@corp.example", "1", "True", "640"]),
    st.text(max_size=40),
)
VALUES = st.one_of(SCALARS, st.tuples(st.text(max_size=8), st.text(max_size=8)))
NAMES = st.sampled_from(["to", "amount", "account", "flag", "note"])


@settings(max_examples=300, deadline=None)
@given(value=SCALARS)
def test_a_numbers_probe_is_its_own(value: Any) -> None:
    assert probed(value) == probe(value)


@settings(max_examples=300, deadline=None)
@given(
    args=st.dictionaries(NAMES, VALUES, max_size=4),
    names=st.one_of(st.none(), st.lists(NAMES, max_size=3, unique=True).map(tuple)),
    seams=st.booleans(),
)
def test_the_union_is_every_probe_the_arguments_make(
    args: dict[str, Any], names: tuple[str, ...] | None, seams: bool
) -> None:
    found = _union_of(args, names, seams)
    made = frozenset().union(*_argument_probes(args, names, None, seams))
    if found is not None:
        assert found == made


def test_numbers_are_filtered_and_one_is_not_true() -> None:
    sessionrules._UNIONS.clear()
    one = _union_of({"account": "DE44500105175407324931", "amount": 1}, None, True)
    true = _union_of({"account": "DE44500105175407324931", "amount": True}, None, True)
    assert one is not None and true is not None
    assert one == frozenset().union(
        *_argument_probes({"account": "DE44500105175407324931", "amount": 1}, None, None, True)
    )
    assert true != one


def test_a_tuple_argument_never_takes_the_union_of_the_texts_it_spells() -> None:
    sessionrules._UNIONS.clear()
    _union_of({"a": 2, "b": "xyzzy-token-12345"}, None, True)  # kept by its 2 texts
    spelled = {"n": 2, "texts": ("2", "xyzzy-token-12345")}  # the values spell that key
    assert _union_of(spelled, None, True) is None  # (a tuple: not filtered)
