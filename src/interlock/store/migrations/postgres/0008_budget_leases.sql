-- Interlock schema 8 (PostgreSQL): one round trip per reservation and per commit,
-- and budget leases (docs/adr/0012-budget-leases.md).
--
-- interlock_reserve and interlock_commit do in one statement what the store did in
-- several: the same conditional writes under the same row locks, in the caller's
-- one transaction. A reservation one of whose budgets cannot hold it raises
-- (SQLSTATE P0001, message 'interlock-refused <line number>'): the statement fails,
-- so nothing it wrote stays. interlock_commit settles only the usual case (held,
-- by its owner, no line past amount + headroom, not leased) and returns no row
-- otherwise, leaving the reservation untouched for the store's general path.
--
-- A lease is a slice of one budget counter granted to one store instance (its
-- owner): the slice counts as reserved on the counter, so the sum of the leases
-- never lets spent + reserved pass the cap. Reservations served from a lease name
-- it (lease_id) and hold lease_held (amount + headroom) of it; once settled they
-- record lease_used (what is charged) until the lease is folded into the counter,
-- which detaches them (lease_id back to NULL). A lease past expires_us belongs to
-- a replica that stopped renewing it: the reaper folds it and returns the rest.

CREATE TABLE budget_leases (
    id           TEXT   PRIMARY KEY,
    tenant       TEXT   NOT NULL,
    budget_id    TEXT   NOT NULL,
    scope_key    TEXT   NOT NULL,
    window_start BIGINT NOT NULL,
    owner        TEXT   NOT NULL,
    granted      BIGINT NOT NULL CHECK (granted >= 0),
    expires_us   BIGINT NOT NULL,
    updated_us   BIGINT NOT NULL
);

CREATE INDEX budget_leases_by_expiry ON budget_leases (expires_us);

ALTER TABLE reservations ADD COLUMN lease_id TEXT;

ALTER TABLE reservations ADD COLUMN lease_amount BIGINT;

ALTER TABLE reservations ADD COLUMN lease_held BIGINT;

ALTER TABLE reservations ADD COLUMN lease_used BIGINT;

CREATE INDEX reservations_by_lease ON reservations (lease_id) WHERE lease_id IS NOT NULL;

CREATE FUNCTION interlock_reserve(
    p_id TEXT, p_tenant TEXT, p_key TEXT, p_lines TEXT, p_created BIGINT,
    p_expires BIGINT, p_owner TEXT, p_force BOOLEAN, p_forced_limit BIGINT
) RETURNS BOOLEAN LANGUAGE plpgsql AS $$
DECLARE
    line JSONB;
    n INTEGER := 0;
BEGIN
    INSERT INTO reservations (id, tenant, idempotency_key, status, lines, created_us,
                              expires_us, owner)
    VALUES (p_id, p_tenant, p_key, 'reserved', p_lines, p_created, p_expires, p_owner)
    ON CONFLICT (tenant, idempotency_key) DO NOTHING;
    IF NOT FOUND THEN
        RETURN FALSE;
    END IF;
    FOR line IN SELECT value FROM jsonb_array_elements(p_lines::jsonb) LOOP
        n := n + 1;
        INSERT INTO budgets AS b (tenant, budget_id, scope_key, window_start, unit, cap,
                                  spent, reserved, headroom, overage, excess, updated_us)
        SELECT p_tenant, line->>0, line->>1, (line->>2)::BIGINT, line->>3,
               (line->>4)::BIGINT, 0, (line->>5)::BIGINT, COALESCE((line->>6)::BIGINT, 0), 0, 0, p_created
        WHERE NOT EXISTS (SELECT 1 FROM budget_closures c WHERE c.tenant = p_tenant
                          AND c.budget_id = line->>0 AND c.scope_key = line->>1)
        ON CONFLICT (tenant, budget_id, scope_key, window_start) DO UPDATE SET
            reserved = b.reserved + excluded.reserved,
            headroom = b.headroom + excluded.headroom, cap = excluded.cap,
            unit = excluded.unit, updated_us = excluded.updated_us
        WHERE CASE WHEN p_force THEN b.reserved + b.headroom <= p_forced_limit
                   ELSE b.spent + b.reserved + b.headroom + excluded.reserved
                        + excluded.headroom <= excluded.cap END;
        IF NOT FOUND THEN
            RAISE EXCEPTION 'interlock-refused %', n;
        END IF;
    END LOOP;
    RETURN TRUE;
END
$$;

CREATE FUNCTION interlock_commit(
    p_id TEXT, p_actual TEXT, p_now BIGINT, p_by TEXT, p_any BOOLEAN, p_ceiling BIGINT
) RETURNS TABLE (out_tenant TEXT, out_key TEXT, out_lines TEXT, out_created BIGINT,
               out_expires BIGINT, out_owner TEXT, out_actual TEXT)
LANGUAGE plpgsql AS $$
DECLARE
    r reservations%ROWTYPE;
    line JSONB;
    given JSONB := COALESCE(p_actual, '{}')::jsonb;
    used BIGINT;
    parts TEXT[] := '{}';
BEGIN
    SELECT * INTO r FROM reservations WHERE id = p_id FOR UPDATE;
    IF NOT FOUND OR r.status <> 'reserved' OR r.lease_id IS NOT NULL
       OR (NOT p_any AND r.owner IS DISTINCT FROM p_by) THEN
        RETURN;
    END IF;
    FOR line IN SELECT value FROM jsonb_array_elements(r.lines::jsonb) LOOP
        used := COALESCE((given->>(line->>0))::BIGINT, (line->>5)::BIGINT);
        IF used > (line->>5)::BIGINT + COALESCE((line->>6)::BIGINT, 0) THEN
            RETURN;  -- an overrun closes the budget: the store's general path
        END IF;
    END LOOP;
    FOR line IN SELECT value FROM jsonb_array_elements(r.lines::jsonb) LOOP
        used := COALESCE((given->>(line->>0))::BIGINT, (line->>5)::BIGINT);
        parts := parts || (to_json(line->>0)::TEXT || ':' || used::TEXT);
        UPDATE budgets SET reserved = reserved - (line->>5)::BIGINT,
            headroom = headroom - COALESCE((line->>6)::BIGINT, 0),
            spent = LEAST(spent + used, p_ceiling),
            overage = LEAST(overage + GREATEST(0, used - (line->>5)::BIGINT), p_ceiling),
            updated_us = p_now
        WHERE tenant = r.tenant AND budget_id = line->>0 AND scope_key = line->>1
          AND window_start = (line->>2)::BIGINT;
    END LOOP;
    SELECT '{' || string_agg(p, ',' ORDER BY p COLLATE "C") || '}' INTO out_actual
    FROM unnest(parts) AS p;
    UPDATE reservations SET status = 'committed', settled_us = p_now, actual = out_actual
    WHERE id = p_id;
    out_tenant := r.tenant;
    out_key := r.idempotency_key;
    out_lines := r.lines;
    out_created := r.created_us;
    out_expires := r.expires_us;
    out_owner := r.owner;
    RETURN NEXT;
END
$$;
