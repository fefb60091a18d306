"""``interlock serve --workers 2`` as a real process: two workers share the socket and
the SQLite store. Both answer checks from many clients; an approval opened through one
worker is decided through the other; every decision is in the audit chain exactly
once and the chain verifies; SIGTERM stops both cleanly; a supervisor killed outright
takes its workers with it."""

from __future__ import annotations

import contextlib
import json
import os
import re
import shlex
import signal
import socket
import subprocess
import sys
import threading
import time
from collections import Counter
from pathlib import Path

import httpx
import pytest

from interlock.server.workers import WORKER_HEADER
from interlock.store import open_store

from .harness import bearer
from .test_serve_process import STARTUP, free_port, make_keys, serving, wait_until_up

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
CLIENTS = 8
#: rounds of CLIENTS new connections before both workers must have answered one
ROUNDS = 25
CHECKS = 5  # per connection per round


def _documented_command() -> list[str]:
    """The ``--workers`` example of docs/server.md, as the test runs it."""
    text = (ROOT / "docs" / "server.md").read_text()
    line = next(line for line in text.splitlines() if line.startswith("interlock serve --workers"))
    return shlex.split(line.split("#", 1)[0])[2:]


def _worker(response: httpx.Response) -> str:
    name = response.headers.get(WORKER_HEADER)
    assert name is not None and re.fullmatch(r"[01]:\d+", name), response.headers
    return name


def _client_on(url: str, worker: str, seen: set[str]) -> httpx.Client:
    """A keep-alive client whose connection the given worker accepted."""
    for _ in range(400):
        client = httpx.Client(base_url=url, timeout=STARTUP)
        if _worker(client.get("/v1/health")) == worker:
            return client
        client.close()
    pytest.fail(f"no connection reached worker {worker} of {sorted(seen)}")


def test_two_workers_serve_share_the_store_and_stop_cleanly(tmp_path: Path, store_url: str) -> None:
    url = store_url  # SQLite (WAL) or a fresh PostgreSQL schema
    tokens = make_keys(url)
    agent, approver = bearer(tokens["agent"]), bearer(tokens["approver"])
    port = free_port()
    options = [option.replace("8750", str(port)) for option in _documented_command()]
    options += ["--database", url]  # the last one given wins over serving()'s own
    assert "--workers" in options and "--access-log" in options
    with serving(tmp_path, *options) as proc:
        base = f"http://127.0.0.1:{port}"
        with httpx.Client(base_url=base, timeout=STARTUP) as probe:
            wait_until_up(proc, probe)

        # many clients, each on a new connection each round, until both workers answered
        answered: Counter[str] = Counter()
        decisions: list[str] = []
        failures: list[str] = []
        lock = threading.Lock()

        def client_round() -> None:
            with httpx.Client(base_url=base, timeout=STARTUP) as client:
                for i in range(CHECKS):
                    command = "ls -la" if i % 2 else "rm -rf /"
                    body = {"name": "shell", "arguments": {"command": command}}
                    response = client.post("/v1/check", json=body, headers=agent)
                    with lock:
                        if response.status_code != 200:
                            failures.append(response.text)
                            continue
                        answered[_worker(response)] += 1
                        decisions.append(response.json()["decision_id"])

        for _ in range(ROUNDS):
            threads = [threading.Thread(target=client_round) for _ in range(CLIENTS)]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join(STARTUP)
            if len(answered) == 2:
                break
        assert failures == []
        assert len(answered) == 2, f"only one worker answered: {answered}"
        assert {name.split(":")[0] for name in answered} == {"0", "1"}

        # the database URL (a password, on PostgreSQL) is on no worker's command line
        for name in answered:
            cmdline = Path(f"/proc/{name.split(':')[1]}/cmdline").read_bytes()
            assert url.encode() not in cmdline and b"--database" not in cmdline

        # an approval opened through one worker, decided through the other
        w0, w1 = sorted(answered, key=lambda name: name.split(":")[0])
        one, two = _client_on(base, w0, set(answered)), _client_on(base, w1, set(answered))
        with contextlib.closing(one), contextlib.closing(two):
            refund = {"name": "refund_order", "arguments": {"amount": 250}}
            asked = one.post("/v1/check", json=refund, headers=agent)
            assert _worker(asked) == w0 and asked.json()["verdict"] == "require_approval"
            approval_id = asked.json()["approval"]["id"]
            decisions.append(asked.json()["decision_id"])
            approved = two.post(
                f"/v1/approvals/{approval_id}/approve", json={"reason": "checked"}, headers=approver
            )
            assert _worker(approved) == w1 and approved.json()["decided_by"] == "alice"
            waited = one.get(f"/v1/approvals/{approval_id}/wait?timeout=60", headers=agent)
            assert waited.json()["status"] == "approved"
            retried = two.post("/v1/check", json=refund, headers=agent)
            assert retried.json()["verdict"] == "allow"  # the grant, claimed via worker 1
            again = one.post("/v1/check", json=refund, headers=agent)
            assert again.json()["verdict"] == "require_approval"  # used up, for both
            decisions += [retried.json()["decision_id"], again.json()["decision_id"]]

        proc.send_signal(signal.SIGTERM)
        output, _ = proc.communicate(timeout=STARTUP)
        assert proc.returncode == 0, output
    assert output.count("the audit log and the store are closed") == 2, output
    assert "every worker stopped" in output
    # the access log was on at 1 in 10: structured lines naming the worker, never a key
    logged = [json.loads(line) for line in output.splitlines() if line.startswith('{"ts"')]
    assert logged, output
    assert {tuple(sorted(entry)) for entry in logged} == {
        ("method", "ms", "path", "route", "status", "ts", "worker")
    }
    assert {entry["worker"] for entry in logged} <= set(answered)
    assert any(entry["route"] == "/v1/check" and entry["status"] == 200 for entry in logged)
    assert tokens["agent"] not in output and tokens["approver"] not in output
    with socket.socket() as sock:  # the supervisor let go of the port
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(("127.0.0.1", port))

    if not url.startswith("sqlite"):
        assert not (tmp_path / "i.db").exists(), "the workers served SQLite, not PostgreSQL"
    with open_store(url, migrate=False) as store:
        report = store.verify_audit()
        rows = list(store.audit_chain("acme"))
    assert report.ok, report.breaks
    recorded = Counter(row.decision_id for row in rows if row.kind == "decision")
    assert recorded == Counter(decisions), "a decision was lost or recorded twice"
    assert [row.seq for row in rows] == list(range(1, len(rows) + 1))


