"""Secret redaction: a vector per pattern, near-misses, values, limits and properties.

Fake secrets are assembled at run time so that secret scanners do not flag this file.
"""

from __future__ import annotations

import base64
import doctest
import json
import math

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import interlock.core.redaction as redaction_module
from interlock.core.redaction import REDACTED, Redactor, redact, redact_value


def _chars(n: int, pool: str = "A1b2C3d4E5f6G7h8J9k0") -> str:
    """``n`` characters cycled from ``pool``."""
    return (pool * (n // len(pool) + 1))[:n]


def _b64url(data: str) -> str:
    return base64.urlsafe_b64encode(data.encode()).decode().rstrip("=")


def _pem(label: str) -> str:
    body = "\n".join(_chars(64, "MIIEowIBAAKCAQEAx9+/") for _ in range(3))
    return f"-----BEGIN {label}-----\n{body}\n-----END {label}-----"


AWS_ID_BODY = "IOSFODNN7EXAMPLE"  # AWS's documented example key id
AWS_STS_BODY = "Y3KQ7ZP2M4N8R6TX"
AWS_SECRET = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"
SK_BODY = _chars(48)
GH_BODY = _chars(36)
GH_PAT_BODY = _chars(22) + "_" + _chars(59)
SLACK_BODY = "123456789012-1234567890123-" + _chars(24)
GOOGLE_BODY = _chars(35, "Sy1_a-B2c3")
JWT = ".".join(
    [
        _b64url('{"alg":"HS256","typ":"JWT"}'),
        _b64url('{"sub":"1234567890","name":"Jo"}'),
        _chars(43, "SflKxwRJSMeKKF2QT4fwpM-_"),
    ]
)
PEM_BODY_LINE = _chars(64, "MIIEowIBAAKCAQEAx9+/")

# (text, the secret that must disappear, the exact expected output)
POSITIVE = [
    pytest.param(
        "GET /v1 with Bearer abc.def-123 ok",
        "abc.def-123",
        "GET /v1 with Bearer [REDACTED:bearer-token] ok",
        id="bearer",
    ),
    pytest.param(
        "auth: bearer abc.def-123\n",
        "abc.def-123",
        "auth: bearer [REDACTED:bearer-token]\n",
        id="bearer-lower",
    ),
    pytest.param(
        f"key id AKIA{AWS_ID_BODY} in config",
        AWS_ID_BODY,
        "key id [REDACTED:aws-access-key-id] in config",
        id="aws-access-key-id",
    ),
    pytest.param(
        f"temp ASIA{AWS_STS_BODY}.",
        AWS_STS_BODY,
        "temp [REDACTED:aws-access-key-id].",
        id="aws-sts-key-id",
    ),
    pytest.param(
        f"aws_secret_access_key={AWS_SECRET} region=us-east-1",
        AWS_SECRET,
        "aws_secret_access_key=[REDACTED:aws-secret-key] region=us-east-1",
        id="aws-secret-key",
    ),
    pytest.param(
        f"[default]\naws_secret_access_key = {AWS_SECRET}\n",
        AWS_SECRET,
        "[default]\naws_secret_access_key = [REDACTED:aws-secret-key]\n",
        id="aws-secret-key-ini",
    ),
    pytest.param(
        f"using sk-{SK_BODY} now", SK_BODY, "using [REDACTED:openai-key] now", id="openai-sk"
    ),
    pytest.param(
        f"OPENAI_KEY is sk-proj-{SK_BODY}!",
        SK_BODY,
        "OPENAI_KEY is [REDACTED:openai-key]!",
        id="openai-sk-proj",
    ),
    pytest.param(
        f"x sk-ant-api03-{SK_BODY} y",
        SK_BODY,
        "x [REDACTED:anthropic-key] y",
        id="anthropic-sk-ant",
    ),
    *[
        pytest.param(
            f"push with {prefix}{GH_BODY} done",
            GH_BODY,
            "push with [REDACTED:github-token] done",
            id=f"github-{prefix[:-1]}",
        )
        for prefix in ("ghp_", "gho_", "ghu_", "ghs_", "ghr_")
    ],
    pytest.param(
        f"pat=github_pat_{GH_PAT_BODY}",
        GH_PAT_BODY,
        # key_value does not apply ("pat" is no secret key word); the github rule does.
        "pat=[REDACTED:github-token]",
        id="github-fine-grained-pat",
    ),
    pytest.param(
        "slack " + "xox" + f"b-{SLACK_BODY} sent",
        SLACK_BODY,
        "slack [REDACTED:slack-token] sent",
        id="slack-bot",
    ),
    pytest.param("xox" + f"p-{SLACK_BODY}", SLACK_BODY, "[REDACTED:slack-token]", id="slack-user"),
    pytest.param(
        f"maps AIza{GOOGLE_BODY} ok",
        GOOGLE_BODY,
        "maps [REDACTED:google-api-key] ok",
        id="google-api-key",
    ),
    pytest.param(f"jwt {JWT} end", JWT, "jwt [REDACTED:jwt] end", id="jwt"),
    pytest.param(f"({JWT}).", JWT, "([REDACTED:jwt]).", id="jwt-in-parentheses"),
    *[
        pytest.param(
            f"before\n{_pem(label)}\nafter",
            PEM_BODY_LINE,
            f"before\n-----BEGIN {label}-----[REDACTED:private-key]-----END {label}-----\nafter",
            id=f"pem-{label.split()[0].lower()}",
        )
        for label in (
            "RSA PRIVATE KEY",
            "EC PRIVATE KEY",
            "OPENSSH PRIVATE KEY",
            "PRIVATE KEY",
            "ENCRYPTED PRIVATE KEY",
        )
    ],
    pytest.param(
        json.dumps({"key": _pem("PRIVATE KEY") + "\n", "n": 1}),
        PEM_BODY_LINE,
        '{"key": "-----BEGIN PRIVATE KEY-----[REDACTED:private-key]-----END PRIVATE KEY-----\\n", '
        '"n": 1}',
        id="pem-inside-json",
    ),
    pytest.param(
        f'{{"key": "-----BEGIN RSA PRIVATE KEY-----\\n{PEM_BODY_LINE}", "n": 1}}',
        PEM_BODY_LINE,
        '{"key": "-----BEGIN RSA PRIVATE KEY-----[REDACTED:private-key]", "n": 1}',
        id="pem-truncated-without-end-line",
    ),
    pytest.param(
        f"private_key: {_pem('EC PRIVATE KEY')}\nnext: 1",
        PEM_BODY_LINE,
        "private_key: -----BEGIN EC PRIVATE KEY-----[REDACTED:private-key]"
        "-----END EC PRIVATE KEY-----\n"
        "next: 1",
        id="pem-as-value-of-secret-key",
    ),
    pytest.param(
        "password=hunter2 user=bob",
        "hunter2",
        "password=[REDACTED:password] user=bob",
        id="kv-password",
    ),
    pytest.param("passwd: hunter2", "hunter2", "passwd: [REDACTED:password]", id="kv-passwd"),
    pytest.param("PWD=hunter2;", "hunter2", "PWD=[REDACTED:password];", id="kv-pwd-uppercase"),
    pytest.param(
        "secret = s3cr3t, n=1", "s3cr3t", "secret = [REDACTED:secret], n=1", id="kv-secret"
    ),
    pytest.param("token: abc123xyz", "abc123xyz", "token: [REDACTED:token]", id="kv-token"),
    pytest.param("api_key=abc123xyz", "abc123xyz", "api_key=[REDACTED:api-key]", id="kv-api-key"),
    pytest.param("APIKEY=abc123xyz", "abc123xyz", "APIKEY=[REDACTED:api-key]", id="kv-apikey"),
    pytest.param(
        "access_token=abc123xyz", "abc123xyz", "access_token=[REDACTED:token]", id="kv-access-token"
    ),
    pytest.param(
        "client_secret=abc123xyz",
        "abc123xyz",
        "client_secret=[REDACTED:secret]",
        id="kv-client-secret",
    ),
    pytest.param(
        "DB_PASSWORD=hunter2 ./run",
        "hunter2",
        "DB_PASSWORD=[REDACTED:password] ./run",
        id="kv-env-var",
    ),
    pytest.param(
        "mysql --password=hunter2 -h db",
        "hunter2",
        "mysql --password=[REDACTED:password] -h db",
        id="kv-cli-flag",
    ),
    pytest.param(
        "GET https://x.io/cb?token=abc123&x=1 200",
        "abc123",
        "GET https://x.io/cb?token=[REDACTED:token]&x=1 200",
        id="kv-query-string",
    ),
    pytest.param(
        "/cb?a=1&client_secret=abc123&b=2",
        "abc123",
        "/cb?a=1&client_secret=[REDACTED:secret]&b=2",
        id="kv-query-string-middle",
    ),
    pytest.param(
        # One word at most: the word after a space may be a command (see
        # test_redaction_bounds), so a two-word value keeps its second word.
        'password="hunter2 x" next',
        "hunter2",
        'password="[REDACTED:password] x" next',
        id="kv-double-quoted",
    ),
    pytest.param(
        "{'password': 'hunter2', 'user': 'bob'}",
        "hunter2",
        "{'password': '[REDACTED:password]', 'user': 'bob'}",
        id="kv-python-repr",
    ),
    pytest.param(
        '{"api_key": "abc123xyz", "user": "bob"}',
        "abc123xyz",
        '{"api_key": "[REDACTED:api-key]", "user": "bob"}',
        id="kv-json",
    ),
    pytest.param(
        '"{\\"password\\": \\"hunter2\\", \\"user\\": \\"bob\\"}"',
        "hunter2",
        '"{\\"password\\": \\"[REDACTED:password]\\", \\"user\\": \\"bob\\"}"',
        id="kv-json-inside-json-string",
    ),
    pytest.param(
        "token: Bearer abc123xyz next",
        "abc123xyz",
        "token: Bearer [REDACTED:bearer-token] next",
        id="kv-value-with-auth-scheme",
    ),
    pytest.param(
        "Authorization: Basic dXNlcjpwYXNz\nHost: example.com",
        "dXNlcjpwYXNz",
        "Authorization: Basic [REDACTED:authorization]\nHost: example.com",
        id="header-authorization",
    ),
    pytest.param(
        "Proxy-Authorization: Bearer abc.def-123\n",
        "abc.def-123",
        "Proxy-Authorization: Bearer [REDACTED:authorization]\n",
        id="header-proxy-authorization",
    ),
    pytest.param(
        "x-api-key: abc123xyz\r\nAccept: */*",
        "abc123xyz",
        "x-api-key: [REDACTED:api-key]\r\nAccept: */*",
        id="header-x-api-key-to-end-of-line",
    ),
    pytest.param(
        '{"authorization": "Bearer abc.def-123", "accept": "json"}',
        "abc.def-123",
        '{"authorization": "Bearer [REDACTED:authorization]", "accept": "json"}',
        id="header-json-ish",
    ),
    pytest.param(
        "{'X-Api-Key': 'abc123xyz', 'Accept': 'json'}",
        "abc123xyz",
        "{'X-Api-Key': '[REDACTED:api-key]', 'Accept': 'json'}",
        id="header-python-repr",
    ),
    pytest.param(
        "curl -H 'Authorization: Bearer abc.def-123' https://api.example.com",
        "abc.def-123",
        "curl -H 'Authorization: Bearer [REDACTED:authorization]' https://api.example.com",
        id="header-in-shell-quotes",
    ),
    pytest.param(
        'Authorization: Digest username="bob", response="6629fae4' + "0" * 24 + '"\nX: 1',
        "6629fae4",
        'Authorization: Digest username="bob", response="[REDACTED:signature]"\nX: 1',
        id="header-digest-with-quotes",
    ),
    pytest.param(
        "Cookie: session=abc123; theme=dark\nX: y",
        "abc123",
        "Cookie: session=[REDACTED:cookie]; theme=dark\nX: y",
        id="header-cookie",
    ),
    pytest.param(
        "git clone https://user:s3cr3t@host/repo.git",
        "s3cr3t",
        "git clone https://user:[REDACTED:url-password]@host/repo.git",
        id="url-credentials",
    ),
    pytest.param(
        "DSN postgres://admin:p@ss@db:5432/app",
        "p@ss",
        "DSN postgres://admin:[REDACTED:url-password]@db:5432/app",
        id="url-credentials-password-with-at",
    ),
    pytest.param(
        "redis://:s3cr3tpw@cache:6379/0",
        "s3cr3tpw",
        "redis://:[REDACTED:url-password]@cache:6379/0",
        id="url-credentials-empty-user",
    ),
    pytest.param(
        f"https://ghp_{GH_BODY}:x-oauth-basic@github.com/o/r",
        GH_BODY,
        "https://[REDACTED:github-token]:[REDACTED:url-password]@github.com/o/r",
        id="url-credentials-token-as-user",
    ),
]

NEGATIVE = [
    pytest.param("pip install scikit-learn, not sk-learn", id="sk-short-word"),
    pytest.param("sk-" + _chars(19), id="sk-19-chars"),
    pytest.param("task-" + _chars(30), id="sk-inside-word"),
    pytest.param("The token expired; please request a new token.", id="token-in-prose"),
    pytest.param("max_tokens=100, tokens: 5, token_count=3", id="token-longer-key"),
    pytest.param("password_hint=blue secretary: Alice api_keys: 3", id="keyword-prefix-keys"),
    pytest.param("my password is not shown here", id="password-in-prose"),
    pytest.param('password=\npassword:\npassword=""', id="kv-empty-values"),
    pytest.param("AKIA", id="akia-alone"),
    pytest.param("AKIA" + AWS_ID_BODY[:15], id="akia-15-chars"),
    pytest.param("AKIA" + AWS_ID_BODY + "X", id="akia-17-chars"),
    pytest.param("akia" + AWS_ID_BODY.lower(), id="akia-lowercase"),
    pytest.param("XAKIA" + AWS_ID_BODY, id="akia-inside-word"),
    pytest.param("ghp_" + GH_BODY[:35], id="github-35-chars"),
    pytest.param("ghx_" + GH_BODY, id="github-unknown-prefix"),
    pytest.param("github_pat_short", id="github-pat-short"),
    pytest.param("xoxo-hugs-and-kisses-forever", id="slack-xoxo"),
    pytest.param("xox" + "b-short", id="slack-short"),
    pytest.param("AIza" + GOOGLE_BODY[:30], id="google-short"),
    pytest.param(JWT.split(".")[0], id="jwt-one-segment"),
    pytest.param(".".join(JWT.split(".")[:2]), id="jwt-two-segments"),
    pytest.param("heyJude.was.here", id="jwt-inside-word"),
    pytest.param(_pem("CERTIFICATE"), id="pem-certificate"),
    pytest.param(_pem("PUBLIC KEY"), id="pem-public-key"),
    pytest.param("Bearer", id="bearer-alone"),
    pytest.param("the bearer of bad news", id="bearer-in-prose"),
    pytest.param("Bearer authentication failed", id="bearer-scheme-name"),
    pytest.param("Authorization: ", id="header-empty"),
    pytest.param("authorization required", id="header-word-in-prose"),
    pytest.param("Cookie jar empty; cookies: 3", id="cookie-in-prose"),
    pytest.param("https://example.com:8443/path?q=1", id="url-port-not-password"),
    pytest.param("https://user@host/repo and bob@example.com", id="url-user-without-password"),
    pytest.param("git@github.com:org/repo.git", id="scp-style-git-url"),
    pytest.param("", id="empty"),
]


@pytest.mark.parametrize(("text", "secret", "expected"), POSITIVE)
def test_redact_removes_secret_and_keeps_surrounding_text(
    text: str, secret: str, expected: str
) -> None:
    out = redact(text)
    assert secret not in out
    assert out == expected


@pytest.mark.parametrize("text", NEGATIVE)
def test_redact_leaves_near_misses_unchanged(text: str) -> None:
    assert redact(text) == text


@pytest.mark.parametrize(
    "text", [*(p.values[0] for p in POSITIVE), *(p.values[0] for p in NEGATIVE)]
)
def test_redact_is_idempotent(text: str) -> None:
    once = redact(text)
    assert redact(once) == once


def test_redacted_marker_is_the_documented_string() -> None:
    assert REDACTED == "[REDACTED]"


def test_redact_finds_every_secret_in_a_mixed_log_line() -> None:
    line = f"user=bob password=hunter2 key=AKIA{AWS_ID_BODY} url=https://bob:pw@h/x jwt={JWT} ok"
    assert redact(line) == (
        "user=bob password=[REDACTED:password] key=[REDACTED:aws-access-key-id] "
        "url=https://bob:[REDACTED:url-password]@h/x jwt=[REDACTED:jwt] ok"
    )


def test_redact_rejects_non_str() -> None:
    with pytest.raises(TypeError, match="bytes"):
        redact(b"password=x")  # type: ignore[arg-type]


def test_module_docstring_example_holds() -> None:
    result = doctest.testmod(redaction_module, optionflags=doctest.ELLIPSIS)
    assert result.attempted > 0
    assert result.failed == 0


# -- redact_value ----------------------------------------------------------------------


def test_redact_value_walks_nested_structures() -> None:
    value = {
        "user": "bob",
        "headers": {"Authorization": "Bearer abc.def-123", "Accept": "json"},
        "args": ["--password=hunter2", ("x", f"sk-{SK_BODY}")],
        "n": 3,
        "ratio": 1.5,
        "ok": True,
        "none": None,
    }
    assert redact_value(value) == {
        "user": "bob",
        "headers": {"Authorization": REDACTED, "Accept": "json"},
        "args": ["--password=[REDACTED:password]", ("x", "[REDACTED:openai-key]")],
        "n": 3,
        "ratio": 1.5,
        "ok": True,
        "none": None,
    }


def test_redact_value_does_not_mutate_its_input() -> None:
    value = {"a": ["password=hunter2"], "token": "t"}
    redact_value(value)
    assert value == {"a": ["password=hunter2"], "token": "t"}


@pytest.mark.parametrize(
    "key",
    [
        "password",
        "passwd",
        "secret",
        "token",
        "api_key",
        "apikey",
        "access_key",
        "private_key",
        "authorization",
        "x-api-key",
        "client_secret",
        "credentials",
        "cookie",
        "set-cookie",
        "PASSWORD",
        "Authorization",
        "X-Api-Key",
        "Set-Cookie",
        "stripe_api_key",
        "GITHUB_TOKEN",
        "refresh_token",
        "webhook_secret",
        "db_password",
        "apiKey",
        "clientSecret",
        "accessToken",
    ],
)
@pytest.mark.parametrize("content", ["plain words", 12345, None, {"nested": "x"}, ["a", "b"]])
def test_redact_value_replaces_whole_value_of_secret_named_key(key: str, content: object) -> None:
    assert redact_value({key: content, "other": "kept"}) == {key: REDACTED, "other": "kept"}


@pytest.mark.parametrize(
    "key", ["tokens", "token_count", "max_tokens", "keyboard", "monkey", "author", "password_hint"]
)
def test_redact_value_keeps_values_of_ordinary_keys(key: str) -> None:
    assert redact_value({key: "visible"}) == {key: "visible"}


def test_redact_value_redacts_secrets_inside_keys() -> None:
    assert redact_value({"Bearer abc.def-123": 1}) == {"Bearer [REDACTED:bearer-token]": 1}


def test_redact_value_keeps_both_keys_that_redact_to_the_same_text() -> None:
    assert redact_value({"token=abc": 1, "token=xyz": 2}) == {
        "token=[REDACTED:token]": 1,
        "token=[REDACTED:token]#2": 2,
    }


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (b"password=hunter2", "<bytes len=16>"),
        (bytearray(b"\x00\x01\x02"), "<bytes len=3>"),
        (memoryview(b"abcd"), "<bytes len=4>"),
        (b"", "<bytes len=0>"),
    ],
)
def test_redact_value_describes_bytes_without_decoding(value: object, expected: str) -> None:
    assert redact_value(value) == expected
    assert redact_value({"blob": value}) == {"blob": expected}


