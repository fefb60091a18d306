-- Interlock schema 15 (PostgreSQL): a session's past, as SQLite's schema 15 (the same
-- table; there WITHOUT ROWID). The append's one statement fills it: the DELETE of the
-- steps past the bound returns them to an INSERT ... SELECT ... GROUP BY ... ON
-- CONFLICT DO UPDATE (interlock.store.sql_sessions). A row of empty kind marks the
-- past overflowed: a session that dropped steps before this schema, or a call settled
-- as run after its step was dropped.

CREATE TABLE session_past (
    tenant     TEXT    NOT NULL,
    session_id TEXT    NOT NULL,
    kind       TEXT    NOT NULL,
    name       TEXT    NOT NULL,
    labels     TEXT    NOT NULL,
    n          BIGINT NOT NULL,
    first_us   BIGINT NOT NULL,
    last_us    BIGINT NOT NULL,
    PRIMARY KEY (tenant, session_id, kind, name, labels)
);

INSERT INTO session_past (tenant, session_id, kind, name, labels, n, first_us, last_us)
    SELECT s.tenant, s.session_id, '', '', '', 0, 0, 0 FROM sessions s
    WHERE s.next_seq > 1 AND NOT EXISTS (SELECT 1 FROM session_steps t
        WHERE t.tenant = s.tenant AND t.session_id = s.session_id AND t.seq = 1);
