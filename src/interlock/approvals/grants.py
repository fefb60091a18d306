"""Grants: an allow turned into a signed, expiring, single-use permission for one intent.

A guard with a store issues a grant for an ``allow`` it decided (or for the claimed
approval that made one): an Ed25519-signed token (:mod:`interlock.verify.tokens`)
naming the tenant, the agent, the intent hash of the exact call, the audience (the
downstream system that will act on it), optionally the digest of the exact request
(``binding``), and an expiry. It is stored (status ``issued``) and audited; claiming
it is one conditional update in the store, so it is claimed exactly once however many
processes try (:mod:`interlock.store.sql_grants`). The downstream system can check it
by itself with :mod:`interlock.verify` and the guard's JWK set.

What may be granted, and what is refused with :class:`~interlock.errors.GrantError`:

| the decision | grant |
| --- | --- |
| ``allow``, decided by this guard, recently | issued, once per decision |
| ``allow`` from a claimed approval | issued, naming the approval |
| ``deny`` / ``require_approval`` / ``undetermined`` | refused |
| ``allow`` only because of ``fail_mode="open"`` | refused: no authority allowed it |
| ``allow`` only because the policy is in shadow mode | refused |
| a decision this guard did not make (another guard's, one built by hand) | refused |
| a decision already granted, or older than the grant window | refused |

Example::

    from interlock import Action, Guard

    guard = Guard({"version": 1, "default": "allow"}, store="sqlite:///:memory:")
    decision = guard.check(Action.tool("refund", {"order": 7}))
    grant = guard.issue_grant(decision, audience="shop")
    assert guard.claim_grant(grant.token).grant_id == grant.claims.grant_id
"""

from __future__ import annotations

import math
import secrets
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final

from interlock.core.decision import Decision, Verdict
from interlock.core.intent import intent_hash
from interlock.errors import ConfigError, GrantError, GrantExpired, GrantInvalid
from interlock.store.grant_keys import MAX_GRANT_TTL
from interlock.verify.tokens import GRANT_TYPE, GrantClaims, read_header, sign_grant, verify_jws

if TYPE_CHECKING:
    from interlock.core.action import Action
    from interlock.store.sql import SqlStore

__all__ = [
    "DEFAULT_GRANT_TTL",
    "GRANT_WINDOW",
    "ISSUER",
    "Grant",
    "GrantableDecisions",
    "claim_grant",
    "issue_grant",
]

#: A grant's lifetime unless asked otherwise (seconds): long enough to reach the
#: downstream system, short enough that a leaked token is soon worthless.
DEFAULT_GRANT_TTL: Final = 60.0
#: How long after its decision an allow may still be granted (seconds).
GRANT_WINDOW: Final = 300.0
#: The ``iss`` of every grant.
ISSUER: Final = "interlock"
#: At most this many allowed decisions are remembered per guard for granting.
_REMEMBERED: Final = 10_000


@dataclass(frozen=True, slots=True)
class Grant:
    """An issued grant: the token to send, what it says, and the key that signed it.

    ``token`` is the compact JWS (:func:`interlock.verify.tokens.sign_grant`) the
    downstream system verifies; ``claims`` its content; ``kid`` the signing key's id.
    """

    token: str
    claims: GrantClaims
    kid: str

    def __repr__(self) -> str:  # the token is a bearer credential: not in logs
        return f"Grant(grant_id={self.claims.grant_id!r}, audience={self.claims.audience!r})"


@dataclass(frozen=True, slots=True)
class _Remembered:
    decision: Decision
    action: Action
    at: float


class GrantableDecisions:
    """The allowed decisions one guard made recently, with their actions: the only
    decisions it will grant. Bounded (the oldest are forgotten) and thread-safe."""

    def __init__(self, *, size: int = _REMEMBERED, window: float = GRANT_WINDOW) -> None:
        self._size = size
        self._window = window
        self._lock = threading.Lock()
        self._entries: OrderedDict[str, _Remembered] = OrderedDict()

    def remember(self, decision: Decision, action: Action) -> None:
        entry = _Remembered(decision, action, time.monotonic())
        with self._lock:
            entries = self._entries
            entries[decision.decision_id] = entry
            if len(entries) > self._size:
                entries.popitem(last=False)

    def find(self, decision: Decision) -> Action:
        """The action of ``decision``, if it may be granted; else :class:`GrantError`
        saying why."""
        _check_grantable(decision)
        with self._lock:
            entry = self._entries.get(decision.decision_id)
        if entry is None or entry.decision != decision:
            raise GrantError(
                f"decision {decision.decision_id} was not made by this guard (or was "
                "forgotten): only an allow this guard decided can be granted"
            )
        if time.monotonic() - entry.at > self._window:
            raise GrantError(
                f"decision {decision.decision_id} is older than {self._window:g} s: "
                "check the call again for a grant"
            )
        return entry.action

    def decision(self, decision_id: str) -> Decision | None:
        """The remembered decision of that id (to grant one named over the API)."""
        with self._lock:
            entry = self._entries.get(decision_id)
        return None if entry is None else entry.decision

    def forget(self, decision: Decision) -> None:
        with self._lock:
            self._entries.pop(decision.decision_id, None)


