-- Interlock schema 3 (PostgreSQL): the approval webhook's delivery state, kept on
-- each approval so that opening one writes nothing more. A pending approval with no
-- notified_us is due once notify_next_us (NULL: at once) has passed and no
-- dispatcher holds its lease (notify_claimed_until_us, a time); notify_attempts
-- counts the deliveries started, notify_error keeps the last failure.

ALTER TABLE approvals ADD COLUMN notified_us BIGINT;

ALTER TABLE approvals ADD COLUMN notify_attempts INTEGER NOT NULL DEFAULT 0;

ALTER TABLE approvals ADD COLUMN notify_next_us BIGINT;

ALTER TABLE approvals ADD COLUMN notify_claimed_until_us BIGINT;

ALTER TABLE approvals ADD COLUMN notify_error TEXT;

CREATE INDEX approvals_awaiting_notice ON approvals (created_us, id)
    WHERE status = 'pending' AND notified_us IS NULL;
