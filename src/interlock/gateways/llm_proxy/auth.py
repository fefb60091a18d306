"""The client's Interlock API key: ``Authorization: Bearer <key>`` (the OpenAI SDK)
or ``x-api-key: <key>`` (the Anthropic SDK). Tenant and agent come from the key,
never from the request. Only ``agent`` keys may call models through the proxy."""

from __future__ import annotations

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request

from interlock.server.keys import ApiKey, KeyStore, Role

from .refusals import Refusal

__all__ = ["authenticate"]


def _token(request: Request) -> str | Refusal:
    bearer = request.headers.get("authorization", "")
    scheme, _, value = bearer.partition(" ")
    from_bearer = value.strip() if scheme.lower() == "bearer" else ""
    from_header = request.headers.get("x-api-key", "").strip()
    if from_bearer and from_header and from_bearer != from_header:
        return Refusal(401, "unauthorized", "two different API keys: send one")
    token = from_bearer or from_header
    if not token:
        return Refusal(
            401,
            "unauthorized",
            "an Interlock API key is required (Authorization: Bearer <key> or x-api-key)",
        )
    return token


async def authenticate(request: Request, keys: KeyStore) -> ApiKey | Refusal:
    """The live agent key the request carries, or the refusal to answer."""
    token = _token(request)
    if isinstance(token, Refusal):
        return token
    hit, key = keys.authenticate_cached(token)
    if not hit:
        key = await run_in_threadpool(keys.authenticate, token)
    if key is None:
        return Refusal(
            401, "unauthorized", "the API key is not valid (unknown, malformed or revoked)"
        )
    if key.role is not Role.AGENT:
        return Refusal(403, "forbidden", f"a key with role {key.role.value!r} may not call models")
    return key