def test_redact_value_describes_ints_too_wide_to_print() -> None:
    huge = 10**5000  # str(huge) raises under the default int digit limit
    assert redact_value({"n": huge, huge: 1, "small": 10**100}) == {
        "n": "<int bits=16610>",
        "<int bits=16610>": 1,
        "small": 10**100,
    }


def test_redact_value_describes_bytes_keys() -> None:
    assert redact_value({b"k": 1}) == {"<bytes len=1>": 1}


def _nested_list(depth: int, leaf: object) -> list[object]:
    value: list[object] = [leaf]
    for _ in range(depth - 1):
        value = [value]
    return value


def _depth_of(value: object) -> tuple[int, object]:
    """How many lists wrap the innermost non-list, and that innermost value."""
    depth = 0
    while isinstance(value, list):
        depth += 1
        value = value[0]
    return depth, value


def test_redact_value_truncates_100000_deep_nesting_without_recursion_error() -> None:
    result = redact_value(_nested_list(100_000, "password=hunter2"))
    depth, leaf = _depth_of(result)
    assert depth == 33  # the list at depth 32 is kept; its child would be depth 33
    assert leaf == "<truncated: depth>"


def test_redact_value_walks_100000_deep_nesting_iteratively_when_allowed() -> None:
    result = redact_value(_nested_list(100_000, "password=hunter2"), max_depth=200_000)
    depth, leaf = _depth_of(result)
    assert depth == 100_000
    assert leaf == "password=[REDACTED:password]"


