"""The approval long-poll: it answers as soon as another client decides, with the
decided record, and never waits past the server's limit. No timed assertions: a
generous timeout, and the record it returns, say what happened."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from .harness import Api, open_api

GENEROUS = 60  # seconds: far more than any decision takes; reaching it fails the test


@pytest.mark.parametrize("decision", ["approve", "deny"])
async def test_a_waiting_agent_is_released_when_another_client_decides(
    api: Api, decision: str
) -> None:
    approval_id = await api.pending_approval()
    waiting = asyncio.create_task(
        api.client.get(
            f"/v1/approvals/{approval_id}/wait?timeout={GENEROUS}", headers=api.h("agent")
        )
    )
    await asyncio.sleep(0.05)  # let the long-poll start; it must still be waiting
    assert not waiting.done()
    decided = await api.client.post(
        f"/v1/approvals/{approval_id}/{decision}",
        json={"reason": "looked at it"},
        headers=api.h("approver"),
    )
    assert decided.status_code == 200
    response = await asyncio.wait_for(waiting, GENEROUS)
    assert response.status_code == 200
    body = response.json()
    expected = "approved" if decision == "approve" else "denied"
    assert (body["id"], body["status"], body["decided_by"]) == (approval_id, expected, "alice")


async def test_many_waiters_are_all_released_by_one_decision(api: Api) -> None:
    approval_id = await api.pending_approval()
    url = f"/v1/approvals/{approval_id}/wait?timeout={GENEROUS}"
    waiters = [
        asyncio.create_task(api.client.get(url, headers=api.h(who)))
        for who in ("agent", "approver", "admin")
    ]
    await api.client.post(
        f"/v1/approvals/{approval_id}/approve",
        json={"reason": "checked"},
        headers=api.h("approver"),
    )
    responses = await asyncio.wait_for(asyncio.gather(*waiters), GENEROUS)
    assert [r.json()["status"] for r in responses] == ["approved"] * 3


@pytest.fixture
async def impatient_api(sqlite_url: str, policy_file: Path) -> AsyncIterator[Api]:
    async for opened in open_api(sqlite_url, policy_file, max_wait=0.01):
        yield opened


async def test_a_wait_longer_than_the_servers_limit_is_cut_to_it(impatient_api: Api) -> None:
    approval_id = await impatient_api.pending_approval()
    response = await asyncio.wait_for(
        impatient_api.client.get(
            f"/v1/approvals/{approval_id}/wait?timeout=3600", headers=impatient_api.h("agent")
        ),
        GENEROUS,
    )
    assert response.status_code == 200 and response.json()["status"] == "pending"
