"""URL facts: the host a client will really connect to.

``https://evil.example\\@docs.example.com/`` is a request to ``evil.example`` for
browsers and for ``requests`` (urllib3), and one to ``docs.example.com`` for Python's
``urllib.parse``. A policy that reads the host with the wrong parser allows the wrong
call. :func:`url_facts` reads a URL as the WHATWG URL Standard does — the parser of
browsers, and the one urllib3 follows — through ``ada-url`` (backslashes, userinfo,
empty hosts, percent-encoding, IDNA and punycode, decimal, octal and hex IPv4 forms,
trailing dots), then gives:

- ``host`` — lower-case ASCII (punycode for an international name), an IPv4
  address dotted (``http://0x7f.1/`` is ``127.0.0.1``), an IPv6 one without brackets;
  a trailing dot dropped;
- ``scheme``, ``port`` (the scheme's default when none is given), ``path``;
- ``site`` — the registrable domain (``a.b.example.co.uk`` → ``example.co.uk``) from
  the Public Suffix List bundled with ``publicsuffixlist`` (never downloaded at run
  time); ``None`` for an IP address or a bare public suffix;
- ``ip_class`` for an IP address: ``loopback``, ``private``, ``link-local``,
  ``multicast``, ``reserved``, ``unspecified`` or ``global`` (IPv4-mapped IPv6
  addresses classed as their IPv4 address);
- ``ambiguous`` — set when Python's own ``urllib.parse`` reads a *different* host:
  such a URL goes to different places depending on the client, and is refused.

A URL without a scheme (``docs.example.com/a``) is read as ``http://`` + it, as a
client that adds a scheme would. Results are cached by the exact string.
"""

from __future__ import annotations

import ipaddress
import re
from functools import lru_cache
from typing import TYPE_CHECKING, Final, Literal, NamedTuple
from urllib.parse import urlsplit

if TYPE_CHECKING:
    from ada_url import URL
    from publicsuffixlist import PublicSuffixList

__all__ = ["UrlError", "UrlFacts", "registrable_domain", "url_facts"]

HostKind = Literal["domain", "ipv4", "ipv6", "none"]

_DEFAULT_PORTS: Final = {"http": 80, "https": 443, "ws": 80, "wss": 443, "ftp": 21}
#: The WHATWG "special" schemes, whose hosts are parsed as hosts (the rest are opaque).
_SPECIAL: Final = frozenset({"http", "https", "ws", "wss", "ftp", "file"})
# Schemes that never reach a network host: no scheme is added to these.
_LOCAL_SCHEMES: Final = frozenset(
    {"javascript", "data", "mailto", "about", "blob", "tel", "sms", "file", "urn", "news"}
)
# A plain http(s) URL: ASCII host of letters, digits, dots and dashes, an optional
# port, then nothing or a path/query/fragment. For these WHATWG, urllib3 and
# urllib.parse all read the same host, so the parser is not needed.
_PLAIN: Final = re.compile(
    r"(?P<scheme>[Hh][Tt][Tt][Pp][Ss]?)://(?P<host>[A-Za-z0-9.-]+)(?::(?P<port>[0-9]{0,5}))?"
    r"(?P<rest>[/?#].*)?",
    re.DOTALL,
)
_NUMERIC_LABEL: Final = re.compile(r"^(?:0[xX][0-9A-Fa-f]*|[0-9]+)$")


class UrlError(ValueError):
    """A URL that cannot be read."""


class UrlFacts(NamedTuple):
    """What a URL points at. (A named tuple: built on every check of a new URL, and
    a frozen dataclass costs several times more to build.)"""

    url: str
    scheme: str
    host: str  # "" when the URL has no host (mailto:, data:)
    port: int | None
    host_kind: HostKind
    path: str
    site: str | None = None
    ip_class: str | None = None
    ambiguous: str | None = None  # why two parsers disagree on the host


@lru_cache(maxsize=8192)
def url_facts(text: str) -> UrlFacts:
    """The facts of ``text``. Raises :class:`UrlError` for what is not a URL."""
    if "\x00" in text:
        raise UrlError("a URL with a NUL byte cannot be judged")
    plain = _PLAIN.fullmatch(text)
    if plain is not None and _plain_host(plain.group("host")):
        return _from_plain(text, plain)
    return _from_parser(text)


def _plain_host(host: str) -> bool:
    """Whether the fast path reads this host exactly as the WHATWG parser would."""
    if ".." in host or host[:1] == "." or "xn--" in host or "XN--" in host.upper():
        return False  # an empty label, or punycode to validate
    last = host.rstrip(".").rpartition(".")[2]
    # a last label that is a number (decimal or hex) makes the host an IPv4 address
    return bool(last) and not (last.isdigit() or last[:2] in ("0x", "0X"))


def _from_plain(text: str, match: re.Match[str]) -> UrlFacts:
    scheme, host, port_text, rest = match.group("scheme", "host", "port", "rest")
    scheme = scheme.lower()
    host = host.lower().rstrip(".")
    if port_text:
        port = int(port_text)
        if port > 65535:
            raise UrlError(f"the URL's port {port} is out of range")
    else:
        port = _DEFAULT_PORTS[scheme]
    path = "/"
    if rest:
        end = len(rest)
        for mark in "?#":
            found = rest.find(mark)
            if 0 <= found < end:
                end = found
        path = rest[:end] or "/"
    return UrlFacts(
        text, scheme, host, port, "domain", path, registrable_domain(host), _name_class(host)
    )


