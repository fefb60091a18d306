"""What the routers share: the error answers each route documents, and path types."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import Path

from interlock.server.api_models import ErrorOut

__all__ = ["ApprovalId", "errors"]

_DESCRIPTIONS = {
    401: "No API key, or one that is malformed, unknown or revoked.",
    403: "The key's role may not do this (or it would decide its own request).",
    404: "No such record in the key's tenant.",
    409: "The record is no longer in a state that allows this.",
    422: "The request is invalid; `field` names what is wrong.",
}

ApprovalId = Annotated[
    str, Path(min_length=1, max_length=100, pattern=r"^[\w-]+$", description="apr_...")
]


def errors(*statuses: int, inputs: bool = True) -> dict[int | str, dict[str, Any]]:
    """The ``responses=`` of a route that needs a key: 401, 422 when it takes any
    input, and ``statuses``."""
    wanted = {401, *statuses} | ({422} if inputs else set())
    return {
        status: {"model": ErrorOut, "description": _DESCRIPTIONS[status]}
        for status in sorted(wanted)
    }
