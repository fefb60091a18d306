"""A session step rides its decision record's transaction (one durable write per
session check): record and step land together or not at all, on SQLite and
PostgreSQL, sync and async; a crash between the decision and the body leaves them
consistent. Also: the async settle runs off the event loop for a store's history, and
one guard's session check does not swallow another guard's."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from interlock import Action, Context, Guard, Verdict
from interlock.policy import load_policy_text
from interlock.session.history import MemoryHistory, NewStep, Step
from interlock.store import open_store
from interlock.store.sql_sessions import SqlHistory

POLICY = """\
version: 1
default: deny
audit: {durability: process}
session: {max_steps: 100000}
labels:
  - id: secrets
    attach: [secret]
    name: read_file
    params:
      path: {glob: ["**/.env"]}
rules:
  - id: reads
    decision: allow
    reason: reads are fine
    name: read_file
  - id: mail
    decision: allow
    reason: mail is fine
    name: send_email
  - id: no-mail-after-secret
    decision: deny
    reason: no mail after a secret read
    name: send_email
    session:
      labels: [secret]
"""

READ_ENV = Action.tool("read_file", {"path": "/srv/app/.env"})
READ_NOTES = Action.tool("read_file", {"path": "/srv/notes.txt"})
MAIL = Action.tool("send_email", {"to": "a@b.example", "body": "hello"})
DELETE = Action.tool("delete", {"path": "/srv"})  # the default: deny


def _guard(url: str, session: str = "s-1", **kw: Any) -> Guard:
    return Guard(
        load_policy_text(POLICY),
        store=url,
        reap_interval=None,
        context=Context(session_id=session),
        **kw,
    )


def _history(guard: Guard) -> SqlHistory:
    history = guard.sessions
    assert isinstance(history, SqlHistory)
    return history


def _refuse_standalone_appends(history: SqlHistory) -> list[NewStep]:
    """Make the history's own (separate-transaction) append fail loudly: a step that
    lands anyway rode its record's transaction."""
    tried: list[NewStep] = []

    def append(tenant: str, session_id: str, step: NewStep) -> Step:
        tried.append(step)
        raise AssertionError("a session step was appended in a transaction of its own")

    history.append = append  # type: ignore[method-assign]
    return tried


def _records(guard: Guard, decision_id: str | None) -> list[str | None]:
    assert guard.audit is not None and guard.store is not None and decision_id is not None
    assert guard.audit.flush(10)
    return [row.decision for row in guard.store.audit_rows(decision_id=decision_id)]


def _refuse_steps(guard: Guard, backend: str) -> None:
    """A real database failure: a trigger that refuses every new step."""
    assert guard.store is not None
    with guard.store.transaction(write=True) as cur:
        if backend == "sqlite":
            cur.execute(
                "CREATE TRIGGER no_steps BEFORE INSERT ON session_steps "
                "BEGIN SELECT RAISE(ABORT, 'steps refused'); END"
            )
        else:
            cur.execute(
                "CREATE FUNCTION no_steps() RETURNS trigger AS $$ BEGIN "
                "RAISE EXCEPTION 'steps refused'; END $$ LANGUAGE plpgsql"
            )
            cur.execute(
                "CREATE TRIGGER no_steps BEFORE INSERT ON session_steps "
                "FOR EACH ROW EXECUTE FUNCTION no_steps()"
            )


def _allow_steps(guard: Guard, backend: str) -> None:
    assert guard.store is not None
    with guard.store.transaction(write=True) as cur:
        cur.execute("DROP TRIGGER no_steps" + ("" if backend == "sqlite" else " ON session_steps"))


