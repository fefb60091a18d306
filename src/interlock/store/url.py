"""Opening a store from one URL: ``sqlite:///path`` or ``postgresql://...``.

The default, when nothing names a database, is the embedded SQLite file
``$INTERLOCK_DATA_DIR/interlock.db`` (``./.interlock/interlock.db`` when the variable
is unset). ``INTERLOCK_DATABASE_URL`` overrides it.

A SQLite URL takes ``busy_timeout`` (seconds; default 10: how long a write waits for
another process's write lock), ``audit_key_file`` (where the audit key is; see
:mod:`interlock.store.audit_keys`) and ``grant_key_file`` (where the grant signing keys
are; see :mod:`interlock.store.grant_keys`). PostgreSQL URLs take libpq's parameters and
Interlock's own (``schema``, pool sizes, ``audit_key_file``, ``grant_key_file``, and the bounds
``connect_timeout``, ``pool_timeout``, ``statement_timeout``, ``lock_timeout``: see
:mod:`interlock.store.postgres`). A check's deadline, when nearer, bounds every wait.

Example::

    from interlock.store import open_store

    store = open_store("sqlite:///var/lib/interlock/interlock.db?busy_timeout=5")
    store = open_store("postgresql://interlock@db:5432/interlock?schema=interlock&lock_timeout=2")
"""

from __future__ import annotations

import math
import os
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl

from interlock.errors import StoreError
from interlock.store.sql import SqlStore

__all__ = ["default_database_url", "open_store"]

#: The query parameters a SQLite URL takes (``sqlite:///path?busy_timeout=5``).
_SQLITE_PARAMS = ("audit_key_file", "busy_timeout", "grant_key_file")


def default_database_url() -> str:
    """``$INTERLOCK_DATABASE_URL``, else the SQLite file in the data directory."""
    url = os.environ.get("INTERLOCK_DATABASE_URL")
    if url:
        return url
    data_dir = Path(os.environ.get("INTERLOCK_DATA_DIR", ".interlock"))
    return f"sqlite:///{data_dir / 'interlock.db'}"


def open_store(url: str | None = None, **options: Any) -> SqlStore:
    """Open (and migrate, unless ``migrate=False``) the store the URL names.
    ``options`` go to the back end: ``clock``, ``audit_key`` (see
    :mod:`interlock.store.audit_keys`), ``checkpoints`` (see
    :mod:`interlock.store.checkpoints`), ..."""
    url = url or default_database_url()
    if url.startswith("sqlite:"):
        from interlock.store.sqlite import SQLiteStore

        rest = url[len("sqlite:") :]
        if rest.startswith("///"):
            path = rest[3:]
        elif rest.startswith("//"):
            raise StoreError(
                f"invalid SQLite URL {url!r}: use sqlite:///relative/path or sqlite:////abs/path"
            )
        else:
            path = rest
        path, params = _sqlite_params(url, path)
        if not path:
            raise StoreError(f"invalid SQLite URL {url!r}: no file path")
        options = {**params, **options}  # an argument wins over the URL
        return SQLiteStore(path, **options)
    if url.startswith(("postgresql:", "postgres:")):
        from interlock.store.postgres import PostgresStore

        return PostgresStore(url, **options)
    scheme = url.split(":", 1)[0] if ":" in url else url
    raise StoreError(
        f"unknown database URL scheme {scheme!r}: use sqlite:///path or postgresql://..."
    )


def _sqlite_params(url: str, path: str) -> tuple[str, dict[str, Any]]:
    """The file path without its query, and Interlock's parameters from the query (a
    StoreError names one that is unknown or invalid)."""
    if "?" not in path:
        return path, {}
    path, query = path.split("?", 1)
    params: dict[str, Any] = {}
    for key, value in parse_qsl(query, keep_blank_values=True):
        if key not in _SQLITE_PARAMS:
            raise StoreError(
                f"unknown parameter {key!r} in the SQLite URL {url!r}: a SQLite URL takes "
                f"{', '.join(_SQLITE_PARAMS)}"
            )
        params[key] = _busy_timeout(url, value) if key == "busy_timeout" else value
    return path, params


def _busy_timeout(url: str, raw: str) -> float:
    try:
        seconds = float(raw)
    except ValueError:
        seconds = math.nan
    if not 0 <= seconds < math.inf:
        raise StoreError(f"invalid busy_timeout={raw!r} in {url!r}: a number of seconds >= 0")
    return seconds
