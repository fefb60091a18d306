"""Three real ``interlock serve`` replicas on one PostgreSQL database need no
coordination of their own: a budget is shared without overspending under concurrent
load, an approval decided through one replica releases a waiter on another and is
claimed exactly once, and the audit chain every replica appended to verifies.

The replicas are processes (``interlock serve``), each on its own port, all on one
fresh schema of the test server (the ``?schema=`` URL of ``tests/conftest.py``, so the
replicas and the test share it; dropped afterwards), with the same policy file and
keys created before they start. They are stopped with SIGTERM and must exit 0.
Skipped when PostgreSQL is unreachable, unless ``INTERLOCK_REQUIRE_POSTGRES=1``.

No timed assertions: timeouts are generous hang guards, and what each request
returned says what happened. The replicas re-read a waited-on approval only once an
hour (``approval_poll=3600``), so a waiter released before its deadline was woken by
PostgreSQL's ``NOTIFY`` from another replica, not by polling.
"""

from __future__ import annotations

import secrets
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from interlock import Action, Decision, Guard, Verdict
from interlock.server import KeyStore, Role
from interlock.store import open_store
from interlock.store.records import Reservation, ReservationStatus

from .replicas import Replica, start_replicas, stop_replicas

pytestmark = pytest.mark.slow

GENEROUS = 60.0  # seconds: a hang guard, far more than anything here takes

POLICY = """\
version: 1
default: deny
approvals:
  url: "https://interlock.example.com/approvals/{id}"
budgets:
  - id: pool
    limit: 1           # USD, shared by every agent of the tenant, never restarting
    unit: USD
    scope: tenant
    window: none
    name: paid_lookup
    max_overage: 0     # a declared cost is what is charged
rules:
  - id: lookups
    decision: allow
    reason: paid lookups are fine within the budget
    name: paid_lookup
  - id: refunds
    decision: require_approval
    reason: refunds need a human
    name: refund_order
"""

LIMIT_UNITS = 1_000_000  # 1 USD in micro-units
EST_COST = 0.03  # USD per lookup ...
COST_UNITS = 30_000  # ... in micro-units
AFFORDABLE = LIMIT_UNITS // COST_UNITS  # 33 lookups fit, the 34th does not
AGENTS = 12
CALLS_PER_AGENT = 8  # 96 checks in all: nearly three times what the budget takes

LOAD_TENANT = "load"
DESK_TENANT = "desk"


def _with_schema(url: str, schema: str) -> str:
    # as tests/conftest.py does: the store takes its schema from the URL
    return f"{url}{'&' if '?' in url else '?'}schema={schema}"


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


@dataclass
class Cluster:
    url: str  # the database, schema included
    replicas: list[Replica]
    tokens: dict[str, str]  # who -> API key

    @property
    def urls(self) -> list[str]:
        return [replica.url for replica in self.replicas]

    def remote(self, who: str, replica: int) -> Guard:
        return Guard.remote(self.replicas[replica].url, self.tokens[who], request_timeout=GENEROUS)


def _make_keys(url: str) -> dict[str, str]:
    """Every key the tests use, created once, before any replica starts."""
    wanted: dict[str, tuple[str, Role, str]] = {
        f"agent-{i}": (LOAD_TENANT, Role.AGENT, f"agent-{i}") for i in range(AGENTS)
    }
    wanted["load-approver"] = (LOAD_TENANT, Role.APPROVER, "auditor")
    wanted["refund-bot"] = (DESK_TENANT, Role.AGENT, "refund-bot")
    wanted["alice"] = (DESK_TENANT, Role.APPROVER, "alice")
    with open_store(url) as store:
        keys = KeyStore(store)
        return {
            who: keys.create(tenant=tenant, role=role, name=name).token
            for who, (tenant, role, name) in wanted.items()
        }


@pytest.fixture(scope="module")
def cluster(
    postgres_server_url: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Cluster]:
    """Three replicas on one fresh schema; stopped with SIGTERM, each must exit 0."""
    import psycopg
    from psycopg import sql

    schema = f"t_{secrets.token_hex(6)}"
    url = _with_schema(postgres_server_url, schema)
    workdir = tmp_path_factory.mktemp("replicas")
    policy = workdir / "interlock.yaml"
    policy.write_text(POLICY)
    try:
        tokens = _make_keys(url)  # also creates and migrates the schema
        # a waiter's safety-net re-read once an hour: only NOTIFY can wake it in time
        replicas = start_replicas(3, f"{url}&approval_poll=3600", policy, workdir)
        try:
            yield Cluster(url, replicas, tokens)
        finally:
            codes = stop_replicas(replicas)
        for replica in replicas:
            assert codes[replica.name] == 0, replica.describe()
            assert "the audit log and the store are closed" in replica.log, replica.describe()
    finally:
        with psycopg.connect(postgres_server_url, autocommit=True, connect_timeout=2) as conn:
            conn.execute("SET lock_timeout = '10s'")
            conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema)))


