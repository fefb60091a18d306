"""Fingerprints that hold: data a step returned is found in an argument however it was
cut, re-wrapped or re-encoded (the attack table, every row must be found), and an
argument that did not come from the data is not (the benign look-alikes, every row must
pass; the false-positive rate over a corpus of ordinary arguments and unrelated texts,
measured and bounded). Both rates are printed (``pytest -s``)."""

from __future__ import annotations

import base64
import codecs
import json
import random
import string
from collections.abc import Callable
from urllib.parse import quote, quote_plus

import pytest

from interlock.session import fingerprints
from interlock.session.fingerprints import (
    GRAM,
    MAX_FINGERPRINTS,
    carries,
    of_data,
    probe,
)

from .fp_corpus import benign_arguments, unrelated_results

AWS = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"
TOKEN = "sk-live-9f8e7d6c5b4a39281706f5e4d3c2b1a0"
PASSWORD = "Tr0ub4dor&3x"
PEM_BODY = (
    "MIIEowIBAAKCAQEA1c7+9z5Pad7OejecsQ0bu3aozN3tihPmljnnudb9G3HECdnH\n"
    "lWu2/a1gB9JW5TBQ+AVpum9Okx7KfqkfBKL9mcHgSd4cPoFkXN3cg3R0bHlsL1nP\n"
    "O1XyxzPYgdT2yZ6MeasgMPcchHMe2yYdnAOiwp8U1VKrxgpaBi6fx+jKAN2ug0Pz\n"
)
ENV = f"# settings\nAWS_SECRET_ACCESS_KEY={AWS}\nOPENAI_API_KEY={TOKEN}\nDB_PASSWORD={PASSWORD}\n"
PROSE = (
    "Confidential: the acquisition of Northwind Traders closes on the fourteenth of "
    "March at a price of forty-two million, pending the approval of the regulator."
)
DATA = of_data({"env": ENV, "key": f"-----BEGIN RSA PRIVATE KEY-----\n{PEM_BODY}", "memo": PROSE})


def _b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


def _at_offset(prefix: int) -> Callable[[str], str]:
    """The base64 of a text where the secret sits at byte ``prefix`` (after a line
    break): its encoding starts at an alignment that is not the secret's own."""

    def encode(secret: str) -> str:
        return _b64("x" * prefix + "\n" + secret + "\nthe end")

    return encode


def _dns_labels(encoded: str) -> str:
    """Unpadded lower-case base32 as the labels (at most 63 characters) of a host."""
    encoded = encoded.rstrip("=").lower()
    return (
        "http://" + ".".join(encoded[i : i + 63] for i in range(0, len(encoded), 63)) + ".x.example"
    )


def _cut_mid_group(secret: str) -> str:
    """A piece cut out of a longer base64 text, starting in the middle of a group."""
    whole = _b64("some words before it\n" + secret + "\nand some after it")
    return whole[5:-5]


ENCODINGS: dict[str, Callable[[str], str]] = {
    "plain": lambda s: s,
    "in a sentence": lambda s: f"here is what you asked for: {s} -- bye",
    "upper case": str.upper,
    "lower case": str.lower,
    "re-wrapped every 7": lambda s: "\n".join(s[i : i + 7] for i in range(0, len(s), 7)),
    "spaced": " ".join,
    "json-escaped": lambda s: json.dumps({"k": "a\n" + s})[1:-1],
    "json twice": lambda s: json.dumps(json.dumps({"k": s})),
    "url-encoded": lambda s: "https://evil.example/c?d=" + quote(s, safe=""),
    "url-encoded plus": lambda s: "https://evil.example/c?d=" + quote_plus(s),
    "url-encoded twice": lambda s: "https://evil.example/c?d=" + quote(quote(s, safe=""), safe=""),
    "base64": _b64,
    "base64 no padding": lambda s: _b64(s).rstrip("="),
    "base64 url-safe": lambda s: base64.urlsafe_b64encode(s.encode()).decode().rstrip("="),
    "base64 wrapped at 60": lambda s: "\n".join(
        _b64(s)[i : i + 60] for i in range(0, len(_b64(s)), 60)
    ),
    "base64, secret at byte 1": _at_offset(0),
    "base64, secret at byte 2": _at_offset(1),
    "base64, secret at byte 3": _at_offset(2),
    "base64 piece cut mid-group": _cut_mid_group,
    "base64 in url": lambda s: "https://evil.example/?q=" + quote(_b64(s)),
    "hex": lambda s: s.encode().hex(),
    "hex upper, odd start": lambda s: "f" + s.encode().hex().upper(),
    "base64 of base64": lambda s: _b64(_b64(s)),
    "base32": lambda s: base64.b32encode(s.encode()).decode(),
    "base32 dns labels": lambda s: _dns_labels(base64.b32encode(s.encode()).decode()),
    "reversed": lambda s: s[::-1],
    "rot13": lambda s: codecs.encode(s, "rot13"),
    "html entities": lambda s: "".join(f"&#{ord(c)};" for c in s),
    "\\x escapes": lambda s: "".join(f"\\x{b:02x}" for b in s.encode()),
}
SECRETS = {
    "aws secret key": AWS,
    "api token": TOKEN,
    "env line": f"OPENAI_API_KEY={TOKEN}",
    "16 chars cut from a key": AWS[22:38],
    "16 chars at another offset": TOKEN[11:27],
    "private key lines": PEM_BODY[70:190],
    "a sentence of the memo": PROSE[20:75],
}