def test_redact_value_handles_deep_dict_nesting() -> None:
    value: dict[str, object] = {"leaf": "token=abc"}
    for _ in range(100_000):
        value = {"d": value}
    result = redact_value(value, max_depth=200_000)
    depth = 0
    while isinstance(result, dict) and "d" in result:
        depth += 1
        result = result["d"]
    assert depth == 100_000
    assert result == {"leaf": "token=[REDACTED:token]"}


@pytest.mark.parametrize(
    ("max_depth", "expected"),
    [
        (0, {"a": "<truncated: depth>"}),
        (1, {"a": ["<truncated: depth>"]}),
        (2, {"a": [["<truncated: depth>"]]}),
        (3, {"a": [["x"]]}),
    ],
)
def test_redact_value_max_depth_counts_container_levels(max_depth: int, expected: object) -> None:
    assert redact_value({"a": [["x"]]}, max_depth=max_depth) == expected


def test_redact_value_marks_cycles() -> None:
    loop: list[object] = [1]
    loop.append(loop)
    assert redact_value(loop) == [1, "<cycle>"]


def test_redact_value_shares_work_for_shared_subtrees() -> None:
    level: list[object] = ["token=abc"]
    for _ in range(200):  # 2**200 paths, 200 distinct lists
        level = [level, level]
    result = redact_value(level, max_depth=1_000)
    for _ in range(200):
        assert isinstance(result, list)
        result = result[1]
    assert result == ["token=[REDACTED:token]"]


