"""``/metrics``: Prometheus text with decisions by verdict, check latency, pending
approvals and HTTP requests by route template — per app, not process-global."""

from __future__ import annotations

import json
import logging
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

from .harness import Api, open_api


async def scrape(api: Api) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    response = await api.client.get("/metrics")
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/plain")
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(response.text)
        for sample in family.samples
    }


async def test_metrics_count_decisions_latency_pending_approvals_and_requests(
    api: Api,
) -> None:
    await api.check(name="search")
    await api.check(name="read_file")
    await api.check(name="shell", arguments={"command": "ls"})
    approval_id = await api.pending_approval()
    await api.client.get(f"/v1/approvals/{approval_id}", headers=api.h("approver"))
    await api.client.get("/v1/approvals/apr_missing", headers=api.h("approver"))
    samples = await scrape(api)
    assert samples[("interlock_decisions_total", (("verdict", "allow"),))] == 2
    assert samples[("interlock_decisions_total", (("verdict", "deny"),))] == 1
    assert samples[("interlock_decisions_total", (("verdict", "require_approval"),))] == 1
    assert samples[("interlock_decisions_total", (("verdict", "undetermined"),))] == 0
    assert samples[("interlock_check_duration_seconds_count", ())] == 4
    assert samples[("interlock_approvals_pending", ())] == 1
    route = "/v1/approvals/{approval_id}"
    for status in ("200", "404"):
        labels = (("method", "GET"), ("route", route), ("status", status))
        assert samples[("interlock_http_requests_total", labels)] == 1
    check = (("method", "POST"), ("route", "/v1/check"), ("status", "200"))
    assert samples[("interlock_http_requests_total", check)] == 4


async def test_a_decided_approval_is_no_longer_pending(api: Api) -> None:
    approval_id = await api.pending_approval()
    await api.client.post(
        f"/v1/approvals/{approval_id}/approve",
        json={"reason": "checked"},
        headers=api.h("approver"),
    )
    assert (await scrape(api))[("interlock_approvals_pending", ())] == 0


async def test_each_app_counts_only_its_own_requests(
    sqlite_api: Api, sqlite_url: str, policy_file: Path
) -> None:
    await sqlite_api.check(name="search")
    async for other in open_api(sqlite_url, policy_file):
        samples = await scrape(other)
        assert samples[("interlock_decisions_total", (("verdict", "allow"),))] == 0
    assert (await scrape(sqlite_api))[("interlock_decisions_total", (("verdict", "allow"),))] == 1


async def test_a_client_cannot_mint_method_labels(api: Api) -> None:
    for method in ("BREW", "PROPFIND-0001", "PROPFIND-0002"):
        await api.client.request(method, "/no/such/route")
    await api.client.request("BREW", "/v1/check")  # a known route: its 405 keeps the method
    samples = await scrape(api)
    methods = {
        dict(labels)["method"]
        for (name, labels) in samples
        if name == "interlock_http_requests_total" and dict(labels)["route"] == "unmatched"
    }
    assert methods == {"other"}
    unmatched = (("method", "other"), ("route", "unmatched"), ("status", "404"))
    assert samples[("interlock_http_requests_total", unmatched)] == 3


async def test_the_access_log_logs_a_counted_share_as_json_lines(
    sqlite_url: str, policy_file: Path
) -> None:
    lines: list[str] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            lines.append(record.getMessage())

    keep = Keep()
    logging.getLogger("interlock.access").addHandler(keep)
    try:
        async for api in open_api(sqlite_url, policy_file, access_log=0.25, worker="0:1"):
            for _ in range(8):
                response = await api.client.post(
                    "/v1/check", json={"name": "search"}, headers=api.h("agent")
                )
                assert response.headers["x-interlock-worker"] == "0:1"
            token = api.tokens["agent"]
    finally:
        logging.getLogger("interlock.access").removeHandler(keep)
    assert len(lines) == 2  # 8 requests, one in four
    entries = [json.loads(line) for line in lines]
    assert {entry["route"] for entry in entries} == {"/v1/check"}
    assert {entry["status"] for entry in entries} == {200}
    assert {entry["worker"] for entry in entries} == {"0:1"}
    assert all(token not in line for line in lines)


async def test_no_access_log_and_no_worker_header_by_default(api: Api) -> None:
    lines: list[str] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            lines.append(record.getMessage())

    keep = Keep()
    logging.getLogger("interlock.access").addHandler(keep)
    try:
        response = await api.client.post(
            "/v1/check", json={"name": "search"}, headers=api.h("agent")
        )
    finally:
        logging.getLogger("interlock.access").removeHandler(keep)
    assert lines == []
    assert "x-interlock-worker" not in response.headers
