"""API keys: shown once, stored as a hash, refused once revoked (at once here,
within the cache TTL elsewhere), managed with ``interlock keys``."""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from interlock.cli import app as cli
from interlock.server import ApiKeyError, ApiKeyNotFound, KeyNameTaken, KeyStore, Role
from interlock.server.keys import parse_token
from interlock.store import SqlStore, open_store

from .harness import bearer, legacy_key, open_api

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


# -- names: one identity, one name ----------------------------------------------------------

LOOK_ALIKES = [
    "ALICE",
    "\uff41\uff4c\uff49\uff43\uff45",  # fullwidth
    "al\u200bice",
    "\u0430lice",  # Cyrillic a
    "aIice",  # capital I
    "a1ice",
    "alice\ufe0f",
]


@pytest.mark.parametrize("look_alike", LOOK_ALIKES)
def test_a_key_named_like_another_keys_name_is_refused(store: SqlStore, look_alike: str) -> None:
    keys = KeyStore(store)
    existing = keys.create(tenant="acme", role=Role.APPROVER, name="alice").key
    with pytest.raises(KeyNameTaken) as refused:
        keys.create(tenant="acme", role=Role.AGENT, name=look_alike)
    assert (refused.value.name, refused.value.existing) == (look_alike, "alice")
    assert "looks like the key name 'alice'" in str(refused.value)
    assert keys.list_keys() == [existing]


def test_the_same_name_again_is_the_same_identity_a_rotation(store: SqlStore) -> None:
    keys = KeyStore(store)
    first = keys.create(tenant="acme", role=Role.AGENT, name="ops-bot").key
    second = keys.create(tenant="acme", role=Role.APPROVER, name=" ops-bot ").key
    third = keys.create(tenant="globex", role=Role.AGENT, name="\u043eps-bot").key  # another tenant
    assert (first.name, second.name, third.name) == ("ops-bot", "ops-bot", "\u043eps-bot")


def test_a_revoked_keys_name_still_cannot_be_imitated(store: SqlStore) -> None:
    keys = KeyStore(store)
    keys.revoke(keys.create(tenant="acme", role=Role.APPROVER, name="alice").key.id)
    with pytest.raises(KeyNameTaken):
        keys.create(tenant="acme", role=Role.AGENT, name="\u0430lice")


def test_names_a_reader_tells_apart_are_two_keys(store: SqlStore) -> None:
    keys = KeyStore(store)
    for name in ("alice", "alicia", "bob", "rob", "ops-bot", "ops-bot-2"):
        keys.create(tenant="acme", role=Role.AGENT, name=name)
    assert len(keys.list_keys()) == 6


def test_a_name_with_nothing_visible_is_refused(store: SqlStore) -> None:
    with pytest.raises(ApiKeyError, match="nothing visible"):
        KeyStore(store).create(tenant="acme", role=Role.AGENT, name="\u200b\u200d")


def test_look_alike_names_racing_each_other_make_one_key(
    store: SqlStore, open_replica: Any
) -> None:
    names = ["alice", "\u0430lice", "ALICE", "al\u200bice", "\uff41lice"]  # pairwise one
    stores = [store, *(open_replica() for _ in names[1:])]
    start = threading.Barrier(len(names))
    outcomes: list[str] = []

    def create(replica: SqlStore, name: str) -> None:
        start.wait()
        try:
            KeyStore(replica).create(tenant="acme", role=Role.AGENT, name=name)
            outcomes.append("created")
        except KeyNameTaken:
            outcomes.append("refused")

    threads = [
        threading.Thread(target=create, args=pair) for pair in zip(stores, names, strict=True)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(outcomes) == ["created"] + ["refused"] * (len(names) - 1)
    assert len(KeyStore(store).list_keys()) == 1


def test_look_alike_names_made_before_are_reported(store: SqlStore) -> None:
    keys = KeyStore(store)
    alice = keys.create(tenant="acme", role=Role.APPROVER, name="alice").key
    legacy_key(store, tenant="acme", role="agent", name="\u0430lice")
    legacy_key(store, tenant="acme", role="agent", name="al\u200bice")
    legacy_key(store, tenant="globex", role="agent", name="alice")  # another tenant: fine
    keys.create(tenant="acme", role=Role.AGENT, name="bob")
    (found,) = keys.collisions()
    assert found.tenant == "acme"
    assert found.names == ("alice", "al\u200bice", "\u0430lice")
    assert alice.id in found.key_ids and len(found.key_ids) == 3
    assert keys.collisions(tenant="globex") == []


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


def test_keys_create_refuses_a_look_alike_and_keys_check_reports_old_ones(
    sqlite_url: str,
) -> None:
    create = ("create", "--tenant", "acme", "--role")
    assert keys_cli(sqlite_url, *create, "approver", "--name", "alice")[0] == 0
    code, stdout, stderr = keys_cli(sqlite_url, *create, "agent", "--name", "\u0430lice")
    assert code == 2 and not stdout
    assert "looks like the key name 'alice'" in stderr and "\\u0430lice" in stderr
    assert keys_cli(sqlite_url, "check")[0] == 0

    store = open_store(sqlite_url)
    try:
        legacy_key(store, tenant="acme", role="agent", name="al\u200bice")
    finally:
        store.close()
    code, stdout, _ = keys_cli(sqlite_url, "check")
    assert code == 1
    assert "tenant 'acme'" in stdout and "'alice'" in stdout and "\\u200b" in stdout


def test_the_keys_commands_do_not_need_the_server_stack() -> None:
    code = (
        "import sys, interlock.cli, interlock.server\n"
        "from interlock.server import KeyStore\n"
        "loaded = [m for m in ('fastapi', 'starlette', 'uvicorn', 'prometheus_client')"
        " if m in sys.modules]\n"
        "assert not loaded, loaded\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)
