"""A grant is claimed exactly once, whatever races for it: threads with a store each
(SQLite and PostgreSQL, as replicas would), threads on one store, and processes on
one SQLite file. No timing is asserted: only who won, and that one did."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from interlock import Action, Context, Guard
from interlock.errors import GrantError, GrantReplayed
from interlock.store import SqlStore

ALLOW_ALL: dict[str, Any] = {"version": 1, "default": "allow"}
CALL = Action.tool("transfer", {"to": "acct-9", "amount": 10}, context=Context(tenant="acme"))
RACERS = 12
GRANTS = 5


def _race(claimers: list[Callable[[str], object]], token: str) -> Counter[str]:
    """Every claimer claims ``token`` at once (released together by a barrier)."""
    barrier = threading.Barrier(len(claimers))
    outcomes: Counter[str] = Counter()
    lock = threading.Lock()

    def run(claim: Callable[[str], object]) -> None:
        barrier.wait()
        try:
            claim(token)
            outcome = "claimed"
        except GrantError as exc:
            outcome = exc.code
        except Exception as exc:
            outcome = f"error: {exc!r}"
        with lock:
            outcomes[outcome] += 1

    threads = [threading.Thread(target=run, args=(claim,)) for claim in claimers]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return outcomes


def test_replicas_racing_for_a_grant_claim_it_once(
    store: SqlStore, open_replica: Callable[..., SqlStore]
) -> None:
    """Each thread has a store of its own on the same database (a replica's view)."""
    replicas = [open_replica() for _ in range(RACERS)]
    guards = [Guard(ALLOW_ALL, store=replica, reap_interval=None) for replica in replicas]
    try:
        with Guard(ALLOW_ALL, store=store, reap_interval=None) as issuer:
            for _ in range(GRANTS):
                grant = issuer.issue_grant(issuer.check(CALL), audience="bank")
                outcomes = _race([guard.claim_grant for guard in guards], grant.token)
                assert outcomes == {"claimed": 1, "grant_replayed": RACERS - 1}
            with store.transaction(write=False) as cur:
                cur.execute("SELECT COUNT(*) FROM grants WHERE status = 'claimed'")
                assert cur.fetchone()[0] == GRANTS
    finally:
        for guard in guards:
            guard.close()


def test_threads_on_one_store_claim_it_once(store: SqlStore) -> None:
    with Guard(ALLOW_ALL, store=store, reap_interval=None) as guard:
        grant = guard.issue_grant(guard.check(CALL), audience="bank")
        outcomes = _race([guard.claim_grant] * RACERS, grant.token)
        assert outcomes == {"claimed": 1, "grant_replayed": RACERS - 1}
        with pytest.raises(GrantReplayed):
            guard.claim_grant(grant.token)


_CLAIMER = """
import json, sys, time
from pathlib import Path
from interlock.errors import GrantError
from interlock.store import open_store
from interlock.approvals.grants import claim_grant

url, token, go = sys.argv[1], sys.argv[2], Path(sys.argv[3])
store = open_store(url)
store.grant_keys.ring()  # read before the start: the race is the claim
print("ready", flush=True)
while not go.exists():
    time.sleep(0.001)
try:
    claim_grant(store, token)
    print(json.dumps("claimed"), flush=True)
except GrantError as exc:
    print(json.dumps(exc.code), flush=True)
store.close()
"""


def test_processes_on_one_sqlite_file_claim_it_once(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'interlock.db'}"
    with Guard(ALLOW_ALL, store=url, reap_interval=None) as guard:
        grant = guard.issue_grant(guard.check(CALL), audience="bank")
    go = tmp_path / "go"
    processes = [
        subprocess.Popen(
            [sys.executable, "-c", _CLAIMER, url, grant.token, str(go)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(6)
    ]
    try:
        for process in processes:  # every one has opened the store and read the ring
            assert process.stdout is not None
            assert process.stdout.readline().strip() == "ready", process.stderr
        go.touch()
        outcomes = Counter()
        for process in processes:
            out, err = process.communicate(timeout=120)
            assert process.returncode == 0, err
            outcomes[json.loads(out.strip().splitlines()[-1])] += 1
    finally:
        for process in processes:
            if process.poll() is None:
                process.kill()
    assert outcomes == {"claimed": 1, "grant_replayed": 5}
