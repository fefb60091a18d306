"""``KeyStore.aauthenticate``: the requests of one token that miss the key cache
together share one read of the table (an expired entry under load used to start one
read per request in flight, each on a worker thread of its own); the answer is the
one :meth:`KeyStore.authenticate` gives, and a key revoked here is refused at once —
no request arriving after the revocation shares a read begun before it."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from interlock.errors import StoreUnavailable
from interlock.server import KeyStore, Role
from interlock.server.keys import ApiKey
from interlock.store import SqlStore

WAIT_S = 30.0


class SlowReads:
    """Counts the table reads of ``keys`` (``authenticate`` past the cache) and holds
    each at a gate until released."""

    def __init__(self, keys: KeyStore) -> None:
        self.reads = 0
        self.gate = threading.Event()
        self.entered = threading.Event()
        self.fail_with: BaseException | None = None
        real = keys.authenticate

        def authenticate(token: str) -> ApiKey | None:
            self.reads += 1
            self.entered.set()
            assert self.gate.wait(WAIT_S)
            if self.fail_with is not None:
                raise self.fail_with
            return real(token)

        keys.authenticate = authenticate  # type: ignore[method-assign]


async def _settle(tasks: list[asyncio.Task[Any]]) -> None:
    await asyncio.sleep(0)
    await asyncio.sleep(0)


async def test_requests_missing_the_cache_together_share_one_read(store: SqlStore) -> None:
    keys = KeyStore(store)
    token = keys.create(tenant="acme", role=Role.AGENT, name="bot").token
    slow = SlowReads(keys)
    tasks = [asyncio.ensure_future(keys.aauthenticate(token)) for _ in range(32)]
    assert await asyncio.to_thread(slow.entered.wait, WAIT_S)
    await _settle(tasks)
    slow.gate.set()
    found = await asyncio.wait_for(asyncio.gather(*tasks), WAIT_S)
    assert slow.reads == 1
    assert {key.name for key in found if key is not None} == {"bot"}
    assert None not in found
    assert await keys.aauthenticate(token) == found[0]  # cached now: no read
    assert slow.reads == 1
    assert not keys._reading


async def test_a_wrong_secret_never_shares_the_right_ones_read(store: SqlStore) -> None:
    keys = KeyStore(store)
    token = keys.create(tenant="acme", role=Role.AGENT, name="bot").token
    wrong = token[:-4] + ("AAAA" if not token.endswith("AAAA") else "BBBB")
    slow = SlowReads(keys)
    right_task = asyncio.ensure_future(keys.aauthenticate(token))
    wrong_task = asyncio.ensure_future(keys.aauthenticate(wrong))
    assert await asyncio.to_thread(slow.entered.wait, WAIT_S)
    slow.gate.set()
    assert (await right_task) is not None
    assert (await wrong_task) is None
    assert slow.reads == 2


async def test_a_request_after_a_revocation_here_does_not_share_an_earlier_read(
    store: SqlStore,
) -> None:
    keys = KeyStore(store)
    created = keys.create(tenant="acme", role=Role.AGENT, name="bot")
    slow = SlowReads(keys)
    before = asyncio.ensure_future(keys.aauthenticate(created.token))
    assert await asyncio.to_thread(slow.entered.wait, WAIT_S)
    keys.revoke(created.key.id)
    after = asyncio.ensure_future(keys.aauthenticate(created.token))
    await asyncio.sleep(0)
    slow.gate.set()
    await asyncio.wait_for(before, WAIT_S)  # began before: either answer is its own
    assert await asyncio.wait_for(after, WAIT_S) is None
    assert slow.reads == 2


async def test_a_failed_read_fails_every_request_sharing_it_and_the_next_reads_again(
    store: SqlStore,
) -> None:
    keys = KeyStore(store)
    token = keys.create(tenant="acme", role=Role.AGENT, name="bot").token
    slow = SlowReads(keys)
    slow.fail_with = StoreUnavailable("the store is down")
    tasks = [asyncio.ensure_future(keys.aauthenticate(token)) for _ in range(4)]
    assert await asyncio.to_thread(slow.entered.wait, WAIT_S)
    slow.gate.set()
    outcomes = await asyncio.gather(*tasks, return_exceptions=True)
    assert all(isinstance(outcome, StoreUnavailable) for outcome in outcomes)
    assert slow.reads == 1
    slow.fail_with = None
    assert (await keys.aauthenticate(token)) is not None
    assert slow.reads == 2


async def test_a_waiter_cancelled_leaves_the_read_to_the_others(store: SqlStore) -> None:
    keys = KeyStore(store)
    token = keys.create(tenant="acme", role=Role.AGENT, name="bot").token
    slow = SlowReads(keys)
    first = asyncio.ensure_future(keys.aauthenticate(token))
    second = asyncio.ensure_future(keys.aauthenticate(token))
    assert await asyncio.to_thread(slow.entered.wait, WAIT_S)
    first.cancel()
    with pytest.raises(asyncio.CancelledError):
        await first
    slow.gate.set()
    assert (await asyncio.wait_for(second, WAIT_S)) is not None
    assert slow.reads == 1


@settings(
    max_examples=20, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    picks=st.lists(
        st.sampled_from(["good", "wrong", "malformed", "unknown", "revoked"]), max_size=12
    )
)
def test_the_shared_read_answers_as_authenticate_does(store: SqlStore, picks: list[str]) -> None:
    """The reference is :meth:`KeyStore.authenticate` on a store of its own (no cache
    shared): for any mix of tokens asked at once, the same keys, or ``None``."""
    keys = KeyStore(store)
    good = keys.create(tenant="acme", role=Role.AGENT, name="good").token
    gone = keys.create(tenant="acme", role=Role.AGENT, name="gone")
    keys.revoke(gone.key.id)
    tokens = {
        "good": good,
        "wrong": good[:-1] + ("A" if good[-1] != "A" else "B"),
        "malformed": "ilk_nope",
        "unknown": "ilk_" + "0" * 16 + "_" + "A" * 43,
        "revoked": gone.token,
    }
    asked = [tokens[pick] for pick in picks]
    expected = [KeyStore(store, cache_ttl=0).authenticate(token) for token in asked]

    async def at_once() -> list[ApiKey | None]:
        fresh = KeyStore(store)
        return list(await asyncio.gather(*(fresh.aauthenticate(token) for token in asked)))

    assert asyncio.run(at_once()) == expected
