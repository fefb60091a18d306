-- Interlock schema 8 (SQLite): budget leases (docs/adr/0012-budget-leases.md).
-- A lease is a slice of one budget counter granted to one store instance (its
-- owner): the slice counts as reserved on the counter, so the sum of the leases
-- never lets spent + reserved pass the cap. Reservations served from a lease name
-- it (lease_id) and hold lease_held (amount + headroom) of it; once settled they
-- record lease_used (what is charged) until the lease is folded into the counter,
-- which detaches them (lease_id back to NULL). A lease past expires_us belongs to
-- a replica that stopped renewing it: the reaper folds it and returns the rest.

CREATE TABLE budget_leases (
    id           TEXT    PRIMARY KEY,
    tenant       TEXT    NOT NULL,
    budget_id    TEXT    NOT NULL,
    scope_key    TEXT    NOT NULL,
    window_start INTEGER NOT NULL,
    owner        TEXT    NOT NULL,
    granted      INTEGER NOT NULL CHECK (granted >= 0),
    expires_us   INTEGER NOT NULL,
    updated_us   INTEGER NOT NULL
);

CREATE INDEX budget_leases_by_expiry ON budget_leases (expires_us);

ALTER TABLE reservations ADD COLUMN lease_id TEXT;

ALTER TABLE reservations ADD COLUMN lease_amount INTEGER;

ALTER TABLE reservations ADD COLUMN lease_held INTEGER;

ALTER TABLE reservations ADD COLUMN lease_used INTEGER;

CREATE INDEX reservations_by_lease ON reservations (lease_id) WHERE lease_id IS NOT NULL;