class _Odd:
    def __init__(self, text: str) -> None:
        self.text = text

    def __repr__(self) -> str:
        if self.text.startswith("!"):
            raise ValueError(self.text)
        return self.text


class _ReprRaises:
    def __repr__(self) -> str:
        raise RuntimeError("boom")


class _ReprLeaks:
    def __repr__(self) -> str:
        return f"<Client api_key=abc123 auth: Bearer abc.def-123 key=sk-{SK_BODY}>"


class _ReprHuge:
    def __repr__(self) -> str:
        return "x" * 10_000


class _DictWithBrokenItems(dict[str, object]):
    def items(self) -> object:  # type: ignore[override]
        raise RuntimeError("boom")


class _ListWithBrokenIter(list[object]):
    def __iter__(self) -> object:  # type: ignore[override]
        raise RuntimeError("boom")


def test_redact_value_survives_repr_that_raises() -> None:
    assert redact_value(_ReprRaises()) == "<unrepresentable: _ReprRaises>"
    assert redact_value({"obj": _ReprRaises()}) == {"obj": "<unrepresentable: _ReprRaises>"}
    assert redact_value({_ReprRaises(): 1}) == {"<unrepresentable: _ReprRaises>": 1}


def test_redact_value_redacts_repr_of_odd_objects() -> None:
    out = redact_value(_ReprLeaks())
    assert out == (
        "<Client api_key=[REDACTED:api-key] auth: Bearer [REDACTED:bearer-token] "
        "key=[REDACTED:openai-key]>"
    )


