"""API keys: shown once, stored as a hash, refused once revoked (at once here,
within the cache TTL elsewhere), managed with ``interlock keys``."""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from interlock.cli import app as cli
from interlock.server import ApiKeyError, ApiKeyNotFound, KeyStore, Role
from interlock.server.keys import parse_token
from interlock.store import SqlStore

from .harness import bearer, open_api

runner = CliRunner()


class FakeMonotonic:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


# -- the key store, on each back end ------------------------------------------------------


def test_a_key_is_shown_once_and_only_its_hash_is_stored(store: SqlStore) -> None:
    keys = KeyStore(store)
    created = keys.create(tenant="acme", role=Role.AGENT, name="ops-bot")
    parsed = parse_token(created.token)
    assert parsed is not None
    key_id, secret = parsed
    assert key_id == created.key.id
    with store.transaction(write=False) as cur:
        cur.execute("SELECT * FROM api_keys")
        (row,) = cur.fetchall()
    assert not any(secret in str(column) for column in row)
    assert hashlib.sha256(secret.encode()).hexdigest() in row
    assert keys.authenticate(created.token) == created.key


def test_a_wrong_secret_an_unknown_id_and_garbage_are_refused(store: SqlStore) -> None:
    keys = KeyStore(store)
    token = keys.create(tenant="acme", role="approver", name="alice").token
    key_id, secret = token[len("ilk_") :].split("_", 1)
    flipped = secret[:-1] + ("A" if secret[-1] != "A" else "B")
    for bad in (
        f"ilk_{key_id}_{flipped}",
        f"ilk_{'f' * 16}_{secret}",
        token + "x",
        token.replace("ilk_", "ilk-"),
        "",
        "ilk_",
    ):
        assert keys.authenticate(bad) is None, bad


def test_keys_are_listed_oldest_first_and_revoked_once(store: SqlStore, clock: Any) -> None:
    keys = KeyStore(store)
    first = keys.create(tenant="acme", role=Role.AGENT, name="a").key
    clock.advance(1)
    second = keys.create(tenant="globex", role=Role.ADMIN, name="b").key
    assert keys.list_keys() == [first, second]
    assert keys.list_keys(tenant="globex") == [second]
    revoked = keys.revoke(first.id)
    again = keys.revoke(first.id)
    assert revoked.revoked and again.revoked_us == revoked.revoked_us
    assert keys.list_keys(include_revoked=False) == [second]
    with pytest.raises(ApiKeyNotFound):
        keys.revoke("0" * 16)


@pytest.mark.parametrize(
    ("tenant", "role", "name"),
    [("", "agent", "x"), ("acme", "agent", "   "), ("acme", "root", "x"), ("a\nb", "agent", "x")],
)
def test_a_key_needs_a_tenant_a_role_and_a_name(
    store: SqlStore, tenant: str, role: str, name: str
) -> None:
    with pytest.raises(ApiKeyError):
        KeyStore(store).create(tenant=tenant, role=role, name=name)


def test_a_revocation_elsewhere_takes_effect_within_the_cache_ttl(store: SqlStore) -> None:
    monotonic = FakeMonotonic()
    server = KeyStore(store, cache_ttl=5.0, monotonic=monotonic)
    elsewhere = KeyStore(store)  # another process or replica
    created = elsewhere.create(tenant="acme", role=Role.AGENT, name="ops-bot")
    assert server.authenticate(created.token) == created.key  # now cached
    elsewhere.revoke(created.key.id)
    monotonic.now += 4.9
    assert server.authenticate(created.token) == created.key  # still within the TTL
    monotonic.now += 0.2
    assert server.authenticate(created.token) is None


def test_with_no_cache_a_revocation_elsewhere_takes_effect_at_once(store: SqlStore) -> None:
    server = KeyStore(store, cache_ttl=0)
    elsewhere = KeyStore(store)
    created = elsewhere.create(tenant="acme", role=Role.AGENT, name="ops-bot")
    assert server.authenticate(created.token) == created.key
    elsewhere.revoke(created.key.id)
    assert server.authenticate(created.token) is None


