"""URL facts: the host a client really connects to (WHATWG), and the URLs whose host
depends on the client."""

from __future__ import annotations

import ipaddress
import socket

import httpx
import pytest
import urllib3.util
from hypothesis import given, settings
from hypothesis import strategies as st

from interlock.facts.url import UrlError, _from_parser, registrable_domain, url_facts

# -- what a URL points at ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("url", "scheme", "host", "port", "kind", "site", "ip_class"),
    [
        (
            "https://docs.example.com/a?b=@c",
            "https",
            "docs.example.com",
            443,
            "domain",
            "example.com",
            None,
        ),
        (
            "HTTPS://DOCS.EXAMPLE.COM./x",
            "https",
            "docs.example.com",
            443,
            "domain",
            "example.com",
            None,
        ),
        ("https:///evil.example/x", "https", "evil.example", 443, "domain", "evil.example", None),
        ("http://0x7f.1/", "http", "127.0.0.1", 80, "ipv4", None, "loopback"),
        ("http://2130706433/", "http", "127.0.0.1", 80, "ipv4", None, "loopback"),
        ("http://0177.0.0.1/", "http", "127.0.0.1", 80, "ipv4", None, "loopback"),
        ("http://127.1:8080/", "http", "127.0.0.1", 8080, "ipv4", None, "loopback"),
        (
            "http://169.254.169.254/latest/meta-data",
            "http",
            "169.254.169.254",
            80,
            "ipv4",
            None,
            "link-local",
        ),
        ("http://10.1.2.3/", "http", "10.1.2.3", 80, "ipv4", None, "private"),
        ("http://8.8.8.8/", "http", "8.8.8.8", 80, "ipv4", None, "global"),
        ("http://[::1]:8080/", "http", "::1", 8080, "ipv6", None, "loopback"),
        ("http://[::ffff:127.0.0.1]/", "http", "::ffff:7f00:1", 80, "ipv6", None, "loopback"),
        ("https://ＥＸＡＭＰＬＥ.com/", "https", "example.com", 443, "domain", "example.com", None),
        (
            "https://пример.рф/",
            "https",
            "xn--e1afmkfd.xn--p1ai",
            443,
            "domain",
            "xn--e1afmkfd.xn--p1ai",
            None,
        ),
        (
            "https://user:pw@docs.example.com@evil.com/",
            "https",
            "evil.com",
            443,
            "domain",
            "evil.com",
            None,
        ),
        (
            "https://a.b.example.co.uk:8443/x",
            "https",
            "a.b.example.co.uk",
            8443,
            "domain",
            "example.co.uk",
            None,
        ),
        ("docs.example.com/path", "http", "docs.example.com", 80, "domain", "example.com", None),
        ("//evil.com/x", "http", "evil.com", 80, "domain", "evil.com", None),
        (
            "  https://docs.example.com/  ",
            "https",
            "docs.example.com",
            443,
            "domain",
            "example.com",
            None,
        ),
        ("file:///etc/passwd", "file", "", None, "none", None, None),
        ("mailto:a@example.com", "mailto", "", None, "none", None, None),
        ("https://x.github.io/", "https", "x.github.io", 443, "domain", "x.github.io", None),
    ],
)
def test_url_facts(
    url: str,
    scheme: str,
    host: str,
    port: int | None,
    kind: str,
    site: str | None,
    ip_class: str | None,
) -> None:
    found = url_facts(url)
    assert (found.scheme, found.host, found.port, found.host_kind) == (scheme, host, port, kind)
    assert (found.site, found.ip_class, found.ambiguous) == (site, ip_class, None)


@pytest.mark.parametrize(
    ("url", "host", "other"),
    [
        ("https://evil.example\\@docs.example.com/", "evil.example", "docs.example.com"),
        ("https://evil.example\\\\@docs.example.com/", "evil.example", "docs.example.com"),
        ("http://evil.example\\@docs.example.com:443/", "evil.example", "docs.example.com"),
        ("https://evil.com\\.docs.example.com/", "evil.com", ".docs.example.com"),
        ("https://docs.example.com%2eevil.com/", "docs.example.com.evil.com", "%2e"),
    ],
)
def test_a_host_two_parsers_read_differently_is_ambiguous(url: str, host: str, other: str) -> None:
    found = url_facts(url)
    assert found.host == host
    assert found.ambiguous is not None and other in found.ambiguous


@pytest.mark.parametrize(
    "url", ["not a url at all", "https://docs.example.com:99999/", "http://[::1", "a\x00b"]
)
def test_what_is_not_a_url_is_an_error(url: str) -> None:
    with pytest.raises(UrlError):
        url_facts(url)


def test_registrable_domains_come_from_the_public_suffix_list() -> None:
    assert registrable_domain("a.b.example.co.uk") == "example.co.uk"
    assert registrable_domain("co.uk") is None
    assert registrable_domain("localhost") is None
    assert registrable_domain("Docs.Example.COM.") == "example.com"


# -- the differential: the host httpx and urllib3 connect to --------------------------------

