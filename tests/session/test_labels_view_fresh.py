"""A session's labels view is as new as its labels (``MemoryHistory.labels_view``): a
label a step attached (or cleared), settled or kept through a demotion is seen by the
very next read — and a label attached by one check denies the next, in one thread or
two interleaved. (A labels view kept between reads must keep these.)"""

from __future__ import annotations

import threading

from tests.session.policies import LABELS

from interlock import Action, Context, Guard, Verdict, load_policy_text
from interlock.session.history import MemoryHistory, NewStep

SECRET = frozenset({"secret"})
CONTEXT = Context(tenant="acme", agent="a", session_id="s-1")


def _call(name: str) -> NewStep:
    return NewStep("tool", name, "allow", f"d-{name}")


def test_the_labels_view_follows_every_change_of_the_labels() -> None:
    history = MemoryHistory()
    history.append("acme", "s-1", _call("read_file"))
    first = history.labels_view("acme", "s-1")
    history.append("acme", "s-1", _call("write_file"))  # no label: the same labels
    assert history.labels_view("acme", "s-1").labels == first.labels == frozenset()
    history.append("acme", "s-1", NewStep("tool", "vault_get", "allow", "d-2", labels=SECRET))
    attached = history.labels_view("acme", "s-1")
    assert attached.labels == SECRET and first.labels == frozenset()
    cleared = NewStep("tool", "rotate", "allow", "d-3", clears=SECRET)
    history.append("acme", "s-1", cleared)
    assert history.labels_view("acme", "s-1").labels == frozenset()


def test_a_labels_view_read_again_still_fails_closed() -> None:
    history = MemoryHistory()
    history.append("acme", "s-1", _call("read_file"))
    history.labels_view("acme", "s-1")
    history.append("acme", "s-1", _call("write_file"))
    again = history.labels_view("acme", "s-1")
    assert again.steps == () and again.sources == () and again.lost
    assert again.past.overflowed and again.next_seq > 1


def test_a_label_a_settle_attaches_is_seen_by_the_next_read() -> None:
    history = MemoryHistory()
    history.append("acme", "s-1", _call("fetch"))
    assert history.labels_view("acme", "s-1").labels == frozenset()
    history.settle("acme", "s-1", "d-fetch", executed=True, labels=SECRET)
    assert history.labels_view("acme", "s-1").labels == SECRET


def test_labels_kept_through_a_demotion_are_seen() -> None:
    history = MemoryHistory(max_sessions=1)
    history.append("acme", "s-1", NewStep("tool", "vault_get", "allow", "d-1", labels=SECRET))
    assert history.labels_view("acme", "s-1").labels == SECRET
    history.append("acme", "s-2", _call("read_file"))  # s-1 demoted: its labels stay
    assert history.labels_view("acme", "s-1").labels == SECRET
    history.append("acme", "s-1", _call("write_file"))  # back, from its remnant
    assert history.labels_view("acme", "s-1").labels == SECRET
    history.append("acme", "s-1", NewStep("tool", "rotate", "allow", "d-3", clears=SECRET))
    assert history.labels_view("acme", "s-1").labels == frozenset()


def _action(name: str) -> Action:
    return Action(kind="tool", name=name, arguments={"url": "https://x.example"}, context=CONTEXT)


def test_a_secret_attached_by_one_check_denies_the_next() -> None:
    guard = Guard(load_policy_text(LABELS), sessions=MemoryHistory())
    assert guard._session_reads is not None  # the labels view is what it reads
    for _ in range(2):  # the session begun, then its labels read
        assert guard.check(_action("http_post")).verdict is Verdict.ALLOW
    assert guard.check(_action("vault_get")).verdict is Verdict.ALLOW  # attaches secret
    denied = guard.check(_action("http_post"))
    assert denied.verdict is Verdict.DENY
    assert denied.rule_ids == ("taint-no-outbound-after-secret",)


def _interleaved() -> list[Verdict]:
    """The reader's two outbound checks around the writer's vault read, in another
    thread; the verdicts in the order they were given."""
    guard = Guard(load_policy_text(LABELS), sessions=MemoryHistory())
    turn = [threading.Event() for _ in range(3)]
    verdicts: list[Verdict] = []

    def reader() -> None:
        guard.check(_action("http_post"))  # the session begun
        verdicts.append(guard.check(_action("http_post")).verdict)  # its labels read
        turn[0].set()
        turn[1].wait(5)
        verdicts.append(guard.check(_action("http_post")).verdict)
        turn[2].set()

    def writer() -> None:
        turn[0].wait(5)
        verdicts.append(guard.check(_action("vault_get")).verdict)
        turn[1].set()

    threads = [threading.Thread(target=reader), threading.Thread(target=writer)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(10)
    assert turn[2].is_set()
    return verdicts


def test_a_secret_attached_in_another_thread_denies_the_next_check() -> None:
    """Two threads on one session, in turns: each of the reader's checks reads the
    labels view; the writer's vault read between two of them attaches
    ``secret``; the reader's next check must see it."""
    for _ in range(20):
        assert _interleaved() == [Verdict.ALLOW, Verdict.ALLOW, Verdict.DENY]


def test_many_threads_never_miss_a_secret_attached_before_their_check() -> None:
    """Checks racing a vault read: a check that begins after the read returned is
    denied, always (one that began before may go either way)."""
    guard = Guard(load_policy_text(LABELS), sessions=MemoryHistory())
    attached = threading.Event()
    late: list[Verdict] = []
    lock = threading.Lock()

    def poster() -> None:
        after = 0
        while after < 100:  # until a hundred checks began after the read returned
            began_after = attached.is_set()
            verdict = guard.check(_action("http_post")).verdict
            if began_after:
                after += 1
                with lock:
                    late.append(verdict)

    threads = [threading.Thread(target=poster) for _ in range(3)]
    for thread in threads:
        thread.start()
    assert guard.check(_action("vault_get")).verdict is Verdict.ALLOW
    attached.set()
    for thread in threads:
        thread.join(30)
    assert late and set(late) == {Verdict.DENY}