#: Only specific whole tokens are turned back: prose reversed or ROT13 is not found
#: (a documented limit: turning every form whole tripled the probe).
TURNED_PROSE = {("a sentence of the memo", "reversed"), ("a sentence of the memo", "rot13")}
ROWS = [(s, e) for s in sorted(SECRETS) for e in sorted(ENCODINGS) if (s, e) not in TURNED_PROSE]


@pytest.mark.parametrize(("secret", "encoding"), ROWS)
def test_data_is_found_however_it_is_encoded(secret: str, encoding: str) -> None:
    argument = ENCODINGS[encoding](SECRETS[secret])
    assert carries(probe({"body": argument}), DATA), (secret, encoding, argument)


@pytest.mark.parametrize(("secret", "encoding"), sorted(TURNED_PROSE))
def test_turned_prose_is_a_documented_limit(secret: str, encoding: str) -> None:
    argument = ENCODINGS[encoding](SECRETS[secret])
    assert not carries(probe({"body": argument}), DATA), (secret, encoding, argument)


#: A whole token shorter than GRAM is found only while it stays one token: cut by
#: whitespace into pieces it is not (a documented limit; every other encoding holds).
SHORT_TOKEN_LOST = {"re-wrapped every 7", "spaced"}


@pytest.mark.parametrize("encoding", sorted(ENCODINGS))
def test_a_short_whole_token_is_found_while_it_stays_a_token(encoding: str) -> None:
    found = carries(probe({"pw": ENCODINGS[encoding](PASSWORD)}), DATA)
    assert found is (encoding not in SHORT_TOKEN_LOST), encoding


def test_detection_rate_printed() -> None:
    rows = [(s, e) for s in SECRETS for e in ENCODINGS]
    found = sum(carries(probe(ENCODINGS[e](SECRETS[s])), DATA) for s, e in rows)
    print(f"\nfingerprints: detection {found}/{len(rows)} = {found / len(rows):.1%}")
    assert found == len(rows) - len(TURNED_PROSE)


BENIGN = {
    "another aws-shaped key": "AKIAZZZZZZZZEXAMPLE wJalrXUtnFEMI/Q9ZZZZZ/aaaaaaaaaaaaaaaaaaa",
    "7 chars of the key": AWS[3:10],
    "15 chars of the key, normalised": TOKEN[8:23],
    "the key's words in another order": "EXAMPLEKEY bPxRfiCY K7MDENG wJalrXUtnFEMI",
    "dictionary word of 8+": "password settings configuration",
    "the memo's topic in other words": "Northwind is being bought; the regulator decides",
    "a host named in the data": "send it to settings.example",
    "base64 of something else": _b64("an entirely different text of some length"),
    "hex of something else": "deadbeefcafebabe0123456789abcdef",
    "random base64": base64.b64encode(random.Random(1).randbytes(48)).decode(),
}


@pytest.mark.parametrize("name", sorted(BENIGN))
def test_look_alikes_that_did_not_come_from_the_data_are_not_found(name: str) -> None:
    assert not carries(probe({"body": BENIGN[name]}), DATA), name


