"""The filter of sessions the in-memory history forgot before they expired
(:mod:`interlock.session.forgotten`): never a false "not forgotten"; false
positives measured on keys never added."""

from __future__ import annotations

import pytest

from interlock.errors import SessionUnavailable
from interlock.session.forgotten import ForgottenSessions
from interlock.session.history import MemoryHistory, NewStep


def test_every_key_added_is_found() -> None:
    forgotten = ForgottenSessions()
    keys = [(f"tenant-{i % 7}", f"session-{i}") for i in range(20_000)]
    for key in keys:
        forgotten.add(key)
    assert all(key in forgotten for key in keys)
    assert forgotten.count == 20_000


def test_keys_never_added_are_rarely_found() -> None:
    forgotten = ForgottenSessions()
    for i in range(20_000):
        forgotten.add(("acme", f"gone-{i}"))
    # look-alikes of the forgotten keys: other tenants, suffixes, swapped fields
    strangers = (
        [("acme", f"gone-{i}x") for i in range(20_000)]
        + [("other", f"gone-{i}") for i in range(20_000)]
        + [(f"gone-{i}", "acme") for i in range(20_000)]
    )
    found = sum(key in forgotten for key in strangers)
    assert found <= 2  # expected ≈ 1e-10 × 60,000
    assert ("acme",) not in forgotten and "acme" not in forgotten


def _step(name: str, labels: frozenset[str] = frozenset()) -> NewStep:
    return NewStep(kind="tool", name=name, verdict="allow", decision_id=None, labels=labels)


def test_the_history_refuses_every_read_of_a_forgotten_session() -> None:
    history = MemoryHistory(max_sessions=1)
    history.append("t", "victim", _step("read_file", frozenset({"secret"})))
    for i in range(101):
        history.append("t", f"s{i}", _step("x", frozenset({"seen"})))
    assert history.sessions_forgotten == 1
    with pytest.raises(SessionUnavailable, match="forgotten"):
        history.view("t", "victim")
    with pytest.raises(SessionUnavailable, match="forgotten"):
        history.labels_view("t", "victim")
    history.append("t", "victim", _step("y"))  # begun again: still refused
    with pytest.raises(SessionUnavailable, match="victim"):
        history.view("t", "victim")
    with pytest.raises(SessionUnavailable):
        history.labels_view("t", "victim")
    # the same id in another tenant, and sessions never seen, are read as before
    assert history.view("u", "victim").labels == frozenset()
    assert history.view("t", "never-seen").next_seq == 1


def test_sessions_expired_on_purpose_are_not_refused() -> None:
    now = [1_000.0]
    history = MemoryHistory(max_sessions=1, clock=lambda: now[0])
    history.append("t", "old", _step("read_file", frozenset({"secret"})))
    history.append("t", "other", _step("x", frozenset({"seen"})))
    now[0] += 100
    assert history.expire(50) == 2
    assert history.sessions_forgotten == 0
    assert history.view("t", "old").labels == frozenset()


def test_forgetting_is_logged(caplog: pytest.LogCaptureFixture) -> None:
    history = MemoryHistory(max_sessions=1)
    with caplog.at_level("WARNING", logger="interlock"):
        for i in range(105):
            history.append("t", f"s{i}", _step("x", frozenset({"seen"})))
    assert history.sessions_forgotten == 4
    told = [r.getMessage() for r in caplog.records if "forgotten" in r.getMessage()]
    assert len(told) == 3  # the 1st, 2nd and 4th
    assert "raise max_sessions" in told[0]