def test_the_step_rides_the_decision_records_commit(store_url: str) -> None:
    with _guard(store_url) as guard:
        tried = _refuse_standalone_appends(_history(guard))
        read = guard.check(READ_ENV)
        assert read.verdict is Verdict.ALLOW
        assert _records(guard, read.decision_id) == ["allow"]
        view = _history(guard).view("default", "s-1")
        assert [(s.name, s.verdict, s.decision_id) for s in view.steps] == [
            ("read_file", "allow", read.decision_id)
        ]
        assert view.labels == {"secret"}
        # the next check sees it: the label rule refuses the mail
        mail = guard.check(MAIL)
        assert mail.verdict is Verdict.DENY
        assert _records(guard, mail.decision_id) == ["deny"]
        assert [s.verdict for s in _history(guard).view("default", "s-1").steps] == [
            "allow",
            "deny",
        ]
        assert tried == []
        assert guard.store is not None
        assert not guard.store.verify_audit().breaks


def test_another_session_is_untouched(store_url: str) -> None:
    with _guard(store_url, "s-1") as one, _guard(store_url, "s-2") as two:
        assert one.check(READ_ENV).verdict is Verdict.ALLOW
        assert two.check(MAIL).verdict is Verdict.ALLOW
        assert one.check(MAIL).verdict is Verdict.DENY


def test_a_step_that_cannot_be_written_takes_its_allow_with_it(
    store_url: str, backend: str
) -> None:
    with _guard(store_url) as guard:
        _refuse_steps(guard, backend)
        ran: list[str] = []

        def read_file(path: str) -> str:
            ran.append(path)
            return "x"

        read = guard.protect(name="read_file")(read_file)
        with pytest.raises(Exception, match="steps refused"):
            read(path="/srv/app/.env")
        assert ran == []  # nothing runs on a non-allow verdict
        decision = guard.check(READ_ENV)
        assert decision.verdict is Verdict.UNDETERMINED
        assert "could not be recorded" in decision.reason
        # the chain holds what the caller was told, and never the allow
        assert _records(guard, decision.decision_id) == ["undetermined"]
        assert guard.store is not None
        allows = list(guard.store.audit_rows(decision="allow"))
        assert allows == []
        view = _history(guard).view("default", "s-1")
        assert view.steps == () and view.labels == frozenset()
        # a refusal stands as it is (its record lands; its step cannot)
        refused = guard.check(DELETE)
        assert refused.verdict is Verdict.DENY
        assert _records(guard, refused.decision_id) == ["deny"]
        # once steps can be written again, both land
        _allow_steps(guard, backend)
        again = guard.check(READ_ENV)
        assert again.verdict is Verdict.ALLOW
        assert _records(guard, again.decision_id) == ["allow"]
        assert [s.decision_id for s in _history(guard).view("default", "s-1").steps] == [
            again.decision_id
        ]
        assert guard.check(MAIL).verdict is Verdict.DENY
        assert not guard.store.verify_audit().breaks


def test_async_a_step_that_cannot_be_written_takes_its_allow_with_it(
    store_url: str, backend: str
) -> None:
    async def run() -> None:
        with _guard(store_url) as guard:
            _refuse_standalone_appends(_history(guard))
            first = await guard.acheck(READ_NOTES)
            assert first.verdict is Verdict.ALLOW
            assert _records(guard, first.decision_id) == ["allow"]
            _refuse_steps(guard, backend)
            failed = await guard.acheck(READ_ENV)
            assert failed.verdict is Verdict.UNDETERMINED
            assert _records(guard, failed.decision_id) == ["undetermined"]
            assert [s.decision_id for s in _history(guard).view("default", "s-1").steps] == [
                first.decision_id
            ]
            _allow_steps(guard, backend)
            assert (await guard.acheck(READ_ENV)).verdict is Verdict.ALLOW
            assert (await guard.acheck(MAIL)).verdict is Verdict.DENY

    asyncio.run(run())


def test_durability_none_appends_the_step_on_its_own(tmp_path: Path) -> None:
    """A writer that does not wait would let the next check run before the step is
    written: the step is then appended on its own, before the check returns."""
    text = POLICY.replace("durability: process", "durability: none")
    with Guard(
        load_policy_text(text),
        store=f"sqlite:///{tmp_path / 'i.db'}",
        reap_interval=None,
        context=Context(session_id="s-1"),
    ) as guard:
        assert guard.check(READ_ENV).verdict is Verdict.ALLOW
        assert guard.check(MAIL).verdict is Verdict.DENY


