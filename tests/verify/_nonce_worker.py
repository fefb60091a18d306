"""A process consuming nonces from a shared store: ``kind location count seed``.

Opens the store, prints ``ready``, waits for a line on stdin (so every worker starts
together), consumes ``n0 .. n<count-1>`` in an order shuffled by ``seed``, and prints
the JSON list of the nonces it won.
"""

from __future__ import annotations

import json
import random
import sys

from interlock.verify.nonces import NonceStore, PostgresNonceStore, SqliteNonceStore


def main() -> None:
    kind, location, count, seed = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
    store: NonceStore
    if kind == "sqlite":
        store = SqliteNonceStore(location, prune_every=7)
    else:
        conninfo, schema = location.rsplit("#", 1)
        store = PostgresNonceStore(conninfo, schema=schema, prune_every=7)
    nonces = [f"n{i}" for i in range(count)]
    random.Random(seed).shuffle(nonces)
    print("ready", flush=True)
    sys.stdin.readline()
    won = [n for n in nonces if store.consume(n, keep_until=2_000_000_000, now=1_000_000_000)]
    store.close()
    print(json.dumps(won), flush=True)


if __name__ == "__main__":
    main()
