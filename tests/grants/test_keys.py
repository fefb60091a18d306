"""Grant signing keys: where they are, how they are kept, rotated and published."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from interlock import Action, Context, Guard
from interlock.errors import AuditKeyError, UnknownKey
from interlock.store import SqlStore, open_store
from interlock.store.grant_keys import (
    ENV_KEY_FILE,
    MAX_GRANT_TTL,
    GrantKeys,
    create_key_ring,
    key_id,
    read_key_ring,
    rotate_key_ring,
)
from interlock.verify.tokens import b64url_decode, keys_from_jwks, read_grant

ALLOW_ALL: dict[str, Any] = {"version": 1, "default": "allow"}
CALL = Action.tool("refund", {"order": 1}, context=Context(tenant="acme", agent="bot"))


def test_the_kid_is_the_rfc_7638_thumbprint() -> None:
    """RFC 8037, appendix A: the Ed25519 example key and its thumbprint."""
    seed = b64url_decode("nWGxne_9WmC6hEr0kuwsxERJxWl7MmkZcDusAxyuf2A", what="d")
    public = Ed25519PrivateKey.from_private_bytes(seed).public_key()
    assert key_id(public) == "kPrK_qmxVWaYVA9wwBF6Iuo3vVzz7TxHCTwXBygrS4k"


def test_a_sqlite_store_makes_its_ring_beside_the_database_on_first_use(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(ENV_KEY_FILE)
    database = tmp_path / "data" / "interlock.db"
    with Guard(ALLOW_ALL, store=f"sqlite:///{database}", reap_interval=None) as guard:
        ring_file = database.with_name("interlock.db.grant-keys")
        assert not ring_file.exists()  # nothing made until a grant needs it
        grant = guard.issue_grant(guard.check(CALL), audience="shop")
        assert ring_file.exists()
        assert os.stat(ring_file).st_mode & 0o777 == 0o600
        assert grant.kid == read_key_ring(ring_file).active.kid
        assert [jwk["kid"] for jwk in guard.grant_jwks()["keys"]] == [grant.kid]
        assert "seed" not in json.dumps(guard.grant_jwks()) and '"d"' not in json.dumps(
            guard.grant_jwks()
        )


def test_a_postgres_store_without_a_ring_refuses_clearly(
    postgres_url: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.delenv(ENV_KEY_FILE)
    with Guard(ALLOW_ALL, store=postgres_url, reap_interval=None) as guard:
        decision = guard.check(CALL)
        with pytest.raises(AuditKeyError, match="interlock keys rotate --key-file"):
            guard.issue_grant(decision, audience="shop")
    missing = tmp_path / "nowhere" / "ring"
    url = f"{postgres_url}&grant_key_file={missing}"
    with Guard(ALLOW_ALL, store=url, reap_interval=None) as guard:
        with pytest.raises(AuditKeyError, match="no grant key ring at"):
            guard.issue_grant(guard.check(CALL), audience="shop")
        assert not missing.exists()  # never made up for a shared database
    create_key_ring(missing)
    with Guard(ALLOW_ALL, store=url, reap_interval=None) as guard:
        assert guard.issue_grant(guard.check(CALL), audience="shop").kid == (
            read_key_ring(missing).active.kid
        )


def test_a_ring_others_can_read_is_refused(tmp_path: Path) -> None:
    ring = tmp_path / "keys" / "ring"
    create_key_ring(ring)
    os.chmod(ring, 0o644)
    with pytest.raises(AuditKeyError, match="chmod 600"):
        GrantKeys.resolve(file=str(ring)).ring()


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda doc: doc["keys"][0].update(kid="made-up"), "thumbprint"),
        (lambda doc: doc["keys"][0].update(seed="AAAA"), "no valid Ed25519 seed"),
        (lambda doc: doc["keys"][0].update(created="yesterday"), "not times"),
        (lambda doc: doc["keys"][0].update(retired=1), "one active key"),
        (lambda doc: doc.update(keys=[]), "holds no key"),
        (lambda doc: doc.update(v=2), "version 1"),
    ],
)
def test_a_malformed_ring_is_refused(tmp_path: Path, change: Any, message: str) -> None:
    ring = tmp_path / "keys" / "ring"
    create_key_ring(ring)
    document = json.loads(ring.read_text())
    change(document)
    ring.write_text(json.dumps(document))
    with pytest.raises(AuditKeyError, match=message):
        read_key_ring(ring)


def test_rotation_keeps_old_grants_verifying_until_they_expire(grant_key_ring: Path) -> None:
    with Guard(ALLOW_ALL, store="sqlite:///:memory:", reap_interval=None) as guard:
        before = guard.issue_grant(guard.check(CALL), audience="shop")
        new_ring = rotate_key_ring(grant_key_ring)  # `interlock keys rotate`, another process
        after = guard.issue_grant(guard.check(CALL), audience="shop")
        assert after.kid == new_ring.active.kid != before.kid  # re-read: no restart
        published = keys_from_jwks(guard.grant_jwks())
        assert set(published) == {before.kid, after.kid}
        assert read_grant(before.token, published) == before.claims
        assert guard.claim_grant(before).grant_id == before.claims.grant_id
        assert guard.claim_grant(after).grant_id == after.claims.grant_id


def test_a_retired_key_leaves_the_set_once_its_grants_have_expired(tmp_path: Path) -> None:
    ring_file = tmp_path / "keys" / "ring"
    create_key_ring(ring_file, now=1_000)
    first = read_key_ring(ring_file).active.kid
    ring = rotate_key_ring(ring_file, now=2_000)
    assert [k["kid"] for k in ring.jwks(now=2_000 + MAX_GRANT_TTL - 1)["keys"]][1] == first
    assert first not in {k["kid"] for k in ring.jwks(now=2_000 + MAX_GRANT_TTL)["keys"]}
    later = rotate_key_ring(ring_file, now=2_000 + MAX_GRANT_TTL)
    assert first not in {key.kid for key in later}  # dropped from the file too
    assert len(list(later)) == 2


def test_a_grant_signed_by_a_key_past_its_retirement_is_an_unknown_key(
    grant_key_ring: Path, store: SqlStore, clock: Any
) -> None:
    with Guard(ALLOW_ALL, store=store, reap_interval=None) as guard:
        old = guard.issue_grant(guard.check(CALL), audience="shop", ttl=MAX_GRANT_TTL)
        rotate_key_ring(grant_key_ring, now=clock() // 1_000_000)
        clock.advance(MAX_GRANT_TTL - 1)
        kept = guard.issue_grant(guard.check(CALL), audience="shop", ttl=60)
        clock.advance(1)
        with pytest.raises(UnknownKey):
            guard.claim_grant(old)  # its key no longer verifies anything
        assert guard.claim_grant(kept).grant_id == kept.claims.grant_id


def test_an_ephemeral_ring_rotates_in_memory() -> None:
    keys = GrantKeys.resolve(file=None, ephemeral=True)
    first = keys.ring().active.kid
    rotated = keys.rotate()
    assert rotated.active.kid != first
    assert set(keys_from_jwks(rotated.jwks())) == {first, rotated.active.kid}


def test_no_key_outside_a_store_is_refused_clearly(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(ENV_KEY_FILE)
    with pytest.raises(AuditKeyError, match="no grant signing keys"):
        GrantKeys.resolve(file=None).ring()
    assert UnknownKey.code == "unknown_key"


def test_a_store_url_names_its_ring(tmp_path: Path) -> None:
    ring = tmp_path / "k" / "ring"
    store = open_store(f"sqlite:///{tmp_path / 'x.db'}?grant_key_file={ring}")
    try:
        assert store.grant_keys.file == ring
    finally:
        store.close()
