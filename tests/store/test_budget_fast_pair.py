"""What the SQLite budget pair's lean Python must keep (issue 13): reservation ids made
in batches are still unique, random and never shared with a forked child; the
remembered lines JSON is the JSON of each line, whatever was remembered before; the
usual statements' per-thread cursor dies with the store; a reservation made in memory
is the row the database holds; and with no lock on the memo of unsettled
reservations, racing commits and releases still settle each reservation once."""

from __future__ import annotations

import json
import os
import re
import threading
from collections.abc import Iterator
from dataclasses import FrozenInstanceError, replace
from pathlib import Path

import pytest

from interlock.errors import ReservationClosed, StoreUnavailable
from interlock.store import (
    ANY_AGENT,
    BudgetLine,
    Reservation,
    ReservationStatus,
    ReserveOutcome,
    SqlStore,
    open_store,
    sql_budgets,
    sql_leases,
)
from interlock.store.sql_base import compact_json
from interlock.store.sql_budgets import _RESERVE_USUAL, _new_id
from interlock.store.sql_leases import lines_json

AMOUNT = 7


def line(budget: str = "spend", *, amount: int = AMOUNT, cap: int = 10**9) -> BudgetLine:
    return BudgetLine(budget, "global", 0, "units", cap, amount, 0)


@pytest.fixture
def lite(tmp_path: Path) -> Iterator[SqlStore]:
    store = open_store(f"sqlite:///{tmp_path / 'pair.db'}")
    yield store
    store.close()


def test_ids_made_in_batches_are_unique_and_shaped_as_before() -> None:
    made = [_new_id() for _ in range(5 * sql_budgets._IDS_AT_ONCE + 3)]
    assert len(set(made)) == len(made)
    assert all(re.fullmatch(r"res_[0-9a-f]{24}", rid) for rid in made)


def test_ids_from_threads_are_never_handed_out_twice() -> None:
    got: list[list[str]] = [[] for _ in range(8)]

    def take(into: list[str]) -> None:
        for _ in range(2_000):
            into.append(_new_id())

    threads = [threading.Thread(target=take, args=(into,)) for into in got]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    every = [rid for into in got for rid in into]
    assert len(set(every)) == len(every) == 16_000


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_a_forked_child_does_not_hand_out_its_parents_ids() -> None:
    _new_id()  # the pool now holds ids made ahead
    ahead = list(sql_budgets._ids)
    assert ahead  # the adversarial case: a full pool at the fork
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: report its next ids and leave at once
        try:
            os.write(write, json.dumps([_new_id() for _ in range(8)]).encode())
        finally:
            os._exit(0)
    os.close(write)
    with os.fdopen(read) as pipe:
        child = json.loads(pipe.read())
    os.waitpid(pid, 0)
    assert len(child) == 8
    assert not set(child) & set(ahead)  # none of the parent's future ids
    parent_next = [_new_id() for _ in range(len(ahead))]
    assert not set(child) & set(parent_next)


def test_the_remembered_lines_json_is_each_lines_own() -> None:
    def plain(one: BudgetLine) -> str:
        return compact_json(
            [
                [
                    one.budget_id,
                    one.scope_key,
                    one.window_start,
                    one.unit,
                    one.cap,
                    one.amount,
                    one.headroom,
                ]
            ]
        )

    seen = [
        BudgetLine("spend", "global", 0, "units", 100, 5, 0),
        BudgetLine("spend", "global", 0, "units", 100, 6, 0),  # another amount
        BudgetLine("spend", "global", 0, "units", 101, 5, 0),  # another cap
        BudgetLine("spend", "global", 0, "units", 100, 5, 1),  # another headroom
        BudgetLine("spend", "global", 1, "units", 100, 5, 0),  # another window
        BudgetLine("spend", 'user:"x"', 0, "USD", 100, 5, 0),  # quoting
        BudgetLine("other", "global", 0, "units", 100, 5, 0),
    ]
    for _ in range(2):  # the second time from memory
        for one in seen:
            assert lines_json((one,)) == plain(one)
            assert json.loads(lines_json((one,))) == json.loads(plain(one))


def test_a_full_lines_memo_is_cleared_not_grown(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sql_leases, "_LINES", {})
    for amount in range(1, sql_leases._QUOTED_KEPT + 50):
        lines_json((line(amount=amount),))
    assert len(sql_leases._LINES) <= sql_leases._QUOTED_KEPT
    assert lines_json((line(amount=3),)) == compact_json(
        [["spend", "global", 0, "units", 10**9, 3, 0]]
    )


