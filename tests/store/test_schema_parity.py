"""The two dialects' migrations define the same schema: same migrations, tables,
columns, constraints and indexes — only the type names differ."""

from __future__ import annotations

import re

from interlock.store.migrate import Migration, known_migrations

#: PostgreSQL's type names and SQLite's; BIGSERIAL is SQLite's INTEGER PRIMARY KEY (a
#: rowid: it ascends as rows are added)
_TYPES = {"BIGSERIAL": "INTEGER", "BIGINT": "INTEGER", "BYTEA": "BLOB"}


def normalised(migration: Migration) -> list[str]:
    """The statements, comments and layout dropped, type names made common; the
    stored procedures left out: the server-side functions only PostgreSQL has (schema
    8 on), and SQLite's views with INSTEAD OF triggers that do the same (schema 9) or
    make a session's usual step one statement (schema 14; its trigger dropped and made
    again by schema 15)."""
    out = []
    for statement in migration.statements():
        if statement.startswith(
            ("CREATE FUNCTION", "CREATE VIEW", "CREATE TRIGGER", "DROP TRIGGER")
        ):
            continue
        text = statement.replace(" WITHOUT ROWID", "")  # a SQLite storage hint, not schema
        for dialect_type, common in _TYPES.items():
            text = re.sub(rf"\b{dialect_type}\b", common, text)
        out.append(re.sub(r"\s+", " ", text).strip())
    return out


def test_only_postgresql_migrations_define_functions() -> None:
    sqlite = [s for m in known_migrations("sqlite") for s in m.statements()]
    postgres = [s for m in known_migrations("postgres") for s in m.statements()]
    assert not [s for s in sqlite if "FUNCTION" in s]
    functions = [s.split("(")[0] for s in postgres if s.startswith("CREATE FUNCTION")]
    assert functions == ["CREATE FUNCTION interlock_reserve", "CREATE FUNCTION interlock_commit"]


def test_only_sqlite_migrations_define_procedure_views() -> None:
    """SQLite's stand-ins for PostgreSQL's functions: each view has its INSTEAD OF
    trigger (the session step's, since schema 15, a second one for its bound: made
    again, the first is dropped before; schema 16 makes the second again), and
    nothing else is a view or a trigger."""
    sqlite = [s for m in known_migrations("sqlite") for s in m.statements()]
    postgres = [s for m in known_migrations("postgres") for s in m.statements()]
    assert not [s for s in postgres if s.startswith(("CREATE VIEW", "CREATE TRIGGER"))]
    views = [s.split()[2] for s in sqlite if s.startswith("CREATE VIEW")]
    triggers = [s.split()[2] for s in sqlite if s.startswith("CREATE TRIGGER")]
    dropped = [s.split()[2] for s in sqlite if s.startswith("DROP TRIGGER")]
    assert views == ["budget_reserve_usual", "budget_commit_usual", "session_step_usual"]
    assert triggers == [
        *(f"{view}_insert" for view in views),
        "session_step_usual_insert",
        "session_step_usual_drop",
        "session_step_usual_drop",
    ]
    assert dropped == ["session_step_usual_insert", "session_step_usual_drop"]
    for statement in sqlite:
        if statement.startswith("CREATE TRIGGER"):
            assert " INSTEAD OF INSERT ON " in statement
            assert statement.endswith("END")


def test_both_dialects_have_the_same_migrations() -> None:
    sqlite = known_migrations("sqlite")
    postgres = known_migrations("postgres")
    assert [(m.version, m.name) for m in sqlite] == [(m.version, m.name) for m in postgres]
    assert sqlite, "no migrations found"


def test_both_dialects_define_the_same_schema() -> None:
    for sqlite, postgres in zip(
        known_migrations("sqlite"), known_migrations("postgres"), strict=True
    ):
        assert normalised(sqlite) == normalised(postgres), sqlite.name


def test_the_schema_has_every_table_the_store_uses() -> None:
    (first, *_) = known_migrations("sqlite")
    tables = set(re.findall(r"CREATE TABLE (\w+)", first.sql))
    assert tables == {
        "audit_events",
        "audit_heads",
        "approvals",
        "budgets",
        "reservations",
        "rate_counters",
    }
