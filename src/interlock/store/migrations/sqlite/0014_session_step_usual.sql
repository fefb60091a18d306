-- Interlock schema 14 (SQLite): a check's session step in one statement (issue 18,
-- docs/sessions-store.md). The usual step — appended by a history whose kept view of
-- the session is the session as it stands — is an INSERT into the view
-- session_step_usual: its INSTEAD OF trigger moves the session row on only if it is
-- still at the version, seq and creation the caller knows, inserts the step and drops
-- the steps past the bound. One statement is all or nothing (no savepoint needed in
-- the decision record's transaction); RAISE(ABORT) undoes it when the session moved
-- (another writer, a settle, an expiry) and the history's general path (the upsert,
-- several statements) appends instead, exactly as before.
-- The tables become WITHOUT ROWID (the primary key is the table: one b-tree written
-- a row, not two), and the index of steps by decision goes: a settle finds its step by
-- the primary key, the session's newest steps first (at most the bound's worth).

CREATE TABLE sessions_14 (
    tenant     TEXT    NOT NULL,
    session_id TEXT    NOT NULL,
    labels     TEXT    NOT NULL,
    next_seq   INTEGER NOT NULL,
    touched_us INTEGER NOT NULL,
    created_us INTEGER NOT NULL,
    version    INTEGER NOT NULL,
    PRIMARY KEY (tenant, session_id)
) WITHOUT ROWID;

INSERT INTO sessions_14 (tenant, session_id, labels, next_seq, touched_us, created_us, version)
    SELECT tenant, session_id, labels, next_seq, touched_us, created_us, version FROM sessions;

DROP TABLE sessions;

ALTER TABLE sessions_14 RENAME TO sessions;

CREATE INDEX sessions_by_touched ON sessions (touched_us);

CREATE TABLE session_steps_14 (
    tenant       TEXT    NOT NULL,
    session_id   TEXT    NOT NULL,
    seq          INTEGER NOT NULL,
    at_us        INTEGER NOT NULL,
    kind         TEXT    NOT NULL,
    name         TEXT    NOT NULL,
    verdict      TEXT    NOT NULL,
    decision_id  TEXT,
    labels       TEXT    NOT NULL,
    fingerprints BLOB    NOT NULL,
    trusted      INTEGER NOT NULL,
    executed     INTEGER,
    changed      INTEGER NOT NULL,
    PRIMARY KEY (tenant, session_id, seq)
) WITHOUT ROWID;

INSERT INTO session_steps_14 (tenant, session_id, seq, at_us, kind, name, verdict,
        decision_id, labels, fingerprints, trusted, executed, changed)
    SELECT tenant, session_id, seq, at_us, kind, name, verdict, decision_id, labels,
        fingerprints, trusted, executed, changed FROM session_steps;

DROP TABLE session_steps;

ALTER TABLE session_steps_14 RENAME TO session_steps;

-- The step, and the session as the caller knows it: seq is the session's next_seq,
-- version the session's version after this step (the known one + 1), created_us its
-- creation; labels the session's labels after the step (NULL: unchanged); steps with
-- seq <= oldest are dropped. Aborts ('interlock-unusual'): the session is not there,
-- or not at that version, seq or creation.
CREATE VIEW session_step_usual AS SELECT
    NULL AS tenant, NULL AS session_id, NULL AS seq, NULL AS version, NULL AS created_us,
    NULL AS at_us, NULL AS kind, NULL AS name, NULL AS verdict, NULL AS decision_id,
    NULL AS step_labels, NULL AS fingerprints, NULL AS trusted, NULL AS executed,
    NULL AS labels, NULL AS oldest;

CREATE TRIGGER session_step_usual_insert INSTEAD OF INSERT ON session_step_usual
BEGIN
    UPDATE sessions SET next_seq = NEW.seq + 1, version = NEW.version,
        touched_us = NEW.at_us, labels = COALESCE(NEW.labels, labels)
    WHERE tenant = NEW.tenant AND session_id = NEW.session_id
        AND version = NEW.version - 1 AND next_seq = NEW.seq
        AND created_us = NEW.created_us;
    SELECT RAISE(ABORT, 'interlock-unusual') WHERE changes() = 0;
    INSERT INTO session_steps (tenant, session_id, seq, at_us, kind, name, verdict,
        decision_id, labels, fingerprints, trusted, executed, changed)
    VALUES (NEW.tenant, NEW.session_id, NEW.seq, NEW.at_us, NEW.kind, NEW.name,
        NEW.verdict, NEW.decision_id, NEW.step_labels, NEW.fingerprints, NEW.trusted,
        NEW.executed, NEW.version);
    DELETE FROM session_steps WHERE tenant = NEW.tenant AND session_id = NEW.session_id
        AND seq <= NEW.oldest;
END;