# -- the async settle, off the loop ---------------------------------------------------------


class _ThreadNoting(SqlHistory):
    def __init__(self, *args: Any, **kw: Any) -> None:
        super().__init__(*args, **kw)
        self.settled_on: list[int] = []

    def settle(self, *args: Any, **kw: Any) -> None:
        self.settled_on.append(threading.get_ident())
        super().settle(*args, **kw)


def test_async_settle_of_a_store_history_runs_off_the_event_loop(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'i.db'}"
    store = open_store(url)
    history = _ThreadNoting(store)

    async def run() -> tuple[int, str]:
        with _guard(url, sessions=history) as guard:

            async def read_file(path: str) -> str:
                return "AKIA" + "Q" * 16 + " the result"

            protected = guard.protect(name="read_file")(read_file)
            result = await protected(path="/srv/notes.txt")
            return threading.get_ident(), result

    try:
        loop_thread, result = asyncio.run(run())
        assert result.startswith("AKIA")
        assert history.settled_on and loop_thread not in history.settled_on
        view = history.view("default", "s-1")
        assert view.steps[-1].executed is True and view.steps[-1].fingerprints
    finally:
        store.close()


def test_async_settle_of_a_memory_history_stays_on_the_loop() -> None:
    history = MemoryHistory()
    with Guard(load_policy_text(POLICY), sessions=history, context=Context(session_id="m")) as g:

        async def read_file(path: str) -> str:
            return "plain"

        asyncio.run(g.protect(name="read_file")(read_file)(path="/srv/notes.txt"))
    assert history.view("default", "m").steps[-1].executed is True


# -- one guard's session check is not another's ----------------------------------------------


def test_a_session_check_inside_another_guards_is_a_check_of_its_own() -> None:
    """An agent's guard whose check runs another guard in the same task (an in-process
    server, a hook): the inner guard records its own step in its own session, with its
    own context."""
    inner_history = MemoryHistory()
    inner = Guard(
        load_policy_text(POLICY),
        sessions=inner_history,
        context=Context(session_id="inner", agent="server"),
    )
    seen: list[Any] = []

    class Forwarding:  # an event sink that asks the other guard, in the same thread
        def emit(self, event: Any) -> None:
            if not seen:
                seen.append(inner.check(READ_ENV))

    outer = Guard(
        load_policy_text(POLICY),
        sessions=MemoryHistory(),
        context=Context(session_id="outer"),
        sink=Forwarding(),
    )
    assert outer.check(READ_NOTES).verdict is Verdict.ALLOW
    assert seen and seen[0].verdict is Verdict.ALLOW
    assert [s.name for s in inner_history.view("default", "inner").steps] == ["read_file"]
    assert inner_history.view("default", "inner").labels == {"secret"}
    assert inner.check(MAIL).verdict is Verdict.DENY  # its own session saw the read
    assert outer.check(MAIL).verdict is Verdict.ALLOW  # the outer one did not

    async def arun() -> None:
        a_history = MemoryHistory()
        a_inner = Guard(
            load_policy_text(POLICY), sessions=a_history, context=Context(session_id="ai")
        )

        async def ahook_check() -> None:
            await a_inner.acheck(READ_ENV)

        a_outer = Guard(
            load_policy_text(POLICY), sessions=MemoryHistory(), context=Context(session_id="ao")
        )
        # the outer check is running (its session check's variable set) while the
        # inner guard checks in the same task
        from interlock.guard import _RECORDING
        from interlock.guard_sessions import SessionCheck

        recorder = a_outer._sessions
        assert recorder is not None
        token = _RECORDING.set(SessionCheck(a_outer, recorder, recorder.facts(Context())))
        try:
            await ahook_check()
        finally:
            _RECORDING.reset(token)
        assert [s.name for s in a_history.view("default", "ai").steps] == ["read_file"]

    asyncio.run(arun())


