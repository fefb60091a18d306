"""Properties of fingerprints: a random secret token (16-40 letters and digits) inside a
random file is found in an argument that carries it under any chain of up to three
encodings, cut out of a longer text or not; a random token that the file does not hold
is not found."""

from __future__ import annotations

import base64
import json
import string
from collections.abc import Callable
from urllib.parse import quote

from hypothesis import given, settings
from hypothesis import strategies as st

from interlock.session.fingerprints import carries, of_data, probe

ALNUM = string.ascii_letters + string.digits
WORDS = ["alpha", "config", "server", "value", "the", "of", "and", "path", "user", "mode"]

ENCODE: dict[str, Callable[[str], str]] = {
    "b64": lambda s: base64.b64encode(s.encode()).decode(),
    "b64url": lambda s: base64.urlsafe_b64encode(s.encode()).decode().rstrip("="),
    "url": lambda s: quote(s, safe=""),
    "hex": lambda s: s.encode().hex(),
    "json": lambda s: json.dumps({"v": s}),
    "wrap": lambda s: "\n".join(s[i : i + 50] for i in range(0, len(s), 50)),
}

tokens = st.text(ALNUM, min_size=16, max_size=40).filter(
    lambda t: any(c.isdigit() for c in t) and any(c.isalpha() for c in t)
)
prose = st.lists(st.sampled_from(WORDS), min_size=0, max_size=30).map(" ".join)
#: a case change comes first (upper-cased base64 is no longer base64: nothing reads it)
chains = st.tuples(st.booleans(), st.lists(st.sampled_from(sorted(ENCODE)), max_size=3)).map(
    lambda pair: (["upper"] if pair[0] else []) + pair[1]
)
ENCODE["upper"] = str.upper


@settings(max_examples=150, deadline=None)
@given(secret=tokens, before=prose, after=prose, chain=chains, key=st.sampled_from(["K", "X_Y"]))
def test_a_secret_is_found_under_any_chain_of_encodings(
    secret: str, before: str, after: str, chain: list[str], key: str
) -> None:
    data = of_data(f"{before}\n{key}={secret}\n{after}")
    carried = f"{before} {secret} {after}" if before else secret
    for name in chain:
        carried = ENCODE[name](carried)
    assert carries(probe({"body": carried}), data), (chain, carried)


@settings(max_examples=150, deadline=None)
@given(secret=tokens, other=tokens, before=prose, chain=chains)
def test_a_token_the_data_does_not_hold_is_not_found(
    secret: str, other: str, before: str, chain: list[str]
) -> None:
    if other.casefold() in secret.casefold() or secret.casefold() in other.casefold():
        return
    data = of_data(f"{before}\nTOKEN={secret}\n")
    carried = other
    for name in chain:
        carried = ENCODE[name](carried)
    shared = any(other.casefold()[i : i + 16] in secret.casefold() for i in range(len(other) - 15))
    assert carries(probe({"body": carried}), data) is shared
