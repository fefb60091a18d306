"""The errors of the lean HTTP/1.1 client, one tree::

UpstreamError                   (an InterlockError) the upstream call failed; carries
│                               ``origin`` (scheme://host:port) and ``sent``: whether
│                               any byte of the request may have reached the upstream
├── ConnectError                no connection: refused, unresolvable, TLS failed
├── UpstreamTimeout             (also a TimeoutError) a bound ran out
│   ├── ConnectTimeout          connecting (TCP and TLS)
│   ├── WriteTimeout            the request could not be written in time
│   ├── ReadTimeout             no byte of the response for that long
│   └── PoolTimeout             no connection of the pool came free in time
├── RemoteProtocolError         the upstream broke HTTP/1.1: a malformed status line,
│   │                           header or chunk, an upgrade, or the connection closed
│   │                           before the response was complete
│   └── ResponseTooLarge        its head (or, read whole, its body) is over the cap
└── ClientClosed                the client was closed
"""

from __future__ import annotations

from interlock.errors import InterlockError

__all__ = [
    "ClientClosed",
    "ConnectError",
    "ConnectTimeout",
    "PoolTimeout",
    "ReadTimeout",
    "RemoteProtocolError",
    "ResponseTooLarge",
    "UpstreamError",
    "UpstreamTimeout",
    "WriteTimeout",
]


class UpstreamError(InterlockError):
    """The upstream call failed. ``sent``: whether the request may have reached the
    upstream (``False``: it certainly did not, so it can be sent again anywhere)."""

    def __init__(self, message: str, *, origin: str = "", sent: bool = True) -> None:
        super().__init__(message)
        self.origin = origin
        self.sent = sent


class ConnectError(UpstreamError):
    """No connection could be made."""


class UpstreamTimeout(UpstreamError, TimeoutError):
    """A time bound ran out."""


class ConnectTimeout(UpstreamTimeout):
    """Connecting (TCP and TLS) took too long."""


class WriteTimeout(UpstreamTimeout):
    """The request could not be written in time."""


class ReadTimeout(UpstreamTimeout):
    """No byte of the response came for the read timeout."""


class PoolTimeout(UpstreamTimeout):
    """No connection of the pool came free in time."""


class RemoteProtocolError(UpstreamError):
    """The upstream's answer is not HTTP/1.1 this client reads, or it ended early."""


class ResponseTooLarge(RemoteProtocolError):
    """The response's head (or its body, read whole) is larger than allowed."""


class ClientClosed(UpstreamError):
    """The client was closed."""
