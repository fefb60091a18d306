"""Nonce stores: exactly once across threads and processes, on each back end; entries
kept until expiry plus the margin, then pruned; a failing store fails closed."""

from __future__ import annotations

import contextlib
import json
import secrets
import subprocess
import sys
import threading
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from interlock.errors import GrantReplayed, StoreUnavailable
from interlock.verify import Verifier
from interlock.verify.nonces import (
    MemoryNonceStore,
    NonceStore,
    PostgresNonceStore,
    SqliteNonceStore,
)

from .support import AUDIENCE, JWKS, Clock, Req, grant_for

WORKER = Path(__file__).parent / "_nonce_worker.py"


@pytest.fixture
def pg_schema(postgres_server_url: str) -> Iterator[tuple[str, str]]:
    """A schema of this test's own on the test server (dropped afterwards)."""
    import psycopg

    schema = f"verify_nonces_{secrets.token_hex(5)}"
    yield postgres_server_url, schema
    with psycopg.connect(postgres_server_url, autocommit=True, connect_timeout=5) as conn:
        conn.execute(f"DROP SCHEMA IF EXISTS {schema} CASCADE")


@pytest.fixture(params=["memory", "sqlite", "postgres"])
def open_nonces(
    request: pytest.FixtureRequest, tmp_path: Path
) -> Iterator[Callable[..., NonceStore]]:
    """Opens stores of the test's kind on one shared place (closed afterwards)."""
    opened: list[NonceStore] = []
    shared = MemoryNonceStore()

    def open_one(**options: int) -> NonceStore:
        store: NonceStore
        if request.param == "memory":
            store = shared if not options else MemoryNonceStore(margin=options["margin"])
        elif request.param == "sqlite":
            store = SqliteNonceStore(tmp_path / "nonces.db", **options)
        else:
            url, schema = request.getfixturevalue("pg_schema")
            store = PostgresNonceStore(url, schema=schema, **options)
        opened.append(store)
        return store

    yield open_one
    for store in opened:
        store.close()


def test_a_nonce_is_consumed_once(open_nonces: Callable[..., NonceStore]) -> None:
    store = open_nonces()
    assert store.consume("g_1", keep_until=1_060, now=1_000)
    assert not store.consume("g_1", keep_until=1_060, now=1_001)
    assert store.consume("g_2", keep_until=1_060, now=1_001)


async def test_aconsume_is_the_same_store(open_nonces: Callable[..., NonceStore]) -> None:
    store = open_nonces()
    assert await store.aconsume("g_1", keep_until=1_060, now=1_000)
    assert not store.consume("g_1", keep_until=1_060, now=1_000)
    assert not await store.aconsume("g_1", keep_until=1_060, now=1_000)


