-- Interlock schema 4 (SQLite): the webhook's approval.decided notice, kept on each
-- approval beside the approval.requested one (0003) and in the same shape. A notice
-- is due once a human decided the approval (decided_by), its request was delivered
-- (notified_us: there is a message to update), decided_notify_next_us (NULL: at
-- once) has passed, no dispatcher holds its lease, and the decision is less than a
-- day old (the dispatcher gives up after that).

ALTER TABLE approvals ADD COLUMN decided_notified_us INTEGER;

ALTER TABLE approvals ADD COLUMN decided_notify_attempts INTEGER NOT NULL DEFAULT 0;

ALTER TABLE approvals ADD COLUMN decided_notify_next_us INTEGER;

ALTER TABLE approvals ADD COLUMN decided_notify_claimed_until_us INTEGER;

ALTER TABLE approvals ADD COLUMN decided_notify_error TEXT;

-- By decision time: the due query reads only the last day's decisions from it.
CREATE INDEX approvals_awaiting_decided_notice ON approvals (decided_us, id)
    WHERE decided_by IS NOT NULL AND notified_us IS NOT NULL AND decided_notified_us IS NULL;

-- Decisions taken before this upgrade count as notified (as of the decision), so that
-- turning the event on never floods a receiver with old news.
UPDATE approvals SET decided_notified_us = decided_us WHERE decided_by IS NOT NULL;
