"""The server's errors, in Interlock's one error tree.

::

    InterlockError
    └── ServerError
        ├── ApiKeyError          (also a ValueError) a key could not be created or used
        │   ├── ApiKeyNotFound   (also a LookupError) no key with that id
        │   └── KeyNameTaken     the name is another key's name written another way
        └── ApiError             an HTTP error answer: status, code, message, field

Every error answer of the HTTP API has one shape::

    {"error": {"code": "not_found", "message": "no approval 'apr_1'", "field": null}}
"""

from __future__ import annotations

__all__ = ["ApiError", "ApiKeyError", "ApiKeyNotFound", "KeyNameTaken", "ServerError"]

from interlock.errors import InterlockError


class ServerError(InterlockError):
    """The root of the server's own errors."""


class ApiKeyError(ServerError, ValueError):
    """An API key could not be created, parsed or revoked."""


class ApiKeyNotFound(ApiKeyError, LookupError):
    """No API key with that id."""

    def __init__(self, message: str, *, key_id: str) -> None:
        super().__init__(message)
        self.key_id = key_id


class KeyNameTaken(ApiKeyError):
    """A key's name is the identity of another key's ``existing`` name in the tenant,
    written another way (case, width, invisible characters, look-alike letters)."""

    def __init__(self, message: str, *, name: str, existing: str, tenant: str) -> None:
        super().__init__(message)
        self.name = name
        self.existing = existing
        self.tenant = tenant


class ApiError(ServerError):
    """An error answer: ``status`` (4xx/5xx), a stable ``code``, a message for people,
    and the request ``field`` at fault when there is one."""

    def __init__(self, status: int, code: str, message: str, *, field: str | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message
        self.field = field
