"""SQLite's usual reservation and usual commit, one statement each (schema 9, ADR 0012
§6): a view whose INSTEAD OF trigger writes the reservation's row and takes its line,
or settles it, all or nothing. Each decides only the usual case and aborts on any
other, changing nothing, for the general path to decide; these tests drive every
abort, check that nothing of an aborted statement stays, and that a store with the
statements and one without leave the same rows after the same script."""

from __future__ import annotations

import random
import sqlite3
from collections.abc import Iterator
from dataclasses import fields
from pathlib import Path

import pytest

from interlock.errors import ReservationClosed
from interlock.store import BudgetLine, Reservation, ReservationStatus, SqlStore, open_store
from interlock.store.sql_budgets import _COMMIT_USUAL, _RESERVE_USUAL, _made

CAP = 100


def spend(amount: int, *, cap: int = CAP, headroom: int = 0, budget: str = "spend") -> BudgetLine:
    return BudgetLine(budget, "global", 0, "units", cap, amount, headroom)


@pytest.fixture
def lite(tmp_path: Path) -> Iterator[SqlStore]:
    store = open_store(f"sqlite:///{tmp_path / 'usual.db'}")
    yield store
    store.close()


def statements(store: SqlStore) -> list[str]:
    """What this thread's connection runs from now on, collected in a list (a
    trigger's statements are traced with the text of the statement that fired them:
    one entry each, the same text)."""
    sent: list[str] = []

    def trace(sql: str) -> None:
        if not sent or sent[-1] != sql:
            sent.append(sql)

    store._connection().set_trace_callback(trace)  # type: ignore[attr-defined]
    return sent


def table(db: Path, sql: str) -> list[tuple[object, ...]]:
    conn = sqlite3.connect(db)
    try:
        return list(conn.execute(sql).fetchall())
    finally:
        conn.close()


def test_a_reservation_and_its_commit_are_one_statement_each(lite: SqlStore) -> None:
    first = lite.reserve(tenant="acme", idempotency_key="k0", lines=[spend(5)], ttl_us=10**9)
    assert first.reservation is not None  # the counter exists now
    sent = statements(lite)
    outcome = lite.reserve(tenant="acme", idempotency_key="k1", lines=[spend(7)], ttl_us=10**9)
    assert outcome.reservation is not None
    lite.commit(outcome.reservation.id, {"spend": 4})
    assert [s.split()[:3] for s in sent] == [
        ["INSERT", "INTO", "budget_reserve_usual"],
        ["INSERT", "INTO", "budget_commit_usual"],
    ]  # no BEGIN, no COMMIT, no read
    (row,) = lite.budget_rows(tenant="acme", budget_id="spend")
    assert (row.spent, row.reserved, row.headroom, row.overage) == (4, 5, 0, 0)


def test_an_overrun_within_the_headroom_is_the_usual_commit(lite: SqlStore) -> None:
    lite.reserve(tenant="acme", idempotency_key="k0", lines=[spend(1)], ttl_us=10**9)
    outcome = lite.reserve(
        tenant="acme", idempotency_key="k1", lines=[spend(10, headroom=5)], ttl_us=10**9
    )
    assert outcome.reservation is not None
    sent = statements(lite)
    done = lite.commit(outcome.reservation.id, {"spend": 15})
    assert [s.split()[2] for s in sent] == ["budget_commit_usual"]
    assert done.status is ReservationStatus.COMMITTED and done.actual == {"spend": 15}
    (row,) = lite.budget_rows(tenant="acme", budget_id="spend")
    assert (row.spent, row.reserved, row.headroom, row.overage, row.excess) == (15, 1, 0, 5, 0)
    assert not lite.budget_closures(tenant="acme")


def test_an_overrun_past_the_headroom_takes_the_general_path_and_closes(lite: SqlStore) -> None:
    lite.reserve(tenant="acme", idempotency_key="k0", lines=[spend(1)], ttl_us=10**9)
    outcome = lite.reserve(
        tenant="acme", idempotency_key="k1", lines=[spend(10, headroom=5)], ttl_us=10**9
    )
    assert outcome.reservation is not None
    sent = statements(lite)
    lite.commit(outcome.reservation.id, {"spend": 16})
    assert "budget_commit_usual" not in " ".join(sent)
    assert sent[0] == "BEGIN IMMEDIATE"
    (row,) = lite.budget_rows(tenant="acme", budget_id="spend")
    assert (row.spent, row.overage, row.excess) == (16, 6, 1)
    assert lite.budget_closures(tenant="acme")


