"""The two dialects' migrations define the same schema: same migrations, tables,
columns, constraints and indexes — only the type names differ."""

from __future__ import annotations

import re

from interlock.store.migrate import known_migrations

_TYPES = {"BIGINT": "INTEGER"}


def normalised(sql: str) -> list[str]:
    """The statements, comments and layout dropped, type names made common."""
    lines = [line.strip() for line in sql.splitlines()]
    text = " ".join(line for line in lines if line and not line.startswith("--"))
    text = text.replace(" WITHOUT ROWID", "")  # a SQLite storage hint, not schema
    for dialect_type, common in _TYPES.items():
        text = re.sub(rf"\b{dialect_type}\b", common, text)
    return [re.sub(r"\s+", " ", s).strip() for s in text.split(";") if s.strip()]


def test_both_dialects_have_the_same_migrations() -> None:
    sqlite = known_migrations("sqlite")
    postgres = known_migrations("postgres")
    assert [(m.version, m.name) for m in sqlite] == [(m.version, m.name) for m in postgres]
    assert sqlite, "no migrations found"


def test_both_dialects_define_the_same_schema() -> None:
    for sqlite, postgres in zip(
        known_migrations("sqlite"), known_migrations("postgres"), strict=True
    ):
        assert normalised(sqlite.sql) == normalised(postgres.sql), sqlite.name


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
