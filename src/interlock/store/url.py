"""Opening a store from one URL: ``sqlite:///path`` or ``postgresql://...``.

The default, when nothing names a database, is the embedded SQLite file
``$INTERLOCK_DATA_DIR/interlock.db`` (``./.interlock/interlock.db`` when the variable
is unset). ``INTERLOCK_DATABASE_URL`` overrides it.

Example::

    from interlock.store import open_store

    store = open_store("sqlite:///var/lib/interlock/interlock.db")
    store = open_store("postgresql://interlock@db:5432/interlock?schema=interlock")
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from interlock.errors import StoreError
from interlock.store.sql import SqlStore

__all__ = ["default_database_url", "open_store"]


def default_database_url() -> str:
    """``$INTERLOCK_DATABASE_URL``, else the SQLite file in the data directory."""
    url = os.environ.get("INTERLOCK_DATABASE_URL")
    if url:
        return url
    data_dir = Path(os.environ.get("INTERLOCK_DATA_DIR", ".interlock"))
    return f"sqlite:///{data_dir / 'interlock.db'}"


def open_store(url: str | None = None, **options: Any) -> SqlStore:
    """Open (and migrate, unless ``migrate=False``) the store the URL names."""
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
        if not path:
            raise StoreError(f"invalid SQLite URL {url!r}: no file path")
        return SQLiteStore(path, **options)
    if url.startswith(("postgresql:", "postgres:")):
        from interlock.store.postgres import PostgresStore

        return PostgresStore(url, **options)
    scheme = url.split(":", 1)[0] if ":" in url else url
    raise StoreError(
        f"unknown database URL scheme {scheme!r}: use sqlite:///path or postgresql://..."
    )
