"""Interlock's one error tree.

Policy outcomes are kept apart from configuration errors and internal failures::

    InterlockError
    ├── Blocked                     the guard refused to let an action run
    │   ├── ActionDenied            (also a PermissionError) a deny verdict
    │   ├── ApprovalRequired        (also a PermissionError) a require_approval verdict;
    │   │                           carries approval_id and approval_url
    │   └── ActionUndetermined      no verdict could be reached; carries the cause.
    │                               The action fails closed.
    ├── PolicyError                 (also a ValueError) a policy file or object is invalid;
    │                               carries file, line, rule_id and field of the first
    │                               issue and the full list in ``issues``
    ├── ConfigError                 (also a ValueError) a gateway's configuration (its
    │                               upstreams, options or config file) is invalid
    ├── InternalFailure             something inside Interlock went wrong on the way to a
    │   ├── MappingError            verdict; it never escapes ``check``: it becomes the
    │   ├── EvaluationError         ``cause`` of an undetermined decision
    │   │   └── CostUnknown         a budget covers the call, but neither the call nor
    │   │                           the policy says what it may cost (the stateful
    │   │                           decider turns it into a deny naming the budget)
    │   ├── DecisionTimeout         (also a TimeoutError)
    │   ├── AuditFailure            the decision's record could not be made durable
    │   └── RemoteError             the server was unreachable, failed (5xx), or
    │                               answered something that is not a decision
    ├── ReloadNotConfirmed          a held policy reload could not be confirmed:
    │   ├── NothingHeld             (also a LookupError) none is held (or the file changed)
    │   └── HeldDigestMismatch      (also a ValueError) another version of the file is held
    ├── RemoteRefused               the server refused a commit/release/wait (a 4xx)
    ├── EffectError                 an effect could not be attempted as asked (nothing
    │   │                           was sent); carries ``effect_id`` when one is recorded
    │   ├── EffectInFlight          another attempt with the key is executing now
    │   ├── EffectConflict          (also a ValueError) the key was used for another intent
    │   └── EffectUnresolved        the key's earlier attempt is indeterminate and its
    │                               provider cannot say what became of it (yet)
    ├── GrantError                  (also a ValueError) a grant refused: by a verifier
    │   │                           (provider side) or at its claim; ``code`` names why
    │   ├── GrantInvalid            not a grant of our profile: malformed token, header
    │   │   │                       or claims
    │   │   ├── UnknownKey          signed by a key the verifier does not know (or retired)
    │   │   │   └── KeysUnavailable the verifier could not learn its keys (a JWK set that
    │   │   │                       could not be fetched or read): the provider's outage
    │   │   └── BadSignature        the signature does not verify
    │   ├── GrantExpired            past its expiry (or not yet valid), beyond the skew
    │   ├── WrongAudience           issued for another downstream system
    │   ├── BindingMismatch         the request is not the one the grant was issued for
    │   └── GrantReplayed           its nonce was seen before / it was claimed already
    ├── ReceiptError                a provider's signed receipt of an effect is missing,
    │                               malformed, not signed by the provider's key, or not for
    │                               this request and answer; carries ``status`` and the
    │                               provider's error ``code`` when it answered one
    └── StoreError                  the store refused or failed an operation (raised by
        │                           store and CLI calls; inside a check it is a cause)
        ├── StoreUnavailable        cannot connect, or the database is locked too long
        │   └── StoreTimeout        (also a TimeoutError) no answer before the check's
        │                           deadline (or the store's own bound)
        ├── MigrationError          the schema is newer than this Interlock, or broken
        ├── AuditKeyError           an audit key or checkpoint signing key cannot be
        │                           used (missing, malformed, readable by others)
        ├── ApprovalError           (also a ValueError) approve/deny refused:
        │   ├── ApprovalNotFound    (also a LookupError) no such approval for this tenant
        │   ├── SelfApproval        the requester tried to decide its own request
        │   ├── ApprovalClosed      it is no longer pending (decided, claimed, expired)
        │   └── ReasonRequired      a reason is required to decide it and none was given
        ├── AmountOutOfRange        (also a ValueError) an amount or usage that no
        │                           budget counts: negative, not an integer, > 2**53
        └── ReservationError        (also a ValueError) commit/release refused:
            ├── ReservationNotFound (also a LookupError)
            ├── ReservationNotOwned (also a PermissionError) made by another agent
            └── ReservationClosed   already settled the other way (released vs committed)

``Blocked`` errors carry the ``Decision`` that produced them (``exc.decision``), so
callers can read the reason and the rule ids.

Example::

    try:
        transfer(amount=10_000)
    except ApprovalRequired as exc:
        print("ask a human:", exc.approval_url)
    except ActionDenied as exc:
        print("refused:", exc.decision.reason)
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from interlock.core.decision import Decision

__all__ = [
    "ActionDenied",
    "ActionUndetermined",
    "AmountOutOfRange",
    "ApprovalClosed",
    "ApprovalError",
    "ApprovalNotFound",
    "ApprovalRequired",
    "AuditFailure",
    "AuditKeyError",
    "BadSignature",
    "BindingMismatch",
    "Blocked",
    "ConfigError",
    "CostUnknown",
    "DecisionTimeout",
    "EffectConflict",
    "EffectError",
    "EffectInFlight",
    "EffectUnresolved",
    "EvaluationError",
    "GrantError",
    "GrantExpired",
    "GrantInvalid",
    "GrantReplayed",
    "HeldDigestMismatch",
    "InterlockError",
    "InternalFailure",
    "KeysUnavailable",
    "MappingError",
    "MigrationError",
    "NothingHeld",
    "PolicyError",
    "PolicyIssue",
    "ReasonRequired",
    "ReceiptError",
    "ReloadNotConfirmed",
    "RemoteError",
    "RemoteRefused",
    "ReservationClosed",
    "ReservationError",
    "ReservationNotFound",
    "ReservationNotOwned",
    "SelfApproval",
    "SessionUnavailable",
    "StoreError",
    "StoreTimeout",
    "StoreUnavailable",
    "UnknownKey",
    "WrongAudience",
    "describe",
    "message_of",
]


class InterlockError(Exception):
    """The root of every error Interlock raises on purpose."""


class Blocked(InterlockError):
    """The guard refused to run an action. ``decision`` holds the verdict."""

    def __init__(self, message: str, *, decision: Decision) -> None:
        super().__init__(message)
        self.decision = decision

    @property
    def reason(self) -> str:
        return self.decision.reason

    @property
    def rule_ids(self) -> tuple[str, ...]:
        return self.decision.rule_ids


class ActionDenied(Blocked, PermissionError):
    """A deny verdict: the action did not run."""


class ApprovalRequired(Blocked, PermissionError):
    """A require_approval verdict: the action did not run and waits for a human."""

    def __init__(self, message: str, *, decision: Decision) -> None:
        super().__init__(message, decision=decision)
        approval = decision.approval
        self.approval_id: str | None = approval.id if approval else None
        self.approval_url: str | None = approval.url if approval else None


class ActionUndetermined(Blocked):
    """No verdict could be reached, so the action failed closed. ``cause`` says why."""

    def __init__(self, message: str, *, decision: Decision) -> None:
        super().__init__(message, decision=decision)
        self.cause: BaseException | None = decision.cause


@dataclass(frozen=True, slots=True)
class PolicyIssue:
    """One thing wrong with a policy, located as precisely as the source allows."""

    message: str
    file: str | None = None
    line: int | None = None
    rule_id: str | None = None
    field: str | None = None

    def __str__(self) -> str:
        where = self.file or "<policy>"
        if self.line is not None:
            where = f"{where}:{self.line}"
        parts = [where]
        if self.rule_id is not None:
            parts.append(f"rule {self.rule_id!r}")
        if self.field is not None:
            parts.append(f"field {self.field!r}")
        return f"{': '.join(parts)}: {self.message}"


class ReloadNotConfirmed(InterlockError):
    """A held policy reload could not be confirmed."""


class NothingHeld(ReloadNotConfirmed, LookupError):
    """No reload is held (none was, or the file changed since)."""


class HeldDigestMismatch(ReloadNotConfirmed, ValueError):
    """The held reload is of another version of the file than the one confirmed."""


class ConfigError(InterlockError, ValueError):
    """A gateway's configuration is invalid; the message names the file and field."""


