-- Interlock schema 5 (PostgreSQL): which audit key each record's link is HMAC'd under.
-- key_id is the key's public id (16 hex digits); NULL means the record is unkeyed
-- (plain SHA-256) or was written before this column existed — then it verifies as
-- SHA-256, or as HMAC under INTERLOCK_AUDIT_KEY without an id in its material. The
-- head keeps the newest record's key id, so that a process without the key refuses
-- to append to a keyed chain.

ALTER TABLE audit_events ADD COLUMN key_id TEXT;

ALTER TABLE audit_heads ADD COLUMN key_id TEXT;
