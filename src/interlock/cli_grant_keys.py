"""``interlock keys rotate`` and ``interlock keys signing``: the grant signing keys.

    interlock keys rotate                                  # the SQLite store's ring
    interlock keys rotate --key-file /run/secrets/grant-keys    # make or rotate a shared one
    interlock keys signing --json                          # kid, created, retired, until
    interlock keys signing --jwks                          # the public JWK set

The ring is the one the store uses (:mod:`interlock.store.grant_keys`): ``--key-file``,
else ``grant_key_file`` in the ``--database`` URL, else ``$INTERLOCK_GRANT_KEY_FILE``,
else the file beside a SQLite database. A rotation makes a new active key; the old one
keeps verifying until every grant it signed has expired. Processes re-read the ring when
it changes: no restart. (``keys list`` / ``create`` / ``revoke`` are the server's API
keys.) Exit codes: 0 done; 2 no ring can be found or used.
"""

from __future__ import annotations

import json
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.table import Table
from rich.text import Text

from interlock.cli_console import fail, out
from interlock.cli_store import DatabaseOption
from interlock.errors import StoreError, message_of
from interlock.store.grant_keys import GrantKeyRing, read_key_ring, rotate_key_ring

__all__ = ["keys_rotate", "keys_signing"]

KeyFileOption = Annotated[
    Path | None,
    typer.Option(
        "--key-file",
        help="The key ring file (default: the one the --database store uses).",
        show_default=False,
    ),
]


def _ring_file(key_file: Path | None, database: str | None) -> Path:
    """The ring file named, or the one the store at ``database`` uses."""
    if key_file is not None:
        return key_file
    from interlock.store import default_database_url, open_store

    url = database or default_database_url()
    try:
        store = open_store(url, migrate=False)
    except (StoreError, ImportError) as exc:
        raise fail(message_of(exc)) from None
    try:
        keys = store.grant_keys
    finally:
        store.close()
    if keys.file is None:
        raise fail(
            f"the store {store.url} has no grant key ring file ({keys.source}): name one with "
            "--key-file (and give every replica the same file: grant_key_file=PATH in the "
            "store URL, or $INTERLOCK_GRANT_KEY_FILE)"
        )
    return keys.file


def keys_rotate(
    key_file: KeyFileOption = None,
    database: DatabaseOption = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the new ring as JSON.")] = False,
) -> None:
    """Make a new active grant signing key (creating the ring if there is none); the
    previous key keeps verifying until the grants it signed have expired."""
    path = _ring_file(key_file, database)
    try:
        ring = rotate_key_ring(path)
    except StoreError as exc:
        raise fail(message_of(exc)) from None
    if as_json:
        sys.stdout.write(json.dumps(_rows(ring)) + "\n")
        return
    out.print(Text(f"grant signing key {ring.active.kid} is active ({path})"))
    retired = len(ring.keys) - 1
    if retired:
        out.print(Text(f"{retired} retired key{'s' if retired != 1 else ''} still verifying"))


def keys_signing(
    key_file: KeyFileOption = None,
    database: DatabaseOption = None,
    as_json: Annotated[bool, typer.Option("--json", help="JSON: one object per key.")] = False,
    jwks: Annotated[
        bool, typer.Option("--jwks", help="Print the public JWK set verifiers need.")
    ] = False,
) -> None:
    """List the grant signing keys (never their secrets): the active one first."""
    path = _ring_file(key_file, database)
    try:
        ring = read_key_ring(path)
    except FileNotFoundError:
        raise fail(
            f"no grant key ring at {path}: one is made on the first grant (SQLite), or "
            f"with `interlock keys rotate --key-file {path}`"
        ) from None
    except StoreError as exc:
        raise fail(message_of(exc)) from None
    if jwks:
        sys.stdout.write(json.dumps(ring.jwks(), indent=1) + "\n")
        return
    rows = _rows(ring)
    if as_json:
        for row in rows:
            sys.stdout.write(json.dumps(row) + "\n")
        return
    table = Table()
    columns = ("kid", "state", "created", "retired", "verifies_until")
    for column in columns:
        table.add_column(column, overflow="fold", no_wrap=column == "kid")
    for row in rows:
        table.add_row(*(Text(str(row[c] or "")) for c in columns))
    out.print(table)


def _rows(ring: GrantKeyRing) -> list[dict[str, Any]]:
    now = time.time()
    rows = []
    for key in ring:
        until = key.verifies_until()
        state = "active" if key.retired is None else "retired"
        if until is not None and until <= now:
            state = "expired"  # dropped at the next rotation
        rows.append(
            {
                "kid": key.kid,
                "state": state,
                "created": _iso(key.created),
                "retired": _iso(key.retired),
                "verifies_until": _iso(until),
            }
        )
    return rows


def _iso(seconds: int | None) -> str | None:
    if seconds is None:
        return None
    moment = datetime.fromtimestamp(seconds, tz=UTC)
    return moment.isoformat(timespec="seconds").replace("+00:00", "Z")
