"""Two provider replicas, each a process of its own behind the middleware, sharing a
SQLite nonce store: a grant accepted by one is refused as a replay by the other, and
the effect happens once."""

from __future__ import annotations

import contextlib
import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from .provider import issue

REPLICA = Path(__file__).parent / "_provider_process.py"


@pytest.fixture
def replicas(tmp_path: Path) -> Iterator[tuple[list[str], Path]]:
    nonces = tmp_path / "nonces.db"
    processes = [
        subprocess.Popen(
            [sys.executable, str(REPLICA), str(nonces)], stdout=subprocess.PIPE, text=True
        )
        for _ in range(2)
    ]
    try:
        urls = []
        for process in processes:
            assert process.stdout is not None
            line = process.stdout.readline().split()
            assert line[:1] == ["port"], line
            urls.append(f"http://127.0.0.1:{line[1]}")
        yield urls, nonces.with_suffix(".effects")
    finally:
        for process in processes:
            process.terminate()
            with contextlib.suppress(subprocess.TimeoutExpired):
                process.wait(timeout=30)
            if process.poll() is None:
                process.kill()


def _post(url: str, token: str, body: bytes) -> httpx.Response:
    headers = {"Interlock-Grant": token, "Idempotency-Key": "k-1"}
    return httpx.post(url + "/refunds", content=body, headers=headers, timeout=60)


def test_a_grant_used_at_one_replica_is_refused_at_the_other(
    replicas: tuple[list[str], Path],
) -> None:
    (a, b), effects = replicas
    body = b'{"amount": 500}'
    token = issue("POST", "/refunds", body, "k-1", grant_id="g_replicas")
    first = _post(a, token, body)
    again = _post(b, token, body)
    assert (first.status_code, first.text) == (201, "g_replicas")
    assert again.status_code == 409 and again.json()["error"]["code"] == "grant_replayed"
    lines = effects.read_text().splitlines()
    assert [json.loads(line)["grant"] for line in lines] == ["g_replicas"]
