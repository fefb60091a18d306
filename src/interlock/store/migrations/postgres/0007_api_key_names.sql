-- Interlock schema 7 (PostgreSQL): the names given to API keys, so that two names that
-- are one identity written differently (case, width, invisible characters, look-alike
-- letters: see interlock.core.identity) are never given to two keys of a tenant.
-- One row per identity form of each name; the primary key makes a race of two
-- look-alike names end with one key. Rows stay when a key is revoked: the name of
-- a revoked key still cannot be imitated.

CREATE TABLE api_key_names (
    tenant     TEXT    NOT NULL,
    form       TEXT    NOT NULL,
    name       TEXT    NOT NULL,
    created_us BIGINT NOT NULL,
    PRIMARY KEY (tenant, form)
);