# -- the load: many agents on one budget, through every replica ---------------------------


@dataclass
class Load:
    """What the agents of the load saw."""

    checks: list[tuple[int, Decision]] = field(default_factory=list)  # (replica, decision)
    commits: list[Reservation] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)

    @property
    def allowed(self) -> list[Decision]:
        return [d for _, d in self.checks if d.verdict is Verdict.ALLOW]


def _run_threads(count: int, target: Callable[[int], None]) -> None:
    threads = [threading.Thread(target=target, args=(i,), daemon=True) for i in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(GENEROUS)
    assert not any(thread.is_alive() for thread in threads), "a thread hung"


@pytest.fixture(scope="module")
def load(cluster: Cluster) -> Load:
    """``AGENTS`` agents at once, each with its own key: agent *i* checks through replica
    *i* mod 3 and commits what it was allowed through the next replica (a reservation
    is not tied to the replica that made it)."""
    seen = Load()
    lock = threading.Lock()
    start = threading.Barrier(AGENTS, timeout=GENEROUS)

    def agent(i: int) -> None:
        here, there = i % 3, (i + 1) % 3
        try:
            with (
                cluster.remote(f"agent-{i}", here) as checker,
                cluster.remote(f"agent-{i}", there) as settler,
            ):
                start.wait()
                for j in range(CALLS_PER_AGENT):
                    action = Action.tool(
                        "paid_lookup", {"query": f"order {i}-{j}", "est_cost": EST_COST}
                    )
                    decision = checker.check(action)
                    with lock:
                        seen.checks.append((here, decision))
                    if decision.verdict is Verdict.ALLOW:
                        settled = settler.commit(decision)
                        assert settled is not None
                        with lock:
                            seen.commits.append(settled)
        except Exception as exc:  # reported by the tests, with what it was
            with lock:
                seen.errors.append(f"agent-{i}: {type(exc).__name__}: {exc}")

    _run_threads(AGENTS, agent)
    return seen


def _server_errors(replica: Replica) -> dict[str, float]:
    """Responses with a 5xx status and undetermined decisions the replica counted."""
    text = httpx.get(f"{replica.url}/metrics", timeout=GENEROUS).text
    found: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            labels = sample.labels
            if sample.name == "interlock_http_requests_total" and int(labels["status"]) >= 500:
                found[f"{labels['method']} {labels['route']} {labels['status']}"] = sample.value
            undetermined = labels.get("verdict") == "undetermined"
            if sample.name == "interlock_decisions_total" and undetermined and sample.value:
                found["undetermined decisions"] = sample.value
    return found


def test_a_shared_budget_is_never_overspent_across_replicas(cluster: Cluster, load: Load) -> None:
    assert load.errors == []
    assert len(load.checks) == AGENTS * CALLS_PER_AGENT
    verdicts = Counter(d.verdict for _, d in load.checks)
    # exactly what fits: no overspend, and no lookup refused while the budget had room
    assert verdicts == {
        Verdict.ALLOW: AFFORDABLE,
        Verdict.DENY: AGENTS * CALLS_PER_AGENT - AFFORDABLE,
    }, verdicts
    for decision in load.allowed:
        assert decision.reservation is not None
        assert decision.reservation.amounts == (("pool", COST_UNITS, "USD"),)
    for _, decision in load.checks:
        if decision.verdict is Verdict.DENY:
            assert decision.rule_ids == ("budget:pool",), decision
    # every replica decided some of them
    assert {replica for replica, _ in load.checks} == {0, 1, 2}

    # every allowed lookup was committed once, at what it reserved
    assert sorted(r.id for r in load.commits) == sorted(
        d.reservation.id for d in load.allowed if d.reservation is not None
    )
    assert all(r.status is ReservationStatus.COMMITTED for r in load.commits)
    assert all(r.actual == {"pool": COST_UNITS} for r in load.commits)

    with open_store(cluster.url, migrate=False) as store:
        (row,) = store.budget_rows(tenant=LOAD_TENANT, budget_id="pool")
    assert (row.scope_key, row.cap) == ("tenant", LIMIT_UNITS)
    assert (row.spent, row.reserved, row.overage) == (AFFORDABLE * COST_UNITS, 0, 0)

    # and no replica answered anything with a 5xx or decided undetermined
    for replica in cluster.replicas:
        assert _server_errors(replica) == {}, replica.describe()


# -- approvals across replicas ------------------------------------------------------------


def test_an_approval_on_one_replica_releases_a_waiter_on_another(cluster: Cluster) -> None:
    a, b, c = 0, 1, 2
    refund = Action.tool("refund_order", {"order_id": 42, "amount": 250})
    with cluster.remote("refund-bot", a) as agent_a:
        asked = agent_a.check(refund)
    assert asked.verdict is Verdict.REQUIRE_APPROVAL and asked.approval is not None
    approval_id = asked.approval.id
    assert approval_id is not None

    with cluster.remote("refund-bot", b) as agent_b:
        # replica B sees the request replica A opened, still pending
        assert agent_b.wait_for_approval(approval_id, timeout=0.1).status.value == "pending"
        waited: list[Any] = []
        waiting = threading.Event()

        def waiter() -> None:
            waiting.set()
            try:
                waited.append(agent_b.wait_for_approval(approval_id, timeout=GENEROUS))
            except Exception as exc:
                waited.append(exc)
            waited.append(time.monotonic())

        thread = threading.Thread(target=waiter, daemon=True)
        started = time.monotonic()
        thread.start()
        assert waiting.wait(GENEROUS)
        threading.Event().wait(0.2)  # so the long-poll is (almost surely) in flight; not asserted

        approver = bearer(cluster.tokens["alice"])
        with httpx.Client(base_url=cluster.urls[c], timeout=GENEROUS) as human:
            pending = human.get("/v1/approvals", headers=approver).json()["approvals"]
            assert [p["id"] for p in pending] == [approval_id]
            decided = human.post(
                f"/v1/approvals/{approval_id}/approve",
                json={"reason": "order checked"},
                headers=approver,
            )
        assert decided.status_code == 200, decided.text
        assert decided.json()["decided_by"] == "alice"

        thread.join(GENEROUS)
        assert not thread.is_alive(), "the waiter on replica B was never released"
    record, released = waited
    assert not isinstance(record, Exception), record
    # Released before its deadline (a re-read only happens at the deadline): replica C's
    # NOTIFY reached replica B. Not a latency measurement: milliseconds against 30 s.
    assert released - started < GENEROUS / 2, "replica B was not woken by NOTIFY"
    assert (record.id, record.status.value, record.decided_by) == (approval_id, "approved", "alice")

    # The identical retry, sent through all three replicas at once: one claims the grant.
    retries: list[Decision | None] = [None, None, None]
    go = threading.Barrier(3, timeout=GENEROUS)

    def retry(i: int) -> None:
        with cluster.remote("refund-bot", i) as agent:
            go.wait()
            retries[i] = agent.check(refund)

    _run_threads(3, retry)
    verdicts = sorted(d.verdict.value for d in retries if d is not None)
    assert verdicts == ["allow", "require_approval", "require_approval"], retries
    losers = [d for d in retries if d is not None and d.verdict is Verdict.REQUIRE_APPROVAL]
    # the two that lost opened one new request between them (one pending per call)
    new_ids = {d.approval.id for d in losers if d.approval is not None}
    assert len(new_ids) == 1 and approval_id not in new_ids, retries

    with httpx.Client(base_url=cluster.urls[a], timeout=GENEROUS) as human:
        claimed = human.get(f"/v1/approvals/{approval_id}", headers=approver).json()
        assert claimed["status"] == "claimed"
        pending = human.get("/v1/approvals", headers=approver).json()["approvals"]
        assert [p["id"] for p in pending] == list(new_ids)
    with cluster.remote("refund-bot", b) as agent_b:
        again = agent_b.check(refund)  # the grant is used up
    assert again.verdict is Verdict.REQUIRE_APPROVAL and again.approval is not None
    assert again.approval.id in new_ids


# -- the audit chain ----------------------------------------------------------------------


def test_the_audit_chain_verifies_after_the_load(cluster: Cluster, load: Load) -> None:
    assert load.errors == []
    auditor = bearer(cluster.tokens["load-approver"])
    with open_store(cluster.url, migrate=False) as store:
        report = store.verify_audit()
        rows = list(store.audit_chain(LOAD_TENANT))
    assert report.ok, report.breaks
    assert report.checked[LOAD_TENANT] == len(rows)

    # every decision the agents were given is recorded exactly once, and nothing else is
    # in the tenant but the commits' budget records
    kinds = Counter(row.kind for row in rows)
    assert kinds == {"decision": len(load.checks), "budget": len(load.commits)}, kinds
    recorded = Counter(row.decision_id for row in rows if row.kind == "decision")
    assert recorded == Counter(d.decision_id for _, d in load.checks)
    assert set(recorded.values()) == {1} and None not in recorded
    assert Counter(row.decision for row in rows if row.kind == "decision") == {
        "allow": AFFORDABLE,
        "deny": len(load.checks) - AFFORDABLE,
    }
    assert [row.seq for row in rows] == list(range(1, len(rows) + 1))

    for replica in cluster.replicas:
        verified = httpx.get(f"{replica.url}/v1/audit/verify", headers=auditor, timeout=GENEROUS)
        assert verified.status_code == 200, verified.text
        body = verified.json()
        assert (body["tenant"], body["ok"], body["records"], body["breaks"]) == (
            LOAD_TENANT,
            True,
            len(rows),
            [],
        ), body
