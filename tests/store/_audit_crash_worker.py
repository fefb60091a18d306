"""A process killed in the middle of an audit batch (run by path by
``test_audit_crash_batch.py``; ``interlock`` comes from the installed package).

``python _audit_crash_worker.py URL DURABILITY``: 16 threads write records over three
tenants through one group-commit writer; each acknowledged record is printed as
``{"ack": [tenant, seq, marker]}`` the moment ``write_record`` returns. From the
``STALL_AT``-th commit with records of at least two tenants, the commit stops
half done inside its transaction — on SQLite every head moved and no row inserted,
on PostgreSQL the rows inserted and no head moved — and prints
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
    commits = [0]

    def stall(rows: list[tuple[Any, ...]]) -> None:
        emit(mid_batch=[json.loads(row[7])["marker"] for row in rows])
        time.sleep(600)  # killed here

    if store.dialect == "sqlite":  # heads moved first (conditionally), rows last
        insert_links = store._insert_links

        def stalling_insert(cur: Any, rows: list[tuple[Any, ...]]) -> None:
            commits[0] += 1
            if commits[0] < STALL_AT or len({row[0] for row in rows}) < 2:
                insert_links(cur, rows)
                return
            stall(rows)  # every head of the batch moved, in the open transaction; no row

        store._insert_links = stalling_insert  # type: ignore[method-assign]
    else:  # heads locked first, then one statement inserts the rows and moves them
        write_links = store._write_links

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
            stall(rows)

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
