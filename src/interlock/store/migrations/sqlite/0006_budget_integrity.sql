-- Interlock schema 6 (SQLite): budgets that cannot be dodged.
-- headroom: what the calls in flight may run past their reservations (each line's
-- share of the budget's max_overage), held against the cap like reserved; excess:
-- what commits ran past reservation + headroom. A reservation names the agent that
-- made it (owner): only that agent, or an admin, settles it. A counter some call
-- overran is closed (budget_closures, one row per budget and scope key, whatever the
-- window) and admits nothing until an admin reopens it.

ALTER TABLE budgets ADD COLUMN headroom INTEGER NOT NULL DEFAULT 0;

ALTER TABLE budgets ADD COLUMN excess INTEGER NOT NULL DEFAULT 0;

ALTER TABLE reservations ADD COLUMN owner TEXT;

CREATE TABLE budget_closures (
    tenant         TEXT    NOT NULL,
    budget_id      TEXT    NOT NULL,
    scope_key      TEXT    NOT NULL,
    closed_us      INTEGER NOT NULL,
    reservation_id TEXT    NOT NULL,
    excess         INTEGER NOT NULL,
    PRIMARY KEY (tenant, budget_id, scope_key)
);
