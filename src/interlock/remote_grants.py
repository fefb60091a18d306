"""Grants through the Interlock server, for a remote guard (``Guard.remote``).

``issue`` asks ``POST /v1/grants`` for a grant of a decision the server made,
``claim`` claims one with ``POST /v1/grants/claim``, ``jwks`` reads the public
``GET /v1/keys/jwks.json``. A refusal comes back as the grant error the server named
(``GrantReplayed`` for ``grant_replayed``, ...), as a local guard raises it; an
unreachable server or a 5xx is a :class:`~interlock.errors.RemoteError`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Final

from interlock.errors import (
    BadSignature,
    BindingMismatch,
    ConfigError,
    GrantError,
    GrantExpired,
    GrantInvalid,
    GrantReplayed,
    RemoteError,
    RemoteRefused,
    UnknownKey,
    WrongAudience,
)

if TYPE_CHECKING:
    from interlock.approvals.grants import Grant
    from interlock.core.decision import Decision
    from interlock.remote import RemoteDecider
    from interlock.verify.tokens import GrantClaims

__all__ = ["aclaim", "aissue", "ajwks", "claim", "grant_of", "issue", "jwks"]

_ERRORS: Final[dict[str, type[GrantError]]] = {
    cls.code: cls
    for cls in (
        GrantError,
        GrantInvalid,
        UnknownKey,
        BadSignature,
        GrantExpired,
        WrongAudience,
        BindingMismatch,
        GrantReplayed,
    )
}


def _issue_body(
    decision: Decision, audience: str | None, binding: str | None, ttl: float | None
) -> dict[str, Any]:
    body: dict[str, Any] = {"decision_id": decision.decision_id}
    for name, value in (("audience", audience), ("binding", binding), ("ttl", ttl)):
        if value is not None:
            body[name] = value
    return body


def grant_of(body: Any) -> Grant:
    """The :class:`Grant` in a ``GrantOut`` body; RemoteError when it is not one."""
    from interlock.approvals.grants import Grant

    try:
        return Grant(token=str(body["token"]), claims=_claims_of(body["claims"]), kid=body["kid"])
    except (KeyError, TypeError) as exc:
        raise RemoteError(f"the server's grant is malformed: {exc!r}") from exc


def _claims_of(body: Any) -> GrantClaims:
    from interlock.verify.tokens import GrantClaims

    try:
        claims = GrantClaims(**body)
        return GrantClaims.from_payload(claims.to_payload())  # every claim's form checked
    except (TypeError, GrantInvalid) as exc:
        raise RemoteError(f"the server's grant claims are malformed: {exc}") from exc


def _translated(exc: RemoteRefused) -> Exception:
    if exc.code in _ERRORS:
        return _ERRORS[exc.code](str(exc))
    if exc.status == 404 or exc.code == "config_error":
        return GrantError(str(exc))
    return exc


def issue(
    remote: RemoteDecider,
    decision: Decision,
    *,
    audience: str | None,
    binding: str | None,
    ttl: float | None,
) -> Grant:
    body = _issue_body(decision, audience, binding, ttl)
    try:
        return grant_of(remote._send("POST", "/v1/grants", None, json=body))
    except RemoteRefused as exc:
        raise _translated(exc) from exc


async def aissue(
    remote: RemoteDecider,
    decision: Decision,
    *,
    audience: str | None,
    binding: str | None,
    ttl: float | None,
) -> Grant:
    body = _issue_body(decision, audience, binding, ttl)
    try:
        return grant_of(await remote._asend("POST", "/v1/grants", None, json=body))
    except RemoteRefused as exc:
        raise _translated(exc) from exc


def claim(remote: RemoteDecider, token: str) -> GrantClaims:
    try:
        return _claims_of(remote._send("POST", "/v1/grants/claim", None, json={"token": token}))
    except RemoteRefused as exc:
        raise _translated(exc) from exc


async def aclaim(remote: RemoteDecider, token: str) -> GrantClaims:
    body = {"token": token}
    try:
        return _claims_of(await remote._asend("POST", "/v1/grants/claim", None, json=body))
    except RemoteRefused as exc:
        raise _translated(exc) from exc


def jwks(remote: RemoteDecider) -> dict[str, Any]:
    document = remote._send("GET", "/v1/keys/jwks.json", None)
    if not isinstance(document, dict):
        raise ConfigError("the server's JWK set is not a JSON object")
    return document


async def ajwks(remote: RemoteDecider) -> dict[str, Any]:
    document = await remote._asend("GET", "/v1/keys/jwks.json", None)
    if not isinstance(document, dict):
        raise ConfigError("the server's JWK set is not a JSON object")
    return document
