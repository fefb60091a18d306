"""A signed webhook for each new approval, so that a chat channel or an on-call tool
hears about a request the moment an agent makes it, and again when a human decides.

:class:`WebhookDispatcher` polls the store for notices due, leases a few (atomically:
replicas on one database never take the same one), and POSTs each as JSON, signed
with HMAC-SHA256 of a shared secret. Two events are sent:

- ``approval.requested``: a new approval, while it is pending. Its body is
  :func:`approval_event`: the approval as the store keeps it, and ``url``, where a
  human decides it::

    X-Interlock-Event: approval.requested
    X-Interlock-Delivery: apr_...                    # the approval id: deduplicate on it
    X-Interlock-Signature: t=1767225600,v1=5f1c...   # HMAC(secret, f"{t}." + body)

- ``approval.decided``: a human approved or denied it, so that a chat message posted
  for the request can be updated. Sent only for an approval whose request was
  delivered (an approval decided before that gets neither), for up to a day after
  the decision. The body is the same, its ``type`` ``approval.decided`` and its
  approval also carrying ``decided_by``, ``decision_reason`` and ``decided_us``
  (``status``: approved, denied, claimed, or expired after approval)::

    X-Interlock-Event: approval.decided
    X-Interlock-Delivery: apr_....decided            # the approval id + ".decided"

A 2xx answer marks the notice delivered. Anything else — another status, a timeout,
a refused connection — is tried again after 1 s, 2 s, 4 s … (at most 5 min): a
request for as long as the approval is pending (a decided or expired one is never
sent), a decision for a day after it was taken. A dispatcher that dies mid-delivery
leaves its lease to lapse, and another delivers: at least once, so a receiver
deduplicates on the delivery id. Receivers check the signature with
:func:`verify_signature`, which needs nothing but the standard library::

    from interlock.approvals.webhook import verify_signature

    if not verify_signature(secret, headers.get("X-Interlock-Signature"), body):
        return 401

The dispatcher needs httpx (``pip install 'interlock[server]'``); signing and
verifying do not. The secret is never logged, nor the URL's path and query (chat
services put tokens there): logs name the URL's origin only.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import logging
import os
import threading
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Final
from urllib.parse import urlsplit

from interlock.core.redaction import redact
from interlock.errors import describe
from interlock.store.notifications import (
    DECIDED,
    REQUESTED,
    NotificationClaim,
    NotificationEvent,
    claim_due,
    has_due,
    mark_failed,
    mark_notified,
    release,
)

if TYPE_CHECKING:
    import httpx

    from interlock.store.records import ApprovalRecord
    from interlock.store.sql import SqlStore

__all__ = [
    "DECIDED_EVENT",
    "EVENT",
    "MAX_BACKOFF",
    "SECRET_ENV",
    "WebhookDispatcher",
    "approval_event",
    "encode_event",
    "retry_delay",
    "sign",
    "verify_signature",
    "webhook_secret",
]

log = logging.getLogger("interlock.webhook")

#: The event type of a new approval (``type`` in the body, ``X-Interlock-Event``).
EVENT: Final = REQUESTED
#: The event type of a human's decision on an approval whose request was delivered.
DECIDED_EVENT: Final = DECIDED
#: The environment variable holding the signing secret.
SECRET_ENV: Final = "INTERLOCK_WEBHOOK_SECRET"
#: The longest wait between two tries, in seconds.
MAX_BACKOFF: Final = 300.0
#: How far a signature's timestamp may be from the receiver's clock, in seconds.
DEFAULT_TOLERANCE: Final = 300

# -- signing -------------------------------------------------------------------------


def sign(secret: str | bytes, body: bytes, timestamp: int) -> str:
    """The ``X-Interlock-Signature`` value for ``body`` sent at ``timestamp`` (Unix
    seconds): ``t=<timestamp>,v1=<hex HMAC-SHA256(secret, f"{timestamp}." + body)>``.

    Example::

        >>> sign("s3cret", b'{"id":"apr_1"}', 1767225600)[:13]
        't=1767225600,'
    """
    return f"t={timestamp},v1={_mac(secret, body, timestamp)}"


def verify_signature(
    secret: str | bytes,
    header: str | None,
    body: bytes,
    *,
    tolerance: float = DEFAULT_TOLERANCE,
    now: float | None = None,
) -> bool:
    """Whether ``header`` (the ``X-Interlock-Signature`` value) signs ``body`` with
    ``secret`` at a time within ``tolerance`` seconds of ``now`` (default: the clock).

    False for a missing or malformed header, another secret, a changed body, or a
    stale (or far future) timestamp — a replayed request is refused once it is older
    than ``tolerance``. Compares in constant time. Pass the body exactly as received:
    the signature covers its bytes, not its parsed JSON.
    """
    parsed = _parse_signature(header)
    if parsed is None:
        return False
    timestamp, candidates = parsed
    moment = time.time() if now is None else now
    if abs(moment - timestamp) > tolerance:
        return False
    expected = _mac(secret, body, timestamp)
    # Every candidate is compared (several v1 values: a secret being rotated).
    return any([hmac.compare_digest(expected, candidate) for candidate in candidates])


def _mac(secret: str | bytes, body: bytes, timestamp: int) -> str:
    key = secret.encode() if isinstance(secret, str) else secret
    return hmac.new(key, f"{timestamp}.".encode() + body, hashlib.sha256).hexdigest()


def _parse_signature(header: str | None) -> tuple[int, list[str]] | None:
    """``(t, [v1, ...])`` from ``t=...,v1=...``; None if it is not that shape."""
    if not header:
        return None
    timestamp: int | None = None
    candidates: list[str] = []
    for part in header.split(","):
        key, sep, value = part.strip().partition("=")
        if not sep:
            return None
        if key == "t":
            if not value.isdigit() or len(value) > 12:
                return None
            timestamp = int(value)
        elif key == "v1":
            candidates.append(value)
    if timestamp is None or not candidates:
        return None
    return timestamp, candidates


# -- the event -----------------------------------------------------------------------


def approval_event(
    record: ApprovalRecord, url: str | None, event: NotificationEvent = EVENT
) -> dict[str, Any]:
    """The body of an ``event`` delivery: the approval as the store keeps it (the
    action and context already redacted) and where a human decides it. For
    ``approval.decided`` the approval also carries who decided it, why and when."""
    approval: dict[str, Any] = {
        "id": record.id,
        "tenant": record.tenant,
        "status": record.status.value,
        "action": record.action,
        "context": record.context,
        "rule_ids": list(record.rule_ids),
        "reason": record.reason,
        "requested_by": record.requested_by,
        "created_us": record.created_us,
        "expires_us": record.expires_us,
        # what an approver weighs in a channel as on the page: the declared risk and
        # what the tool is said to do, and by whom ("policy", or the agent's own words)
        "severity": record.severity,
        "tool_description": record.tool_description,
        "tool_description_from": record.tool_description_from,
    }
    if event == DECIDED_EVENT:
        # The approver's words go to a channel, as to the audit log: redacted alike.
        reason = record.decision_reason
        approval["decided_by"] = record.decided_by
        approval["decision_reason"] = None if reason is None else redact(reason)
        approval["decided_us"] = record.decided_us
    return {"type": event, "id": record.id, "approval": approval, "url": url}


def _delivery_id(approval_id: str, event: NotificationEvent) -> str:
    """``X-Interlock-Delivery``, what a receiver deduplicates on: one per approval and
    event (a request's is the bare approval id, as it was before decisions were sent)."""
    return approval_id if event == EVENT else f"{approval_id}.decided"


def encode_event(event: Mapping[str, Any]) -> bytes:
    """The bytes sent and signed: compact UTF-8 JSON."""
    return json.dumps(event, separators=(",", ":"), ensure_ascii=False).encode()


def retry_delay(attempt: int, base: float, *, cap: float = MAX_BACKOFF) -> float:
    """Seconds to wait after failed attempt number ``attempt`` (1, 2, …): ``base``
    doubled for each earlier failure, at most ``cap``."""
    return float(min(cap, base * 2 ** min(max(attempt - 1, 0), 32)))


# -- configuration -------------------------------------------------------------------


def webhook_secret(url: str, environ: Mapping[str, str] | None = None) -> str:
    """The signing secret for a webhook to ``url``, from ``$INTERLOCK_WEBHOOK_SECRET``.

    Raises ValueError, saying what to fix, for a URL that is not http(s) or a secret
    that is missing: a server refuses to start rather than send unsigned requests.
    The secret is read from the environment only, never from a command line (which
    other users of the host can read)."""
    _check_url(url)
    secret = (os.environ if environ is None else environ).get(SECRET_ENV, "")
    if not secret.strip():
        raise ValueError(
            f"a webhook URL needs its signing secret in the environment variable "
            f"{SECRET_ENV} (it is never taken from the command line)"
        )
    return secret


def _check_url(url: str) -> None:
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(f"the webhook URL must be http:// or https:// with a host, not {url!r}")


def _origin(url: str) -> str:
    """``scheme://host[:port]`` — what logs may show of a webhook URL."""
    parts = urlsplit(url)
    return f"{parts.scheme}://{parts.netloc.rpartition('@')[2]}"


def _import_httpx() -> Any:
    try:
        import httpx
    except ImportError:
        raise ImportError(
            "the approval webhook needs httpx: pip install 'interlock[server]'"
        ) from None
    return httpx


# -- the dispatcher ------------------------------------------------------------------


class WebhookDispatcher:
    """Delivers every new approval in ``store`` to ``url``, and then its decision,
    signed with ``secret``.

    ``interval``: seconds between looks at the store when idle. ``timeout``: seconds
    for each of connecting, sending and reading an answer. ``lease``: how long a
    claimed notice is this dispatcher's alone (another replica takes it after; at
    least 3 × ``timeout``, and a batch is cut short before its lease could lapse).
    ``backoff_base``: the first retry delay, doubled on each failure up to 5 min.
    ``policy_url_template``: the policy's ``approvals.url`` (``{id}`` replaced), sent
    as ``url``. ``batch``: notices leased in a round, requests first, then decisions.

    Example::

        dispatcher = WebhookDispatcher(store, "https://hooks.example.com/interlock",
                                       os.environ["INTERLOCK_WEBHOOK_SECRET"])
        dispatcher.start()        # a daemon thread; or call run_once() yourself
        ...
        dispatcher.stop()
    """

    def __init__(
        self,
        store: SqlStore,
        url: str,
        secret: str | bytes,
        *,
        interval: float = 0.5,
        timeout: float = 5.0,
        lease: float = 30.0,
        backoff_base: float = 1.0,
        policy_url_template: str | None = None,
        batch: int = 10,
    ) -> None:
        _check_url(url)
        if not secret:
            raise ValueError("the webhook needs a non-empty signing secret")
        if min(interval, timeout, backoff_base) <= 0 or batch < 1:
            raise ValueError("interval, timeout, backoff_base and batch must be positive")
        if lease < 3 * timeout:
            raise ValueError(f"the lease ({lease} s) must be at least 3 × timeout ({timeout} s)")
        self.store = store
        self.url = url
        self.origin = _origin(url)
        self._secret = secret
        self.interval = interval
        self.timeout = timeout
        self.lease = lease
        self.backoff_base = backoff_base
        self.policy_url_template = policy_url_template
        self.batch = batch
        self._httpx = _import_httpx()
        self._client: httpx.Client = self._httpx.Client(
            timeout=timeout, follow_redirects=False, headers={"User-Agent": "interlock-webhook"}
        )
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None

    def __repr__(self) -> str:  # never the secret, nor the URL's path
        return f"WebhookDispatcher({self.origin!r}, store={self.store.url!r})"

    # -- one round -------------------------------------------------------------------

    def run_once(self) -> int:
        """Lease the due notices (up to ``batch`` in all: new approvals first, then
        decisions) and deliver each; return how many deliveries were attempted. Store
        errors propagate."""
        attempted = 0
        # Requests first: a decision is sent only once its request was delivered, and
        # a human waits on a request, whereas a decision only updates a message.
        for event in (EVENT, DECIDED_EVENT):
            room = self.batch - attempted
            if room < 1 or not has_due(self.store, event=event):
                continue
            claims = claim_due(
                self.store, limit=room, lease_us=round(self.lease * 1e6), event=event
            )
            # Start a delivery only if it can end (3 timeouts) before the lease lapses:
            # past that, another replica may take the notice and send it too.
            last_start = time.monotonic() + self.lease - 3 * self.timeout
            for done, claim in enumerate(claims):
                if time.monotonic() > last_start:
                    release(self.store, claims[done:])
                    return attempted + done
                self._deliver(claim)
            attempted += len(claims)
        return attempted

    def _deliver(self, claim: NotificationClaim) -> None:
        record, event = claim.record, claim.event
        body = encode_event(approval_event(record, self._approval_url(record.id), event))
        headers = {
            "Content-Type": "application/json",
            "X-Interlock-Event": event,
            "X-Interlock-Delivery": _delivery_id(record.id, event),
            "X-Interlock-Signature": sign(self._secret, body, int(time.time())),
        }
        try:
            # Streamed and closed unread: a receiver's answer body is not needed.
            with self._client.stream("POST", self.url, content=body, headers=headers) as answer:
                status, phrase = answer.status_code, answer.reason_phrase
        except self._httpx.HTTPError as exc:
            self._failed(claim, describe(exc).replace(self.url, self.origin))
            return
        if 200 <= status < 300:
            mark_notified(self.store, record.id, event=event)
            log.debug("interlock: %s of approval %s delivered to %s", event, record.id, self.origin)
        else:
            self._failed(claim, f"HTTP {status} {phrase}".strip())

    def _failed(self, claim: NotificationClaim, error: str) -> None:
        delay = retry_delay(claim.attempt, self.backoff_base)
        retry_at = self.store.clock() + round(delay * 1e6)
        mark_failed(self.store, claim, error, retry_at_us=retry_at)
        log.warning(
            "interlock: webhook delivery of %s for approval %s to %s failed (attempt %d): "
            "%s; next try in %.1f s %s",
            claim.event,
            claim.record.id,
            self.origin,
            claim.attempt,
            error,
            delay,
            "while it is pending" if claim.event == EVENT else "until a day after the decision",
        )

    def _approval_url(self, approval_id: str) -> str | None:
        template = self.policy_url_template
        return None if template is None else template.replace("{id}", approval_id)

    # -- the thread ------------------------------------------------------------------

    def start(self) -> None:
        """Deliver from a daemon thread until :meth:`stop`."""
        if self._thread is not None:
            raise RuntimeError("the webhook dispatcher is already started")
        self._thread = threading.Thread(target=self._run, name="interlock-webhook", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stopping.is_set():
            try:
                attempted = self.run_once()
            except Exception as exc:  # the database is away: try again next round
                log.warning("interlock: the webhook dispatcher could not run: %s", describe(exc))
                attempted = 0
            if attempted < self.batch:  # after a full batch more may be due: no pause
                self._stopping.wait(self.interval)

    def stop(self, timeout: float | None = 30.0) -> None:
        """Stop the thread (a delivery in flight finishes) and close the HTTP client."""
        self._stopping.set()
        thread = self._thread
        if thread is not None and thread.is_alive():
            thread.join(timeout)
        self.close()

    def close(self) -> None:
        """Close the HTTP client (for a dispatcher driven by :meth:`run_once`)."""
        self._client.close()

    def __enter__(self) -> WebhookDispatcher:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