class PolicyError(InterlockError, ValueError):
    """A policy is invalid. Nothing of it was loaded.

    ``file``, ``line``, ``rule_id`` and ``field`` locate the first issue; ``issues``
    lists all of them.
    """

    def __init__(self, issues: list[PolicyIssue] | tuple[PolicyIssue, ...]) -> None:
        if not issues:
            issues = (PolicyIssue("invalid policy"),)
        self.issues: tuple[PolicyIssue, ...] = tuple(issues)
        first = self.issues[0]
        self.file = first.file
        self.line = first.line
        self.rule_id = first.rule_id
        self.field = first.field
        lines = [str(issue) for issue in self.issues]
        summary = (
            lines[0] if len(lines) == 1 else f"{len(lines)} problems:\n  " + "\n  ".join(lines)
        )
        super().__init__(summary)


class InternalFailure(InterlockError):
    """A failure on the way to a verdict. Surfaces only as an undetermined cause."""


class MappingError(InternalFailure):
    """A mapper raised, or returned something that is not an Action, a list or None."""


class EvaluationError(InternalFailure):
    """A rule could not be evaluated (a CEL runtime error, a type mismatch, a limit)."""

    def __init__(self, message: str, *, rule_id: str | None = None) -> None:
        super().__init__(message)
        self.rule_id = rule_id


