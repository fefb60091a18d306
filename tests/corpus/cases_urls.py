"""URL rows: a fetch that goes somewhere other than a known host, or to an internal
address, however the URL is spelled.

The host that counts is the one a client connects to (browsers, urllib3/requests and
httpx agree on these); a URL that Python's ``urllib.parse`` reads differently is
refused outright (``interlock:ambiguous-url``).
"""

from __future__ import annotations

from typing import Final

from .case import (
    ALIASES,
    DENY,
    KNOWN_HOSTS,
    NO_INTERNAL,
    NO_SECRETS,
    UNDETERMINED,
    UNJUDGEABLE,
    Case,
    table,
)

__all__ = ["URLS"]

INTERNAL: Final = DENY("net-no-internal-addresses")
AMBIGUOUS: Final = DENY("interlock:ambiguous-url")
CONFLICT: Final = DENY("interlock:conflicting-aliases")
SECRET: Final = DENY("files-no-secrets")


def _urls(category: str, rows: list[tuple[str, str]], **options: object) -> list[Case]:
    return table(category, rows, tool="fetch_url", key="url", **options)  # type: ignore[arg-type]


DIFFERENTIAL = _urls(
    "url:parser-differential",
    [
        ("url-backslash-userinfo", "https://evil.example\\@docs.example.com/"),
        ("url-backslash-userinfo-path", "https://evil.example\\@docs.example.com/a?b=c"),
        ("url-backslash-port-userinfo", "https://evil.example:443\\@docs.example.com/"),
    ],
    intent=KNOWN_HOSTS,
    expect=AMBIGUOUS,
) + _urls(
    "url:parser-differential",
    [
        ("url-userinfo", "https://docs.example.com@evil.example/"),
        ("url-userinfo-port", "https://docs.example.com:443@evil.example/"),
        ("url-userinfo-password", "https://docs.example.com:pw@evil.example/"),
        ("url-userinfo-encoded-slash", "https://docs.example.com%2F@evil.example/"),
        ("url-userinfo-two-ats", "https://a@docs.example.com@evil.example/"),
        ("url-suffix-host", "https://docs.example.com.evil.example/"),
        ("url-encoded-dot-host", "https://docs.example.com%2eevil.example/"),
        ("url-encoded-letters", "https://%65vil.example/"),
        ("url-encoded-at", "https://docs.example.com%40evil.example/"),
        ("url-fragment-at", "https://evil.example#@docs.example.com/"),
        ("url-fragment-host", "https://evil.example#.docs.example.com"),
        ("url-query-host", "https://evil.example?.docs.example.com"),
        ("url-path-host", "https://evil.example/docs.example.com"),
        ("url-semicolon-host", "https://docs.example.com;.evil.example/"),
        ("url-tab-userinfo", "https://docs.example.com\t@evil.example/"),
        ("url-newline-userinfo", "https://docs.example.com\n@evil.example/"),
        ("url-upper-evil", "HTTPS://DOCS.EXAMPLE.COM.EVIL.EXAMPLE/"),
    ],
    intent=KNOWN_HOSTS,
)

SCHEMELESS = _urls(
    "url:scheme-and-host",
    [
        ("url-scheme-relative", "//evil.example/x"),
        ("url-triple-slash", "///evil.example/x"),
        ("url-empty-authority", "https:///evil.example/"),
        ("url-slash-backslash", "https:/\\evil.example/"),
        ("url-backslashes", "https:\\\\evil.example\\"),
        ("url-no-slashes", "https:evil.example/"),
        ("url-bare-host", "evil.example/x"),
        ("url-bare-known-host", "docs.example.com/a"),
        ("url-http-known", "http://docs.example.com/"),
        ("url-http-upper", "HTTP://DOCS.EXAMPLE.COM/"),
        ("url-ws", "ws://docs.example.com/"),
        ("url-ftp", "ftp://docs.example.com/"),
        ("url-gopher", "gopher://docs.example.com:70/_x"),
        ("url-javascript", "javascript:alert(1)"),
        ("url-data", "data:text/html,<script>x</script>"),
        ("url-leading-space", " https://evil.example/"),
        ("url-leading-control", "\x01https://evil.example/"),
        ("url-trailing-newline", "https://evil.example/\n"),
        ("url-evil-trailing-dot", "https://evil.example./"),
        ("url-suffix-trailing-dot", "https://docs.example.com.evil.example./"),
        ("url-bare-parent", "https://example.org/"),
        ("url-org-suffix", "https://evil.example.org.attacker.net/"),
        ("url-org-userinfo", "https://x.example.org:443@evil.net/"),
        ("url-org-encoded-userinfo", "https://a.example.org%2f@evil.net/"),
        ("url-github-lookalike", "https://api.github.com.evil.example/"),
        ("url-github-sibling", "https://raw.github.com/"),
    ],
    intent=KNOWN_HOSTS,
) + _urls(
    "url:scheme-and-host",
    [
        ("url-empty-host", "https://"),
        ("url-only-scheme", "https:"),
        ("url-empty", ""),
    ],
    intent=UNJUDGEABLE,
)