def test_a_full_counter_aborts_the_usual_reservation_and_the_general_path_refuses(
    lite: SqlStore,
) -> None:
    held = lite.reserve(tenant="acme", idempotency_key="k1", lines=[spend(90)], ttl_us=10**9)
    assert held.reservation is not None
    sent = statements(lite)
    refused = lite.reserve(tenant="acme", idempotency_key="k2", lines=[spend(20)], ttl_us=10**9)
    assert refused.reservation is None and refused.refusal is not None
    assert refused.refusal.reserved == 90  # the counter's numbers, read by the general path
    assert any("budget_reserve_usual" in s for s in sent)  # tried first, aborted
    path = lite.file_path()
    assert path is not None
    rows = table(path, "SELECT idempotency_key FROM reservations ORDER BY idempotency_key")
    assert rows == [("k1",)]  # nothing of the aborted statement stayed


def test_the_usual_reservation_aborts_on_a_closed_budget(lite: SqlStore) -> None:
    first = lite.reserve(
        tenant="acme", idempotency_key="k1", lines=[spend(10, headroom=0)], ttl_us=10**9
    )
    assert first.reservation is not None
    lite.commit(first.reservation.id, {"spend": 30})  # past its headroom: closes
    assert lite.budget_closures(tenant="acme")
    again = lite.reserve(tenant="acme", idempotency_key="k2", lines=[spend(1)], ttl_us=10**9)
    assert again.reservation is None and again.refusal is not None
    assert again.refusal.closed is not None


def test_a_used_key_aborts_the_usual_reservation_and_replays_the_first(lite: SqlStore) -> None:
    first = lite.reserve(tenant="acme", idempotency_key="k1", lines=[spend(10)], ttl_us=10**9)
    again = lite.reserve(tenant="acme", idempotency_key="k1", lines=[spend(10)], ttl_us=10**9)
    assert first.reservation is not None and again.reservation is not None
    assert again.reservation.replayed and again.reservation.id == first.reservation.id
    (row,) = lite.budget_rows(tenant="acme", budget_id="spend")
    assert row.reserved == 10  # reserved once


def test_a_reservation_on_no_counter_yet_makes_it(lite: SqlStore) -> None:
    outcome = lite.reserve(tenant="acme", idempotency_key="k1", lines=[spend(10)], ttl_us=10**9)
    assert outcome.reservation is not None
    (row,) = lite.budget_rows(tenant="acme", budget_id="spend")
    assert (row.reserved, row.cap) == (10, CAP)


def test_the_usual_commit_aborts_once_another_instance_settled_it(
    lite: SqlStore, tmp_path: Path
) -> None:
    outcome = lite.reserve(tenant="acme", idempotency_key="k1", lines=[spend(10)], ttl_us=10**9)
    assert outcome.reservation is not None
    other = open_store(f"sqlite:///{tmp_path / 'usual.db'}")
    try:
        other.release(outcome.reservation.id)
    finally:
        other.close()
    sent = statements(lite)
    with pytest.raises(ReservationClosed):
        lite.commit(outcome.reservation.id)
    assert any("budget_commit_usual" in s for s in sent)  # tried, aborted, then read
    (row,) = lite.budget_rows(tenant="acme", budget_id="spend")
    assert (row.spent, row.reserved) == (0, 0)  # released: nothing charged, nothing held


def test_the_views_change_nothing_when_they_abort(lite: SqlStore) -> None:
    """Straight at the views: an abort leaves every table as it was."""
    path = lite.file_path()
    assert path is not None
    held = lite.reserve(tenant="acme", idempotency_key="k1", lines=[spend(95)], ttl_us=10**9)
    assert held.reservation is not None
    before = (
        table(path, "SELECT * FROM budgets"),
        table(path, "SELECT * FROM reservations ORDER BY id"),
    )
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        with pytest.raises(sqlite3.IntegrityError, match="interlock-unusual"):
            conn.execute(  # the counter cannot hold 10 more
                _RESERVE_USUAL,
                (
                    "res_x",
                    "acme",
                    "k9",
                    "[]",
                    1,
                    2,
                    None,
                    "spend",
                    "global",
                    0,
                    "units",
                    CAP,
                    10,
                    0,
                ),
            )
        with pytest.raises(sqlite3.IntegrityError, match="interlock-unusual"):
            conn.execute(  # no such reservation in flight
                _COMMIT_USUAL, ("res_nope", 1, "{}", "acme", "spend", "global", 0, 5, 0, 5, 0)
            )
        conn.execute("UPDATE reservations SET status = 'released'")  # settled elsewhere
        with pytest.raises(sqlite3.IntegrityError, match="interlock-unusual"):
            conn.execute(
                _COMMIT_USUAL,
                (held.reservation.id, 1, "{}", "acme", "spend", "global", 0, 95, 0, 95, 0),
            )
        conn.execute("UPDATE reservations SET status = 'reserved'")
    finally:
        conn.close()
    after = (
        table(path, "SELECT * FROM budgets"),
        table(path, "SELECT * FROM reservations ORDER BY id"),
    )
    assert after == before


