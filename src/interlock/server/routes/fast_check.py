"""The check endpoints' hot path: ``POST /v1/check`` and ``/v1/check/batch`` served by
plain Starlette routes placed before FastAPI's.

A check is the one request every agent makes on every tool call; FastAPI's dependency
solving and its second pass over the response model cost more than the decision
itself. These routes do the same work — the same key (401/403), the same pydantic
models (422 naming the field), the same trusted context, the same answer — in one
pass. The FastAPI routes in :mod:`checks` stay registered behind them: they write the
OpenAPI document, and the schema tests hold both to it.
"""

from __future__ import annotations

import json
import time

from fastapi.concurrency import run_in_threadpool
from fastapi.exceptions import RequestValidationError
from pydantic import ValidationError
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from interlock.server.api_models import ActionIn, BatchIn
from interlock.server.auth import ROLE_PERMISSIONS, Permission
from interlock.server.errors import ApiError
from interlock.server.keys import ApiKey
from interlock.server.routes.checks import _answer, to_action
from interlock.server.state import state_of

__all__ = ["fast_routes"]


async def _key(request: Request) -> ApiKey:
    header = request.headers.get("authorization")
    scheme, _, token = (header or "").partition(" ")
    if not header or scheme.lower() != "bearer" or not token.strip():
        raise ApiError(401, "unauthorized", "an API key is required: Authorization: Bearer <key>")
    keys = state_of(request).keys
    token = token.strip()
    hit, key = keys.authenticate_cached(token)
    if not hit:
        key = await run_in_threadpool(keys.authenticate, token)
    if key is None:
        raise ApiError(
            401, "unauthorized", "the API key is not valid (unknown, malformed or revoked)"
        )
    if Permission.CHECK not in ROLE_PERMISSIONS[key.role]:
        raise ApiError(
            403, "forbidden", f"a key with role {key.role.value!r} may not {Permission.CHECK.value}"
        )
    return key


def _invalid(exc: ValidationError) -> RequestValidationError:
    return RequestValidationError(
        [{**error, "loc": ("body", *error.get("loc", ()))} for error in exc.errors()]
    )


async def _json(request: Request) -> object:
    """The body parsed as FastAPI parses it (Python's JSON parser: the models' own
    validators then refuse NaN and lone surrogates, naming the field)."""
    raw = await request.body()
    try:
        return json.loads(raw)
    except ValueError as exc:
        problem = {"type": "json_invalid", "loc": ("body", 0), "msg": f"JSON decode error: {exc}"}
        raise RequestValidationError([problem]) from None
    except RecursionError:  # the body limit's depth check comes first; this is a backstop
        raise ApiError(400, "too_deep", "the request's JSON is nested too deep") from None


async def _check(request: Request) -> Response:
    request.scope["route"] = CHECK  # for the request metrics, as FastAPI's routes do
    key = await _key(request)
    try:
        body = ActionIn.model_validate(await _json(request))
    except ValidationError as exc:
        raise _invalid(exc) from None
    state = state_of(request)
    started = time.perf_counter()
    decision = await state.guard.acheck(to_action(body, key))
    return _answer(state, decision, started)


async def _check_batch(request: Request) -> Response:
    request.scope["route"] = CHECK_BATCH
    key = await _key(request)
    try:
        body = BatchIn.model_validate(await _json(request))
    except ValidationError as exc:
        raise _invalid(exc) from None
    state = state_of(request)
    started = time.perf_counter()
    decision = await state.guard.acheck_batch([to_action(item, key) for item in body.actions])
    assert decision is not None  # the list is never empty
    return _answer(state, decision, started)


CHECK = Route("/v1/check", _check, methods=["POST"], include_in_schema=False)
CHECK_BATCH = Route("/v1/check/batch", _check_batch, methods=["POST"], include_in_schema=False)


def fast_routes() -> list[Route]:
    return [CHECK, CHECK_BATCH]
