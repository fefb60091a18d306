"""The audit batch's one-shot event wakes every waiter once set, times out unset, and
stays set."""

from __future__ import annotations

import threading

from interlock.store.audit import _Done

WAIT_S = 30.0  # a hang guard


def test_an_unset_event_times_out() -> None:
    done = _Done()
    assert not done.is_set()
    assert done.wait(0.01) is False
    assert done.wait(0) is False
    assert not done.is_set()


def test_every_waiter_wakes_when_it_is_set() -> None:
    done = _Done()
    woke: list[bool] = []
    lock = threading.Lock()
    started = threading.Barrier(9)

    def waiter() -> None:
        started.wait(WAIT_S)
        result = done.wait(WAIT_S)
        with lock:
            woke.append(result)

    threads = [threading.Thread(target=waiter) for _ in range(8)]
    for thread in threads:
        thread.start()
    started.wait(WAIT_S)
    done.set()
    for thread in threads:
        thread.join(WAIT_S)
    assert woke == [True] * 8
    # set for good: later waits, with or without a limit, return at once
    assert done.is_set() and done.wait(0) and done.wait(None) and done.wait(WAIT_S)


def test_setting_twice_is_harmless() -> None:
    done = _Done()
    done.set()
    done.set()
    assert done.wait(0) and done.wait(0)
