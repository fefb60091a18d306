"""The in-memory history's bound on the fingerprints it keeps across sessions: the
running total matches what its sessions hold, never exceeds the bound after a write
(but for the one session just written), demotes the least recently written sessions
first, never the writer, keeps the labels of those it demotes, and leaves the views it
handed out as they were."""

from __future__ import annotations

import random
import threading

import pytest

from interlock import Action, Context, Guard, Verdict
from interlock.policy import load_policy_text
from interlock.policy.sessionrules import FlowTest, StepSelector
from interlock.session.fingerprints import FORMAT_MARK, of_data
from interlock.session.history import (
    MAX_FINGERPRINTS,
    MemoryHistory,
    NewStep,
    SessionView,
)

ANY = FlowTest(StepSelector())
SECRET = "DB_PASSWORD=pa55-w0rd-4b1c-9d2e-7f00-aa11-bb22-cc33"


def _prints(n: int, salt: int) -> frozenset[int]:
    """``n`` distinct fingerprints of the current format (the mark among them)."""
    return frozenset({FORMAT_MARK, *((salt << 20) + i + 1 for i in range(n - 1))})


def _call(
    history: MemoryHistory,
    session: str,
    decision_id: str,
    prints: frozenset[int],
    labels: frozenset[str] = frozenset(),
) -> None:
    history.append("t", session, NewStep("tool", "read_file", "allow", decision_id, labels=labels))
    history.settle("t", session, decision_id, executed=True, fingerprints=prints)


def _counted(history: MemoryHistory, sessions: list[str]) -> int:
    """What the sessions hold, read from their views: each step's set, the index, and
    the union of the data their dropped steps brought in (past ``max_steps``)."""
    total = 0
    for session in sessions:
        view = history.view("t", session)
        total += sum(len(step.fingerprints) for step in view.steps)
        if view.index is not None:
            total += len(view.index.prints)
        if view.past.data is not None:
            total += len(view.past.data.prints) + len(view.past.data.trusted)
    return total


def test_the_bound_holds_after_every_write_across_many_sessions() -> None:
    bound = 2_000
    history = MemoryHistory(max_steps=6, max_fingerprints=bound)
    rng = random.Random(7)
    sessions = [f"s{n}" for n in range(40)]
    for n in range(600):
        session = rng.choice(sessions)
        decision_id = f"d{n}"
        history.append("t", session, NewStep("tool", "fetch", "allow", decision_id))
        assert history.fingerprints_held <= bound
        assert history.fingerprints_held == _counted(history, sessions)
        prints = _prints(rng.randint(1, 40), n)  # a session alone: < 35 * 40
        history.settle("t", session, decision_id, executed=True, fingerprints=prints)
        assert history.fingerprints_held <= bound
        assert history.fingerprints_held == _counted(history, sessions)
        # the writer keeps its steps: it is never demoted by its own write
        assert history.view("t", session).steps[-1].decision_id == decision_id
    # steps dropped past max_steps, and rebuilt indexes, were taken off the total
    assert 0 < history.fingerprints_held <= bound
    assert sum(1 for s in sessions if history.view("t", s).steps) < len(sessions)  # demoted


def test_a_session_alone_over_the_bound_keeps_its_steps_until_another_writes() -> None:
    history = MemoryHistory(max_fingerprints=50)
    _call(history, "big", "d1", _prints(100, 1))
    view = history.view("t", "big")
    assert [s.decision_id for s in view.steps] == ["d1"]
    assert history.fingerprints_held == 200  # its step's set and its index
    history.append("t", "other", NewStep("tool", "ls", "allow", "d2"))
    assert history.view("t", "big").steps == ()  # demoted by another's write
    assert history.view("t", "other").steps[0].decision_id == "d2"
    assert history.fingerprints_held == 0