def test_inside_a_transaction_an_abort_undoes_the_statement_only(lite: SqlStore) -> None:
    with lite.transaction(write=True) as cur:
        cur.execute("INSERT INTO budget_closures VALUES ('t', 'b', 's', 1, 'r', 0)")
        assert not lite.usual_in(cur, _COMMIT_USUAL, ("nope", 1, "{}", "t", "b", "s", 0) + (1,) * 4)
    assert lite.budget_closures(tenant="t")  # the transaction went on and committed


def test_the_fast_reservation_builder_makes_the_dataclass() -> None:
    line = spend(3)
    made = _made(
        "res_1", "acme", "k", ReservationStatus.COMMITTED, (line,), 1, 2, 3, {"spend": 3}, "bot"
    )
    built = Reservation(
        "res_1", "acme", "k", ReservationStatus.COMMITTED, (line,), 1, 2, 3, {"spend": 3}, False
    )
    built = Reservation(
        **{**{f.name: getattr(built, f.name) for f in fields(built)}, "owner": "bot"}
    )
    assert made == built
    assert [getattr(made, f.name) for f in fields(made)] == [
        getattr(built, f.name) for f in fields(built)
    ]


def test_with_and_without_the_statements_a_script_leaves_the_same_rows(tmp_path: Path) -> None:
    """One random script — reservations that fit or not, commits within, past and far
    past the headroom, releases, replays, settlements by another instance — on a
    store that uses the usual statements and on one that never does."""
    outcomes = []
    for usual in (True, False):
        path = tmp_path / f"{usual}.db"
        store = open_store(f"sqlite:///{path}", clock=iter(range(10**6, 10**9)).__next__)
        other = open_store(f"sqlite:///{path}", clock=iter(range(10**9, 10**10)).__next__)
        store.usual_statements = usual
        rng = random.Random(13)
        held: list[str] = []
        amounts: dict[str, int] = {}
        said: list[object] = []
        for step in range(400):
            if rng.random() < 0.2 and store.budget_closures(tenant="acme"):
                store.reopen_budget(tenant="acme", budget_id="spend")
            move = rng.random()
            if move < 0.5 or not held:
                key = f"k{rng.randrange(step + 1)}"
                line = spend(rng.randint(1, 30), headroom=rng.choice((0, 5)), cap=2_500)
                got = store.reserve(tenant="acme", idempotency_key=key, lines=[line], ttl_us=10)
                said.append(got.refusal.reserved if got.refusal else got.reservation.replayed)
                if got.reservation is not None and not got.reservation.replayed:
                    held.append(got.reservation.id)
                    amounts[got.reservation.id] = line.amount
                continue
            rid = held.pop(rng.randrange(len(held)))
            try:
                if move < 0.8:  # under, at, within and past the headroom (5 or 0)
                    used = max(1, amounts[rid] + rng.choice((-3, 0, 2, 5, 6, 20)))
                    done = store.commit(rid, {"spend": used})
                elif move < 0.85:  # committed elsewhere first: this commit replays it
                    other.commit(rid)
                    done = store.commit(rid)
                elif move < 0.9:  # released elsewhere first: this commit is refused
                    other.release(rid)
                    done = store.commit(rid)
                else:
                    done = store.release(rid)
                said.append((done.status, done.actual))
            except ReservationClosed as exc:
                said.append(type(exc).__name__)
        rows = table(
            path,
            "SELECT tenant, budget_id, scope_key, window_start, unit, cap, spent, reserved, "
            "headroom, overage, excess FROM budgets",
        )
        settled = table(
            path,
            "SELECT idempotency_key, status, actual FROM reservations ORDER BY idempotency_key",
        )
        closures = table(path, "SELECT tenant, budget_id, scope_key, excess FROM budget_closures")
        outcomes.append((said, rows, settled, closures))
        store.close()
        other.close()
    usual_run, general_run = outcomes
    assert usual_run == general_run
    said, rows, settled, _ = usual_run
    assert {status for _, status, _ in settled} >= {"committed", "released"}
    assert any(isinstance(x, int) for x in said)  # some reservations were refused
    assert "ReservationClosed" in said  # some settled by another instance first
    assert rows[0][-1] > 0  # some commits ran past their headroom
