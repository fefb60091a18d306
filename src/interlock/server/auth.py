"""Who may call what: ``Authorization: Bearer <key>`` → an :class:`ApiKey` → its
role's permissions.

| permission | agent | approver | admin |
| --- | --- | --- | --- |
| ``check`` (check, batch check) | ✓ | | ✓ |
| ``budgets:write`` (reserve, commit, release) | ✓ | | ✓ |
| ``budgets:read`` (budget status) | ✓ | ✓ | ✓ |
| ``budgets:admin`` (reopen a closed budget; settle any key's reservation) | | | ✓ |
| ``approvals:read`` (get one, wait for one) | ✓ | ✓ | ✓ |
| ``approvals:list`` | | ✓ | ✓ |
| ``approvals:decide`` (approve, deny) | | ✓ | ✓ |
| ``audit:read`` (query, export, verify) | | ✓ | ✓ |
| ``policy:admin`` (confirm a held policy reload) | | | ✓ |
| ``audit:replay`` (replay the log against a draft policy) | | | ✓ |

Every permission is within the key's own tenant: nothing of another tenant is
visible, and another tenant's approval id is "not found", exactly like an id that
does not exist. A missing, malformed, unknown or revoked key is ``401``; a key whose
role lacks the permission is ``403``.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from enum import StrEnum
from typing import Annotated, Final

from fastapi import Depends, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from interlock.server.errors import ApiError
from interlock.server.keys import ApiKey, Role
from interlock.server.state import ServerState, state_of

__all__ = ["ROLE_PERMISSIONS", "Permission", "authenticated", "require"]


class Permission(StrEnum):
    CHECK = "check"
    BUDGETS_WRITE = "budgets:write"
    BUDGETS_READ = "budgets:read"
    BUDGETS_ADMIN = "budgets:admin"
    APPROVALS_READ = "approvals:read"
    APPROVALS_LIST = "approvals:list"
    APPROVALS_DECIDE = "approvals:decide"
    AUDIT_READ = "audit:read"
    POLICY_ADMIN = "policy:admin"
    AUDIT_REPLAY = "audit:replay"


ROLE_PERMISSIONS: Final[dict[Role, frozenset[Permission]]] = {
    Role.AGENT: frozenset(
        {
            Permission.CHECK,
            Permission.BUDGETS_WRITE,
            Permission.BUDGETS_READ,
            Permission.APPROVALS_READ,
        }
    ),
    Role.APPROVER: frozenset(
        {
            Permission.BUDGETS_READ,
            Permission.APPROVALS_READ,
            Permission.APPROVALS_LIST,
            Permission.APPROVALS_DECIDE,
            Permission.AUDIT_READ,
        }
    ),
    Role.ADMIN: frozenset(Permission),
}

_bearer = HTTPBearer(
    auto_error=False,
    scheme_name="apiKey",
    description="An Interlock API key: `Authorization: Bearer ilk_<id>_<secret>`.",
)


def _unauthorized(message: str) -> ApiError:
    return ApiError(401, "unauthorized", message)


async def authenticated(
    request: Request,
    credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)],
) -> ApiKey:
    """The live key the request carries, or 401."""
    if credentials is None:
        raise _unauthorized("an API key is required: Authorization: Bearer <key>")
    state: ServerState = state_of(request)
    token = credentials.credentials
    key = await state.keys.aauthenticate(token)  # the table is read off the event loop
    if key is None:
        raise _unauthorized("the API key is not valid (unknown, malformed or revoked)")
    return key


def require(permission: Permission) -> Callable[..., Awaitable[ApiKey]]:
    """A dependency: the request's key, which must hold ``permission`` (else 403).
    One level of dependency, not two: it is on every request's path."""

    async def permitted(
        request: Request,
        credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)],
    ) -> ApiKey:
        key = await authenticated(request, credentials)
        if permission not in ROLE_PERMISSIONS[key.role]:
            raise ApiError(
                403,
                "forbidden",
                f"a key with role {key.role.value!r} may not {permission.value}",
            )
        return key

    return permitted
