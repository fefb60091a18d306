"""Every error answer in one shape, ``{"error": {"code", "message", "field"}}``, with
the status that says what went wrong: bad input is a 4xx, never a 5xx.

| raised | status | code |
| --- | --- | --- |
| invalid body, query or path | 422 | ``invalid_request`` (``field`` names it) |
| a body over the size limit | 413 | ``too_large`` (see :mod:`~interlock.server.body_limit`) |
| JSON nested deeper than the depth limit | 400 | ``too_deep`` (ditto) |
| :class:`ApiError` | its own | its own |
| ``ApprovalNotFound``, ``ReservationNotFound`` | 404 | ``not_found`` |
| ``SelfApproval`` | 403 | ``self_approval`` |
| ``ReservationNotOwned`` | 403 | ``forbidden`` |
| ``AmountOutOfRange`` | 422 | ``invalid_request`` |
| ``ApprovalClosed``, ``ReservationClosed`` | 409 | ``conflict`` |
| ``StoreUnavailable`` | 503 | ``unavailable`` |
| an HTTP error of the framework (404 route, 405, 413...) | its own | by status |
| anything else | 500 | ``internal`` (logged; the message says nothing more) |
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException

from interlock.errors import (
    AmountOutOfRange,
    ApprovalClosed,
    ApprovalNotFound,
    ReservationClosed,
    ReservationNotFound,
    ReservationNotOwned,
    SelfApproval,
    StoreUnavailable,
    message_of,
)
from interlock.server.errors import ApiError

__all__ = ["error_response", "exception_response", "install_error_handlers"]

log = logging.getLogger("interlock.server")

_CODES = {
    400: "bad_request",
    401: "unauthorized",
    403: "forbidden",
    404: "not_found",
    405: "method_not_allowed",
    409: "conflict",
    413: "too_large",
    415: "unsupported_media_type",
    422: "invalid_request",
    503: "unavailable",
}
_LOCATIONS = frozenset({"body", "query", "path", "header", "cookie"})
_TRUSTED = frozenset({"tenant", "agent"})
_MAPPED: tuple[tuple[type[Exception], int, str], ...] = (
    (ApprovalNotFound, 404, "not_found"),
    (ReservationNotFound, 404, "not_found"),
    (SelfApproval, 403, "self_approval"),
    (ReservationNotOwned, 403, "forbidden"),
    (AmountOutOfRange, 422, "invalid_request"),
    (ApprovalClosed, 409, "conflict"),
    (ReservationClosed, 409, "conflict"),
    (StoreUnavailable, 503, "unavailable"),
)


def error_response(
    status: int,
    code: str,
    message: str,
    *,
    field: str | None = None,
    headers: Mapping[str, str] | None = None,
) -> JSONResponse:
    body = {"error": {"code": code, "message": message, "field": field}}
    return JSONResponse(body, status_code=status, headers=headers)


def install_error_handlers(app: FastAPI) -> None:
    app.add_exception_handler(ApiError, _api_error)
    app.add_exception_handler(RequestValidationError, _invalid)
    app.add_exception_handler(HTTPException, _http_error)
    for error, _, _ in _MAPPED:
        app.add_exception_handler(error, _mapped)
    app.add_exception_handler(Exception, _internal)


async def exception_response(request: Request, exc: Exception) -> JSONResponse:
    """The answer the app's handlers give ``exc`` raised by a route: for the check
    entry (:mod:`~interlock.server.check_entry`), which runs ahead of them."""
    if isinstance(exc, ApiError):
        return await _api_error(request, exc)
    if isinstance(exc, HTTPException):
        return await _http_error(request, exc)
    return await _mapped(request, exc)


async def _api_error(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, ApiError)
    headers = {"WWW-Authenticate": "Bearer"} if exc.status == 401 else None
    return error_response(exc.status, exc.code, exc.message, field=exc.field, headers=headers)


async def _invalid(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, RequestValidationError)
    problems = exc.errors()
    if not problems:
        return error_response(422, "invalid_request", "the request is invalid")
    first = problems[0]
    field = _field(first)
    message = str(first.get("msg", "invalid"))
    location = tuple(first.get("loc", ()))
    if first.get("type") == "extra_forbidden" and location and location[-1] in _TRUSTED:
        message = f"the {location[-1]} comes from the API key; a request cannot state it"
    more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
    return error_response(422, "invalid_request", f"{field}: {message}{more}", field=field)


def _field(problem: Mapping[str, Any]) -> str:
    location: Sequence[Any] = tuple(problem.get("loc", ()))
    if problem.get("type") == "json_invalid":
        return "body"
    if len(location) > 1 and location[0] in _LOCATIONS:
        location = location[1:]
    return ".".join(str(part) for part in location) or "body"


async def _http_error(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, HTTPException)
    code = _CODES.get(exc.status_code, "error")
    message = exc.detail if isinstance(exc.detail, str) else code.replace("_", " ")
    return error_response(exc.status_code, code, message, headers=exc.headers)


async def _mapped(request: Request, exc: Exception) -> JSONResponse:
    for error, status, code in _MAPPED:
        if isinstance(exc, error):
            return error_response(status, code, message_of(exc))
    return await _internal(request, exc)


async def _internal(request: Request, exc: Exception) -> JSONResponse:
    log.error("interlock: %s %s failed", request.method, request.url.path, exc_info=exc)
    return error_response(500, "internal", "the server failed; see its log")
