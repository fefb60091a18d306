"""A tool result's fingerprints are the same in every process: an agent's guard and a
shared server must agree on what flowed. Found on 6 December: boilerplate names of
equal length were cut in the set's order, which follows the hash seed, and two that
overlap cut a text differently (``PYTHONHASHSEED`` 1 and 3 disagreed)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

#: equal-length identifiers that overlap in the third word: the order they are cut in
#: decides which grams are left
DATA = "AAAA_BBBB=1 BBBB_CCCC=2 xAAAA_BBBB_CCCCdefghijklmnopqrstu"
SCRIPT = (
    "import sys; from interlock.session.fingerprints import of_data;"
    "print(sorted(of_data(sys.argv[1])))"
)


def _fingerprints(seed: str, *, no_speedups: bool) -> str:
    env = {**os.environ, "PYTHONHASHSEED": seed}
    env.pop("INTERLOCK_NO_SPEEDUPS", None)
    if no_speedups:
        env["INTERLOCK_NO_SPEEDUPS"] = "1"
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT, DATA], env=env, capture_output=True, text=True, check=True
    )
    return done.stdout


@pytest.mark.parametrize("no_speedups", [False, True], ids=["accelerated", "python"])
def test_of_data_is_the_same_under_every_hash_seed(no_speedups: bool) -> None:
    seen = {_fingerprints(seed, no_speedups=no_speedups) for seed in ("0", "1", "2", "3", "7")}
    assert len(seen) == 1, "fingerprints differ between processes"


def test_both_paths_agree_across_seeds() -> None:
    assert _fingerprints("1", no_speedups=False) == _fingerprints("3", no_speedups=True)
