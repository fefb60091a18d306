-- Interlock schema 11 (SQLite): grants — signed, expiring, single-use permissions for one
-- intent hash (interlock.approvals.grants). A grant is issued (a row, status 'issued')
-- and claimed at most once: the claim is one conditional UPDATE (status 'issued' and
-- not expired), never a read followed by a write. At most one grant per decision.

CREATE TABLE grants (
    id          TEXT    PRIMARY KEY,
    tenant      TEXT    NOT NULL,
    intent_hash TEXT    NOT NULL,
    audience    TEXT    NOT NULL,
    agent       TEXT,
    kid         TEXT    NOT NULL,
    binding     TEXT,
    decision_id TEXT,
    approval_id TEXT,
    issued_us   INTEGER NOT NULL,
    expires_us  INTEGER NOT NULL,
    status      TEXT    NOT NULL CHECK (status IN ('issued', 'claimed')),
    claimed_us  INTEGER,
    CHECK (expires_us > issued_us)
);

CREATE UNIQUE INDEX grants_one_per_decision ON grants (tenant, decision_id)
    WHERE decision_id IS NOT NULL;

CREATE INDEX grants_by_intent ON grants (tenant, intent_hash, issued_us);

CREATE INDEX grants_by_time ON grants (tenant, issued_us);