def test_redact_value_cuts_long_repr_to_200_chars() -> None:
    out = redact_value(_ReprHuge())
    assert isinstance(out, str)
    assert len(out) == 200
    assert out.endswith("...")


def test_redact_value_redacts_before_cutting_the_repr() -> None:
    # The key starts at 185 and runs past the 200-char cut: cutting first would leave
    # "sk-" plus 12 characters, too short to match, and leak them.
    out = redact_value(_Odd("a" * 184 + " sk-" + SK_BODY))
    assert isinstance(out, str)
    assert SK_BODY[:12] not in out
    assert out == "a" * 184 + " ..."  # the cut falls in the marker: the word is dropped


def test_redact_value_reads_real_contents_of_misbehaving_subclasses() -> None:
    broken_dict = _DictWithBrokenItems(password="x", note="token=abc")
    broken_list = _ListWithBrokenIter(["token=abc"])
    assert redact_value(broken_dict) == {"password": REDACTED, "note": "token=[REDACTED:token]"}
    assert redact_value(broken_list) == ["token=[REDACTED:token]"]


class _HostileStr(str):
    __slots__ = ()

    def __hash__(self) -> int:
        return str.__hash__(self)

    def __eq__(self, other: object) -> bool:
        raise RuntimeError("boom")

    def lower(self) -> str:
        return ""


