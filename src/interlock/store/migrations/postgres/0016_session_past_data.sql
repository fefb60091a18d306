-- Interlock schema 16 (PostgreSQL): the data a session's dropped steps brought in, as
-- SQLite's schema 16 (the same table; its id a BIGSERIAL). The append's one statement
-- fills it: the DELETE of the steps past the bound returns them to an INSERT ...
-- SELECT (interlock.store.sql_sessions). A session's rows are added under its row's
-- lock (the append's upsert, a settle's SELECT ... FOR UPDATE), so its ids ascend in
-- commit order and a reader reads only the rows past the last it read.

CREATE TABLE session_past_data (
    id           BIGSERIAL PRIMARY KEY,
    tenant       TEXT    NOT NULL,
    session_id   TEXT    NOT NULL,
    seq          BIGINT,
    kind         TEXT    NOT NULL,
    name         TEXT    NOT NULL,
    labels       TEXT    NOT NULL,
    trusted      INTEGER NOT NULL,
    fingerprints BYTEA,
    total        BIGINT NOT NULL
);

CREATE INDEX session_past_data_by_session ON session_past_data (tenant, session_id, id);

INSERT INTO session_past_data
    (tenant, session_id, seq, kind, name, labels, trusted, fingerprints, total)
    SELECT s.tenant, s.session_id, NULL, '', '', '[]', 0, NULL, 0 FROM sessions s
    WHERE s.next_seq > 1 AND NOT EXISTS (SELECT 1 FROM session_steps t
        WHERE t.tenant = s.tenant AND t.session_id = s.session_id AND t.seq = 1);