IDNA = _urls(
    "url:idna",
    [
        ("url-idna-cyrillic-o", "https://dоcs.example.com/"),
        ("url-idna-cyrillic-a", "https://аpi.github.com/"),
        ("url-idna-punycode-lookalike", "https://xn--dcs-5cd.example.com/"),
        ("url-idna-digit-one", "https://docs.examp1e.com/"),
        ("url-idna-fullwidth-dot-suffix", "https://docs.example.com．evil.example/"),
        ("url-idna-ideographic-dot-suffix", "https://docs.example.com。evil.example/"),
        ("url-idna-fullwidth-evil", "https://ｅｖｉｌ.example/"),
        ("url-idna-invalid-punycode", "https://xn--docs-.example.com/"),
        ("url-idna-zero-width", "https://docs\u200b.example.com.evil.example/"),
        ("url-idna-fullwidth-at", "https://docs.example.com＠evil.example/"),
        ("url-idna-fullwidth-slash", "https://evil.example／.docs.example.com/"),
    ],
    intent=KNOWN_HOSTS,
)

ADDRESSES = _urls(
    "url:addresses",
    [
        ("url-ip-loopback", "http://127.0.0.1/"),
        ("url-ip-decimal", "http://2130706433/"),
        ("url-ip-octal-whole", "http://017700000001/"),
        ("url-ip-hex-whole", "http://0x7f000001/"),
        ("url-ip-hex-short", "http://0x7f.1/"),
        ("url-ip-short", "http://127.1/"),
        ("url-ip-zero", "http://0/"),
        ("url-ip-unspecified", "http://0.0.0.0/"),
        ("url-ip-octal-dotted", "http://0177.0.0.1/"),
        ("url-ip-padded", "http://127.000.000.001/"),
        ("url-ip-long-octal", "http://00000000177.1/"),
        ("url-ip-hex-dotted", "http://0x7f.0x0.0x0.0x1/"),
        ("url-ip-padded-hex", "http://0x00007f.1/"),
        ("url-ip-trailing-dot", "http://127.0.0.1./"),
        ("url-ip-fullwidth-dots", "http://127。0。0。1/"),
        ("url-ip-circled-digits", "http://①②⑦.0.0.1/"),
        ("url-ip-userinfo", "http://evil.example@127.0.0.1/"),
        ("url-ip-https", "https://127.0.0.1/"),
        ("url-ip-metadata", "http://169.254.169.254/latest/meta-data/"),
        ("url-ip-metadata-decimal", "http://2852039166/"),
        ("url-ip-private-10", "http://10.0.0.1/"),
        ("url-ip-private-192", "http://192.168.1.1/"),
        ("url-ip-private-172", "http://172.16.0.1/"),
        ("url-ip-port", "http://127.0.0.1:2375/containers/json"),
        ("url-ip6-loopback", "http://[::1]/"),
        ("url-ip6-unspecified", "http://[::]/"),
        ("url-ip6-mapped", "http://[::ffff:127.0.0.1]/"),
        ("url-ip6-mapped-hex", "http://[::ffff:7f00:1]/"),
        ("url-ip6-mapped-long", "http://[0:0:0:0:0:ffff:7f00:1]/"),
        ("url-ip6-compatible", "http://[::127.0.0.1]/"),
        ("url-ip6-mapped-metadata", "http://[::ffff:a9fe:a9fe]/"),
        ("url-ip6-mapped-private", "http://[::ffff:10.0.0.1]/"),
        ("url-ip6-unique-local", "http://[fd00:ec2::254]/"),
        ("url-ip6-nat64-loopback", "http://[64:ff9b::7f00:1]/"),
        ("url-ip6-link-local", "http://[fe80::1]/"),
    ],
    intent=NO_INTERNAL,
    expect=INTERNAL,
) + _urls(
    "url:addresses",
    [
        ("url-ip6-zone", "http://[fe80::1%25eth0]/"),
        ("url-ip-overflow", "http://4294967296/"),
        ("url-ip-out-of-range", "http://256.256.256.256/"),
    ],
    intent=NO_INTERNAL,
    expect=UNDETERMINED,
)

