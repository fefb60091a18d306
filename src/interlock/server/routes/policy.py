"""The policy file the server reloads: confirming a reload that was held because it
removes more of the rules than the server's ``--reload-max-removed`` (see
:mod:`interlock.policy.reload`). Admin keys only."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, Request

from interlock.errors import message_of
from interlock.policy.reload import NothingHeld, ReloadNotConfirmed
from interlock.server.api_models import ConfirmReloadIn, PolicyReloadOut
from interlock.server.auth import Permission, require
from interlock.server.errors import ApiError
from interlock.server.keys import ApiKey
from interlock.server.routes.common import errors
from interlock.server.state import state_of

__all__ = ["router"]

router = APIRouter(prefix="/v1/policy", tags=["policy"])

AdminKey = Annotated[ApiKey, Depends(require(Permission.POLICY_ADMIN))]


@router.post("/reload/confirm", response_model=PolicyReloadOut, responses=errors(403, 404, 409))
def confirm_reload(body: ConfirmReloadIn, request: Request, key: AdminKey) -> PolicyReloadOut:
    """Apply the held reload of the policy file whose digest is ``sha256`` (as
    ``/v1/ready`` shows it in ``policy_reload_held``). ``409`` when no reload is held,
    or the held one is another version of the file; ``404`` when this server reloads
    no policy file."""
    state = state_of(request)
    watcher = state.watcher
    if watcher is None:
        raise ApiError(404, "not_found", "this server does not reload a policy file")
    try:
        watcher.confirm(body.sha256)
    except NothingHeld as exc:
        raise ApiError(409, "conflict", message_of(exc)) from None
    except ReloadNotConfirmed as exc:
        raise ApiError(409, "conflict", message_of(exc), field="sha256") from None
    policy = state.guard.policy
    status = watcher.status
    return PolicyReloadOut(
        serving_sha256=status.serving_sha256 or "",
        rules=0 if policy is None else len(policy.rules),
    )
