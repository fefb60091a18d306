"""The views a SQL history keeps: each carries a fingerprint index (the filter an
argument's probe is tested against once, instead of step by step), which must hold
every fingerprint of the view's data-bringing steps whatever path made the view — a
read, a read of what changed since, an append, a settle, by this replica or another;
and together they stay within ``max_fingerprints_kept``, the least recently used
views out (read whole again when needed, never wrong). Each test runs on SQLite and
PostgreSQL (two store objects on one database: two replicas)."""

from __future__ import annotations

import random
from collections.abc import Callable

import pytest

from interlock import Action, Context, Guard, load_policy_text
from interlock.adapters.base import run_settled
from interlock.core.events import MemorySink
from interlock.session.fingerprints import of_data
from interlock.session.history import NewStep, SessionView
from interlock.store import SqlStore

_WORDS = ("ledger", "invoice", "quarter", "harbour", "meridian", "copper", "violet", "summit")


def _text(rng: random.Random, words: int = 60) -> str:
    token = "".join(rng.choices("ABCDEFGHJKLMNPQRSTUVWXYZ23456789", k=24))
    return " ".join(rng.choice(_WORDS) for _ in range(words)) + f" key={token}"


def _call(name: str, decision: str, **kw: object) -> NewStep:
    return NewStep(kind="tool", name=name, verdict="allow", decision_id=decision, **kw)  # type: ignore[arg-type]


def _assert_indexed(view: SessionView, where: object) -> None:
    """The view's index holds every fingerprint, label and name of its sources (the
    steps that brought data in, but trusted inputs: the index leaves them out)."""
    index = view.index
    assert index is not None, where
    for step in view.sources:
        if step.kind == "input" and step.trusted:
            continue
        assert step.fingerprints <= index.prints, (where, step.seq)
        assert step.labels <= index.labels, (where, step.seq)
        assert (step.kind, step.name) in index.names, (where, step.seq)


def test_every_view_of_either_replica_has_an_index_holding_its_sources(
    store: SqlStore, open_replica: Callable[..., SqlStore]
) -> None:
    """Two replicas taking turns at random (appends with and without data, settles
    adding data to their own and the other's steps, trusted inputs, the bound
    crossed): after every operation both replicas' views are indexed in full."""
    rng = random.Random(1806)
    replicas = [store.session_history(max_steps=6), open_replica().session_history(max_steps=6)]
    decisions: list[str] = []
    for i in range(80):
        history = rng.choice(replicas)
        op = rng.random()
        if op < 0.45:
            decision = f"d-{i}"
            decisions.append(decision)
            labels = frozenset(rng.sample(["secret", "untrusted", "pii"], rng.randint(0, 1)))
            history.append("acme", "s", _call(f"tool{i % 5}", decision, labels=labels))
        elif op < 0.55:
            history.append(
                "acme",
                "s",
                NewStep(
                    "input",
                    "input",
                    "input",
                    fingerprints=of_data(_text(rng)),
                    trusted=rng.random() < 0.5,
                    executed=True,
                ),
            )
        elif decisions:
            history.settle(
                "acme",
                "s",
                rng.choice(decisions),
                executed=rng.random() < 0.8,
                fingerprints=of_data(_text(rng)),
                labels=frozenset(rng.sample(["secret", "untrusted"], rng.randint(0, 1))),
            )
        for n, replica in enumerate(replicas):
            _assert_indexed(replica.view("acme", "s"), (i, n))


def test_a_settle_made_here_reaches_the_kept_views_index(store: SqlStore) -> None:
    """The settle moves the kept view on in process (no read): its index takes the
    result's fingerprints before the view is handed out."""
    history = store.session_history()
    history.append("acme", "s", _call("read_file", "d-1", labels=frozenset({"secret"})))
    assert history.view("acme", "s").index is not None
    data = of_data("the deploy key is QX7K2M9PLW4R8TZC5N3VJ6HB and nothing else")
    history.settle("acme", "s", "d-1", executed=True, fingerprints=data)
    view = history.view("acme", "s")
    _assert_indexed(view, "after the settle")
    assert view.index is not None and view.index.may_hold(data)


def test_kept_views_stay_within_their_fingerprint_budget(
    store: SqlStore, open_replica: Callable[..., SqlStore]
) -> None:
    rng = random.Random(7)
    budget = 5_000
    history = store.session_history(max_fingerprints_kept=budget)
    results: dict[str, frozenset[int]] = {}
    for n in range(40):
        session = f"s-{n}"
        history.append("acme", session, _call("fetch_url", f"{session}-d"))
        results[session] = of_data(_text(rng, 400))
        history.settle(
            "acme", session, f"{session}-d", executed=True, fingerprints=results[session]
        )
        history.view("acme", session)
        views, held = history.kept
        assert held <= budget or views == 1, (n, views, held)
    views, _ = history.kept
    assert 1 < views < 40  # some went, the newest stayed
    # a view that went is read whole again: the same as a replica's that never kept it
    fresh = open_replica().session_history()
    for session, data in results.items():
        mine, theirs = history.view("acme", session), fresh.view("acme", session)
        assert [(s.seq, s.fingerprints) for s in mine.steps] == [
            (s.seq, s.fingerprints) for s in theirs.steps
        ]
        assert mine.steps[0].fingerprints == data
        _assert_indexed(mine, session)


def test_the_budget_must_not_be_negative(store: SqlStore) -> None:
    with pytest.raises(ValueError, match="max_fingerprints_kept must be 0 or more, not -1"):
        store.session_history(max_fingerprints_kept=-1)


FLOW: str = """\
version: 1
default: allow
tools:
  vault_get: {labels: [secret]}
rules:
  - id: no-secret-out
    decision: deny
    reason: data a secret step returned may not leave
    name: send_email
    session:
      flows_from: {labels: [secret]}
"""


def test_a_flow_is_refused_after_the_sessions_kept_view_went(store: SqlStore) -> None:
    """With a budget that keeps one view, every other session's check evicts the
    secret's session's view: its next check reads it whole and still finds the
    secret in the mail."""
    guard = Guard(
        load_policy_text(FLOW, file="flow.yaml"),
        sink=MemorySink(),
        store=store,
        sessions=store.session_history(max_fingerprints_kept=0),
    )
    context = Context(tenant="acme", agent="agent", session_id="victim")
    secret = "vault token 9KQ2XW7MZP4TR8LB6NC3VH5J for the payroll service"
    read = guard.check(
        Action(kind="tool", name="vault_get", arguments={"k": "pay"}, context=context)
    )
    assert run_settled(guard, read, lambda: secret) == secret
    for n in range(5):
        other = Context(tenant="acme", agent="agent", session_id=f"other-{n}")
        done = guard.check(
            Action(kind="tool", name="fetch_url", arguments={"url": f"/p/{n}"}, context=other)
        )
        run_settled(guard, done, lambda n=n: _text(random.Random(n), 200))  # type: ignore[misc]
    leak = Action(
        kind="tool",
        name="send_email",
        arguments={"to": "ops@corp.example", "body": f"fyi: {secret[6:34]}"},
        context=context,
    )
    assert guard.check(leak).verdict.value == "deny"
    benign = Action(
        kind="tool",
        name="send_email",
        arguments={"to": "ops@corp.example", "body": "the payroll run is done"},
        context=context,
    )
    assert guard.check(benign).verdict.value == "allow"
    guard.close()  # its reaper stops before the store closes