class CostUnknown(EvaluationError):
    """A budget covers the call, but neither the call (``max_tokens``, the prompt,
    ``est_cost``) nor the policy (``default_estimate``, ``pricing.default_max_tokens``)
    says what it may cost. ``budget_id`` names the budget."""

    def __init__(self, message: str, *, budget_id: str) -> None:
        super().__init__(message)
        self.budget_id = budget_id


class DecisionTimeout(InternalFailure, TimeoutError):
    """No verdict arrived before the deadline."""


class AuditFailure(InternalFailure):
    """The decision's record could not be made durable, so the decision cannot stand."""


class StoreError(InterlockError):
    """The store refused or failed an operation."""


class StoreUnavailable(StoreError):
    """The database cannot be reached, or stayed locked past the timeout."""


class StoreTimeout(StoreUnavailable, TimeoutError):
    """The store did not answer before the deadline of the check waiting on it (or,
    outside a check, before the store's own bound): a connection, a lock or the
    server's reply took too long."""


class SessionUnavailable(StoreUnavailable):
    """A session's history could not be read or appended to: a rule that reads the
    session cannot be decided (the check is undetermined, never allowed)."""


class MigrationError(StoreError):
    """The database schema is newer than this Interlock knows, or a migration failed."""


class AuditKeyError(StoreError):
    """An audit key or a checkpoint signing key cannot be used: missing where it must
    be given, malformed, or in a file that others can read or replace. The message
    names the file and how to fix it."""


class ApprovalError(StoreError, ValueError):
    """Approving or denying was refused. ``approval_id`` names the approval."""

    def __init__(self, message: str, *, approval_id: str) -> None:
        super().__init__(message)
        self.approval_id = approval_id


class ApprovalNotFound(ApprovalError, LookupError):
    """No approval with that id (for that tenant)."""


class SelfApproval(ApprovalError):
    """The identity that requested an approval tried to decide it."""


class ApprovalClosed(ApprovalError):
    """The approval is no longer pending: decided, claimed or expired."""


class ReasonRequired(ApprovalError):
    """Deciding an approval needs a reason (the server's ``approval_reason``
    setting), and the one given is empty or only blank space. Nothing was decided."""


class AmountOutOfRange(StoreError, ValueError):
    """An amount, cap or usage no budget counts: negative, not an integer, or larger
    than 2**53 units. Nothing was changed."""