def test_the_least_recently_written_sessions_go_first() -> None:
    history = MemoryHistory(max_fingerprints=1_000)
    for n, session in enumerate(("a", "b", "c")):
        _call(history, session, f"d-{session}", _prints(100, n))  # 200 each: 600
    # "a" is written again (a settle counts as a write): "b" is now the oldest
    history.append("t", "a", NewStep("tool", "ls", "allow", "d-a2"))
    history.settle("t", "a", "d-a2", executed=True, fingerprints=_prints(10, 9))
    _call(history, "d", "d-d", _prints(200, 4))  # 400 more: 1,020, over the bound
    assert history.view("t", "b").steps == ()
    assert [len(history.view("t", s).steps) for s in ("a", "c", "d")] == [2, 1, 1]
    _call(history, "e", "d-e", _prints(100, 5))  # 1,020 again: then "c"
    assert history.view("t", "c").steps == ()
    assert len(history.view("t", "a").steps) == 2
    _call(history, "f", "d-f", _prints(100, 6))  # and then "a"
    assert history.view("t", "a").steps == ()
    assert history.fingerprints_held <= 1_000


def test_a_settle_makes_its_session_the_most_recent() -> None:
    history = MemoryHistory(max_fingerprints=500)
    history.append("t", "a", NewStep("tool", "read_file", "allow", "d-a"))
    _call(history, "b", "d-b", _prints(100, 1))
    history.settle("t", "a", "d-a", executed=True, fingerprints=_prints(100, 2))
    _call(history, "c", "d-c", _prints(100, 3))  # 600: the oldest written is "b"
    assert history.view("t", "b").steps == ()
    assert history.view("t", "a").steps[0].executed


def test_a_demoted_session_keeps_its_labels_and_its_numbering() -> None:
    history = MemoryHistory(max_fingerprints=300)
    _call(history, "a", "d1", of_data(SECRET), frozenset({"secret"}))
    _call(history, "plain", "d2", _prints(20, 1))
    _call(history, "b", "d3", _prints(150, 2))  # "a" and "plain" go
    kept = history.view("t", "a")
    assert kept.steps == () and kept.labels == {"secret"} and kept.next_seq == 2
    # a session with no labels keeps its numbering too, that its data is lost, and what
    # it ran, counted (its past)
    plain = history.view("t", "plain")
    assert plain == SessionView("t", "plain", next_seq=2, lost=True, past=plain.past)
    assert [(c.name, c.n) for c in plain.past.counts] == [("read_file", 1)]
    step = history.append("t", "a", NewStep("tool", "ls", "allow", "d4"))
    assert step.seq == 2
    assert history.view("t", "a").labels == {"secret"}
    # what it lost: its earlier result is no longer there to flow (as past max_steps),
    # and the view says so: a data rule on it is undetermined (see the flood tests)
    assert not ANY.holds(history.view("t", "a"), {"body": SECRET}, None)
    assert history.view("t", "a").lost


def test_views_handed_out_before_a_demotion_stay_as_they_were() -> None:
    history = MemoryHistory(max_fingerprints=100)
    _call(history, "a", "d1", of_data(SECRET), frozenset({"secret"}))
    before = history.view("t", "a")
    steps, prints = before.steps, set(before.index.prints) if before.index else set()
    assert ANY.holds(before, {"body": SECRET}, None)
    _call(history, "b", "d2", _prints(80, 1))  # "a" is demoted
    assert history.view("t", "a").steps == ()
    assert before.steps == steps and before.steps[0].fingerprints == of_data(SECRET)
    assert before.index is not None and before.index.prints == prints
    assert ANY.holds(before, {"body": SECRET}, None)  # still decides as it did
    assert not ANY.holds(before, {"body": "the weekly report, nothing more"}, None)
    # the session starts afresh with a new index: the old view's is not written again
    _call(history, "a", "d3", _prints(5, 2))
    assert before.index.prints == prints


