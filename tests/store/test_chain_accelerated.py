"""The C link material (``interlock.store._chain``) is byte for byte what its Python
reference, ``chain.link_material``, writes — non-ASCII and surrogate texts, missing
fields, keyed or not, numbers of any size — and arguments it leaves to the reference (a
str subclass, an int too wide, a bool) get the reference's bytes. Skipped where the
extension is not built."""

from __future__ import annotations

import os
import subprocess
import sys
from typing import Any

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from interlock.store import chain

try:
    from interlock.store import _chain
except ImportError:  # pragma: no cover - only where no compiler was at install time
    _chain = None  # type: ignore[assignment]

pytestmark = pytest.mark.skipif(_chain is None, reason="the C accelerator is not built")


class Text(str):
    def __format__(self, spec: str) -> str:
        return "formatted"


TEXTS = st.one_of(
    st.text(max_size=40),
    st.text(alphabet=st.characters(min_codepoint=0xD800, max_codepoint=0xDFFF), max_size=3),
    st.sampled_from(["", "acme", "Grüße 東京 🙂", '{"kind":"decision"}', chain.GENESIS]),
)
MAYBE = st.one_of(st.none(), TEXTS)
NUMBERS = st.one_of(
    st.integers(min_value=-(2**63), max_value=2**63 - 1),
    st.integers(min_value=2**63, max_value=2**80),
    st.integers(min_value=-(2**80), max_value=-(2**63) - 1),
)
FIELDS = st.tuples(TEXTS, TEXTS, NUMBERS, NUMBERS, TEXTS, MAYBE, MAYBE, MAYBE, TEXTS, MAYBE)


class Calls:
    """The reference, counting the calls C hands it."""

    def __init__(self) -> None:
        self.count = 0

    def __call__(self, *fields: Any) -> bytes:
        self.count += 1
        return chain.link_material(*fields)


def _accelerated_in_a_new_process(**env: str) -> str:
    environ = {k: v for k, v in os.environ.items() if k != "INTERLOCK_NO_SPEEDUPS"}
    code = (
        "from interlock.store import chain as c; print(c.fast_link_material is not c.link_material)"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], env=environ | env, capture_output=True, text=True, check=True
    )
    return done.stdout.strip()


def test_the_c_path_is_taken_by_default_and_the_env_switch_turns_it_off() -> None:
    assert _accelerated_in_a_new_process() == "True"
    assert _accelerated_in_a_new_process(INTERLOCK_NO_SPEEDUPS="0") == "True"
    assert _accelerated_in_a_new_process(INTERLOCK_NO_SPEEDUPS="1") == "False"


@pytest.mark.skipif(
    os.environ.get("INTERLOCK_NO_SPEEDUPS", "") not in ("", "0"), reason="INTERLOCK_NO_SPEEDUPS"
)
def test_the_c_path_is_taken_where_it_is_built() -> None:
    assert chain.fast_link_material is not chain.link_material
    assert type(chain.fast_link_material).__name__ == "builtin_function_or_method"


@settings(max_examples=1000, deadline=None)
@given(FIELDS)
@example(("", "", 0, -1, "", None, None, None, "", None))
@example(("a", "b", -(2**63), 2**63 - 1, "c", "", "", "", "", ""))
@example(("\ud800", "Grüße", 10, -10, "k", "\udfff", None, "x", "🙂", "kid"))
def test_the_c_material_is_the_python_reference_byte_for_byte(fields: tuple[Any, ...]) -> None:
    reference = Calls()
    got = _chain.material_or(reference)(*fields)  # type: ignore[union-attr]
    assert got == chain.link_material(*fields)
    # C wrote it itself unless a number is wider than 64 bits
    assert reference.count == (0 if all(-(2**63) <= n < 2**63 for n in fields[2:4]) else 1)


def test_a_missing_key_id_is_left_out_and_other_missing_fields_are_a_tilde() -> None:
    material = chain.fast_link_material
    assert material("p", "t", 1, 2, "k", None, None, None, "b", None) == b"1:p1:t1:11:21:k~~~1:b"
    keyed = material("p", "t", 1, 2, "k", "d", "a", "allow", "b", "kid")
    assert keyed == b"1:p1:t1:11:21:k1:d1:a5:allow1:b3:kid"


@pytest.mark.parametrize(
    "fields",
    [
        ("p", Text("t"), 1, 2, "k", None, "a", None, "b", None),
        ("p", "t", 2**70, 2, "k", None, None, None, "b", None),
        ("p", "t", 1, True, "k", None, None, None, "b", None),
        ("p", "t", 1, 2, "k", None, None, None, "b"),  # key_id left to its default
    ],
)
def test_what_c_leaves_to_the_reference_gets_its_bytes(fields: tuple[Any, ...]) -> None:
    reference = Calls()
    got = _chain.material_or(reference)(*fields)  # type: ignore[union-attr]
    assert reference.count == 1
    assert got == chain.link_material(*fields)


def test_a_hash_made_on_either_path_is_the_same() -> None:
    args = (chain.GENESIS, "acme", 1, 1_700_000_000_000_000, "decision", "d", "bot", "allow", "{}")
    fast = chain.fast_link_material(*args, "kid")
    assert fast == chain.link_material(*args, "kid")
    assert chain.link_hash(*args) == chain.hashlib.sha256(chain.link_material(*args)).hexdigest()
