"""Opening a store from one URL: ``sqlite:///path`` or ``postgresql://...``.

The default, when nothing names a database, is the embedded SQLite file
``$INTERLOCK_DATA_DIR/interlock.db`` (``./.interlock/interlock.db`` when the variable
is unset). ``INTERLOCK_DATABASE_URL`` overrides it.

A SQLite URL takes one parameter, ``audit_key_file`` (where the audit key is; see
:mod:`interlock.store.audit_keys`); a PostgreSQL URL takes it too, beside its own.

Example::

    from interlock.store import open_store

    store = open_store("sqlite:///var/lib/interlock/interlock.db")
    store = open_store("postgresql://interlock@db:5432/interlock?schema=interlock")
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl

from interlock.errors import StoreError
from interlock.store.sql import SqlStore

__all__ = ["default_database_url", "open_store"]

#: The query parameters a SQLite URL takes (``sqlite:///path?audit_key_file=...``).
_SQLITE_PARAMS = ("audit_key_file",)


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


def _sqlite_params(url: str, path: str) -> tuple[str, dict[str, str]]:
    """The file path without its query, and Interlock's parameters from the query."""
    if "?" not in path:
        return path, {}
    path, query = path.split("?", 1)
    params: dict[str, str] = {}
    for key, value in parse_qsl(query, keep_blank_values=True):
        if key not in _SQLITE_PARAMS:
            raise StoreError(
                f"unknown parameter {key!r} in the SQLite URL {url!r}: a SQLite URL takes "
                f"{', '.join(_SQLITE_PARAMS)}"
            )
        params[key] = value
    return path, params