def test_the_fast_builders_make_frozen_dataclasses_of_their_own_class() -> None:
    made = sql_budgets._made(
        "res_1", "acme", "k", ReservationStatus.RESERVED, (line(),), 1, 2, None, None, None
    )
    outcome = sql_budgets._outcome(made)
    assert type(made) is Reservation and type(outcome) is ReserveOutcome
    assert outcome == ReserveOutcome(made)
    with pytest.raises(FrozenInstanceError):
        made.owner = "agent-1"  # type: ignore[misc]
    with pytest.raises(FrozenInstanceError):
        outcome.refusal = None  # type: ignore[misc]
    assert replace(made, owner="agent-1").owner == "agent-1"


@pytest.mark.parametrize("owner", ["agent-1", None])
def test_the_reservation_returned_is_the_row_the_database_holds(
    lite: SqlStore, owner: str | None
) -> None:
    first = lite.reserve(tenant="acme", idempotency_key="k0", lines=[line()], ttl_us=10**9)
    assert first.reservation is not None  # the counter exists: the usual statement runs
    outcome = lite.reserve(
        tenant="acme", idempotency_key="k1", lines=[line()], ttl_us=10**9, owner=owner
    )
    made = outcome.reservation
    assert made is not None and outcome.refusal is None
    assert lite.get_reservation(made.id) == made
    settled = lite.commit(made.id, {"spend": AMOUNT - 2}, by=owner or ANY_AGENT)
    assert lite.get_reservation(made.id) == settled
    assert settled.status is ReservationStatus.COMMITTED and settled.actual == {"spend": 5}
    (row,) = lite.budget_rows(budget_id="spend")
    assert (row.spent, row.reserved) == (AMOUNT - 2, AMOUNT)


def test_the_usual_statements_cursor_dies_with_the_store(tmp_path: Path) -> None:
    store = open_store(f"sqlite:///{tmp_path / 'closed.db'}")
    first = store.reserve(tenant="acme", idempotency_key="a", lines=[line()], ttl_us=10**9)
    assert first.reservation is not None  # the thread's cursor exists now
    store.close()
    with pytest.raises(StoreUnavailable):
        store.usual(_RESERVE_USUAL, ("res_x",) + ("x",) * 13)
    with pytest.raises(StoreUnavailable):
        store.reserve(tenant="acme", idempotency_key="b", lines=[line()], ttl_us=10**9)


def test_each_thread_runs_the_usual_statements_on_its_own_connection(lite: SqlStore) -> None:
    errors: list[BaseException] = []

    def pairs(worker: int) -> None:
        try:
            for i in range(50):
                outcome = lite.reserve(
                    tenant="acme", idempotency_key=f"t{worker}-{i}", lines=[line()], ttl_us=10**9
                )
                assert outcome.reservation is not None
                lite.commit(outcome.reservation.id)
        except BaseException as exc:  # reported below
            errors.append(exc)

    threads = [threading.Thread(target=pairs, args=(w,)) for w in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    (row,) = lite.budget_rows(budget_id="spend")
    assert (row.spent, row.reserved) == (4 * 50 * AMOUNT, 0)


def test_racing_commits_and_releases_settle_each_reservation_once(lite: SqlStore) -> None:
    """No lock on the memo: two threads race a commit against a commit, or a
    release, on every reservation. Exactly one settlement counts."""
    made = []
    for i in range(150):
        outcome = lite.reserve(tenant="acme", idempotency_key=f"r{i}", lines=[line()], ttl_us=10**9)
        assert outcome.reservation is not None
        made.append(outcome.reservation.id)
    start = threading.Barrier(2)
    outcomes: dict[str, list[str]] = {rid: [] for rid in made}
    lock = threading.Lock()

    def settle(release_odd: bool) -> None:
        start.wait()
        for n, rid in enumerate(made):
            try:
                if release_odd and n % 2:
                    lite.release(rid)
                    got = "released"
                else:
                    got = "replayed" if lite.commit(rid).replayed else "committed"
            except ReservationClosed:
                got = "closed"
            with lock:
                outcomes[rid].append(got)

    threads = [threading.Thread(target=settle, args=(flag,)) for flag in (False, True)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    committed = 0
    for n, rid in enumerate(made):
        final = lite.get_reservation(rid).status
        got = sorted(outcomes[rid])
        if n % 2 == 0:  # two commits: one commits, the other replays it
            assert got == ["committed", "replayed"], (rid, got)
            assert final is ReservationStatus.COMMITTED
            committed += 1
        elif final is ReservationStatus.COMMITTED:  # the commit won; the release refused
            assert got == ["closed", "committed"], (rid, got)
            committed += 1
        else:  # the release won; the commit refused
            assert final is ReservationStatus.RELEASED
            assert got == ["closed", "released"], (rid, got)
    (row,) = lite.budget_rows(budget_id="spend")
    assert (row.spent, row.reserved) == (committed * AMOUNT, 0)