def test_redact_value_copies_str_subclasses_as_plain_str() -> None:
    value = {
        _HostileStr("k password=x"): _HostileStr("token=abc"),
        _HostileStr("plain"): _HostileStr("text"),
    }
    out = redact_value(value)
    assert out == {
        "k password=[REDACTED:password]": "token=[REDACTED:token]",
        "plain": "text",
    }
    assert isinstance(out, dict)
    assert all(type(item) is str for pair in out.items() for item in pair)


class _ClassRaises:
    @property  # type: ignore[misc]
    def __class__(self) -> type:  # isinstance() consults __class__ and re-raises
        raise RuntimeError("boom")


def test_redact_value_isolates_an_object_whose_class_lookup_raises() -> None:
    odd = _ClassRaises()
    out = redact_value({odd: odd, "note": "password=x"})
    # The odd entry degrades to a placeholder; its siblings are still redacted normally.
    assert out == {
        "<unrepresentable: _ClassRaises>": "<unrepresentable: _ClassRaises>",
        "note": "password=[REDACTED:password]",
    }


def test_redactor_accepts_any_iterable_of_patterns_once() -> None:
    redactor = Redactor(extra_patterns=iter(["ACME-[0-9]+"]))  # type: ignore[arg-type]
    assert redactor.extra_patterns == ("ACME-[0-9]+",)
    assert redactor.redact("ACME-1") == "[REDACTED:policy]"


def test_redact_value_turns_other_containers_into_redacted_repr() -> None:
    assert redact_value({"password=hunter2"}) == "{'password=[REDACTED:password]'}"


def test_redact_value_output_is_json_serialisable() -> None:
    value = {
        "t": ("a", b"b"),
        1: [None, True, 2.5],
        (1, 2): {"k": object()},
        None: _ReprRaises(),
    }
    json.dumps(redact_value(value))


# -- Redactor --------------------------------------------------------------------------


def test_module_functions_match_a_default_redactor() -> None:
    text = "password=x Bearer abc.def-123 plain"
    assert redact(text) == Redactor().redact(text)
    assert redact_value({"a": text}) == Redactor().redact_value({"a": text})


def test_extra_pattern_is_redacted_alongside_builtins() -> None:
    redactor = Redactor(extra_patterns=[r"ACME-[0-9]{6}"])
    assert redactor.redact("id ACME-123456 password=x") == (
        "id [REDACTED:policy] password=[REDACTED:password]"
    )
    assert redactor.redact_value({"id": "ACME-654321"}) == {"id": "[REDACTED:policy]"}
    assert redactor.extra_patterns == ("ACME-[0-9]{6}",)


def test_extra_pattern_secret_group_keeps_the_rest_as_hint() -> None:
    redactor = Redactor(extra_patterns=[r"session=(?P<secret>\w+)"])
    assert redactor.redact("session=abc123; path=/") == "session=[REDACTED:policy]; path=/"


