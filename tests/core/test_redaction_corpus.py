"""The secret corpus, as a table: for each kind, real-shaped samples and what the record
shows; and benign look-alikes that must stay as they are. Keep it growing: a new
provider is a new row here (and a rule in ``interlock.core.redaction_rules``).

Fake secrets are assembled at run time so that secret scanners do not flag this file.
Each sample is shaped like the real thing (prefix, alphabet, length) and is not a key.
"""

from __future__ import annotations

import base64
import json

import pytest

from interlock.core.redaction import MARKER_RE, Redactor, redact, redact_value


def _chars(n: int, pool: str = "Zq8Xv2Lm9Pw4Rt7Ks1Nb6Hy3Jd5Fg0AcUeWo") -> str:
    return (pool * (n // len(pool) + 1))[:n]


def _b64url(data: str) -> str:
    return base64.urlsafe_b64encode(data.encode()).decode().rstrip("=")


def _hex(n: int) -> str:
    return _chars(n, "3f9a0c7be1d24865")


AWS_ID = "AKIA" + "IOSFODNN7EXAMPLE"  # AWS's documented example key id
AWS_SECRET = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"  # AWS's documented example
OPENAI = "sk-" + "proj-" + _chars(48)
ANTHROPIC = "sk-" + "ant-api03-" + _chars(93)
STRIPE_LIVE = "sk_" + "live_" + _chars(24)
STRIPE_RESTRICTED = "rk_" + "live_" + _chars(24)
STRIPE_TEST = "sk_" + "test_" + _chars(24)
STRIPE_WEBHOOK = "whsec_" + _chars(32)
GITHUB = "ghp_" + _chars(36)
GITHUB_FINE = "github_pat_" + _chars(22) + "_" + _chars(59)
GITLAB = "glpat-" + _chars(20)
HUGGING_FACE = "hf_" + _chars(34, "ZqXvLmPwRtKsNbHyJdFgAcUeWo")
SENDGRID = "SG." + _chars(22) + "." + _chars(43)
NPM = "npm_" + _chars(36)
SLACK_BOT = "xox" + "b-" + "123456789012-1234567890123-" + _chars(24)
SLACK_APP = "xapp-" + "1-A0123456789-1234567890123-" + _hex(64)
SLACK_HOOK_SECRET = _chars(24)
GOOGLE = "AIza" + _chars(35, "Sy1_a-B2c3")
SHOPIFY = "shpat_" + _hex(32)
VAULT = "hvs." + _chars(24)
JWT = ".".join(
    [
        _b64url('{"alg":"HS256","typ":"JWT"}'),
        _b64url('{"sub":"1234567890","name":"Jo"}'),
        _chars(43, "SflKxwRJSMeKKF2QT4fwpM-_"),
    ]
)
PEM_LINE = _chars(64, "MIIEowIBAAKCAQEAx9+/")
PEM = "-----BEGIN PRIVATE KEY-----\n" + "\n".join([PEM_LINE] * 3) + "\n-----END PRIVATE KEY-----"
OPAQUE = _chars(32)  # an opaque session id / bearer token
PASSWORD = "hunter2" + _chars(5)

# (id, text, exactly what a record shows, the secrets that must be gone)
CORPUS: list[tuple[str, str, str, tuple[str, ...]]] = [
    # -- headers: the credential word only, the scheme and everything around it stay
    (
        "authorization-bearer-in-curl",
        f"curl -H 'Authorization: Bearer {OPAQUE}' https://api.example.com/v1/me",
        "curl -H 'Authorization: Bearer [REDACTED:authorization]' https://api.example.com/v1/me",
        (OPAQUE,),
    ),
    (
        "authorization-basic",
        "Authorization: Basic dXNlcjpwYXNzd29yZA==\nHost: example.com",
        "Authorization: Basic [REDACTED:authorization]\nHost: example.com",
        ("dXNlcjpwYXNzd29yZA",),
    ),
    (
        "proxy-authorization",
        f"Proxy-Authorization: Bearer {OPAQUE}\n",
        "Proxy-Authorization: Bearer [REDACTED:authorization]\n",
        (OPAQUE,),
    ),
    (
        "authorization-without-scheme",
        f'{{"authorization": "{OPAQUE}", "accept": "json"}}',
        '{"authorization": "[REDACTED:authorization]", "accept": "json"}',
        (OPAQUE,),
    ),
    (
        "authorization-digest-response",
        f'Authorization: Digest username="bob", nonce="abc", response="{_hex(32)}"',
        'Authorization: Digest username="bob", nonce="abc", response="[REDACTED:signature]"',
        (_hex(32),),
    ),
    (
        "cookie-header",
        f"Cookie: session={OPAQUE}; theme=dark\nAccept: */*",
        "Cookie: session=[REDACTED:cookie]; theme=dark\nAccept: */*",
        (OPAQUE,),
    ),
    (
        "cookie-opaque-values-after-the-first",
        f"Cookie: session={OPAQUE}; csrftoken={_hex(32)}",
        "Cookie: session=[REDACTED:cookie]; csrftoken=[REDACTED:cookie]",
        (OPAQUE, _hex(32)),
    ),
    (
        "cookie-inside-quotes-every-value",
        "curl -H 'Cookie: a=b1; c=d2' https://example.com",
        "curl -H 'Cookie: a=[REDACTED:cookie]; c=[REDACTED:cookie]' https://example.com",
        ("b1", "d2"),
    ),
    (
        "set-cookie",
        f"Set-Cookie: id={OPAQUE}; Path=/; HttpOnly; Secure",
        "Set-Cookie: id=[REDACTED:cookie]; Path=/; HttpOnly; Secure",
        (OPAQUE,),
    ),
    (
        "x-api-key-header",
        f"x-api-key: {OPAQUE}\r\nAccept: */*",
        "x-api-key: [REDACTED:api-key]\r\nAccept: */*",
        (OPAQUE,),
    ),
    (
        "bearer-anywhere",
        f"GET /v1 with Bearer {OPAQUE} ok",
        "GET /v1 with Bearer [REDACTED:bearer-token] ok",
        (OPAQUE,),
    ),
    # -- key = value, in text, env, JSON, XML, YAML
    (
        "password-equals",
        f"password={PASSWORD} user=bob",
        "password=[REDACTED:password] user=bob",
        (PASSWORD,),
    ),
    (
        "env-assignment",
        f"PGPASSWORD={PASSWORD} psql -h db -U app",
        "PGPASSWORD=[REDACTED:password] psql -h db -U app",
        (PASSWORD,),
    ),
    (
        "export-env",
        f"export DB_PASSWORD='{PASSWORD}'",
        "export DB_PASSWORD='[REDACTED:password]'",
        (PASSWORD,),
    ),
    (
        "json-password",
        json.dumps({"user": "bob", "password": PASSWORD}),
        '{"user": "bob", "password": "[REDACTED:password]"}',
        (PASSWORD,),
    ),
    (
        "yaml-token",
        f"github:\n  token: {OPAQUE}\n  org: acme",
        "github:\n  token: [REDACTED:token]\n  org: acme",
        (OPAQUE,),
    ),
    (
        "xml-password",
        f"<server><id>nexus</id><password>{PASSWORD}</password></server>",
        "<server><id>nexus</id><password>[REDACTED:password]</password></server>",
        (PASSWORD,),
    ),
    (
        "xml-api-key-element",
        f"<apiKey>{OPAQUE}</apiKey>",
        "<apiKey>[REDACTED:api-key]</apiKey>",
        (OPAQUE,),
    ),
    (
        "query-string-token",
        f"GET https://x.io/cb?access_token={OPAQUE}&page=2 200",
        "GET https://x.io/cb?access_token=[REDACTED:token]&page=2 200",
        (OPAQUE,),
    ),
    (
        "access-key",
        f"MINIO_ACCESS_KEY={OPAQUE} mc ls",
        "MINIO_ACCESS_KEY=[REDACTED:access-key] mc ls",
        (OPAQUE,),
    ),
    (
        "private-key-value",
        f"private_key={OPAQUE}",
        "private_key=[REDACTED:private-key]",
        (OPAQUE,),
    ),
    (
        "client-secret",
        f"client_secret={OPAQUE}",
        "client_secret=[REDACTED:secret]",
        (OPAQUE,),
    ),
    # -- command-line passwords
    (
        "flag-password-space",
        f"mysql -u root --password {PASSWORD} -h db",
        "mysql -u root --password [REDACTED:password] -h db",
        (PASSWORD,),
    ),
    (
        "flag-password-equals",
        f"mysql -u root --password={PASSWORD} -h db",
        "mysql -u root --password=[REDACTED:password] -h db",
        (PASSWORD,),
    ),
    (
        "mysql-p-attached",
        f"mysqldump -uroot -p{PASSWORD} shop > shop.sql",
        "mysqldump -uroot -p[REDACTED:password] shop > shop.sql",
        (PASSWORD,),
    ),
    (
        "sshpass-p",
        f"sshpass -p {PASSWORD} ssh admin@10.0.0.5 uptime",
        "sshpass -p [REDACTED:password] ssh admin@10.0.0.5 uptime",
        (PASSWORD,),
    ),
    (
        "curl-u-user-password",
        f"curl -u admin:{PASSWORD} https://example.com/api",
        "curl -u admin:[REDACTED:password] https://example.com/api",
        (PASSWORD,),
    ),
    (
        "curl-user-long-flag",
        f"curl --user admin:{PASSWORD} https://example.com/api",
        "curl --user admin:[REDACTED:password] https://example.com/api",
        (PASSWORD,),
    ),
    (
        "redis-cli-a",
        f"redis-cli -h cache -a {PASSWORD} ping",
        "redis-cli -h cache -a [REDACTED:password] ping",
        (PASSWORD,),
    ),
    (
        "docker-login-p",
        f"docker login -u bob -p {PASSWORD} registry.example.com",
        "docker login -u bob -p [REDACTED:password] registry.example.com",
        (PASSWORD,),
    ),
    (
        "openssl-passin",
        f"openssl pkcs12 -in a.p12 -passin pass:{PASSWORD} -nokeys",
        "openssl pkcs12 -in a.p12 -passin pass:[REDACTED:password] -nokeys",
        (PASSWORD,),
    ),
    (
        "ldapsearch-w",
        f"ldapsearch -x -D cn=admin -w {PASSWORD} -b dc=example",
        "ldapsearch -x -D cn=admin -w [REDACTED:password] -b dc=example",
        (PASSWORD,),
    ),
    (
        "zip-P",
        f"zip -P {PASSWORD} out.zip report.pdf",
        "zip -P [REDACTED:password] out.zip report.pdf",
        (PASSWORD,),
    ),
    (
        "7z-p-attached",
        f"7z a -p{PASSWORD} out.7z report.pdf",
        "7z a -p[REDACTED:password] out.7z report.pdf",
        (PASSWORD,),
    ),
    (
        "smbclient-user-percent-password",
        f"smbclient //fs/share -U bob%{PASSWORD}",
        "smbclient //fs/share -U bob%[REDACTED:password]",
        (PASSWORD,),
    ),
    (
        "keytool-storepass",
        f"keytool -list -keystore k.jks -storepass {PASSWORD}",
        "keytool -list -keystore k.jks -storepass [REDACTED:password]",
        (PASSWORD,),
    ),
    (
        "gpg-passphrase",
        f"gpg --batch --passphrase {PASSWORD} -d notes.gpg",
        "gpg --batch --passphrase [REDACTED:password] -d notes.gpg",
        (PASSWORD,),
    ),
    (
        "url-userinfo-password",
        f"DSN postgres://admin:{PASSWORD}@db:5432/app",
        "DSN postgres://admin:[REDACTED:url-password]@db:5432/app",
        (PASSWORD,),
    ),
    (
        "url-userinfo-password-with-at",
        "git clone https://bob:p@ss@git.example.com/repo.git",
        "git clone https://bob:[REDACTED:url-password]@git.example.com/repo.git",
        ("p@ss",),
    ),
    # -- cloud and SaaS tokens, wherever they are
    (
        "aws-access-key-id",
        f"key id {AWS_ID} in config",
        "key id [REDACTED:aws-access-key-id] in config",
        (AWS_ID[4:],),
    ),
    (
        "aws-secret-env",
        f"export AWS_SECRET_ACCESS_KEY={AWS_SECRET}",
        "export AWS_SECRET_ACCESS_KEY=[REDACTED:aws-secret-key]",
        (AWS_SECRET,),
    ),
    (
        "aws-secret-ini",
        f"[default]\naws_secret_access_key = {AWS_SECRET}\n",
        "[default]\naws_secret_access_key = [REDACTED:aws-secret-key]\n",
        (AWS_SECRET,),
    ),
    (
        "aws-secret-cli-argument",
        f"aws configure set aws_secret_access_key {AWS_SECRET}",
        "aws configure set aws_secret_access_key [REDACTED:aws-secret-key]",
        (AWS_SECRET,),
    ),
    (
        "aws-secret-sts-json",
        f'{{"AccessKeyId": "{AWS_ID}", "SecretAccessKey": "{AWS_SECRET}"}}',
        '{"AccessKeyId": "[REDACTED:aws-access-key-id]", '
        '"SecretAccessKey": "[REDACTED:aws-secret-key]"}',
        (AWS_SECRET, AWS_ID[4:]),
    ),
    (
        "aws-presigned-signature",
        f"https://b.s3.amazonaws.com/k?X-Amz-Signature={_hex(64)}&X-Amz-Expires=60",
        "https://b.s3.amazonaws.com/k?X-Amz-Signature=[REDACTED:signature]&X-Amz-Expires=60",
        (_hex(64),),
    ),
    ("openai", f"using {OPENAI} now", "using [REDACTED:openai-key] now", (OPENAI[8:],)),
    ("anthropic", f"x {ANTHROPIC} y", "x [REDACTED:anthropic-key] y", (ANTHROPIC[14:],)),
    (
        "stripe-live",
        f"stripe.api_key = '{STRIPE_LIVE}'",
        "stripe.api_key = '[REDACTED:stripe-key]'",
        (STRIPE_LIVE[8:],),
    ),
    ("stripe-restricted", f"key {STRIPE_RESTRICTED}", "key [REDACTED:stripe-key]", ("rk_live",)),
    ("stripe-test", f"STRIPE={STRIPE_TEST}", "STRIPE=[REDACTED:stripe-key]", (STRIPE_TEST[8:],)),
    (
        "stripe-webhook-secret",
        f"endpoint secret {STRIPE_WEBHOOK}",
        "endpoint secret [REDACTED:stripe-key]",
        (STRIPE_WEBHOOK[6:],),
    ),
    (
        "github-classic",
        f"push with {GITHUB} done",
        "push with [REDACTED:github-token] done",
        (GITHUB[4:],),
    ),
    (
        "github-fine-grained",
        f"pat={GITHUB_FINE}",
        "pat=[REDACTED:github-token]",
        (GITHUB_FINE[11:],),
    ),
    (
        "gitlab",
        f"git clone https://oauth2:{GITLAB}@gitlab.example.com/g/p.git",
        "git clone https://oauth2:[REDACTED:gitlab-token]@gitlab.example.com/g/p.git",
        (GITLAB[6:],),
    ),
    ("gitlab-bare", f"GL {GITLAB} ok", "GL [REDACTED:gitlab-token] ok", (GITLAB[6:],)),
    (
        "hugging-face",
        f"login {HUGGING_FACE}",
        "login [REDACTED:huggingface-token]",
        (HUGGING_FACE[3:],),
    ),
    ("sendgrid", f"key={SENDGRID}", "key=[REDACTED:sendgrid-key]", (SENDGRID[3:],)),
    ("npm", f"publish with {NPM}", "publish with [REDACTED:npm-token]", (NPM[4:],)),
    ("slack-bot", f"slack {SLACK_BOT} sent", "slack [REDACTED:slack-token] sent", (SLACK_BOT[5:],)),
    ("slack-app", f"app {SLACK_APP}", "app [REDACTED:slack-token]", (SLACK_APP[9:],)),
    (
        "slack-webhook",
        f"curl -X POST https://hooks.slack.com/services/T0ABC/B0DEF/{SLACK_HOOK_SECRET} -d @m.json",
        "curl -X POST https://hooks.slack.com/services/T0ABC/B0DEF/[REDACTED:slack-webhook] "
        "-d @m.json",
        (SLACK_HOOK_SECRET,),
    ),
    ("google", f"maps {GOOGLE} ok", "maps [REDACTED:google-api-key] ok", (GOOGLE[4:],)),
    ("shopify", f"X-Shopify: {SHOPIFY}", "X-Shopify: [REDACTED:shopify-token]", (SHOPIFY[6:],)),
    ("vault", f"vault login {VAULT}", "vault login [REDACTED:vault-token]", (VAULT[4:],)),
    ("jwt", f"jwt {JWT} end", "jwt [REDACTED:jwt] end", (JWT.split(".")[2],)),
    (
        "pem-private-key",
        f"before\n{PEM}\nafter",
        "before\n-----BEGIN PRIVATE KEY-----[REDACTED:private-key]-----END PRIVATE KEY-----\nafter",
        (PEM_LINE,),
    ),
    (
        "pem-inside-json",
        json.dumps({"key": PEM + "\n", "n": 1}),
        '{"key": "-----BEGIN PRIVATE KEY-----[REDACTED:private-key]-----END PRIVATE KEY-----\\n",'
        ' "n": 1}',
        (PEM_LINE,),
    ),
    (
        "pem-on-one-line",
        PEM.replace("\n", " "),
        "-----BEGIN PRIVATE KEY-----[REDACTED:private-key]-----END PRIVATE KEY-----",
        (PEM_LINE,),
    ),
    (
        "pem-cut-without-end-line",
        f"-----BEGIN RSA PRIVATE KEY-----\n{PEM_LINE}\n{PEM_LINE}",
        "-----BEGIN RSA PRIVATE KEY-----[REDACTED:private-key]",
        (PEM_LINE,),
    ),
]

# Text that looks like a secret and is not: it must come out exactly as it went in.
LOOK_ALIKES: list[tuple[str, str]] = [
    ("sk-in-prose", "pip install scikit-learn, not sk-learn; risk-averse"),
    ("sk-inside-a-word", "task-" + _chars(30)),
    ("sk-too-short", "sk-" + _chars(19)),
    ("sha256-hex", _hex(64)),
    ("git-sha", _hex(40)),
    ("md5", _hex(32)),
    ("uuid", "c0a8012e-7d1f-4b5e-9f3a-2b6c8d9e0f11"),
    ("idempotency-key", "idempotency_key=c0a8012e-7d1f-4b5e-9f3a-2b6c8d9e0f11"),
    ("token-counts", "max_tokens=100, tokens: 5, token_count=3"),
    ("token-in-prose", "The token expired; please request a new token."),
    ("password-in-prose", "my password is not shown here"),
    ("password-hint-keys", "password_hint=blue secretary: Alice api_keys: 3"),
    ("password-file-flag", "mysql --password-file /run/secrets/db -h db"),
    ("no-password-flag", "psql --no-password shop"),
    ("ask-pass-flag", "ansible-playbook --ask-pass site.yml"),
    ("password-stdin", "docker login --password-stdin -u bob registry.example.com"),
    ("mkdir-p", "mkdir -p /tmp/build/out"),
    ("ssh-p", "ssh -p 2222 admin@host"),
    ("docker-run-p", "docker run -p 8080:80 nginx"),
    ("git-add-p", "git add -p src/"),
    ("mysql-p-prompts", "mysql -u root -p shop"),
    ("hf-hub", "from huggingface_hub import hf_hub_download"),
    ("npm-config", "npm_config_cache=/tmp/npm-cache npm ci"),
    ("sg-in-word", "msg.send(SG.short)"),
    ("stripe-too-short", "sk_test_abc"),
    ("gitlab-too-short", "glpat-abc"),
    ("slack-xoxo", "xoxo-hugs-and-kisses-forever"),
    ("google-too-short", "AIza" + _chars(20)),
    ("bearer-scheme-name", "Bearer authentication failed"),
    ("bearer-in-prose", "the bearer of bad news"),
    ("bearer-variable", 'curl -H "Authorization: Bearer $TOKEN" https://api.example.com'),
    ("password-variable", "mysql --password=$DB_PASSWORD -h db"),
    ("authorization-prose", "authorization required"),
    ("cookie-prose", "Cookie jar empty; cookies: 3"),
    ("pwd-is-a-directory", "PWD=/home/bob OLDPWD=/tmp"),
    ("response-word", "response=ok signature=abc"),
    ("compass-bypass-passport", "compass: north bypass=1 passport=X123"),
    ("url-port", "https://example.com:8443/path?q=1"),
    ("url-user-only", "https://user@host/repo and bob@example.com"),
    ("scp-git-url", "git@github.com:org/repo.git"),
    ("pem-certificate", "-----BEGIN CERTIFICATE-----\n" + PEM_LINE + "\n-----END CERTIFICATE-----"),
    ("pem-public-key", "-----BEGIN PUBLIC KEY-----\n" + PEM_LINE + "\n-----END PUBLIC KEY-----"),
    ("jwt-two-segments", ".".join(JWT.split(".")[:2])),
    ("aws-secret-without-context", AWS_SECRET),
    ("empty-values", 'password=\npassword:\npassword=""'),
]


@pytest.mark.parametrize(
    ("text", "expected", "secrets"),
    [pytest.param(text, expected, secrets, id=name) for name, text, expected, secrets in CORPUS],
)
def test_each_kind_of_secret_is_redacted_and_named(
    text: str, expected: str, secrets: tuple[str, ...]
) -> None:
    out = redact(text)
    assert out == expected
    for secret in secrets:
        assert secret not in out


@pytest.mark.parametrize("text", [pytest.param(text, id=name) for name, text in LOOK_ALIKES])
def test_look_alikes_are_left_alone(text: str) -> None:
    assert redact(text) == text


@pytest.mark.parametrize("text", [pytest.param(text, id=name) for name, text, _, _ in CORPUS])
def test_redacting_a_record_again_changes_nothing(text: str) -> None:
    once = redact(text)
    assert redact(once) == once


def test_every_kind_of_the_corpus_has_a_sample() -> None:
    from interlock.core.redaction_rules import KINDS

    shown = {kind for _, _, expected, _ in CORPUS for kind in MARKER_RE.findall(expected)}
    assert set(KINDS) - shown == set()


def test_the_marker_names_the_kind_and_a_policy_pattern_is_named_policy() -> None:
    redactor = Redactor(extra_patterns=[r"INTERNAL-[0-9]{6}"])
    assert redactor.redact(f"ref INTERNAL-123456 key {STRIPE_LIVE}") == (
        "ref [REDACTED:policy] key [REDACTED:stripe-key]"
    )
    assert MARKER_RE.findall("a [REDACTED:stripe-key] b [REDACTED] c") == ["stripe-key", ""]


def test_a_value_under_a_secret_key_is_replaced_whole() -> None:
    assert redact_value({"stripe_api_key": STRIPE_LIVE, "note": f"use {STRIPE_LIVE}"}) == {
        "stripe_api_key": "[REDACTED]",
        "note": "use [REDACTED:stripe-key]",
    }