TRICKY = [
    "https://evil.example\\@docs.example.com/",
    "http://0x7f.1/",
    "http://2130706433/",
    "http://0177.0.0.1/",
    "http://127.1/",
    "https://user:pw@docs.example.com@evil.com/",
    "http://docs.example.com:80@evil.com/",
    "http://evil.com;@docs.example.com/",
    "https://docs.example.com%2eevil.com/",
    "https://docs.example.com%40evil.com/",
    "https://пример.рф/",
    "https://xn--e1afmkfd.xn--p1ai/",
    "http://[::1]:8080/",
    "http://[::ffff:127.0.0.1]/",
    "HTTPS://DOCS.EXAMPLE.COM./",
    "https://docs.example.com#@evil.com",
    "https://docs.example.com?@evil.com",
    "https://docs.example.com/a?b=@c",
    "https://a.b.example.co.uk:8443/x",
    "http://docs.example.com/..%2f..%2fevil.com",
    "http://[0:0:0:0:0:0:0:1]/",
    "http://0/",
    "http://0.0.0.0/",
    "https://docs.example.com.:443/",
    "https://DoCs.ExAmPlE.cOm/",
    "http://example.com\\.evil.com/",
]


def _connects_to(host: str | None) -> str | None:
    """The address a client's resolver would use for ``host`` (getaddrinfo reads the
    legacy IPv4 forms with inet_aton), lower-case ASCII otherwise."""
    if not host:
        return None
    host = host.strip("[]").lower().rstrip(".")
    if ":" in host:
        return str(ipaddress.ip_address(host))
    try:
        return socket.inet_ntoa(socket.inet_aton(host))
    except OSError:
        pass
    try:
        return host.encode("idna").decode()
    except UnicodeError:
        return host


def _client_host(url: str, client: str) -> str | None:
    try:
        host = urllib3.util.parse_url(url).host if client == "urllib3" else httpx.URL(url).host
    except Exception:
        return None  # the client refuses the URL: it connects nowhere
    return _connects_to(host)


def _ours(url: str) -> str:
    found = url_facts(url)
    return str(ipaddress.ip_address(found.host)) if found.host_kind != "domain" else found.host


@pytest.mark.parametrize("url", TRICKY)
def test_interlock_reads_the_host_the_clients_connect_to(url: str) -> None:
    clients = {c: _client_host(url, c) for c in ("urllib3", "httpx")}
    reached = {host for host in clients.values() if host is not None}
    try:
        found = url_facts(url)
    except UrlError:
        # Refused (the check is undetermined): only for a host no client can reach.
        assert all("%" in host for host in reached), (url, clients)
        return
    if len(reached) > 1:
        # The clients themselves disagree: Interlock must not pick one silently.
        assert (
            found.ambiguous is not None
            or _ours(url) not in reached
            or (
                # or both disagree only because one keeps an escape the other decodes
                # (httpx leaves %2e in the host: its resolver then finds no such host)
                any("%" in host for host in reached)
            )
        ), (url, clients, found)
        return
    if not reached:
        return  # neither client would connect anywhere
    assert _ours(url) in reached, (url, clients, found)


# -- the fast path reads exactly what the parser reads ------------------------------------

_LABEL = st.from_regex(r"[A-Za-z0-9-]{1,12}", fullmatch=True)


@settings(max_examples=400, deadline=None)
@given(
    scheme=st.sampled_from(["http", "https", "HTTP", "hTtPs"]),
    labels=st.lists(_LABEL, min_size=1, max_size=4),
    trailing_dot=st.booleans(),
    port=st.one_of(st.none(), st.integers(0, 65535), st.just("")),
    rest=st.sampled_from(["", "/", "/a/b?c=d#e", "?q=@x", "#@evil.com", "/%2e%2e/x"]),
)
def test_the_fast_path_agrees_with_the_whatwg_parser(
    scheme: str, labels: list[str], trailing_dot: bool, port: int | str | None, rest: str
) -> None:
    host = ".".join(labels) + ("." if trailing_dot else "")
    url = f"{scheme}://{host}" + ("" if port is None else f":{port}") + rest
    try:
        slow = _from_parser(url)
    except UrlError:
        with pytest.raises(UrlError):
            url_facts.__wrapped__(url)
        return
    fast = url_facts.__wrapped__(url)
    assert (fast.scheme, fast.host, fast.port, fast.host_kind, fast.site) == (
        slow.scheme,
        slow.host,
        slow.port,
        slow.host_kind,
        slow.site,
    ), url


@pytest.mark.parametrize(
    ("url", "host", "ip_class"),
    [
        ("tcp://0x7f.1:4444/", "127.0.0.1", "loopback"),
        ("ssh://10.0.0.5/", "10.0.0.5", "private"),
        ("git+https://x.example/y", "x.example", None),
    ],
)
def test_hosts_of_other_schemes_are_read_as_connections_read_them(
    url: str, host: str, ip_class: str | None
) -> None:
    found = url_facts(url)
    assert (found.host, found.ip_class) == (host, ip_class)