# -- a crash between the decision and the body ---------------------------------------------

CHILD = textwrap.dedent(
    """
    import sys
    from interlock import Action, Context, Guard
    from interlock.policy import load_policy_text
    policy = load_policy_text(open(sys.argv[2]).read())
    guard = Guard(policy, store=sys.argv[1], reap_interval=None,
                  context=Context(session_id="crash"))
    actions = [Action.tool("read_file", {"path": "/srv/notes.txt"}),
               Action.tool("send_email", {"to": "a@b.example", "body": "hi"}),
               Action.tool("delete", {"path": "/srv"})]
    i = 0
    while True:
        decision = guard.check(actions[i % 3])
        i += 1
        if i == 50:
            print("ready", flush=True)
        # the body would run here: the process dies before or while it does
    """
)


def test_kill_9_between_decision_and_body_leaves_record_and_step_consistent(
    store_url: str, tmp_path: Path
) -> None:
    policy = tmp_path / "policy.yaml"
    policy.write_text(POLICY)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    child = subprocess.Popen(
        [sys.executable, "-c", CHILD, store_url, str(policy)],
        stdout=subprocess.PIPE,
        env=env,
    )
    try:
        assert child.stdout is not None
        assert child.stdout.readline().strip() == b"ready"
        time.sleep(0.3)
    finally:
        os.kill(child.pid, signal.SIGKILL)
        child.wait(10)
    store = open_store(store_url)
    try:
        records = {
            row.decision_id: row.decision
            for row in store.audit_rows(kind="decision")
            if row.decision_id is not None
        }
        steps = {
            s.decision_id: s.verdict
            for s in SqlHistory(store, max_steps=100000).view("default", "crash").steps
        }
        assert len(records) >= 50
        # every decision recorded has its step, with the same verdict, and no step
        # lacks its record
        assert steps == records
        assert set(steps.values()) == {"allow", "deny"}
        assert all(s.executed is None for s in SqlHistory(store).view("default", "crash").steps)
        assert not store.verify_audit().breaks
    finally:
        store.close()


def _steps(view: Any) -> tuple[Any, ...]:
    return (
        tuple(
            (s.seq, s.name, s.verdict, s.decision_id, s.labels, s.executed, s.fingerprints)
            for s in view.steps
        ),
        view.labels,
        view.next_seq,
    )


def test_the_kept_view_moved_on_by_a_joined_step_matches_a_fresh_read(
    store_url: str, open_replica: Any
) -> None:
    """After each joined step the history keeps the view it would read (so the next
    read skips the steps); writes by another replica between the checks, settles and
    the step bound all show up as a fresh read shows them."""
    text = POLICY.replace("max_steps: 100000", "max_steps: 5")
    other = open_replica()
    with Guard(
        load_policy_text(text), store=store_url, reap_interval=None, context=Context(session_id="v")
    ) as guard:
        history = _history(guard)
        replica = SqlHistory(other, max_steps=5)
        read = guard.protect(name="read_file")(lambda path: "AKIA" + "Z" * 16)
        for i in range(14):
            if i % 3 == 0:
                read(path="/srv/app/.env" if i == 9 else "/srv/notes.txt")
            elif i % 5 == 0:
                replica.append("default", "v", NewStep(kind="tool", name="x", verdict="deny"))
            else:
                guard.check(MAIL if i % 2 else DELETE)
            fresh = SqlHistory(other, max_steps=5).view("default", "v")
            assert _steps(history.view("default", "v")) == _steps(fresh), i
        assert history.view("default", "v").labels == {"secret"}


