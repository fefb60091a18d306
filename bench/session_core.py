"""Quick A/B of the in-process fixed cost of session rules (issue 18): the stateless
check, labels-only rules and the 20-step flows rules, interleaved rounds, best p50 of
each. Run with one tree's ``src`` first on ``PYTHONPATH``::

    flock /tmp/interlock-bench.lock python -m bench.session_core [calls] [rounds]
"""

from __future__ import annotations

import sys

from bench.session import FLOWS, LABELS, PER_CALL, TYPICAL_STEPS, _best, _subject


def main(calls: int = 2_000, rounds: int = 5) -> None:
    subjects = [
        _subject("base repeated", PER_CALL, 0, calls),
        _subject("base mix", PER_CALL, 0, calls, arguments="mix"),
        _subject("labels repeated", LABELS, TYPICAL_STEPS, calls),
        _subject("flows20 repeated", FLOWS, TYPICAL_STEPS, calls),
        _subject("flows20 mix", FLOWS, TYPICAL_STEPS, calls, arguments="mix"),
    ]
    stats = {s.label: s for s in _best(rounds, subjects)}
    for label, base in (
        ("base repeated", None),
        ("base mix", None),
        ("labels repeated", "base repeated"),
        ("flows20 repeated", "base repeated"),
        ("flows20 mix", "base mix"),
    ):
        p50 = stats[label].p50_ns / 1000
        ratio = "" if base is None else f"  {stats[label].p50_ns / stats[base].p50_ns:.2f}x"
        print(f"{label:18} p50 {p50:6.2f} us{ratio}")


if __name__ == "__main__":
    main(*(int(a) for a in sys.argv[1:3]))
