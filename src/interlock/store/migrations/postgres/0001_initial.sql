-- Interlock schema 1 (PostgreSQL). Times are integer microseconds since the epoch;
-- amounts are integer units (currency micro-units or tokens).

CREATE TABLE audit_events (
    tenant      TEXT    NOT NULL,
    seq         BIGINT NOT NULL,
    ts_us       BIGINT NOT NULL,
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
    seq    BIGINT NOT NULL,
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
    created_us      BIGINT NOT NULL,
    expires_us      BIGINT NOT NULL,
    decided_us      BIGINT,
    claimed_us      BIGINT,
    grant_ttl_us    BIGINT NOT NULL
);

CREATE UNIQUE INDEX approvals_one_open_per_intent ON approvals (tenant, intent_hash)
    WHERE status IN ('pending', 'approved');

CREATE INDEX approvals_by_intent ON approvals (tenant, intent_hash, created_us);

CREATE INDEX approvals_by_status ON approvals (tenant, status, created_us);

CREATE TABLE budgets (
    tenant       TEXT    NOT NULL,
    budget_id    TEXT    NOT NULL,
    scope_key    TEXT    NOT NULL,
    window_start BIGINT NOT NULL,
    unit         TEXT    NOT NULL,
    cap          BIGINT NOT NULL,
    spent        BIGINT NOT NULL DEFAULT 0,
    reserved     BIGINT NOT NULL DEFAULT 0 CHECK (reserved >= 0),
    overage      BIGINT NOT NULL DEFAULT 0,
    updated_us   BIGINT NOT NULL,
    PRIMARY KEY (tenant, budget_id, scope_key, window_start)
);

CREATE TABLE reservations (
    id              TEXT    PRIMARY KEY,
    tenant          TEXT    NOT NULL,
    idempotency_key TEXT    NOT NULL,
    status          TEXT    NOT NULL CHECK (status IN ('reserved', 'committed', 'released', 'expired')),
    lines           TEXT    NOT NULL,
    created_us      BIGINT NOT NULL,
    expires_us      BIGINT NOT NULL,
    settled_us      BIGINT,
    actual          TEXT,
    UNIQUE (tenant, idempotency_key)
);

CREATE INDEX reservations_open_by_expiry ON reservations (expires_us) WHERE status = 'reserved';

CREATE TABLE rate_counters (
    tenant   TEXT    NOT NULL,
    limit_id TEXT    NOT NULL,
    key      TEXT    NOT NULL,
    tat_us   BIGINT NOT NULL,
    PRIMARY KEY (tenant, limit_id, key)
);