def test_workers_stop_when_their_supervisor_is_killed(tmp_path: Path) -> None:
    make_keys(f"sqlite:///{tmp_path / 'i.db'}")
    port = free_port()
    with serving(tmp_path, "--port", str(port), "--workers", "2") as proc:
        base = f"http://127.0.0.1:{port}"
        with httpx.Client(base_url=base, timeout=STARTUP) as probe:
            wait_until_up(proc, probe)
        pids: set[int] = set()
        deadline = time.monotonic() + STARTUP
        while len(pids) < 2 and time.monotonic() < deadline:
            with httpx.Client(base_url=base, timeout=STARTUP) as client:
                pids.add(int(_worker(client.get("/v1/health")).split(":")[1]))
        assert len(pids) == 2
        proc.kill()  # the supervisor, outright
        proc.wait(STARTUP)
        deadline = time.monotonic() + STARTUP
        while pids and time.monotonic() < deadline:
            for pid in list(pids):
                if not _alive(pid):
                    pids.discard(pid)
            time.sleep(0.1)
        assert not pids, f"worker(s) {pids} outlived their supervisor"


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    with contextlib.suppress(OSError):  # a zombie (reaped by init soon) is not serving
        status = Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0]
        return status != "Z"
    return True


def test_one_worker_has_no_worker_header(tmp_path: Path) -> None:
    make_keys(f"sqlite:///{tmp_path / 'i.db'}")
    port = free_port()
    with serving(tmp_path, "--port", str(port)) as proc:
        with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=STARTUP) as client:
            wait_until_up(proc, client)
            assert WORKER_HEADER not in client.get("/v1/health").headers
        proc.send_signal(signal.SIGTERM)
        output, _ = proc.communicate(timeout=STARTUP)
    assert proc.returncode == 0, output
    assert not any(line.startswith('{"ts"') for line in output.splitlines())  # no access log