def test_extra_pattern_with_inline_flags_is_compiled_on_its_own() -> None:
    redactor = Redactor(extra_patterns=[r"(?i)internal-\d+", r"(\w)\1{5}"])
    assert redactor.redact("INTERNAL-42 zzzzzz") == "[REDACTED:policy] [REDACTED:policy]"


def test_extra_pattern_matching_empty_string_inserts_nothing() -> None:
    assert Redactor(extra_patterns=[r"x*"]).redact("abc xx") == "abc [REDACTED:policy]"


def test_invalid_extra_pattern_raises_value_error_naming_it() -> None:
    with pytest.raises(ValueError, match=r"\(unclosed\[") as info:
        Redactor(extra_patterns=["fine", "(unclosed["])
    assert "fine" not in str(info.value)


@pytest.mark.parametrize("bad", ["password", [b"bytes"], [None]])
def test_extra_patterns_must_be_a_sequence_of_str(bad: object) -> None:
    with pytest.raises(TypeError):
        Redactor(extra_patterns=bad)  # type: ignore[arg-type]


def test_redactor_is_truthy_so_callers_can_write_or_default() -> None:
    assert Redactor()
    assert "Redactor(" in repr(Redactor(["a"]))


# -- properties ------------------------------------------------------------------------

_B64 = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789"
_B64URL = _B64 + "-_"
_UPPER_DIGITS = "ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"


def _run(alphabet: str, lo: int, hi: int) -> st.SearchStrategy[str]:
    return st.text(alphabet=alphabet, min_size=lo, max_size=hi)


# Each strategy yields (full text of the secret, the part that must disappear).
# Tokens whose shape alone says they are secrets: hidden wherever they are.
_SHAPED: st.SearchStrategy[tuple[str, str]] = st.one_of(
    st.tuples(st.sampled_from(["AKIA", "ASIA"]), _run(_UPPER_DIGITS, 16, 16)).map(
        lambda t: (t[0] + t[1], t[1])
    ),
    st.tuples(st.sampled_from(["sk-", "sk-proj-", "sk-ant-"]), _run(_B64URL, 20, 60)).map(
        lambda t: (t[0] + t[1], t[1])
    ),
    st.tuples(st.sampled_from(["ghp_", "gho_", "ghu_", "ghs_", "ghr_"]), _run(_B64, 36, 40)).map(
        lambda t: (t[0] + t[1], t[1])
    ),
    _run(_B64 + "_", 22, 90).map(lambda b: ("github_pat_" + b, b)),
    st.tuples(st.sampled_from("abprs"), _run(_B64 + "-", 10, 50)).map(
        lambda t: ("xox" + t[0] + "-" + t[1], t[1])
    ),
    _run(_B64URL, 35, 35).map(lambda b: ("AIza" + b, b)),
    st.tuples(_run(_B64URL, 1, 30), _run(_B64URL, 12, 60), _run(_B64URL, 12, 60)).map(
        lambda t: (f"eyJ{t[0]}.{t[1]}.{t[2]}", f"{t[1]}.{t[2]}")
    ),
    st.tuples(st.sampled_from(["RSA ", "EC ", "OPENSSH ", ""]), _run(_B64 + "+/=", 12, 200)).map(
        lambda t: (
            f"-----BEGIN {t[0]}PRIVATE KEY-----\n{t[1]}\n-----END {t[0]}PRIVATE KEY-----",
            t[1],
        )
    ),
    _run(_B64 + "!$*+.~_-", 12, 40).map(lambda p: (f"https://user:{p}@host/path", p)),
)
# Values a label announces. A value that is a word of its own is hidden only where the
# text before it reads plainly (test_redaction_bounds covers the rest).
_LABELLED: st.SearchStrategy[tuple[str, str]] = st.one_of(
    st.tuples(_run(_B64, 8, 40), st.sampled_from("0123456789.-_~+/")).map(
        lambda t: (f"Bearer {t[0]}{t[1]}", t[0] + t[1])
    ),
    st.tuples(
        st.sampled_from(["password", "passwd", "pwd", "secret", "token", "api_key", "apikey"]),
        st.sampled_from(["=", ": ", " = "]),
        _run(_B64, 1, 1),
        _run(_B64 + "!#%*+./:?@^_~-", 11, 39),
    ).map(lambda t: (t[0] + t[1] + t[2] + t[3], t[2] + t[3])),
    _run(_B64 + "+/=", 12, 60).map(lambda v: (f"Authorization: Basic {v}", v)),
)
_SEPARATORS = st.sampled_from([" ", "\n", "\t", " \n "])
# Text a shell reads plainly: no quote, escape, expansion or here-document.
_PLAIN = st.text(
    alphabet=st.characters(blacklist_characters="`$<'\"\\", blacklist_categories=("Cs",)),
    max_size=80,
)