# -- interlock keys ------------------------------------------------------------------------


def keys_cli(url: str, *args: str) -> tuple[int, str, str]:
    result = runner.invoke(cli, ["keys", *args, "-d", url])
    return result.exit_code, result.stdout, result.stderr


def test_keys_create_prints_the_key_once_and_list_never_does(sqlite_url: str) -> None:
    code, stdout, stderr = keys_cli(
        sqlite_url, "create", "--tenant", "acme", "--role", "agent", "--name", "ops-bot"
    )
    assert code == 0
    token = stdout.strip()
    assert parse_token(token) is not None
    assert "cannot be shown again" in stderr
    key_id, secret = token[len("ilk_") :].split("_", 1)
    code, listing, _ = keys_cli(sqlite_url, "list")
    assert code == 0 and key_id in listing and secret not in listing
    code, as_json, _ = keys_cli(sqlite_url, "list", "--json")
    (row,) = [json.loads(line) for line in as_json.splitlines()]
    assert (row["id"], row["tenant"], row["role"], row["name"], row["revoked"]) == (
        key_id,
        "acme",
        "agent",
        "ops-bot",
        "",
    )
    assert secret not in as_json


def test_keys_create_json_and_refusals(sqlite_url: str) -> None:
    code, stdout, _ = keys_cli(
        sqlite_url, "create", "--tenant", "acme", "--role", "admin", "--name", "root", "--json"
    )
    created = json.loads(stdout)
    assert code == 0 and created["key"].startswith(f"ilk_{created['id']}_")
    bad_role = keys_cli(sqlite_url, "create", "--tenant", "a", "--role", "root", "--name", "x")
    bad_name = keys_cli(sqlite_url, "create", "--tenant", "a", "--role", "agent", "--name", " ")
    assert bad_role[0] == 2 and bad_name[0] == 2


def test_keys_revoke_and_list_refuse_what_is_not_there(sqlite_url: str, tmp_path: Path) -> None:
    missing_db = f"sqlite:///{tmp_path / 'nowhere.db'}"
    code, _, stderr = keys_cli(missing_db, "list")
    assert code == 2 and "no database" in stderr
    assert not (tmp_path / "nowhere.db").exists()
    keys_cli(sqlite_url, "create", "--tenant", "acme", "--role", "agent", "--name", "x")
    code, _, stderr = keys_cli(sqlite_url, "revoke", "0123456789abcdef")
    assert code == 1 and "no API key" in stderr


async def test_a_key_revoked_with_the_cli_gets_401(sqlite_url: str, policy_file: Path) -> None:
    code, stdout, _ = keys_cli(
        sqlite_url, "create", "--tenant", "acme", "--role", "agent", "--name", "ops-bot"
    )
    token = stdout.strip()
    key_id = token.split("_")[1]
    async for api in open_api(sqlite_url, policy_file, key_cache_ttl=0):
        before = await api.client.post("/v1/check", json={"name": "search"}, headers=bearer(token))
        code, stdout, _ = keys_cli(sqlite_url, "revoke", key_id)
        after = await api.client.post("/v1/check", json={"name": "search"}, headers=bearer(token))
        assert code == 0 and f"revoked API key {key_id}" in stdout
        assert (before.status_code, after.status_code) == (200, 401)
        assert after.json()["error"]["code"] == "unauthorized"


def test_the_keys_commands_do_not_need_the_server_stack() -> None:
    code = (
        "import sys, interlock.cli, interlock.server\n"
        "from interlock.server import KeyStore\n"
        "loaded = [m for m in ('fastapi', 'starlette', 'uvicorn', 'prometheus_client')"
        " if m in sys.modules]\n"
        "assert not loaded, loaded\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)
