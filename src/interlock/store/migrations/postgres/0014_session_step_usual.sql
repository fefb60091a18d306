-- Interlock schema 14 (PostgreSQL): the session tables rebuilt as SQLite's schema 14
-- rebuilds them (there WITHOUT ROWID; the same tables, column for column, here), which
-- drops the index of steps by decision: a settle finds its step by the primary key,
-- the session's newest steps first (at most the bound's worth), and an append writes
-- one index fewer. SQLite's one-statement usual step (the view session_step_usual) is
-- not needed here: the append is one statement already (a data-modifying WITH).

CREATE TABLE sessions_14 (
    tenant     TEXT    NOT NULL,
    session_id TEXT    NOT NULL,
    labels     TEXT    NOT NULL,
    next_seq   BIGINT NOT NULL,
    touched_us BIGINT NOT NULL,
    created_us BIGINT NOT NULL,
    version    BIGINT NOT NULL,
    PRIMARY KEY (tenant, session_id)
);

INSERT INTO sessions_14 (tenant, session_id, labels, next_seq, touched_us, created_us, version)
    SELECT tenant, session_id, labels, next_seq, touched_us, created_us, version FROM sessions;

DROP TABLE sessions;

ALTER TABLE sessions_14 RENAME TO sessions;

CREATE INDEX sessions_by_touched ON sessions (touched_us);

CREATE TABLE session_steps_14 (
    tenant       TEXT    NOT NULL,
    session_id   TEXT    NOT NULL,
    seq          BIGINT NOT NULL,
    at_us        BIGINT NOT NULL,
    kind         TEXT    NOT NULL,
    name         TEXT    NOT NULL,
    verdict      TEXT    NOT NULL,
    decision_id  TEXT,
    labels       TEXT    NOT NULL,
    fingerprints BYTEA    NOT NULL,
    trusted      INTEGER NOT NULL,
    executed     INTEGER,
    changed      BIGINT NOT NULL,
    PRIMARY KEY (tenant, session_id, seq)
);

INSERT INTO session_steps_14 (tenant, session_id, seq, at_us, kind, name, verdict,
        decision_id, labels, fingerprints, trusted, executed, changed)
    SELECT tenant, session_id, seq, at_us, kind, name, verdict, decision_id, labels,
        fingerprints, trusted, executed, changed FROM session_steps;

DROP TABLE session_steps;

ALTER TABLE session_steps_14 RENAME TO session_steps;
