"""The conformance vectors (conformance/grants/*.json): the files in the repository are
what the generator writes, every vector passes against this verifier, and the set
covers every refusal code."""

from __future__ import annotations

import base64
import importlib.util
import json
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from interlock.errors import GrantError
from interlock.verify import Verifier
from interlock.verify.asgi import status_for
from interlock.verify.nonces import MemoryNonceStore

ROOT = Path(__file__).resolve().parents[2]
VECTORS = ROOT / "conformance" / "grants"
FILES = sorted(VECTORS.glob("*.json"))


def _generator() -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        "generate_grants", ROOT / "conformance" / "generate_grants.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_checked_in_vectors_are_what_the_generator_writes(tmp_path: Path) -> None:
    _generator().main(tmp_path)
    written = {p.name: p.read_bytes() for p in sorted(tmp_path.glob("*.json"))}
    checked_in = {p.name: p.read_bytes() for p in FILES}
    assert sorted(written) == sorted(checked_in)
    stale = [name for name in written if written[name] != checked_in[name]]
    assert stale == [], "run: python conformance/generate_grants.py"


def run_vector(vector: dict[str, Any]) -> dict[str, Any]:
    """What this implementation answers for ``vector`` (the shape of ``expected``)."""
    settings = vector["verifier"]
    nonces = MemoryNonceStore()
    for grant_id in vector["consumed"]:
        nonces.consume(grant_id, keep_until=settings["now"] + 3600, now=settings["now"])
    verifier = Verifier(
        vector["jwks"],
        audience=settings["audience"],
        leeway=settings["leeway"],
        allow_intent_only=settings["allow_intent_only"],
        nonces=nonces,
        clock=lambda: settings["now"],
    )
    request = vector["request"]
    try:
        verified = verifier.verify(
            vector["token"],
            method=request["method"],
            target=request["target"],
            body=base64.b64decode(request["body_base64"]),
            idempotency_key=request["idempotency_key"],
        )
    except GrantError as exc:
        return {"result": "refuse", "code": exc.code, "status": status_for(exc)}
    return {
        "result": "accept",
        "grant_id": verified.grant_id,
        "kid": verified.kid,
        "binding": verified.claims.binding,
        "claims": verified.claims.to_payload(),
    }


@pytest.mark.parametrize("path", FILES, ids=[p.stem for p in FILES])
def test_a_vector_passes(path: Path) -> None:
    vector = json.loads(path.read_text())
    assert vector["version"] == 1 and vector["name"] == path.stem
    assert run_vector(vector) == vector["expected"]


def test_the_vectors_cover_every_verdict_a_verifier_gives() -> None:
    expected = [json.loads(p.read_text())["expected"] for p in FILES]
    codes = {e.get("code") for e in expected if e["result"] == "refuse"}
    assert codes == {
        "grant_invalid",
        "unknown_key",
        "bad_signature",
        "grant_expired",
        "wrong_audience",
        "binding_mismatch",
        "grant_replayed",
    }
    assert any(e["result"] == "accept" for e in expected)
    names = {p.stem for p in FILES}
    assert {
        "valid", "tampered_payload", "tampered_signature", "expired", "not_yet_valid",
        "replayed", "wrong_audience", "unknown_key", "retired_key", "wrong_binding",
        "alg_none", "wrong_typ", "malformed",
    } <= names  # fmt: skip


def test_a_changed_vector_fails_the_runner() -> None:
    vector = json.loads((VECTORS / "valid.json").read_text())
    vector["request"]["target"] += "&x=1"
    assert run_vector(vector)["code"] == "binding_mismatch"
