"""The approval webhook, end to end: approvals opened by a real Guard check, delivered
by WebhookDispatcher over real HTTP to a receiver that checks each signature with
``verify_signature``; failures retried with backoff; decided approvals never sent;
racing dispatchers and a crashed one; the ``approval.decided`` notice of a delivered
request, alike, and given up after a day; and ``interlock serve --webhook-url``."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
import os
import re
import signal
import subprocess
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import pytest
from typer.testing import CliRunner

from interlock import Action, Context, Guard, Verdict, load_policy_text
from interlock.approvals.webhook import (
    WebhookDispatcher,
    approval_event,
    sign,
    verify_signature,
)
from interlock.cli import app
from interlock.store import SqlStore
from interlock.store.notifications import claim_due, has_due, notification_state

from .harness import POLICY, bearer
from .test_serve_process import STARTUP, free_port, interlock_exe, make_keys, wait_until_up

SECRET = "whsec-test-0123456789"
HOOK_PATH = "/hooks/t0ken-in-the-path"  # chat services put tokens here: never logged
TEMPLATE = "https://interlock.example.com/approvals/{id}"
HANG = 6.0  # seconds a "hang" answer takes: well past the dispatcher's timeout
SIGNATURE = re.compile(r"^t=(\d+),v1=([0-9a-f]{64})$")
DECIDED = "approval.decided"
DAY = 24 * 3600.0


# -- a real receiver ----------------------------------------------------------------


@dataclass(frozen=True)
class Delivery:
    """One POST the receiver got, and what it did with it."""

    path: str
    headers: dict[str, str]
    body: bytes
    valid: bool  # verify_signature said yes
    answer: str  # "ok", "500" or "hang"

    @property
    def event(self) -> dict[str, Any]:
        parsed: dict[str, Any] = json.loads(self.body)
        return parsed


class Receiver:
    """An HTTP endpoint on 127.0.0.1 that verifies every delivery and answers as
    scripted, one answer per request ("ok" once the script runs out)."""

    def __init__(self, secret: str = SECRET, script: Sequence[str] = (), delay: float = 0.0):
        self.secret = secret
        self.script = list(script)
        self.delay = delay
        self.deliveries: list[Delivery] = []
        self.lock = threading.Lock()
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self.server.daemon_threads = True
        self.thread = threading.Thread(
            target=self.server.serve_forever, kwargs={"poll_interval": 0.01}, daemon=True
        )
        self.thread.start()
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}{HOOK_PATH}"

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                signature = self.headers.get("X-Interlock-Signature")
                with receiver.lock:
                    answer = receiver.script.pop(0) if receiver.script else "ok"
                    receiver.deliveries.append(
                        Delivery(
                            self.path,
                            dict(self.headers.items()),
                            body,
                            verify_signature(receiver.secret, signature, body),
                            answer,
                        )
                    )
                time.sleep(HANG if answer == "hang" else receiver.delay)
                with contextlib.suppress(OSError):  # a client that gave up has gone
                    self.send_response(500 if answer == "500" else 200)
                    self.send_header("Content-Length", "0")
                    self.end_headers()

            def log_message(self, format: str, *args: Any) -> None:
                pass

        return Handler

    def accepted(self) -> list[Delivery]:
        with self.lock:
            return [d for d in self.deliveries if d.answer == "ok"]

    def wait_for(self, count: int, timeout: float = 30.0) -> list[Delivery]:
        """The accepted deliveries once there are ``count`` (a hang guard, not a timing)."""
        deadline = time.monotonic() + timeout
        while len(self.accepted()) < count:
            assert time.monotonic() < deadline, f"only {self.accepted()} after {timeout} s"
            time.sleep(0.01)
        return self.accepted()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    opened = Receiver()
    yield opened
    opened.close()


@pytest.fixture
def guard(store: SqlStore) -> Iterator[Guard]:
    opened = Guard(
        load_policy_text(POLICY),
        store=store,
        context=Context(tenant="acme", agent="support-bot"),
        reap_interval=None,
    )
    yield opened
    opened.close()


@pytest.fixture
def make_dispatcher(receiver: Receiver) -> Iterator[Callable[..., WebhookDispatcher]]:
    """Dispatchers to the receiver (closed after the test); options as the class takes."""
    made: list[WebhookDispatcher] = []

    def make(store: SqlStore, **options: Any) -> WebhookDispatcher:
        options.setdefault("policy_url_template", TEMPLATE)
        dispatcher = WebhookDispatcher(store, receiver.url, SECRET, **options)
        made.append(dispatcher)
        return dispatcher

    yield make
    for dispatcher in made:
        dispatcher.stop()


def open_approval(guard: Guard, order_id: int, **arguments: Any) -> str:
    """The id of the approval a real check of a large refund opens."""
    decision = guard.check(
        Action.tool("refund_order", {"order_id": order_id, "amount": 250, **arguments})
    )
    assert decision.verdict is Verdict.REQUIRE_APPROVAL, decision
    assert decision.approval is not None and decision.approval.id is not None
    return decision.approval.id


# -- delivery and signature ----------------------------------------------------------


def test_a_new_approval_is_delivered_once_signed_with_the_documented_body(
    store: SqlStore,
    guard: Guard,
    receiver: Receiver,
    make_dispatcher: Callable[..., WebhookDispatcher],
) -> None:
    approval_id = open_approval(guard, 42, api_key="sk-live-0123456789abcdefghij")
    dispatcher = make_dispatcher(store)
    assert dispatcher.run_once() == 1
    assert dispatcher.run_once() == 0

    (delivery,) = receiver.deliveries
    assert delivery.valid and delivery.path == HOOK_PATH
    assert delivery.headers["Content-Type"] == "application/json"
    assert delivery.headers["X-Interlock-Event"] == "approval.requested"
    assert delivery.headers["X-Interlock-Delivery"] == approval_id
    assert SIGNATURE.match(delivery.headers["X-Interlock-Signature"])
    record = store.get_approval(approval_id)
    assert delivery.event == {
        "type": "approval.requested",
        "id": approval_id,
        "approval": {
            "id": approval_id,
            "tenant": "acme",
            "status": "pending",
            "action": record.action,
            "context": record.context,
            "rule_ids": ["refund-large"],
            "reason": "refunds over 100 need a human",
            "requested_by": "support-bot",
            "created_us": record.created_us,
            "expires_us": record.expires_us,
            "severity": None,
            "tool_description": None,
            "tool_description_from": None,
        },
        "url": f"https://interlock.example.com/approvals/{approval_id}",
    }
    assert record.action["arguments"]["order_id"] == 42
    assert b"sk-live-0123456789abcdefghij" not in delivery.body  # redacted in the store
    state = notification_state(store, approval_id)
    assert state.notified_us is not None and state.attempts == 1


@pytest.mark.parametrize("backend", ["sqlite"])
def test_a_changed_body_another_secret_or_a_stale_time_fails_verification(
    store: SqlStore,
    guard: Guard,
    receiver: Receiver,
    make_dispatcher: Callable[..., WebhookDispatcher],
) -> None:
    open_approval(guard, 7)
    make_dispatcher(store).run_once()
    (delivery,) = receiver.deliveries
    header, body = delivery.headers["X-Interlock-Signature"], delivery.body
    signed_at = int(header.split(",")[0].removeprefix("t="))
    assert verify_signature(SECRET, header, body, now=signed_at + 299)
    assert verify_signature(SECRET.encode(), header, body, now=signed_at)

    tampered = body.replace(b'"amount":250', b'"amount":25')
    assert tampered != body
    assert not verify_signature(SECRET, header, tampered, now=signed_at)
    assert not verify_signature("another-secret", header, body, now=signed_at)
    assert not verify_signature(SECRET, header, body, now=signed_at + 301)  # stale: a replay
    assert not verify_signature(SECRET, header, body, now=signed_at - 301)
    assert verify_signature(SECRET, header, body, now=signed_at + 600, tolerance=900)
    moved = header.replace(f"t={signed_at}", f"t={signed_at - 1}")  # the time is signed too
    assert not verify_signature(SECRET, moved, body, now=signed_at)
    for malformed in (None, "", "v1=abc", f"t={signed_at}", "t=soon,v1=00", "garbage"):
        assert not verify_signature(SECRET, malformed, body, now=signed_at)
    rotating = f"{header},v1={'0' * 64}"  # several v1 values: any one may match
    assert verify_signature(SECRET, rotating, body, now=signed_at)


def test_sign_is_hmac_sha256_over_the_timestamp_and_the_body() -> None:
    import hashlib
    import hmac

    body = b'{"id":"apr_1"}'
    expected = hmac.new(b"s3cret", b"1767225600." + body, hashlib.sha256).hexdigest()
    assert sign("s3cret", body, 1767225600) == f"t=1767225600,v1={expected}"


# -- failures and retries ------------------------------------------------------------


@pytest.mark.parametrize("backend", ["sqlite"])
def test_a_failing_receiver_gets_the_delivery_on_the_third_try_after_backoff(
    store: SqlStore,
    clock: Any,
    guard: Guard,
    receiver: Receiver,
    make_dispatcher: Callable[..., WebhookDispatcher],
    caplog: pytest.LogCaptureFixture,
) -> None:
    receiver.script = ["500", "hang"]
    approval_id = open_approval(guard, 1)
    dispatcher = make_dispatcher(store, timeout=1.5, lease=5.0, backoff_base=1.0)
    caplog.set_level(logging.WARNING, logger="interlock.webhook")

    assert dispatcher.run_once() == 1  # 500
    state = notification_state(store, approval_id)
    assert (state.attempts, state.error, state.notified_us) == (
        1,
        "HTTP 500 Internal Server Error",
        None,
    )
    assert (state.next_us, state.claimed_until_us) == (clock.now + 1_000_000, None)
    assert dispatcher.run_once() == 0  # backing off: 1 s
    clock.advance(0.999)
    assert dispatcher.run_once() == 0
    clock.advance(0.001)

    assert dispatcher.run_once() == 1  # a timeout
    state = notification_state(store, approval_id)
    assert state.attempts == 2 and state.error is not None and "Timeout" in state.error
    assert state.next_us == clock.now + 2_000_000  # doubled
    clock.advance(1.999)
    assert dispatcher.run_once() == 0
    clock.advance(0.001)

    assert dispatcher.run_once() == 1  # delivered
    assert dispatcher.run_once() == 0
    state = notification_state(store, approval_id)
    assert state.attempts == 3 and state.notified_us == clock.now
    assert [d.answer for d in receiver.deliveries] == ["500", "hang", "ok"]
    assert {d.headers["X-Interlock-Delivery"] for d in receiver.deliveries} == {approval_id}
    assert all(d.valid for d in receiver.deliveries)

    failures = [r for r in caplog.records if r.name == "interlock.webhook"]
    assert len(failures) == 2 and all(approval_id in r.getMessage() for r in failures)
    logged = "\n".join(r.getMessage() for r in caplog.records)
    assert SECRET not in logged and HOOK_PATH not in logged


def test_an_approval_decided_or_expired_before_delivery_is_not_sent(
    store: SqlStore,
    clock: Any,
    guard: Guard,
    receiver: Receiver,
    make_dispatcher: Callable[..., WebhookDispatcher],
) -> None:
    receiver.script = ["500"]
    retried = open_approval(guard, 1)
    dispatcher = make_dispatcher(store)
    assert dispatcher.run_once() == 1  # fails: to be retried in 1 s
    approved, denied = open_approval(guard, 2), open_approval(guard, 3)
    store.approve(approved, by="alice")
    store.deny(denied, by="alice")
    store.approve(retried, by="alice")  # decided while it waited for its retry
    lapsing = open_approval(guard, 4)
    clock.advance(3600)  # the policy's approvals.ttl: the last one has expired
    assert dispatcher.run_once() == 0
    assert [d.headers["X-Interlock-Delivery"] for d in receiver.deliveries] == [retried]
    for approval_id in (approved, denied, lapsing):
        assert notification_state(store, approval_id).attempts == 0


# -- decisions -----------------------------------------------------------------------


@pytest.mark.parametrize("decision", ["approved", "denied"])
def test_a_decision_is_delivered_once_after_its_request_signed_with_the_documented_body(
    store: SqlStore,
    clock: Any,
    guard: Guard,
    receiver: Receiver,
    make_dispatcher: Callable[..., WebhookDispatcher],
    decision: str,
) -> None:
    approval_id = open_approval(guard, 42)
    dispatcher = make_dispatcher(store)
    assert dispatcher.run_once() == 1  # the request
    assert dispatcher.run_once() == 0  # nothing decided yet
    clock.advance(90)
    decide = store.approve if decision == "approved" else store.deny
    decide(approval_id, by="alice", reason="checked with the customer")
    assert dispatcher.run_once() == 1
    assert dispatcher.run_once() == 0

    requested, decided = receiver.deliveries
    assert requested.headers["X-Interlock-Event"] == "approval.requested"
    assert requested.headers["X-Interlock-Delivery"] == approval_id
    assert decided.valid and decided.path == HOOK_PATH
    assert decided.headers["Content-Type"] == "application/json"
    assert decided.headers["X-Interlock-Event"] == "approval.decided"
    assert decided.headers["X-Interlock-Delivery"] == f"{approval_id}.decided"
    assert SIGNATURE.match(decided.headers["X-Interlock-Signature"])
    record = store.get_approval(approval_id)
    assert record.decided_us == clock.now
    assert decided.event == {
        "type": "approval.decided",
        "id": approval_id,
        "approval": {
            "id": approval_id,
            "tenant": "acme",
            "status": decision,
            "action": record.action,
            "context": record.context,
            "rule_ids": ["refund-large"],
            "reason": "refunds over 100 need a human",
            "requested_by": "support-bot",
            "created_us": record.created_us,
            "expires_us": record.expires_us,
            "severity": None,
            "tool_description": None,
            "tool_description_from": None,
            "decided_by": "alice",
            "decision_reason": "checked with the customer",
            "decided_us": clock.now,
        },
        "url": f"https://interlock.example.com/approvals/{approval_id}",
    }
    assert requested.event["approval"]["status"] == "pending"
    assert "decided_by" not in requested.event["approval"]
    state = notification_state(store, approval_id, event=DECIDED)
    assert state.notified_us == clock.now and state.attempts == 1
    assert notification_state(store, approval_id).attempts == 1  # the request: once


@pytest.mark.parametrize("backend", ["sqlite"])
def test_a_decision_reason_is_sent_redacted(
    store: SqlStore,
    guard: Guard,
    receiver: Receiver,
    make_dispatcher: Callable[..., WebhookDispatcher],
) -> None:
    approval_id = open_approval(guard, 5)
    dispatcher = make_dispatcher(store)
    assert dispatcher.run_once() == 1
    store.deny(approval_id, by="alice", reason="no: key sk-live-0123456789abcdefghij leaked")
    assert dispatcher.run_once() == 1
    decided = receiver.deliveries[-1]
    assert b"0123456789abcdefghij" not in decided.body
    assert decided.event["approval"]["decision_reason"] == "no: key [REDACTED:openai-key] leaked"


def test_no_decision_is_sent_without_a_delivered_request_nor_for_an_approval_that_expired(
    store: SqlStore,
    clock: Any,
    guard: Guard,
    receiver: Receiver,
    make_dispatcher: Callable[..., WebhookDispatcher],
) -> None:
    decided_first = open_approval(guard, 1)
    store.approve(decided_first, by="alice")  # before any dispatcher ran
    lapsing, granted = open_approval(guard, 2), open_approval(guard, 3)
    dispatcher = make_dispatcher(store)
    assert dispatcher.run_once() == 2  # the two pending requests
    store.approve(granted, by="alice")
    clock.advance(3600)  # the policy's approvals.ttl; the grant's 15 min too
    store.reap()  # lapsing expired while pending; granted expired unused, after approval
    assert store.get_approval(lapsing).status.value == "expired"
    assert dispatcher.run_once() == 1
    assert dispatcher.run_once() == 0
    delivered = [d.headers["X-Interlock-Delivery"] for d in receiver.deliveries]
    assert sorted(delivered) == sorted([lapsing, granted, f"{granted}.decided"])
    (decided,) = [d for d in receiver.deliveries if d.headers["X-Interlock-Event"] == DECIDED]
    assert decided.event["approval"]["status"] == "expired"
    assert decided.event["approval"]["decided_by"] == "alice"
    for approval_id in (decided_first, lapsing):
        assert notification_state(store, approval_id, event=DECIDED).attempts == 0
    assert notification_state(store, decided_first).attempts == 0


@pytest.mark.parametrize("backend", ["sqlite"])
def test_a_failing_receiver_gets_the_decision_on_the_third_try_after_backoff(
    store: SqlStore,
    clock: Any,
    guard: Guard,
    receiver: Receiver,
    make_dispatcher: Callable[..., WebhookDispatcher],
    caplog: pytest.LogCaptureFixture,
) -> None:
    receiver.script = ["ok", "500", "hang"]
    approval_id = open_approval(guard, 1)
    dispatcher = make_dispatcher(store, timeout=1.5, lease=5.0, backoff_base=1.0)
    caplog.set_level(logging.WARNING, logger="interlock.webhook")
    assert dispatcher.run_once() == 1  # the request, accepted
    store.deny(approval_id, by="alice")

    assert dispatcher.run_once() == 1  # 500
    state = notification_state(store, approval_id, event=DECIDED)
    assert (state.attempts, state.error, state.notified_us) == (
        1,
        "HTTP 500 Internal Server Error",
        None,
    )
    assert (state.next_us, state.claimed_until_us) == (clock.now + 1_000_000, None)
    assert dispatcher.run_once() == 0  # backing off: 1 s
    clock.advance(0.999)
    assert dispatcher.run_once() == 0
    clock.advance(0.001)

    assert dispatcher.run_once() == 1  # a timeout
    state = notification_state(store, approval_id, event=DECIDED)
    assert state.attempts == 2 and state.error is not None and "Timeout" in state.error
    assert state.next_us == clock.now + 2_000_000  # doubled
    clock.advance(1.999)
    assert dispatcher.run_once() == 0
    clock.advance(0.001)

    assert dispatcher.run_once() == 1  # delivered
    assert dispatcher.run_once() == 0
    state = notification_state(store, approval_id, event=DECIDED)
    assert state.attempts == 3 and state.notified_us == clock.now
    request = notification_state(store, approval_id)
    assert (request.attempts, request.error) == (1, None)  # untouched by the decision's
    assert [d.answer for d in receiver.deliveries] == ["ok", "500", "hang", "ok"]
    assert [d.headers["X-Interlock-Delivery"] for d in receiver.deliveries] == [
        approval_id,
        *[f"{approval_id}.decided"] * 3,
    ]
    assert all(d.valid for d in receiver.deliveries)

    failures = [r.getMessage() for r in caplog.records if r.name == "interlock.webhook"]
    assert len(failures) == 2
    assert all(DECIDED in m and approval_id in m and "after the decision" in m for m in failures)
    logged = "\n".join(r.getMessage() for r in caplog.records)
    assert SECRET not in logged and HOOK_PATH not in logged


def test_a_decision_no_receiver_accepted_for_a_day_is_given_up(
    store: SqlStore,
    clock: Any,
    guard: Guard,
    receiver: Receiver,
    make_dispatcher: Callable[..., WebhookDispatcher],
) -> None:
    receiver.script = ["ok", "500"]
    approval_id = open_approval(guard, 1)
    dispatcher = make_dispatcher(store)
    assert dispatcher.run_once() == 1
    store.approve(approval_id, by="alice")
    assert dispatcher.run_once() == 1  # 500: to be retried in 1 s ...
    clock.advance(DAY - 0.000001)
    assert has_due(store, event=DECIDED)  # ... for as long as a day after the decision
    clock.advance(0.000001)
    assert dispatcher.run_once() == 0  # then never
    assert [d.answer for d in receiver.deliveries] == ["ok", "500"]
    state = notification_state(store, approval_id, event=DECIDED)
    assert (state.notified_us, state.attempts) == (None, 1)


# -- replicas ------------------------------------------------------------------------


def test_three_dispatchers_racing_on_one_database_deliver_each_approval_exactly_once(
    store: SqlStore,
    guard: Guard,
    receiver: Receiver,
    open_replica: Callable[..., SqlStore],
    make_dispatcher: Callable[..., WebhookDispatcher],
) -> None:
    opened = {open_approval(guard, n) for n in range(30)}
    receiver.delay = 0.002  # deliveries overlap the other dispatchers' claims
    dispatchers = [make_dispatcher(open_replica(clock=None), batch=4) for _ in range(3)]
    barrier = threading.Barrier(len(dispatchers))
    attempted: list[int] = []
    errors: list[BaseException] = []

    def rounds(dispatcher: WebhookDispatcher) -> None:
        """Lockstep: all three claim at once, then all look at what was delivered."""
        try:
            for _ in range(50):
                barrier.wait(30)
                attempted.append(dispatcher.run_once())
                barrier.wait(30)
                if len(receiver.accepted()) >= len(opened):
                    return
        except BaseException as exc:
            errors.append(exc)
            barrier.abort()

    threads = [threading.Thread(target=rounds, args=(d,)) for d in dispatchers]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert errors == []
    delivered = Counter(d.headers["X-Interlock-Delivery"] for d in receiver.deliveries)
    assert delivered == Counter(opened)  # every approval, each exactly once
    assert sum(attempted) == len(opened)
    assert all(d.valid for d in receiver.deliveries)
    assert all(notification_state(store, a).notified_us is not None for a in opened)


def test_a_dispatcher_that_claimed_and_died_leaves_the_approval_to_another_after_its_lease(
    store: SqlStore,
    clock: Any,
    guard: Guard,
    receiver: Receiver,
    open_replica: Callable[..., SqlStore],
    make_dispatcher: Callable[..., WebhookDispatcher],
) -> None:
    approval_id = open_approval(guard, 9)
    crashed = open_replica()
    (held,) = claim_due(crashed, limit=10, lease_us=30_000_000)  # ... and never delivers
    crashed.close()
    survivor = make_dispatcher(store, lease=30.0)
    assert survivor.run_once() == 0
    clock.advance(29.9)
    assert survivor.run_once() == 0
    clock.advance(0.1)
    assert survivor.run_once() == 1
    (delivery,) = receiver.wait_for(1)
    assert delivery.headers["X-Interlock-Delivery"] == held.record.id == approval_id
    assert notification_state(store, approval_id).attempts == 2  # the lost one counts


def test_three_dispatchers_racing_on_one_database_deliver_each_decision_exactly_once(
    store: SqlStore,
    guard: Guard,
    receiver: Receiver,
    open_replica: Callable[..., SqlStore],
    make_dispatcher: Callable[..., WebhookDispatcher],
) -> None:
    opened = {open_approval(guard, n) for n in range(30)}
    first = make_dispatcher(store, batch=30)
    while first.run_once():  # the requests, by one dispatcher
        pass
    assert len(receiver.accepted()) == len(opened)
    for n, approval_id in enumerate(sorted(opened)):
        (store.approve if n % 2 else store.deny)(approval_id, by="alice")
    receiver.delay = 0.002  # deliveries overlap the other dispatchers' claims
    dispatchers = [make_dispatcher(open_replica(clock=None), batch=4) for _ in range(3)]
    barrier = threading.Barrier(len(dispatchers))
    attempted: list[int] = []
    errors: list[BaseException] = []

    def rounds(dispatcher: WebhookDispatcher) -> None:
        """Lockstep: all three claim at once, then all look at what was delivered."""
        try:
            for _ in range(50):
                barrier.wait(30)
                attempted.append(dispatcher.run_once())
                barrier.wait(30)
                if len(receiver.accepted()) >= 2 * len(opened):
                    return
        except BaseException as exc:
            errors.append(exc)
            barrier.abort()

    threads = [threading.Thread(target=rounds, args=(d,)) for d in dispatchers]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert errors == []
    delivered = Counter(
        d.headers["X-Interlock-Delivery"]
        for d in receiver.deliveries
        if d.headers["X-Interlock-Event"] == DECIDED
    )
    assert delivered == Counter(f"{a}.decided" for a in opened)  # each exactly once
    assert sum(attempted) == len(opened)
    assert len(receiver.deliveries) == 2 * len(opened)  # no request sent again
    assert all(d.valid for d in receiver.deliveries)
    assert all(notification_state(store, a, event=DECIDED).notified_us is not None for a in opened)


def test_a_dispatcher_that_claimed_a_decision_and_died_leaves_it_to_another_after_its_lease(
    store: SqlStore,
    clock: Any,
    guard: Guard,
    receiver: Receiver,
    open_replica: Callable[..., SqlStore],
    make_dispatcher: Callable[..., WebhookDispatcher],
) -> None:
    approval_id = open_approval(guard, 9)
    survivor = make_dispatcher(store, lease=30.0)
    assert survivor.run_once() == 1
    store.deny(approval_id, by="alice")
    crashed = open_replica()
    (held,) = claim_due(crashed, limit=10, lease_us=30_000_000, event=DECIDED)  # ... and dies
    crashed.close()
    assert held.event == DECIDED
    assert survivor.run_once() == 0
    clock.advance(29.9)
    assert survivor.run_once() == 0
    clock.advance(0.1)
    assert survivor.run_once() == 1
    (_, delivery) = receiver.wait_for(2)
    assert delivery.headers["X-Interlock-Delivery"] == f"{held.record.id}.decided"
    assert notification_state(store, approval_id, event=DECIDED).attempts == 2


@pytest.mark.parametrize("backend", ["sqlite"])
def test_one_round_sends_requests_before_decisions_within_one_batch(
    store: SqlStore,
    guard: Guard,
    receiver: Receiver,
    make_dispatcher: Callable[..., WebhookDispatcher],
) -> None:
    first, second = open_approval(guard, 1), open_approval(guard, 2)
    dispatcher = make_dispatcher(store, batch=3)
    assert dispatcher.run_once() == 2
    store.approve(first, by="alice")
    store.deny(second, by="alice")
    newer = [open_approval(guard, n) for n in (3, 4)]
    assert dispatcher.run_once() == 3  # two requests, then one decision: the batch
    assert dispatcher.run_once() == 1
    assert dispatcher.run_once() == 0
    events = [d.headers["X-Interlock-Event"] for d in receiver.deliveries[2:]]
    assert events == ["approval.requested"] * 2 + [DECIDED] * 2
    assert {d.headers["X-Interlock-Delivery"] for d in receiver.deliveries[2:4]} == set(newer)


@pytest.mark.parametrize("backend", ["sqlite"])
def test_a_started_dispatcher_delivers_from_its_thread_until_stopped(
    store: SqlStore,
    guard: Guard,
    receiver: Receiver,
    make_dispatcher: Callable[..., WebhookDispatcher],
) -> None:
    dispatcher = make_dispatcher(store, interval=0.01)
    dispatcher.start()
    first = open_approval(guard, 1)
    (delivery,) = receiver.wait_for(1)
    assert delivery.headers["X-Interlock-Delivery"] == first
    dispatcher.stop()
    open_approval(guard, 2)
    time.sleep(0.1)  # ten intervals: a running thread would have sent it
    assert len(receiver.deliveries) == 1


def test_a_dispatcher_refuses_settings_that_could_not_work(store: SqlStore) -> None:
    with pytest.raises(ValueError, match="http"):
        WebhookDispatcher(store, "ftp://example.com/hook", SECRET)
    with pytest.raises(ValueError, match="secret"):
        WebhookDispatcher(store, "https://example.com/hook", "")
    with pytest.raises(ValueError, match="lease"):
        WebhookDispatcher(store, "https://example.com/hook", SECRET, timeout=5, lease=10)
    dispatcher = WebhookDispatcher(store, "https://user:pw@example.com/hook/t0ken", SECRET)
    assert "t0ken" not in repr(dispatcher) and SECRET not in repr(dispatcher)
    assert "pw" not in dispatcher.origin
    dispatcher.close()


# -- interlock serve --webhook-url ---------------------------------------------------


def test_serve_refuses_a_webhook_url_without_its_secret(
    tmp_path: Path, policy_file: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("INTERLOCK_WEBHOOK_SECRET", raising=False)
    database = tmp_path / "never-opened.db"
    runner = CliRunner()
    args = ["serve", "-p", str(policy_file), "-d", f"sqlite:///{database}"]
    refused = runner.invoke(app, [*args, "--webhook-url", "https://hooks.example.com/x"])
    assert refused.exit_code == 2
    assert "INTERLOCK_WEBHOOK_SECRET" in refused.output
    assert "never taken from the command line" in refused.output
    assert not database.exists()  # refused before anything opened

    on_command_line = runner.invoke(app, [*args, "--webhook-secret", "s3cret"])
    assert on_command_line.exit_code == 2 and "No such option" in on_command_line.output

    monkeypatch.setenv("INTERLOCK_WEBHOOK_SECRET", SECRET)
    bad_url = runner.invoke(app, [*args, "--webhook-url", "hooks.example.com"])
    assert bad_url.exit_code == 2 and "http:// or https://" in bad_url.output
    assert not database.exists()


@pytest.mark.slow
@pytest.mark.parametrize("workers", ["1", "2"])
def test_serve_with_a_webhook_posts_a_signed_delivery_for_a_check_that_opens_an_approval(
    tmp_path: Path, policy_file: Path, receiver: Receiver, workers: str
) -> None:
    url = f"sqlite:///{tmp_path / 'serve.db'}"
    tokens = make_keys(url)
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("INTERLOCK_")}
    env["INTERLOCK_WEBHOOK_SECRET"] = SECRET
    command = [interlock_exe(), "serve", "-p", str(policy_file), "-d", url, "--port", str(port)]
    proc = subprocess.Popen(
        [*command, "--webhook-url", receiver.url, "--workers", workers],
        cwd=tmp_path,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=STARTUP) as client:
            wait_until_up(proc, client)
            answer = client.post(
                "/v1/check",
                json={"name": "refund_order", "arguments": {"amount": 250}},
                headers=bearer(tokens["agent"]),
            )
        decision = answer.json()
        assert decision["verdict"] == "require_approval"
        if workers != "1":  # the hook's token is on no worker's command line
            pid = answer.headers["x-interlock-worker"].split(":")[1]
            assert HOOK_PATH.encode() not in Path(f"/proc/{pid}/cmdline").read_bytes()
        approval_id = decision["approval"]["id"]
        (delivery,) = receiver.wait_for(1)  # once, with two workers too
        assert delivery.valid
        assert delivery.headers["X-Interlock-Delivery"] == approval_id
        assert delivery.event["url"] == f"https://interlock.example.com/approvals/{approval_id}"
        assert delivery.event["approval"]["requested_by"] == "ops-bot"
        proc.send_signal(signal.SIGTERM)
        output, _ = proc.communicate(timeout=STARTUP)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate(timeout=10)
    assert proc.returncode == 0, output
    assert f"new approvals are posted to {receiver.url.removesuffix(HOOK_PATH)}" in output
    assert SECRET not in output and HOOK_PATH not in output


def test_a_delivery_carries_the_declared_risk_and_what_the_tool_does(guard: Guard) -> None:
    """What an approver weighs on the page reaches a channel too: the severity the rules
    declare and the tool's description, with who says so."""
    store = guard.store
    assert store is not None
    decision = guard.check(
        Action.tool("refund_order", {"order_id": 7, "amount": 500}, context=Context(tenant="acme"))
    )
    assert decision.verdict is Verdict.REQUIRE_APPROVAL and decision.approval is not None
    record = dataclasses.replace(
        store.get_approval(decision.approval.id),
        severity="high",
        tool_description="Refunds an order to the card it was paid with",
        tool_description_from="policy",
    )
    event = approval_event(record, None)["approval"]
    assert (event["severity"], event["tool_description"], event["tool_description_from"]) == (
        "high",
        "Refunds an order to the card it was paid with",
        "policy",
    )
