"""Numbered SQL migrations, applied in order, each once, each in its own transaction.

Files live in ``migrations/<dialect>/NNNN_name.sql``; ``schema_migrations`` records
what was applied. Applying is idempotent and safe to race (several processes or
replicas starting at once): each migration's transaction takes the database's write
lock (SQLite) or an advisory lock (PostgreSQL) and re-reads what is applied.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from importlib import resources
from typing import TYPE_CHECKING

from interlock.errors import MigrationError

if TYPE_CHECKING:
    from interlock.store.sql import Cursor, SqlStore

__all__ = ["Migration", "apply_migrations", "known_migrations", "migration_status"]

_NAME = re.compile(r"^(\d{4})_([a-z0-9_]+)\.sql$")

_CREATE_LEDGER = (
    "CREATE TABLE IF NOT EXISTS schema_migrations ("
    "version INTEGER PRIMARY KEY, name TEXT NOT NULL, applied_us BIGINT NOT NULL)"
)


@dataclass(frozen=True, slots=True)
class Migration:
    version: int
    name: str
    sql: str

    def statements(self) -> list[str]:
        """The file's statements (split on ``;`` at a line end, but not inside a
        ``$$``-quoted function body, nor inside a trigger's ``BEGIN … END;``;
        comments dropped)."""
        lines = [line for line in self.sql.splitlines() if not line.lstrip().startswith("--")]
        out: list[str] = []
        current: list[str] = []
        quoted = False
        trigger = False
        for line in lines:
            starts = not "".join(current).strip()
            if starts and line.lstrip().upper().startswith("CREATE TRIGGER"):
                trigger = True
            current.append(line)
            quoted ^= line.count("$$") % 2 == 1
            if trigger:  # its body's statements end in ';' too: only END ends it
                if re.fullmatch(r"\s*END\s*;\s*", line, re.IGNORECASE):
                    out.append("\n".join(current).strip().removesuffix(";").strip())
                    current = []
                    trigger = False
            elif not quoted and re.search(r";\s*$", line):
                out.append("\n".join(current).strip().removesuffix(";").strip())
                current = []
        out.append("\n".join(current).strip())
        return [s for s in out if s]


def known_migrations(dialect: str) -> list[Migration]:
    folder = resources.files("interlock.store").joinpath("migrations", dialect)
    found = []
    for entry in folder.iterdir():
        match = _NAME.match(entry.name)
        if match:
            found.append(Migration(int(match.group(1)), match.group(2), entry.read_text("utf-8")))
    return sorted(found, key=lambda m: m.version)


def _applied(cur: Cursor, store: SqlStore) -> set[int]:
    cur.execute(store.q("SELECT version FROM schema_migrations"))
    return {int(row[0]) for row in cur.fetchall()}


def apply_migrations(store: SqlStore, dialect: str, *, lock: str = "") -> list[str]:
    """Apply what is missing. ``lock`` is a statement run first in each transaction
    (PostgreSQL's advisory lock). Refuses a database migrated by a newer Interlock."""
    migrations = known_migrations(dialect)
    newest = migrations[-1].version if migrations else 0
    with store.transaction(write=True) as cur:
        if lock:
            cur.execute(lock)
        cur.execute(_CREATE_LEDGER)
    applied_now: list[str] = []
    for migration in migrations:
        with store.transaction(write=True) as cur:
            if lock:
                cur.execute(lock)
            done = _applied(cur, store)
            if done and max(done) > newest:
                raise MigrationError(
                    f"the database is at schema version {max(done)}, newer than this "
                    f"Interlock knows ({newest}); upgrade Interlock"
                )
            if migration.version in done:
                continue
            try:
                for statement in migration.statements():
                    cur.execute(statement)
            except Exception as exc:
                raise MigrationError(
                    f"migration {migration.version:04d}_{migration.name} failed: {exc}"
                ) from exc
            cur.execute(
                store.q(
                    "INSERT INTO schema_migrations (version, name, applied_us) VALUES (?, ?, ?)"
                ),
                (migration.version, migration.name, store.clock()),
            )
            applied_now.append(f"{migration.version:04d}_{migration.name}")
    return applied_now


def migration_status(store: SqlStore, dialect: str) -> list[tuple[int, str, bool]]:
    with store.transaction(write=True) as cur:
        cur.execute(_CREATE_LEDGER)
        done = _applied(cur, store)
    return [(m.version, m.name, m.version in done) for m in known_migrations(dialect)]