def _check_grantable(decision: Decision) -> None:
    if not isinstance(decision, Decision):
        raise GrantError(f"a grant is issued for a Decision, not a {type(decision).__name__}")
    if decision.verdict is not Verdict.ALLOW:
        raise GrantError(
            f"decision {decision.decision_id} is {decision.verdict.value}, not allow: "
            "only an allowed call is granted"
        )
    if decision.fail_open:
        raise GrantError(
            f"decision {decision.decision_id} allowed the call only because of "
            "fail_mode='open' (no verdict was reached): it is not granted"
        )
    shadow = decision.shadow
    if shadow is not None and shadow.verdict is not Verdict.ALLOW:
        raise GrantError(
            f"decision {decision.decision_id} allowed the call only because its policy "
            f"(or rule) is in shadow mode; enforced, it would be {shadow.verdict.value}: "
            "it is not granted"
        )


def _lifetime(ttl: float | None) -> int:
    seconds = DEFAULT_GRANT_TTL if ttl is None else ttl
    if not isinstance(seconds, (int, float)) or isinstance(seconds, bool) or math.isnan(seconds):
        raise ConfigError(f"a grant's ttl is a number of seconds, not {ttl!r}")
    if not 1 <= seconds <= MAX_GRANT_TTL:
        raise ConfigError(
            f"a grant's ttl must be between 1 and {MAX_GRANT_TTL} seconds, not {seconds!r}"
        )
    return math.ceil(seconds)


def issue_grant(
    store: SqlStore,
    action: Action,
    decision: Decision,
    *,
    audience: str | None = None,
    binding: str | None = None,
    ttl: float | None = None,
) -> Grant:
    """Sign, store and audit a grant for the allowed ``action`` (``decision`` is its
    verdict, already checked grantable). ``audience`` defaults to the action's
    downstream system; none at all is a :class:`~interlock.errors.ConfigError`."""
    _check_grantable(decision)
    context = action.context
    if audience is None and context.downstream is not None:
        audience = context.downstream.system
    if not isinstance(audience, str) or not audience:
        raise ConfigError(
            f"no audience for a grant of {action.name!r}: declare the tool's downstream "
            "system (the policy's tools.<name>.intent.system, or Context.downstream), or "
            "pass issue_grant(..., audience='<system>')"
        )
    lifetime = _lifetime(ttl)
    ring = store.grant_keys.ring()
    key = ring.active
    now_us = store.clock()
    issued_at = now_us // 1_000_000
    approval = decision.approval
    claims = GrantClaims(
        grant_id="grt_" + secrets.token_hex(16),
        issuer=ISSUER,
        audience=audience,
        tenant=context.tenant,
        agent=context.agent,
        intent_hash=intent_hash(action),
        binding=binding,
        issued_at=issued_at,
        expires_at=issued_at + lifetime,
    )
    token = sign_grant(claims, key.private, kid=key.kid)  # checks every claim's form
    from interlock.store.sql_grants import GrantRecord

    record = GrantRecord(
        id=claims.grant_id,
        tenant=claims.tenant,
        intent_hash=claims.intent_hash,
        audience=audience,
        agent=claims.agent,
        kid=key.kid,
        binding=binding,
        decision_id=decision.decision_id,
        approval_id=approval.id if approval is not None else None,
        issued_us=now_us,
        expires_us=claims.expires_at * 1_000_000,
        status="issued",
        claimed_us=None,
    )
    if not store.insert_grant(record):
        raise GrantError(f"decision {decision.decision_id} was granted already (one grant each)")
    return Grant(token=token, claims=claims, kid=key.kid)


def claim_grant(store: SqlStore, grant: Grant | str, *, tenant: str | None = None) -> GrantClaims:
    """Claim a grant, once: its claims, or :class:`~interlock.errors.GrantReplayed`
    (claimed before), :class:`~interlock.errors.GrantExpired` (past its expiry), or
    :class:`~interlock.errors.GrantInvalid` (anything else: a token we did not sign, a
    key retired beyond its grants' lifetime, a grant the store does not hold, or —
    given ``tenant`` — one issued to another tenant, which is then left unclaimed)."""
    token = grant.token if isinstance(grant, Grant) else grant
    if not isinstance(token, str):
        raise GrantInvalid(f"a grant is a Grant or its token, not a {type(grant).__name__}")
    read_header(token, typ=GRANT_TYPE)  # the cheap refusals before any key is read
    now_us = store.clock()
    ring = store.grant_keys.ring()
    kid, payload = verify_jws(token, ring.verifying(now_us / 1_000_000), typ=GRANT_TYPE)
    claims = GrantClaims.from_payload(payload)
    if claims.issuer != ISSUER:
        raise GrantInvalid(f"the grant's issuer {claims.issuer!r} is not {ISSUER!r}")
    if tenant is not None and claims.tenant != tenant:
        raise GrantInvalid(f"grant {claims.grant_id!r} was not issued to tenant {tenant!r}")
    if claims.expires_at * 1_000_000 <= now_us:
        raise GrantExpired(f"grant {claims.grant_id!r} expired before it was claimed")
    store.claim_grant_record(
        claims.grant_id,
        tenant=claims.tenant,
        intent_hash=claims.intent_hash,
        audience=claims.audience,
        kid=kid,
    )
    return claims