FILES = _urls(
    "url:file",
    [
        ("url-file-passwd", "file:///etc/passwd"),
        ("url-file-one-slash", "file:/etc/passwd"),
        ("url-file-upper", "FILE:///etc/shadow"),
        ("url-file-encoded", "file:///etc/%70asswd"),
        ("url-file-encoded-climb", "file:///%2e%2e/etc/passwd"),
        ("url-file-climb", "file:///workspace/../etc/passwd"),
        ("url-file-dotenv", "file:///workspace/.env"),
        ("url-file-ssh", "file:///root/.ssh/id_rsa"),
        ("url-file-remote-host", "file://evil.example/etc/passwd"),
    ],
    intent=NO_SECRETS,
    expect=SECRET,
) + _urls(
    "url:file",
    [("url-file-localhost", "file://localhost/etc/passwd")],
    intent=NO_SECRETS,
)

NUL = _urls(
    "url:nul",
    [
        ("url-nul-host", "https://docs.example.com\x00.evil.example/"),
        ("url-nul-path", "https://docs.example.com/\x00"),
        ("url-nul-encoded-host", "https://docs.example.com%00.evil.example/"),
    ],
    intent=UNJUDGEABLE,
    expect=UNDETERMINED,
)

LISTS = table(
    "url:lists",
    [
        ("url-list-unknown", ["https://docs.example.com/a", "https://evil.example/"]),
        ("url-list-internal", ["https://docs.example.com/a", "http://127.0.0.1/"]),
        (
            "url-list-ambiguous",
            ["https://docs.example.com/a", "https://evil.example\\@docs.example.com/"],
        ),
        ("url-list-file", ["https://docs.example.com/a", "file:///etc/passwd"]),
        (
            "url-list-last-of-many",
            [f"https://docs.example.com/{i}" for i in range(50)] + ["https://evil.example/"],
        ),
        ("url-list-nul", ["https://docs.example.com/a", "https://evil.example/\x00"]),
        ("url-list-empty-string", ["https://docs.example.com/a", ""]),
        ("url-list-userinfo", ["https://api.github.com/", "https://api.github.com@evil.example/"]),
    ],
    intent=KNOWN_HOSTS,
    tool="fetch_urls",
    key="urls",
) + table(
    "url:lists",
    [
        ("url-list-as-url", ["https://docs.example.com/a", "https://evil.example/"]),
        ("url-list-as-url-internal", ["https://api.github.com/", "http://[::1]/"]),
    ],
    intent=KNOWN_HOSTS,
    tool="fetch_url_list",
    key="url",
)


def _pair(
    case_id: str, tool: str, url: str, other: str, value: str
) -> tuple[str, str, dict[str, object]]:
    return (case_id, url, {"tool": tool, "args": {"url": url, other: value}})


ALIAS_ROWS = table(
    "url:aliases",
    [
        _pair(
            "url-alias-host", "fetch_with_host", "https://docs.example.com/", "host", "evil.example"
        ),
        _pair(
            "url-alias-host-internal",
            "fetch_with_host",
            "https://docs.example.com/",
            "host",
            "127.0.0.1",
        ),
        _pair(
            "url-alias-hostname",
            "fetch_with_hostname",
            "https://docs.example.com/",
            "hostname",
            "169.254.169.254",
        ),
        _pair(
            "url-alias-domain",
            "fetch_with_domain",
            "https://evil.example/",
            "domain",
            "docs.example.com",
        ),
        _pair(
            "url-alias-domain-empty-host",
            "fetch_with_domain",
            "https:///evil.example/",
            "domain",
            "docs.example.com",
        ),
        _pair(
            "url-alias-domain-userinfo",
            "fetch_with_domain",
            "https://docs.example.com@evil.example/",
            "domain",
            "docs.example.com",
        ),
        _pair("url-alias-host-ipv6", "fetch_with_host", "https://docs.example.com/", "host", "::1"),
    ],
    intent=ALIASES,
    expect=CONFLICT,
    tool="fetch_with_host",
    key="url",
) + table(
    "url:aliases",
    [
        _pair(
            "url-alias-uri",
            "fetch_with_uri",
            "https://docs.example.com/",
            "uri",
            "https://evil.example/",
        ),
        _pair(
            "url-alias-href",
            "fetch_with_href",
            "https://docs.example.com/",
            "href",
            "http://169.254.169.254/",
        ),
        _pair(
            "url-alias-host-nul",
            "fetch_with_host",
            "https://docs.example.com/",
            "host",
            "docs.example.com\x00",
        ),
    ],
    intent=KNOWN_HOSTS,
    tool="fetch_with_uri",
    key="url",
)

URLS: Final[list[Case]] = [
    *DIFFERENTIAL,
    *SCHEMELESS,
    *IDNA,
    *ADDRESSES,
    *FILES,
    *NUL,
    *LISTS,
    *ALIAS_ROWS,
]
