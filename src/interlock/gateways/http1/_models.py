"""What a request is sent to, and the client's bounds: prepared once, used per call."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Final
from urllib.parse import urlsplit

__all__ = ["Limits", "Target", "Timeouts", "check_header"]

_DEFAULT_PORTS: Final = {"http": 80, "https": 443}
# RFC 9110 token characters: what a header name may be.
_TOKEN: Final = re.compile(rb"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")
# What a header value may not hold: a line break or a NUL would split the request.
_UNSAFE_VALUE: Final = re.compile(rb"[\r\n\0]")


@dataclass(frozen=True, slots=True)
class Timeouts:
    """Seconds: ``connect`` (TCP and TLS), ``write`` (the request), ``read`` (the
    longest gap between two reads of the response — a stream may last longer), and
    ``pool`` (waiting for a connection when ``max_connections`` are busy)."""

    connect: float = 10.0
    write: float = 60.0
    read: float = 600.0
    pool: float = 10.0


@dataclass(frozen=True, slots=True)
class Limits:
    """``max_connections`` per origin (busy and idle); ``max_idle`` kept open per
    origin; ``idle_expiry``: seconds an idle connection is kept (shorter than the
    common servers' own 5 s, so the client, not the server, closes it — a server that
    announces a shorter ``Keep-Alive: timeout`` is believed); ``max_head``: bytes of a
    response's status line and headers; ``max_body``: bytes of a body read whole."""

    max_connections: int = 1000
    max_idle: int = 100
    idle_expiry: float = 4.0
    max_head: int = 64 * 1024
    max_body: int = 256 * 1024 * 1024

    def __post_init__(self) -> None:
        for name in ("max_connections", "max_idle", "max_head", "max_body"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be at least 1, not {getattr(self, name)!r}")
        if self.idle_expiry < 0:
            raise ValueError(f"idle_expiry must not be negative, not {self.idle_expiry!r}")


@dataclass(frozen=True, slots=True)
class Target:
    """A URL prepared once: its origin (``scheme``, ``host``, ``port``), the request
    target (``path``, with the query) and the ``Host`` header.

    Example::

        target = Target.of("https://api.example.test/v1/chat/completions")
    """

    scheme: str
    host: str
    port: int
    path: str
    host_header: bytes = field(repr=False)

    @classmethod
    def of(cls, url: str) -> Target:
        parts = urlsplit(url)
        scheme = parts.scheme.lower()
        if scheme not in _DEFAULT_PORTS:
            raise ValueError(f"only http and https URLs can be sent to, not {url!r}")
        host = parts.hostname
        if not host:
            raise ValueError(f"the URL names no host: {url!r}")
        if parts.username is not None or parts.password is not None:
            raise ValueError("credentials in a URL are not sent: use a header")
        port = parts.port or _DEFAULT_PORTS[scheme]
        path = parts.path or "/"
        if parts.query:
            path += "?" + parts.query
        if any(c in path for c in "\r\n\0 "):
            raise ValueError(f"the URL's path cannot be sent as it is: {url!r}")
        shown = f"[{host}]" if ":" in host else host
        if port != _DEFAULT_PORTS[scheme]:
            shown += f":{port}"
        return cls(scheme, host, port, path, shown.encode("ascii"))

    @property
    def origin(self) -> str:
        return f"{self.scheme}://{self.host}:{self.port}"


def check_header(name: bytes, value: bytes) -> None:
    """Refuse a header that would not be one header on the wire."""
    if not _TOKEN.fullmatch(name):
        raise ValueError(f"not a header name: {name!r}")
    if _UNSAFE_VALUE.search(value):
        raise ValueError(f"the value of header {name.decode()!r} holds a line break or NUL")
