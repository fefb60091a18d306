-- Interlock schema 2 (SQLite): API keys of `interlock serve`. Only the SHA-256 of a
-- key's secret is kept; the key itself is shown once, when it is created.

CREATE TABLE api_keys (
    id          TEXT    PRIMARY KEY,
    tenant      TEXT    NOT NULL,
    role        TEXT    NOT NULL CHECK (role IN ('agent', 'approver', 'admin')),
    name        TEXT    NOT NULL,
    secret_hash TEXT    NOT NULL,
    created_us  INTEGER NOT NULL,
    revoked_us  INTEGER
);

CREATE INDEX api_keys_by_tenant ON api_keys (tenant, created_us);
