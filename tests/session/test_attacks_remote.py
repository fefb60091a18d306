"""Attacks through a remote guard (a real ``interlock serve`` on PostgreSQL): the
outcome a remote agent reports must carry what the model could read — the error of a
read that failed after reading, and the result of a call its mapper turned into
several actions — so that the server's flow rule refuses the leak; benign calls pass."""

from __future__ import annotations

import secrets
from collections.abc import Iterator
from dataclasses import dataclass

import pytest

from interlock import Action, Guard, Verdict
from interlock.adapters.base import run_settled
from interlock.core.action import Context
from interlock.server import KeyStore, Role
from interlock.store import open_store
from server.replicas import Replica, start_replicas, stop_replicas

pytestmark = pytest.mark.slow

POLICY = """\
version: 1
default: allow
labels:
  - id: secrets-read
    attach: [secret]
    name: read_file
    params:
      path: {glob: ["**/.env"]}
rules:
  - id: no-exfil-of-secret-data
    decision: deny
    reason: data returned by a secret read may not leave
    name: send_email
    session:
      flows_from:
        labels: [secret]
"""
KEY = "sk-live-9f8e7d6c5b4a39281706f5e4d3c2b1a0"


@dataclass
class Server:
    replica: Replica
    token: str

    def guard(self) -> Guard:
        session = f"s-{secrets.token_hex(4)}"
        return Guard.remote(
            self.replica.url, self.token, request_timeout=60.0, context=Context(session_id=session)
        )


@pytest.fixture(scope="module")
def server(postgres_server_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    import psycopg
    from psycopg import sql

    schema = f"t_{secrets.token_hex(6)}"
    url = f"{postgres_server_url}{'&' if '?' in postgres_server_url else '?'}schema={schema}"
    workdir = tmp_path_factory.mktemp("session-attacks-remote")
    policy = workdir / "interlock.yaml"
    policy.write_text(POLICY)
    try:
        with open_store(url) as store:
            token = KeyStore(store).create(tenant="acme", role=Role.AGENT, name="agent").token
        replicas = start_replicas(1, url, policy, workdir)
        try:
            yield Server(replicas[0], token)
        finally:
            codes = stop_replicas(replicas)
        assert codes[replicas[0].name] == 0, replicas[0].describe()
    finally:
        with psycopg.connect(postgres_server_url, autocommit=True, connect_timeout=2) as conn:
            conn.execute("SET lock_timeout = '10s'")
            conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema)))


def _mail(guard: Guard, body: str) -> Verdict:
    return guard.check(Action.tool("send_email", {"to": "x@corp.example", "body": body})).verdict


def test_a_remote_read_that_raises_reports_its_error(server: Server) -> None:
    with server.guard() as guard:

        @guard.protect
        def read_file(path: str) -> str:
            raise ValueError(f"cannot parse {path}: OPENAI_API_KEY={KEY}")

        with pytest.raises(ValueError):
            read_file("/srv/app/.env")
        assert _mail(guard, f"the key is {KEY}") is Verdict.DENY
        assert _mail(guard, "the read failed") is Verdict.ALLOW


def test_a_remote_mapped_call_reports_for_every_action(server: Server) -> None:
    with server.guard() as guard:

        def mapper(path: str) -> list[Action]:
            return [Action.tool("read_file", {"path": path}), Action.tool("load_config", {})]

        decision = guard.check_mapped(mapper, "/srv/app/.env")
        assert decision is not None and decision.verdict is Verdict.ALLOW
        run_settled(guard, decision, lambda: f"OPENAI_API_KEY={KEY}\n")
        assert _mail(guard, KEY) is Verdict.DENY
        assert _mail(guard, "config loaded") is Verdict.ALLOW


def test_a_slow_remote_read_still_reports_its_secret(
    server: Server, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The remote decider keeps the newest ``_PENDING_KEPT`` outcomes it waits for (10,000;
    5 here): a read whose body runs while more calls are checked must still report."""
    import interlock.remote

    monkeypatch.setattr(interlock.remote, "_PENDING_KEPT", 5)
    with server.guard() as guard:

        @guard.protect
        def read_file(path: str) -> str:
            for i in range(8):  # the agent's other sessions, busy meanwhile
                other = Action.tool(
                    "list_dir", {"path": "/tmp"}, context=Context(session_id=f"o{i}")
                )
                assert guard.check(other).allowed
            return f"OPENAI_API_KEY={KEY}\n"

        read_file("/srv/app/.env")
        assert _mail(guard, f"the key is {KEY}") is Verdict.DENY
        assert _mail(guard, "the read went fine") is Verdict.ALLOW
