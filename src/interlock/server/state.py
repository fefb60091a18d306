"""What every request handler shares: the guard, the key store and the metrics of one
app. Held on ``app.state.interlock``; the policy is read from the guard on every
request, so a policy the guard is given later (a reload) serves at once."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from starlette.requests import HTTPConnection

if TYPE_CHECKING:
    from interlock.guard import Guard
    from interlock.policy.reload import PolicyWatcher
    from interlock.server.keys import KeyStore
    from interlock.server.metrics import Metrics
    from interlock.store.sql import SqlStore

__all__ = ["ServerState", "state_of"]


@dataclass(frozen=True, slots=True)
class ServerState:
    guard: Guard
    store: SqlStore
    keys: KeyStore
    metrics: Metrics
    #: The longest an approval long-poll may wait, in seconds.
    max_wait: float
    #: Reloads the policy file into the guard (``interlock serve``), if any.
    watcher: PolicyWatcher | None = None
    #: Whether approving or denying needs a reason (``422`` without one).
    approval_reason_required: bool = True


def state_of(connection: HTTPConnection) -> ServerState:
    state: ServerState = connection.app.state.interlock
    return state