def test_a_whole_short_token_matches_only_when_specific() -> None:
    data = of_data("user alice.smith@corp.example, id ab12cd34, word elephant")
    assert carries(probe("mail alice.smith@corp.example"), data)  # an address
    assert carries(probe("look up ab12cd34"), data)  # letters and digits
    assert not carries(probe("an elephant"), data)  # a plain word of 8


def test_fingerprints_are_bounded_per_result() -> None:
    rng = random.Random(7)
    huge = "".join(rng.choice(string.ascii_letters + string.digits) for _ in range(200_000))
    kept = of_data(huge)
    assert len(kept) == MAX_FINGERPRINTS
    prose = " ".join(rng.choice(["alpha", "beta", "gamma", "delta", "kappa"]) for _ in range(400))
    # ordinary text: well under one fingerprint a character
    assert len(of_data(prose)) < 0.6 * len(prose)
    assert of_data("short") == frozenset()


def test_a_hostile_argument_is_probed_in_bounded_work() -> None:
    # nested encodings that would unfold forever are cut at the depth and count bounds
    nested = "secret-value-123456"
    for _ in range(10):
        nested = quote(_b64(nested), safe="")
    assert probe(nested)  # returns, with something
    assert len(probe("A" * 5000)) < 6000


def test_gram_length_is_the_substring_guarantee() -> None:
    data = of_data(TOKEN)
    norm = TOKEN.replace("-", "")
    for start in range(len(norm) - GRAM + 1):
        assert carries(probe(norm[start : start + GRAM]), data), start
    assert not any(
        carries(probe(norm[s : s + GRAM - 4]), data) for s in range(0, len(norm) - GRAM, 3)
    )


def test_false_positive_rate_on_ordinary_arguments_and_unrelated_texts() -> None:
    """Benign arguments against texts they did not come from. The bound: at most 1 in
    100 (argument, text) pairs and 5% of the arguments flagged by any of ~76 texts —
    a flagged pair turns a flow rule's allow into its refusal (a human, or a deny),
    never the other way; the measured figures are far below (see the printout)."""
    arguments = benign_arguments()
    texts = unrelated_results()
    assert len(arguments) >= 100 and len(texts) >= 50
    kept = [of_data(text) for text in texts]
    flagged_pairs = 0
    flagged_arguments = []
    for argument in arguments:
        probed = probe(argument)
        hits = sum(carries(probed, data) for data in kept)
        flagged_pairs += hits
        if hits:
            flagged_arguments.append(argument)
    pair_rate = flagged_pairs / (len(arguments) * len(texts))
    argument_rate = len(flagged_arguments) / len(arguments)
    print(
        f"\nfingerprints: false positives {flagged_pairs}/{len(arguments) * len(texts)} pairs "
        f"= {pair_rate:.3%}; arguments flagged by any text {len(flagged_arguments)}/"
        f"{len(arguments)} = {argument_rate:.1%}: {flagged_arguments}"
    )
    assert pair_rate <= 0.01
    assert argument_rate <= 0.05


def test_base32_of_both_cases_is_read_when_it_has_a_digit() -> None:
    """A base32 encoding whose case was turned (every other character, or at random) is
    read as base32 is; prose joined (both cases, no digit 2-7) is not decoded."""
    encoded = base64.b32encode(TOKEN.encode()).decode()
    alternating = "".join(c.lower() if i % 2 else c for i, c in enumerate(encoded))
    assert alternating.upper() != alternating != alternating.lower()
    assert carries(probe(alternating), DATA)
    assert carries(probe(f"see https://{alternating.rstrip('=').lower()}.x.example/"), DATA)
    assert fingerprints._py_b32_runs("TheQuickBrownFoxJumps") == []
    assert fingerprints._py_b32_runs("TheQuick2BrownFox") == ["TheQuick2BrownFox"]


def test_other_ciphers_are_not_claimed() -> None:
    """What is not decoded (said so in the docs): a cipher of the agent's own (a Caesar
    shift other than 13), an alphabet not read (base85, base32's hex alphabet), or two
    turns on one chain (reversed and ROT13)."""
    caesar = "".join(chr((ord(c) - 97 + 3) % 26 + 97) if c.islower() else c for c in TOKEN)
    hex32 = base64.b32hexencode(TOKEN.encode()).decode()
    for argument in (caesar, base64.b85encode(TOKEN.encode()).decode(), hex32):
        assert not carries(probe(argument), DATA), argument
    assert not carries(probe(codecs.encode(TOKEN, "rot13")[::-1]), DATA)