def _from_parser(text: str) -> UrlFacts:
    import ada_url

    parsed = _parse(text)
    if parsed is None:
        raise UrlError(f"not a URL: {_short(text)}")
    url, given = parsed
    scheme = url.protocol.rstrip(":").lower()
    if scheme not in _SPECIAL and url.hostname and "://" in given:
        # A scheme the standard does not know (git+https:, ssh:, tcp:) keeps its host
        # "opaque": read it as a connection would, with the special-host rules
        # (IPv4 forms, IDNA), or `tcp://0x7f.1` would not be loopback.
        try:
            url = ada_url.URL("http://" + given.split("://", 1)[1])
        except ValueError:
            raise UrlError(f"not a URL: {_short(text)}") from None
    host = url.hostname
    kind: HostKind = "none"
    ip_class: str | None = None
    if host:
        if host.startswith("["):
            kind, host = "ipv6", host[1:-1]
        elif url.host_type == ada_url.HostType.IPV4:
            kind = "ipv4"
        else:
            kind = "domain"
        host = host.lower().rstrip(".")
        ip_class = _ip_class(host) if kind != "domain" else _name_class(host)
    port = int(url.port) if url.port else _DEFAULT_PORTS.get(scheme)
    return UrlFacts(
        url=text,
        scheme=scheme,
        host=host,
        port=port,
        host_kind=kind,
        path=url.pathname,
        site=registrable_domain(host) if kind == "domain" else None,
        ip_class=ip_class,
        ambiguous=_second_opinion(given, host),
    )


def _parse(text: str) -> tuple[URL, str] | None:
    """The WHATWG reading of ``text`` (with ``http://`` added when it has no scheme),
    and the string that was parsed."""
    import ada_url

    candidates = [text]
    stripped = text.strip()
    scheme = re.match(r"^([A-Za-z][A-Za-z0-9+.-]*):", stripped)
    if "://" not in stripped and (scheme is None or scheme.group(1).lower() not in _LOCAL_SCHEMES):
        candidates.insert(0, "http://" + stripped.lstrip("/"))
    elif stripped.startswith("//"):
        candidates.insert(0, "http:" + stripped)
    for candidate in candidates:
        try:
            return ada_url.URL(candidate), candidate
        except ValueError:
            continue
    return None


def _second_opinion(text: str, host: str) -> str | None:
    """Why Python's urllib.parse would connect elsewhere, if it would."""
    try:
        other = urlsplit(text.strip()).hostname
    except ValueError:
        return None  # urllib refuses it: a client using it fails, it goes nowhere
    if not other:
        return None
    # A host with a character the WHATWG parser reads as syntax (a backslash, an
    # escape) is not "the same host in another spelling": the parsers disagree.
    normal = other if any(ch in other for ch in "\\%@/?# \t") else _normal_host(other)
    if normal is None or normal == host:
        return None
    return (
        f"browsers and urllib3 (requests) connect to {host!r}, but Python's "
        f"urllib.parse reads the host as {normal!r}"
    )


@lru_cache(maxsize=4096)
def _normal_host(host: str) -> str | None:
    import ada_url

    if ":" in host and not host.startswith("["):
        host = f"[{host}]"  # an IPv6 address
    try:
        parsed = ada_url.URL(f"http://{host}/")
    except ValueError:
        return host.lower().rstrip(".")
    value = parsed.hostname.lower().rstrip(".")
    return value[1:-1] if value.startswith("[") else value


def _ip_class(host: str) -> str:
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return "reserved"
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        address = address.ipv4_mapped
    if address.is_loopback:
        return "loopback"
    if address.is_link_local:
        return "link-local"
    if address.is_multicast:
        return "multicast"
    if address.is_unspecified:
        return "unspecified"
    if address.is_private:
        return "private"
    if address.is_reserved:
        return "reserved"
    if not address.is_global:
        return "private"  # shared address space (100.64.0.0/10) and the like
    return "global"


#: Names reserved for what an IP class says (RFC 6761 and common practice): a request
#: to them never leaves the host, the link or the private network.
_NAME_CLASSES: Final = (
    (
        "loopback",
        re.compile(r"(?:^|\.)localhost$|^localhost\.localdomain$|^ip6-(?:localhost|loopback)$"),
    ),
    ("link-local", re.compile(r"\.local$")),
    ("private", re.compile(r"(?:^|\.)(?:internal|intranet|corp|lan|home\.arpa|localdomain)$")),
)


def _name_class(host: str) -> str | None:
    for name, pattern in _NAME_CLASSES:
        if pattern.search(host):
            return name
    return None


@lru_cache(maxsize=8192)
def registrable_domain(host: str) -> str | None:
    """The registrable domain of ``host`` (eTLD+1): ``a.example.co.uk`` →
    ``example.co.uk``; None for a bare public suffix or a single label."""
    found = _psl().privatesuffix(host.lower().rstrip("."))
    return found if isinstance(found, str) else None


@lru_cache(maxsize=1)
def _psl() -> PublicSuffixList:
    from publicsuffixlist import PublicSuffixList

    return PublicSuffixList()


def _short(text: str) -> str:
    return repr(text if len(text) <= 60 else text[:57] + "...")
