-- Interlock schema 1 (SQLite). Times are integer microseconds since the epoch;
-- amounts are integer units (currency micro-units or tokens).

CREATE TABLE audit_events (
    tenant      TEXT    NOT NULL,
    seq         INTEGER NOT NULL,
    ts_us       INTEGER NOT NULL,
    kind        TEXT    NOT NULL,
    decision_id TEXT,
    agent       TEXT,
    decision    TEXT,
    body        TEXT    NOT NULL,
    prev_hash   TEXT    NOT NULL,
    hash        TEXT    NOT NULL,
    PRIMARY KEY (tenant, seq)
);

CREATE INDEX audit_events_by_time ON audit_events (ts_us, tenant, seq);

CREATE INDEX audit_events_by_decision_id ON audit_events (decision_id);

CREATE TABLE audit_heads (
    tenant TEXT    PRIMARY KEY,
    seq    INTEGER NOT NULL,
    hash   TEXT    NOT NULL
);

CREATE TABLE approvals (
    id              TEXT    PRIMARY KEY,
    tenant          TEXT    NOT NULL,
    intent_hash     TEXT    NOT NULL,
    status          TEXT    NOT NULL CHECK (status IN ('pending', 'approved', 'denied', 'expired', 'claimed')),
    action          TEXT    NOT NULL,
    context         TEXT    NOT NULL,
    rule_ids        TEXT    NOT NULL,
    reason          TEXT    NOT NULL,
    requested_by    TEXT,
    decided_by      TEXT,
    decision_reason TEXT,
    created_us      INTEGER NOT NULL,
    expires_us      INTEGER NOT NULL,
    decided_us      INTEGER,
    claimed_us      INTEGER,
    grant_ttl_us    INTEGER NOT NULL
);

CREATE UNIQUE INDEX approvals_one_open_per_intent ON approvals (tenant, intent_hash)
    WHERE status IN ('pending', 'approved');

CREATE INDEX approvals_by_intent ON approvals (tenant, intent_hash, created_us);

CREATE INDEX approvals_by_status ON approvals (tenant, status, created_us);

CREATE TABLE budgets (
    tenant       TEXT    NOT NULL,
    budget_id    TEXT    NOT NULL,
    scope_key    TEXT    NOT NULL,
    window_start INTEGER NOT NULL,
    unit         TEXT    NOT NULL,
    cap          INTEGER NOT NULL,
    spent        INTEGER NOT NULL DEFAULT 0,
    reserved     INTEGER NOT NULL DEFAULT 0 CHECK (reserved >= 0),
    overage      INTEGER NOT NULL DEFAULT 0,
    updated_us   INTEGER NOT NULL,
    PRIMARY KEY (tenant, budget_id, scope_key, window_start)
);

CREATE TABLE reservations (
    id              TEXT    PRIMARY KEY,
    tenant          TEXT    NOT NULL,
    idempotency_key TEXT    NOT NULL,
    status          TEXT    NOT NULL CHECK (status IN ('reserved', 'committed', 'released', 'expired')),
    lines           TEXT    NOT NULL,
    created_us      INTEGER NOT NULL,
    expires_us      INTEGER NOT NULL,
    settled_us      INTEGER,
    actual          TEXT,
    UNIQUE (tenant, idempotency_key)
);

CREATE INDEX reservations_open_by_expiry ON reservations (expires_us) WHERE status = 'reserved';

CREATE TABLE rate_counters (
    tenant   TEXT    NOT NULL,
    limit_id TEXT    NOT NULL,
    key      TEXT    NOT NULL,
    tat_us   INTEGER NOT NULL,
    PRIMARY KEY (tenant, limit_id, key)
) WITHOUT ROWID;
