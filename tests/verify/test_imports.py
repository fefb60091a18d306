"""A provider imports ``interlock.verify`` and nothing of Interlock's server, store or
guard comes with it; the caller's httpx hooks load httpx only when asked for."""

from __future__ import annotations

import json
import subprocess
import sys

NOT_FOR_A_PROVIDER = (
    "interlock.guard",
    "interlock.store",
    "interlock.server",
    "interlock.policy",
    "interlock.core",
    "interlock.deciders",
    "interlock.ledger",
    "interlock.approvals",
    "interlock.effects",
    "starlette",
    "fastapi",
    "uvicorn",
    "httpx",
    "psycopg",
    "psycopg_pool",
    "sqlite3",
    "pydantic",
    "yaml",
)


def _loaded(code: str) -> set[str]:
    probe = code + "\nimport json, sys\nprint(json.dumps(sorted(sys.modules)))"
    done = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, timeout=120, check=True
    )
    return set(json.loads(done.stdout.strip().splitlines()[-1]))


def _heavy(modules: set[str], allowed: tuple[str, ...] = ()) -> list[str]:
    banned = tuple(n for n in NOT_FOR_A_PROVIDER if n not in allowed)
    return sorted(m for m in modules if m in banned or m.startswith(tuple(f"{b}." for b in banned)))


def test_a_provider_loads_the_verifier_and_middleware_alone() -> None:
    loaded = _loaded(
        "from interlock.verify import GrantMiddleware, Verifier, MemoryNonceStore, "
        "read_receipt, http_binding"
    )
    assert _heavy(loaded) == []


def test_the_sqlite_store_loads_sqlite3_only_when_used() -> None:
    loaded = _loaded(
        "import tempfile, os\n"
        "from interlock.verify import SqliteNonceStore\n"
        "SqliteNonceStore(os.path.join(tempfile.mkdtemp(), 'n.db')).close()"
    )
    assert _heavy(loaded, allowed=("sqlite3",)) == []


def test_the_httpx_hooks_bring_httpx_and_nothing_else() -> None:
    loaded = _loaded("from interlock.verify import GrantAuth, receipt_hook")
    assert "httpx" in loaded
    assert _heavy(loaded, allowed=("httpx",)) == []


def test_every_public_name_resolves_to_its_modules_object() -> None:
    import importlib

    import interlock.verify as verify

    for name in verify.__all__:
        value = getattr(verify, name)
        where = verify._LAZY.get(name)
        if where is not None:
            assert value is getattr(importlib.import_module(where), name), name
    assert sorted(verify.__all__) == sorted(set(verify.__all__))
    assert set(verify._LAZY) <= set(verify.__all__)
