-- Interlock schema 9 (SQLite): the usual reservation and the usual commit, each one
-- statement (docs/adr/0012-budget-leases.md, §6). SQLite has no server-side
-- functions; a view with an INSTEAD OF trigger is its stored procedure: an INSERT
-- into the view runs the trigger's statements as one statement, so in autocommit it
-- is one transaction with no BEGIN or COMMIT sent, and it is all or nothing — a
-- RAISE(ABORT) undoes everything the statement did. Each handles only the usual
-- case and aborts on anything else; the store's general path (one transaction,
-- several statements) then decides, exactly as before. PostgreSQL has its functions
-- (schema 8) for the same.

-- One line, not forced, on a counter that exists, is open and can hold it.
-- Aborts: the key was used before (the reservation's unique key), no such counter,
-- the counter is closed or full.
CREATE VIEW budget_reserve_usual AS SELECT
    NULL AS id, NULL AS tenant, NULL AS idempotency_key, NULL AS lines,
    NULL AS created_us, NULL AS expires_us, NULL AS owner, NULL AS budget_id,
    NULL AS scope_key, NULL AS window_start, NULL AS unit, NULL AS cap,
    NULL AS amount, NULL AS headroom;

CREATE TRIGGER budget_reserve_usual_insert INSTEAD OF INSERT ON budget_reserve_usual
BEGIN
    INSERT INTO reservations (id, tenant, idempotency_key, status, lines, created_us,
        expires_us, owner)
    VALUES (NEW.id, NEW.tenant, NEW.idempotency_key, 'reserved', NEW.lines,
        NEW.created_us, NEW.expires_us, NEW.owner);
    UPDATE budgets SET reserved = reserved + NEW.amount,
        headroom = headroom + NEW.headroom, cap = NEW.cap, unit = NEW.unit,
        updated_us = NEW.created_us
    WHERE tenant = NEW.tenant AND budget_id = NEW.budget_id
        AND scope_key = NEW.scope_key AND window_start = NEW.window_start
        AND spent + reserved + headroom + NEW.amount + NEW.headroom <= NEW.cap
        AND NOT EXISTS (SELECT 1 FROM budget_closures c WHERE c.tenant = NEW.tenant
            AND c.budget_id = NEW.budget_id AND c.scope_key = NEW.scope_key);
    SELECT RAISE(ABORT, 'interlock-unusual') WHERE changes() = 0;
END;

-- A one-line reservation still in flight and on no lease, settled by a commit that
-- closes nothing (the caller worked out the settlement: no excess).
-- Aborts: it is no longer in flight (settled or expired elsewhere) or on a lease.
CREATE VIEW budget_commit_usual AS SELECT
    NULL AS id, NULL AS settled_us, NULL AS actual, NULL AS tenant, NULL AS budget_id,
    NULL AS scope_key, NULL AS window_start, NULL AS reserved, NULL AS headroom,
    NULL AS charge, NULL AS overage;

CREATE TRIGGER budget_commit_usual_insert INSTEAD OF INSERT ON budget_commit_usual
BEGIN
    UPDATE reservations SET status = 'committed', settled_us = NEW.settled_us,
        actual = NEW.actual
    WHERE id = NEW.id AND status = 'reserved' AND lease_id IS NULL;
    SELECT RAISE(ABORT, 'interlock-unusual') WHERE changes() = 0;
    UPDATE budgets SET reserved = reserved - NEW.reserved,
        headroom = headroom - NEW.headroom,
        spent = MIN(spent + NEW.charge, 4611686018427387904),
        overage = MIN(overage + NEW.overage, 4611686018427387904),
        updated_us = NEW.settled_us
    WHERE tenant = NEW.tenant AND budget_id = NEW.budget_id
        AND scope_key = NEW.scope_key AND window_start = NEW.window_start;
END;