class ReservationError(StoreError, ValueError):
    """Committing or releasing a reservation was refused."""

    def __init__(self, message: str, *, reservation_id: str) -> None:
        super().__init__(message)
        self.reservation_id = reservation_id


class ReservationNotFound(ReservationError, LookupError):
    """No reservation with that id."""


class ReservationNotOwned(ReservationError, PermissionError):
    """The reservation was made by another agent: only that agent (or an admin key)
    may commit or release it."""


class ReservationClosed(ReservationError):
    """The reservation was already settled the other way (released, or committed)."""


class RemoteError(InternalFailure):
    """The Interlock server could not be reached, failed, or answered something that
    is not a decision. A check that meets it is undetermined (fails closed).
    ``status`` is the HTTP status when there was one."""

    def __init__(self, message: str, *, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status


class GrantError(InterlockError, ValueError):
    """A grant refused, by a verifier or at its claim. ``code`` is a stable, machine-
    readable name of the reason (what a verifier answers with)."""

    code: str = "grant_error"


class GrantInvalid(GrantError):
    """Not a grant of Interlock's profile: a malformed token, header or claims."""

    code = "grant_invalid"


class UnknownKey(GrantInvalid):
    """Signed by a key the verifier does not know, or one retired."""

    code = "unknown_key"


class KeysUnavailable(UnknownKey):
    """The verifier could not learn its keys: the JWK set could not be fetched or read.
    The grant may be good; the provider cannot tell (it answers 503, not 401)."""

    code = "keys_unavailable"


class BadSignature(GrantInvalid):
    """The signature does not verify under the key the token names."""

    code = "bad_signature"


class GrantExpired(GrantError):
    """Past its expiry, or not yet valid, beyond the allowed clock skew."""

    code = "grant_expired"


class WrongAudience(GrantError):
    """Issued for another downstream system."""

    code = "wrong_audience"


class BindingMismatch(GrantError):
    """The request that arrived is not the one the grant was issued for."""

    code = "binding_mismatch"


class GrantReplayed(GrantError):
    """Its nonce was seen before (provider side), or it was claimed already."""

    code = "grant_replayed"


class EffectError(InterlockError):
    """An effect could not be attempted as asked; nothing was sent. ``effect_id``
    names the recorded attempt it met, when there is one."""

    def __init__(self, message: str, *, effect_id: str | None = None) -> None:
        super().__init__(message)
        self.effect_id = effect_id


class EffectInFlight(EffectError):
    """Another attempt with this idempotency key is executing now."""


class EffectConflict(EffectError, ValueError):
    """The idempotency key was used before for another intent (another action, other
    arguments): a key names one effect."""


class EffectUnresolved(EffectError):
    """The key's earlier attempt is indeterminate, and its provider cannot say (yet)
    whether it happened: it is not attempted again until it is reconciled."""


class ReceiptError(InterlockError):
    """A provider's receipt of an effect does not check: missing, malformed, not signed
    by the provider's key, or for another grant, request, status or body. ``status`` is
    the provider's HTTP status when there was an answer; ``provider_code`` the error
    code it answered with (``grant_replayed``, ...) when it refused the request."""

    code = "receipt_invalid"

    def __init__(
        self, message: str, *, status: int | None = None, provider_code: str | None = None
    ) -> None:
        super().__init__(message)
        self.status = status
        self.provider_code = provider_code


class RemoteRefused(InterlockError):
    """The Interlock server refused a request outside a check (committing, releasing,
    waiting): a 4xx, with the server's error ``code`` and ``field``."""

    def __init__(
        self, message: str, *, status: int, code: str | None = None, field: str | None = None
    ) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.field = field


def message_of(exc: BaseException) -> str:
    """``str(exc)``, even for an exception whose ``__str__`` raises."""
    try:
        return str(exc)
    except Exception:
        return f"<unprintable {type(exc).__name__}>"


def describe(exc: BaseException) -> str:
    """``Type: message`` for any exception, even one whose ``__str__`` raises."""
    text = message_of(exc)
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__