def test_a_worker_that_dies_stops_the_server_with_exit_1(tmp_path: Path) -> None:
    make_keys(f"sqlite:///{tmp_path / 'i.db'}")
    port = free_port()
    with serving(tmp_path, "--port", str(port), "--workers", "2") as proc:
        base = f"http://127.0.0.1:{port}"
        with httpx.Client(base_url=base, timeout=STARTUP) as probe:
            wait_until_up(proc, probe)
        workers: dict[str, int] = {}
        deadline = time.monotonic() + STARTUP
        while len(workers) < 2 and time.monotonic() < deadline:
            with httpx.Client(base_url=base, timeout=STARTUP) as client:
                index, pid = _worker(client.get("/v1/health")).split(":")
                workers[index] = int(pid)
        assert len(workers) == 2
        os.kill(workers["1"], signal.SIGKILL)
        output, _ = proc.communicate(timeout=STARTUP)
    assert proc.returncode == 1, output
    assert "exited on their own" in output
    assert "the audit log and the store are closed" in output  # worker 0 stopped cleanly
    assert not _alive(workers["0"])


def test_sighup_to_the_server_reloads_the_policy_in_every_worker(tmp_path: Path) -> None:
    tokens = make_keys(f"sqlite:///{tmp_path / 'i.db'}")
    agent = bearer(tokens["agent"])
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    probe_call = {"name": "hup_probe", "arguments": {}}

    def verdicts_by_worker(wanted: str) -> dict[str, str]:
        """Each worker's verdict on the probe, asked on new connections until both
        answered ``wanted`` (or the hang guard passes)."""
        seen: dict[str, str] = {}
        deadline = time.monotonic() + STARTUP
        while time.monotonic() < deadline:
            with httpx.Client(base_url=base, timeout=STARTUP) as client:
                answer = client.post("/v1/check", json=probe_call, headers=agent)
                seen[_worker(answer).split(":")[0]] = answer.json()["verdict"]
            if len(seen) == 2 and set(seen.values()) == {wanted}:
                break
        return seen

    options = ["--port", str(port), "--workers", "2", "--reload-interval", "0"]
    with serving(tmp_path, *options) as proc:
        with httpx.Client(base_url=base, timeout=STARTUP) as probe:
            wait_until_up(proc, probe)
        assert verdicts_by_worker("deny") == {"0": "deny", "1": "deny"}  # both up
        policy = tmp_path / "interlock.yaml"
        policy.write_text(
            policy.read_text()
            + "  - id: hup-probe\n    decision: allow\n    reason: added\n    name: hup_probe\n"
        )
        proc.send_signal(signal.SIGHUP)  # to the supervisor only
        assert verdicts_by_worker("allow") == {"0": "allow", "1": "allow"}
        proc.send_signal(signal.SIGTERM)
        output, _ = proc.communicate(timeout=STARTUP)
    assert proc.returncode == 0, output
    assert output.count("reloaded") == 2, output


_SUPERVISE = """
import signal, socket, sys, time
from interlock.server.workers import Supervisor
sock = socket.socket(); sock.bind(("127.0.0.1", 0)); sock.listen()
worker = [sys.executable, "-c", sys.argv[1]]
supervisor = Supervisor(sock, [worker, worker])
signal.signal(signal.SIGALRM, lambda *_: print("started", flush=True))
signal.setitimer(signal.ITIMER_REAL, 0.5)
sys.exit(supervisor.run())
"""


@pytest.mark.parametrize(
    ("worker", "code"),
    [
        # still starting: no handler yet, so the SIGTERM it is sent ends it — a clean stop
        ("import time; time.sleep(60)", 0),
        # a worker that stops with an error when asked is still a failed stop
        (
            "import signal, sys, time\n"
            "signal.signal(signal.SIGTERM, lambda *_: sys.exit(3))\n"
            "time.sleep(60)",
            1,
        ),
    ],
)
def test_sigterm_while_workers_start_is_a_clean_stop(worker: str, code: int) -> None:
    """Under load a stop can reach a worker before it installs its graceful handler
    (the flake of the webhook test with two workers: exit 1 after SIGTERM)."""
    proc = subprocess.Popen(
        [sys.executable, "-c", _SUPERVISE, worker],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline().strip() == "started"
        time.sleep(0.5)  # the workers' interpreters are up (and have their handler, if any)
        proc.send_signal(signal.SIGTERM)
        output, _ = proc.communicate(timeout=STARTUP)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate(timeout=10)
    assert proc.returncode == code, output