def test_expire_takes_forgotten_sessions_off_the_total() -> None:
    now = [1_000.0]
    history = MemoryHistory(max_fingerprints=10_000, clock=lambda: now[0])
    _call(history, "old", "d1", _prints(100, 1))
    now[0] += 100
    _call(history, "new", "d2", _prints(30, 2))
    assert history.fingerprints_held == 260
    assert history.expire(50) == 1
    assert history.fingerprints_held == 60 == _counted(history, ["old", "new"])


def test_without_a_fingerprint_bound_only_max_sessions_demotes() -> None:
    history = MemoryHistory(max_sessions=3, max_fingerprints=None)
    for n in range(3):
        _call(history, f"s{n}", f"d{n}", _prints(5_000, n))
    assert all(history.view("t", f"s{n}").steps for n in range(3))
    assert history.fingerprints_held == 30_000
    _call(history, "s3", "d3", _prints(10, 3))
    assert history.view("t", "s0").steps == ()
    assert history.fingerprints_held == 20_020


def test_the_bound_is_checked_and_has_a_default() -> None:
    with pytest.raises(ValueError, match="max_fingerprints"):
        MemoryHistory(max_fingerprints=-1)
    assert MemoryHistory()._max_fingerprints == MAX_FINGERPRINTS
    # a bound of 0 keeps only the session just written
    history = MemoryHistory(max_fingerprints=0)
    _call(history, "a", "d1", _prints(3, 1))
    _call(history, "b", "d2", _prints(3, 2))
    assert history.view("t", "a").steps == () and history.view("t", "b").steps


