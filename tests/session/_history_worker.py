"""A process appending to one session of a shared store, for the cross-process tests.

``python tests/session/_history_worker.py URL TENANT SESSION COUNT PREFIX [THREADS]``:
says ``ready``, waits for ``go`` on stdin, then appends COUNT steps (from THREADS
threads, default 1), each attaching the label ``PREFIX-i`` and settling with
fingerprint ``i`` and label ``PREFIX-settled-i``; prints the seqs it got as one JSON line.
"""

from __future__ import annotations

import json
import sys
import threading

from interlock.session.history import NewStep
from interlock.store import open_store


def main() -> None:
    url, tenant, session, count, prefix = sys.argv[1:6]
    threads = int(sys.argv[6]) if len(sys.argv) > 6 else 1
    store = open_store(url)
    history = store.session_history(max_steps=100_000, expire_after=3600.0)
    print(json.dumps({"ready": True}), flush=True)
    if sys.stdin.readline().strip() != "go":
        raise SystemExit("expected 'go'")
    seqs: list[int] = []
    lock = threading.Lock()

    def run(part: int) -> None:
        for i in range(part, int(count), threads):
            decision = f"{prefix}-d{i}"
            step = NewStep(
                kind="tool",
                name="t",
                verdict="allow",
                decision_id=decision,
                labels=frozenset({f"{prefix}-{i}"}),
            )
            got = history.append(tenant, session, step)
            history.settle(
                tenant,
                session,
                decision,
                executed=True,
                fingerprints=frozenset({i + 1}),
                labels=frozenset({f"{prefix}-settled-{i}"}),
            )
            with lock:
                seqs.append(got.seq)

    workers = [threading.Thread(target=run, args=(p,)) for p in range(threads)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    store.close()
    print(json.dumps({"seqs": seqs}), flush=True)


if __name__ == "__main__":
    main()
