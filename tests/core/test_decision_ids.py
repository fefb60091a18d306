"""Decision ids: ``dec_`` + a per-process random prefix + a counter in 8+ hex digits,
unique in the process — made in blocks of 256 (``core/decision.py``), which must not
show: across block boundaries the ids are exactly the counter's next values."""

from __future__ import annotations

import re
import threading

from interlock.core.decision import Decision, Verdict, decision_ids, new_decision_id

_ID = re.compile(r"^dec_([0-9a-f]{12})([0-9a-f]{8,})$")


def _parts(decision_id: str) -> tuple[str, int]:
    found = _ID.match(decision_id)
    assert found is not None, decision_id
    return found.group(1), int(found.group(2), 16)


def test_ids_count_up_by_one_across_the_blocks_they_are_made_in() -> None:
    prefix, first = _parts(new_decision_id())
    made = [new_decision_id() for _ in range(1_000)]  # four blocks of 256, or more
    assert made == [f"dec_{prefix}{n:08x}" for n in range(first + 1, first + 1_001)]


def test_every_source_of_ids_shares_one_counter() -> None:
    ids = decision_ids()
    taken = [
        new_decision_id(),
        next(ids),
        Decision(Verdict.ALLOW, "ok").decision_id,
        next(ids),
        Decision(Verdict.DENY, "no").decision_id,
    ]
    numbers = [_parts(found)[1] for found in taken]
    assert numbers == list(range(numbers[0], numbers[0] + 5))


def test_a_given_id_is_kept() -> None:
    assert Decision(Verdict.ALLOW, "ok", decision_id="dec_mine").decision_id == "dec_mine"


def test_ids_taken_from_many_threads_are_all_different() -> None:
    found: list[list[str]] = [[] for _ in range(8)]

    def take(into: list[str]) -> None:
        for _ in range(5_000):
            into.append(new_decision_id())

    threads = [threading.Thread(target=take, args=(into,)) for into in found]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    every = [decision_id for into in found for decision_id in into]
    assert len(set(every)) == len(every) == 40_000