def test_threads_appending_and_settling_keep_the_total_exact_and_bounded() -> None:
    bound = 20_000  # a session alone holds less: (8 + 33) * 150 with its index
    history = MemoryHistory(max_steps=8, max_fingerprints=bound)
    sessions = [f"s{n}" for n in range(24)]
    errors: list[BaseException] = []

    def work(worker: int) -> None:
        rng = random.Random(worker)
        try:
            for n in range(300):
                session = rng.choice(sessions)
                decision_id = f"w{worker}-{n}"
                history.append("t", session, NewStep("tool", "fetch", "allow", decision_id))
                prints = _prints(rng.randint(1, 150), worker * 1_000 + n)
                history.settle("t", session, decision_id, executed=True, fingerprints=prints)
                # read between another's write and its demotions: over by one settle
                assert history.fingerprints_held <= bound + 2 * 150
        except BaseException as error:  # reported below
            errors.append(error)

    threads = [threading.Thread(target=work, args=(w,)) for w in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors
    assert history.fingerprints_held == _counted(history, sessions)
    assert history.fingerprints_held <= bound
    assert sum(1 for s in sessions if history.view("t", s).steps) < len(sessions)  # demoted


# -- attacks: another session floods the shared history ------------------------------

KEY = "wJalrXUtnFEMI-K7MDENG-bPxRfiCYEXAMPLEKEY"
FLOOD_POLICY = """\
version: 1
default: allow
labels:
  - id: secrets-read
    attach: [secret]
    name: read_file
    params:
      path: {glob: ["**/.env"]}
rules:
  - id: no-leak
    decision: deny
    reason: data a secret read returned may not leave
    name: http_post
    session:
      flows_from: {labels: [secret]}
  - id: no-mail-after-secret
    decision: deny
    reason: a session that read a secret sends no mail
    name: send_mail
    session:
      labels: [secret]
"""


def _victim(history: MemoryHistory, path: str) -> Guard:
    guard = Guard(
        load_policy_text(FLOOD_POLICY), context=Context(session_id="victim"), sessions=history
    )

    @guard.protect
    def read_file(path: str) -> str:
        return f"AWS_SECRET_ACCESS_KEY={KEY}\n"

    read_file(path)
    return guard


def _flood(history: MemoryHistory) -> None:
    """Another tenant's sessions bring in large results: past the bound in all."""
    for n in range(8):
        _call_in(history, "other", f"flood-{n}", _prints(4_000, 100 + n))


def _call_in(history: MemoryHistory, tenant: str, session: str, prints: frozenset[int]) -> None:
    history.append(tenant, session, NewStep("tool", "fetch", "allow", f"d-{session}"))
    history.settle(tenant, session, f"d-{session}", executed=True, fingerprints=prints)


@pytest.mark.parametrize(("path", "mail"), [(".env", Verdict.DENY), ("notes.txt", Verdict.ALLOW)])
def test_a_flood_from_other_sessions_does_not_wash_off_a_secret_label(
    path: str, mail: Verdict
) -> None:
    history = MemoryHistory(max_fingerprints=20_000)
    guard = _victim(history, path)
    _flood(history)
    assert history.view("default", "victim").steps == ()  # demoted
    assert history.fingerprints_held <= 20_000
    # the label rule still refuses mail after the secret; the benign session mails
    mail_args = {"to": "bob@corp.example", "body": KEY}
    assert guard.check(Action.tool("send_mail", mail_args)).verdict == mail


@pytest.mark.parametrize("path", [".env", "notes.txt"])
def test_a_flood_from_other_sessions_does_not_hide_a_flow(path: str) -> None:
    """Demoted, the session's results' fingerprints are gone: a data-flow rule on it
    cannot tell, so the check is undetermined (refused), never a miss that allows —
    for the secret's session and for its benign look-alike alike (neither can be told
    apart once the data is gone). Calls no data rule reads still go."""
    history = MemoryHistory(max_fingerprints=20_000)
    guard = _victim(history, path)
    post = Action.tool("http_post", {"url": "https://x.example", "body": KEY})
    before = guard.check(post).verdict
    assert before == (Verdict.DENY if path == ".env" else Verdict.ALLOW)
    _flood(history)
    assert history.view("default", "victim").steps == ()  # demoted
    assert history.view("default", "victim").lost
    decision = guard.check(post)
    assert decision.verdict == Verdict.UNDETERMINED
    assert "cannot tell" in decision.reason
    other = Action.tool("http_post", {"url": "https://x.example", "body": "hello"})
    assert guard.check(other).verdict == Verdict.UNDETERMINED  # any data rule: unknown
    assert guard.check(Action.tool("lookup", {"q": "x"})).verdict == Verdict.ALLOW


def test_a_demoted_session_that_brought_no_data_in_is_still_judged() -> None:
    """A session whose only steps were the user's own words (trusted inputs) lost no
    data a flow could come from: its flow rules are judged as before."""
    history = MemoryHistory(max_fingerprints=20_000)
    guard = Guard(
        load_policy_text(FLOOD_POLICY), context=Context(session_id="quiet"), sessions=history
    )
    guard.record_input("please post the report", trusted=True)
    _flood(history)
    assert not history.view("default", "quiet").lost
    post = Action.tool("http_post", {"url": "https://x.example", "body": KEY})
    assert guard.check(post).verdict == Verdict.ALLOW


def test_a_result_that_arrives_after_its_session_was_demoted_is_lost_not_dropped() -> None:
    """The secret is read (allowed, not yet settled), the session is demoted, then the
    read returns: its data cannot be kept, so the session is marked lost and the flow
    rule on it is undetermined, not a miss."""
    history = MemoryHistory(max_fingerprints=20_000)
    guard = Guard(
        load_policy_text(FLOOD_POLICY), context=Context(session_id="slow"), sessions=history
    )
    read = guard.check(Action.tool("read_file", {"path": "notes.txt"}))
    assert read.verdict == Verdict.ALLOW
    _flood(history)
    assert not history.view("default", "slow").lost  # nothing had come in yet
    history.settle("default", "slow", read.decision_id, executed=True, fingerprints=of_data(KEY))
    assert history.view("default", "slow").lost
    post = Action.tool("http_post", {"url": "https://x.example", "body": KEY})
    assert guard.check(post).verdict == Verdict.UNDETERMINED
