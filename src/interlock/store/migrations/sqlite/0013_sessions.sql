-- Interlock schema 13 (SQLite): session history (interlock.session; issue 18) — what a
-- session already did and read, shared by every replica on this database. One row per
-- session (its labels as a sorted JSON array, the seq its next step gets, when it was
-- last touched) and its last steps (bounded: an append deletes the ones past the
-- bound). An append is one transaction that first upserts the session row
-- (ON CONFLICT DO UPDATE: the row stays locked until the commit), so concurrent
-- appends to one session take turns: distinct, gapless seqs, no label lost.
-- Fingerprints are packed sorted little-endian uint64 (8 bytes each). Every write
-- moves the session's version on, and stamps the steps it wrote with it (changed):
-- a reader holding a view of version V reads only the steps changed after V.

CREATE TABLE sessions (
    tenant     TEXT    NOT NULL,
    session_id TEXT    NOT NULL,
    labels     TEXT    NOT NULL,
    next_seq   INTEGER NOT NULL,
    touched_us INTEGER NOT NULL,
    created_us INTEGER NOT NULL,
    version    INTEGER NOT NULL,
    PRIMARY KEY (tenant, session_id)
);

CREATE INDEX sessions_by_touched ON sessions (touched_us);

CREATE TABLE session_steps (
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
);

CREATE INDEX session_steps_by_decision ON session_steps (tenant, session_id, decision_id)
    WHERE decision_id IS NOT NULL;
