-- Interlock schema 12 (PostgreSQL): effect attempts (interlock.effects). One row per
-- (tenant, idempotency key): the key never executes twice. A row is written, status
-- 'executing', BEFORE the effect is attempted, so that a process that dies mid-call
-- leaves a row the reconciler finds. Status: executing | committed | failed |
-- indeterminate (neither committed nor refused: held until reconciled) |
-- never_executed (a retry may run it, as attempt + 1).

CREATE TABLE effects (
    id              TEXT    PRIMARY KEY,
    tenant          TEXT    NOT NULL,
    idempotency_key TEXT    NOT NULL,
    adapter_id      TEXT    NOT NULL,
    adapter_version TEXT    NOT NULL,
    intent_hash     TEXT    NOT NULL,
    binding         TEXT,
    grant_id        TEXT,
    decision_id     TEXT    NOT NULL,
    reservation_id  TEXT,
    agent           TEXT,
    runner          TEXT    NOT NULL,
    status          TEXT    NOT NULL CHECK (status IN ('executing', 'committed', 'failed', 'indeterminate', 'never_executed')),
    attempt         BIGINT NOT NULL,
    request         TEXT    NOT NULL,
    result          TEXT,
    result_digest   TEXT,
    reason          TEXT    NOT NULL,
    deadline_us     BIGINT NOT NULL,
    created_us      BIGINT NOT NULL,
    updated_us      BIGINT NOT NULL,
    UNIQUE (tenant, idempotency_key)
);

CREATE INDEX effects_unsettled ON effects (status, deadline_us)
    WHERE status IN ('executing', 'indeterminate');

CREATE INDEX effects_by_time ON effects (tenant, created_us);