def test_a_views_sources_are_its_executed_steps_with_data(store_url: str) -> None:
    """The index flows and provenance read (``SessionView.sources``) is exactly the
    steps with fingerprints, after appends, settles and the bound, in memory
    and in the store."""
    import random

    store = open_store(store_url)
    try:
        histories: list[MemoryHistory | SqlHistory] = [
            MemoryHistory(max_steps=6),
            SqlHistory(store, max_steps=6),
        ]
        for i in range(60):
            for history in histories:
                rng_i = random.Random(i)
                if rng_i.random() < 0.6:
                    history.append(
                        "t",
                        "s",
                        NewStep(
                            kind="input" if rng_i.random() < 0.2 else "tool",
                            name="n",
                            verdict="allow",
                            decision_id=f"d{i}",
                            fingerprints=frozenset({i}) if rng_i.random() < 0.5 else frozenset(),
                        ),
                    )
                else:
                    history.settle(
                        "t",
                        "s",
                        f"d{i - 1 - rng_i.randrange(4)}",
                        executed=rng_i.random() < 0.7,
                        fingerprints=frozenset({1000 + i}) if rng_i.random() < 0.5 else frozenset(),
                    )
                view = history.view("t", "s")
                assert view.sources == tuple(s for s in view.steps if s.fingerprints), (
                    type(history).__name__,
                    i,
                )
        memory, sql = (h.view("t", "s") for h in histories)
        assert [s.seq for s in memory.sources] == [s.seq for s in sql.sources]
    finally:
        store.close()


def test_cached_probes_are_the_probes() -> None:
    """Argument probes cached by value give what ``probe`` gives, for short texts
    (cached) and long ones (not), and the cache stays bounded."""
    from interlock.policy import sessionrules
    from interlock.session.fingerprints import probe

    texts = ["bob@corp.example", "https://x.example/?q=" + "a" * 40, "k" * 300, "", "é" * 20]
    for text in texts * 2:
        assert sessionrules.probed(text) == probe(text)
    assert "k" * 300 not in sessionrules._PROBED
    for i in range(sessionrules._PROBED_KEPT + 5):
        sessionrules.probed(f"value-{i}")
    assert len(sessionrules._PROBED) <= sessionrules._PROBED_KEPT
    assert sessionrules.probed({"to": "bob@corp.example"}) == probe({"to": "bob@corp.example"})


def test_a_failing_step_replaces_only_its_own_record_in_a_shared_commit(
    store_url: str, backend: str
) -> None:
    """Two records in one transaction, the first carrying a step that cannot be
    written: the first is appended as the undetermined decision, the second as it
    was; nothing of the step stays."""
    from interlock.core.decision import Decision
    from interlock.guard_sessions import JoinedStep

    with _guard(store_url) as guard:
        _refuse_steps(guard, backend)
        recorder, writer, store = guard._sessions, guard.audit, guard.store
        assert recorder is not None and writer is not None and store is not None
        allow = Decision(Verdict.ALLOW, "fine")
        other = Decision(Verdict.ALLOW, "fine too")
        events = [guard._event(READ_ENV, d, time.perf_counter_ns()) for d in (allow, other)]
        entries = [writer.encode("default", e) for e in events]
        join = JoinedStep(
            recorder,
            writer,
            "default",
            "s-1",
            NewStep(kind="tool", name="read_file", verdict="allow", decision_id=allow.decision_id),
            True,
            lambda exc: guard._step_failed(READ_ENV, allow, exc),
        )
        try:
            store.append_audit(entries, joins={0: join})
        except Exception:  # PostgreSQL: no savepoint; the aborted batch is tried again
            assert backend == "postgres"
            assert not list(store.audit_rows(decision_id=other.decision_id))
            store.append_audit(entries, joins={0: join})
        assert join.instead is not None and join.written is None
        recorded = [r.decision for r in store.audit_rows(decision_id=allow.decision_id)]
        assert recorded == ["undetermined"]
        assert [r.decision for r in store.audit_rows(decision_id=other.decision_id)] == ["allow"]
        assert _history(guard).view("default", "s-1").steps == ()
        # tried again (a retried batch): the same replacement, the step not retried
        assert join(None) is join.instead  # type: ignore[arg-type]
        assert not store.verify_audit().breaks