def test_threads_racing_on_the_same_nonces_win_each_once(
    open_nonces: Callable[..., NonceStore],
) -> None:
    stores = [open_nonces() for _ in range(2)]  # two handles on one place, 8 threads
    nonces = [f"n{i}" for i in range(200)]
    won: list[str] = []
    lock = threading.Lock()
    start = threading.Barrier(8)

    def race(store: NonceStore) -> None:
        start.wait()
        mine = [n for n in nonces if store.consume(n, keep_until=2_000, now=1_000)]
        with lock:
            won.extend(mine)

    threads = [threading.Thread(target=race, args=(stores[i % 2],)) for i in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert Counter(won) == Counter(nonces)  # every nonce won, none twice


def test_entries_are_kept_until_expiry_and_the_margin_then_pruned(
    open_nonces: Callable[..., NonceStore],
) -> None:
    store = open_nonces(margin=30, prune_every=1)
    assert store.consume("old", keep_until=1_000, now=900)
    assert not store.consume("old", keep_until=1_000, now=1_030)  # within the margin: kept
    assert store.consume("tick", keep_until=5_000, now=1_031)  # prunes what ended < 1_001
    assert store.consume("old", keep_until=1_000, now=1_031)  # gone: a grant this old is
    # refused as expired by the verifier before its nonce is ever looked at


@pytest.mark.parametrize("kind", ["sqlite", "postgres"])
def test_processes_racing_on_one_store_win_each_nonce_once(
    kind: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    if kind == "sqlite":
        location = str(tmp_path / "nonces.db")
        SqliteNonceStore(location).close()  # created before the race
    else:
        url, schema = request.getfixturevalue("pg_schema")
        location = f"{url}#{schema}"
    count = 300
    workers = [
        subprocess.Popen(
            [sys.executable, str(WORKER), kind, location, str(count), str(seed)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        for seed in range(4)
    ]
    try:
        for worker in workers:
            assert worker.stdout is not None and worker.stdout.readline().strip() == "ready"
        for worker in workers:
            assert worker.stdin is not None
            worker.stdin.write("go\n")
            worker.stdin.flush()
        won: Counter[str] = Counter()
        for worker in workers:
            out, _ = worker.communicate(timeout=240)
            assert worker.returncode == 0
            won.update(json.loads(out.strip().splitlines()[-1]))
    finally:
        for worker in workers:
            with contextlib.suppress(ProcessLookupError):
                worker.kill()
    assert won == Counter(f"n{i}" for i in range(count))


def test_a_verifier_on_a_shared_store_refuses_a_replay_to_another_replica(
    tmp_path: Path,
) -> None:
    path = tmp_path / "nonces.db"
    a = Verifier(JWKS, audience=AUDIENCE, nonces=SqliteNonceStore(path), clock=Clock())
    b = Verifier(JWKS, audience=AUDIENCE, nonces=SqliteNonceStore(path), clock=Clock())
    token = grant_for()
    a.verify(token, **Req().kwargs())
    with pytest.raises(GrantReplayed):
        b.verify(token, **Req().kwargs())


def test_a_store_that_cannot_open_says_where(tmp_path: Path) -> None:
    with pytest.raises(StoreUnavailable, match="missing"):
        SqliteNonceStore(tmp_path / "missing" / "nonces.db")
    with pytest.raises(StoreUnavailable, match="cannot be opened"):
        PostgresNonceStore("postgresql://nobody@127.0.0.1:1/none", connect_timeout=1)


def test_a_closed_store_fails_closed(tmp_path: Path) -> None:
    store = SqliteNonceStore(tmp_path / "nonces.db")
    verifier = Verifier(JWKS, audience=AUDIENCE, nonces=store, clock=Clock())
    store.close()
    with pytest.raises(StoreUnavailable):
        verifier.verify(grant_for(), **Req().kwargs())
    failed: list[BaseException] = []
    thread = threading.Thread(  # a thread with no connection yet meets the closed store
        target=lambda: _catch(failed, lambda: verifier.verify(grant_for(), **Req().kwargs()))
    )
    thread.start()
    thread.join()
    assert len(failed) == 1 and isinstance(failed[0], StoreUnavailable)


def _catch(into: list[BaseException], call: Callable[[], object]) -> None:
    try:
        call()
    except BaseException as exc:
        into.append(exc)


@pytest.mark.parametrize(
    ("nonce", "keep_until"), [("", 1), ("x" * 513, 1), ("g", 1.5), ("g", True)]
)
def test_a_malformed_entry_is_refused(nonce: str, keep_until: object) -> None:
    with pytest.raises(ValueError):
        MemoryNonceStore().consume(nonce, keep_until=keep_until, now=0)  # type: ignore[arg-type]


def test_table_names_are_checked(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="table name"):
        SqliteNonceStore(tmp_path / "n.db", table="x; DROP TABLE y")


def test_a_store_url_with_a_schema_parameter_uses_that_schema(
    pg_schema: tuple[str, str],
) -> None:
    import psycopg

    url, schema = pg_schema
    store = PostgresNonceStore(f"{url}?schema={schema}")
    try:
        assert store.consume("g_1", keep_until=2_000, now=1_000)
    finally:
        store.close()
    with psycopg.connect(url) as conn:
        row = conn.execute(f"SELECT keep_until FROM {schema}.interlock_nonces").fetchone()
    assert row == (2_000,)


@pytest.mark.parametrize("synchronous", ["FULL", "NORMAL"])
def test_the_sqlite_durability_is_the_one_asked_for(tmp_path: Path, synchronous: str) -> None:
    store = SqliteNonceStore(tmp_path / "n.db", synchronous=synchronous)  # type: ignore[arg-type]
    try:
        level = store._connection().execute("PRAGMA synchronous").fetchone()[0]
        assert level == {"FULL": 2, "NORMAL": 1}[synchronous]
        assert store.consume("g", keep_until=2, now=1)
    finally:
        store.close()
    with pytest.raises(ValueError, match="synchronous"):
        SqliteNonceStore(tmp_path / "n.db", synchronous="OFF")  # type: ignore[arg-type]