@settings(max_examples=300, suppress_health_check=[HealthCheck.too_slow])
@given(
    prefix=st.text(max_size=80),
    secret=_SHAPED,
    before=_SEPARATORS,
    after=_SEPARATORS,
    suffix=st.text(max_size=80),
)
def test_redact_removes_a_secret_embedded_in_random_text(
    prefix: str, secret: tuple[str, str], before: str, after: str, suffix: str
) -> None:
    full, sensitive = secret
    out = redact(prefix + before + full + after + suffix)
    # (Secrets contain no whitespace, so only the random parts could hold a copy.)
    assert sensitive not in out or sensitive in prefix or sensitive in suffix


@settings(max_examples=300, suppress_health_check=[HealthCheck.too_slow])
@given(
    prefix=_PLAIN,
    secret=_LABELLED,
    before=_SEPARATORS,
    after=_SEPARATORS,
    suffix=st.text(max_size=80),
)
def test_redact_removes_a_labelled_secret_after_plain_text(
    prefix: str, secret: tuple[str, str], before: str, after: str, suffix: str
) -> None:
    full, sensitive = secret
    out = redact(prefix + before + full + after + suffix)
    assert sensitive not in out or sensitive in prefix or sensitive in suffix


@settings(max_examples=300)
@given(st.text(max_size=300))
def test_redact_never_raises_and_is_idempotent_on_arbitrary_text(text: str) -> None:
    once = redact(text)
    assert isinstance(once, str)
    assert redact(once) == once


_FRAGMENTS = [
    "password",
    "token",
    "=",
    ":",
    '"',
    "'",
    "\\",
    '\\"',
    " ",
    "\n",
    "Bearer ",
    "abc.def-123",
    "AKIA" + AWS_ID_BODY,
    "sk-",
    SK_BODY,
    "ghp_" + GH_BODY,
    "eyJ",
    ".",
    "-----BEGIN RSA PRIVATE KEY-----",
    "-----END RSA PRIVATE KEY-----",
    "-----",
    "https://",
    "@",
    "/",
    "&",
    "Authorization",
    "x-api-key",
    REDACTED,
    "a",
]


@settings(max_examples=300)
@given(st.lists(st.sampled_from(_FRAGMENTS), max_size=12).map("".join))
def test_redact_is_idempotent_on_secret_like_fragments(text: str) -> None:
    once = redact(text)
    assert redact(once) == once


_LEAVES = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.floats(allow_nan=True),
    st.text(max_size=40),
    st.binary(max_size=20),
    st.text(max_size=20).map(_Odd),
)
_KEYS = st.one_of(st.text(max_size=20), st.integers(), st.binary(max_size=5), st.none())
_VALUES = st.recursive(
    _LEAVES,
    lambda children: st.one_of(
        st.lists(children, max_size=4),
        st.lists(children, max_size=4).map(tuple),
        st.dictionaries(_KEYS, children, max_size=4),
    ),
    max_leaves=30,
)


@settings(max_examples=300)
@given(_VALUES, st.integers(min_value=-1, max_value=6))
def test_redact_value_never_raises_and_returns_json_ready_data(
    value: object, max_depth: int
) -> None:
    out = redact_value(value, max_depth=max_depth)
    json.dumps(out)  # keys and leaves are all JSON-compatible
    again = redact_value(out, max_depth=max_depth)
    if max_depth >= 6:
        assert _same(again, out)


def _same(a: object, b: object) -> bool:
    """Equality that treats NaN as equal to itself."""
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
        return True
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, list | tuple) and isinstance(b, list | tuple):
        return type(a) is type(b) and len(a) == len(b) and all(map(_same, a, b))
    return a == b


# -- linear time -------------------------------------------------------------------------

_MB = 1_000_000


@pytest.mark.parametrize(
    "unit",
    [
        "a",
        "a-",
        "a:",
        "eyJa.",
        "eyJa.b",
        "-----BEGIN PRIVATE KEY-----",
        'password: "',
        "token=\\'",
        "https://a:",
        "a:@",
        "bearer aaaaaaaa ",
        "AKIA",
        "ghp_",
        "Authorization: '",
        '\\"',
    ],
)
def test_redact_completes_on_1mb_adversarial_input(unit: str) -> None:
    # No timing assertion (the project forbids them): quadratic or exponential
    # backtracking on these shapes would not finish, a linear scan takes milliseconds.
    text = (unit * (_MB // len(unit) + 1))[:_MB]
    out = redact(text)
    assert isinstance(out, str)


def test_redact_completes_on_1mb_single_unterminated_candidates() -> None:
    for head in ("Bearer ", "https://u:", "-----BEGIN RSA PRIVATE KEY-----", 'password="'):
        assert isinstance(redact(head + "a" * _MB), str)


@pytest.mark.parametrize("name", ["idempotency_key", "idempotencyKey", "primary-key", "sort_key"])
def test_identifiers_named_like_keys_are_kept(name: str) -> None:
    assert redact_value({name: "order-42", "stripe_api_key": "sk_live_x"}) == {
        name: "order-42",
        "stripe_api_key": "[REDACTED]",
    }
