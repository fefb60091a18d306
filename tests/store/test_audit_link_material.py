"""The link material, built in one f-string on the commit's path, is byte for byte
the documented encoding (each field ``<length>:<text>``, a missing one ``~``)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from interlock.store.chain import link_material

TEXT = st.text(max_size=40)
OPTIONAL = st.none() | TEXT


def _field(text: str | None) -> str:
    return "~" if text is None else f"{len(text)}:{text}"


def _reference(*fields: str | int | None, key_id: str | None) -> bytes:
    parts = [_field(None if f is None else str(f)) for f in fields]
    if key_id is not None:
        parts.append(_field(key_id))
    return "".join(parts).encode("utf-8", "surrogatepass")


@settings(max_examples=400, deadline=None)
@given(
    TEXT,
    TEXT,
    st.integers(min_value=1, max_value=2**62),
    st.integers(min_value=0, max_value=2**62),
    TEXT,
    OPTIONAL,
    OPTIONAL,
    OPTIONAL,
    TEXT,
    OPTIONAL,
)
def test_link_material_is_the_documented_encoding(
    prev: str,
    tenant: str,
    seq: int,
    ts_us: int,
    kind: str,
    decision_id: str | None,
    agent: str | None,
    decision: str | None,
    body: str,
    key_id: str | None,
) -> None:
    got = link_material(prev, tenant, seq, ts_us, kind, decision_id, agent, decision, body, key_id)
    assert got == _reference(
        prev, tenant, seq, ts_us, kind, decision_id, agent, decision, body, key_id=key_id
    )


def test_a_missing_field_and_an_empty_one_differ() -> None:
    assert link_material("p", "t", 1, 2, "k", None, "", None, "{}") == b"1:p1:t1:11:21:k~0:~2:{}"
