"""A process killed in the middle of an audit batch (run by path by
``test_audit_crash_batch.py``; ``interlock`` comes from the installed package).

``python _audit_crash_worker.py URL DURABILITY``: 16 threads write records over three
tenants through one group-commit writer; each acknowledged record is printed as
``{"ack": [tenant, seq, marker]}`` the moment ``write_record`` returns. From the
``STALL_AT``-th commit with records of at least two tenants, the commit stops
between its INSERT and its head UPDATE — inside the transaction — and prints
``{"mid_batch": [markers]}``; the test kills the process there (SIGKILL).
"""

from __future__ import annotations

import json
import sys
import threading
import time
from typing import Any

from interlock.store import AuditWriter, open_store

STALL_AT = 20
_print_lock = threading.Lock()


def emit(**message: Any) -> None:
    line = json.dumps(message) + "\n"
    with _print_lock:
        sys.stdout.write(line)
        sys.stdout.flush()


def main() -> None:
    url, durability = sys.argv[1], sys.argv[2]
    store = open_store(url)
    write_links = store._write_links
    commits = [0]

    def stalling(cur: Any, rows: list[tuple[Any, ...]], heads: Any) -> None:
        commits[0] += 1
        if commits[0] < STALL_AT or len(heads) < 2:
            write_links(cur, rows, heads)
            return
        cur.executemany(  # the batch's rows, in the open transaction; no head moved
            store.q(
                "INSERT INTO audit_events (tenant, seq, ts_us, kind, decision_id, agent, "
                "decision, body, prev_hash, hash, key_id) VALUES (?,?,?,?,?,?,?,?,?,?,?)"
            ),
            rows,
        )
        emit(mid_batch=[json.loads(row[7])["marker"] for row in rows])
        time.sleep(600)  # killed here

    store._write_links = stalling  # type: ignore[method-assign]
    writer = AuditWriter(store, durability=durability)  # type: ignore[arg-type]
    tenants = ("acme", "globex", "initech")

    def loop(index: int) -> None:
        for n in range(1_000_000):
            tenant = tenants[(index + n) % len(tenants)]
            marker = f"m-{index}-{n}"
            seq = writer.write_record(tenant, "note", {"marker": marker, "thread": index})
            emit(ack=[tenant, seq, marker])

    threads = [threading.Thread(target=loop, args=(i,), daemon=True) for i in range(16)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()


if __name__ == "__main__":
    main()
