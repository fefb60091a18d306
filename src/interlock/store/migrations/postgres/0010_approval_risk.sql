-- Interlock schema 10 (PostgreSQL): what an approver is told about a call besides the
-- call itself. `severity` is the highest severity (low, medium, high, critical) the
-- rules that asked for the approval declare; `tool_description` the tool's
-- description, from the policy's `tools` section or else from the framework the
-- agent runs in (redacted, bounded), and `tool_description_from` which of the two
-- ('policy' or 'agent': the agent's text is its own claim, and the page says so).
-- All are NULL when nothing declared them, and for every approval made before.
-- The index serves the history of decided approvals: newest decision (or, for one
-- that expired undecided, its expiry) first, per tenant.

ALTER TABLE approvals ADD COLUMN severity TEXT
    CHECK (severity IS NULL OR severity IN ('low', 'medium', 'high', 'critical'));

ALTER TABLE approvals ADD COLUMN tool_description TEXT;

ALTER TABLE approvals ADD COLUMN tool_description_from TEXT
    CHECK (tool_description_from IS NULL OR tool_description_from IN ('policy', 'agent'));

CREATE INDEX approvals_history ON approvals (tenant, (COALESCE(decided_us, expires_us)), id);
