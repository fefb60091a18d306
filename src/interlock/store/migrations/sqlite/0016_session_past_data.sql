-- Interlock schema 16 (SQLite): the data a session's dropped steps brought in (issue 18,
-- docs/session-engine.md) — so that past max_steps a flow or provenance the kept steps
-- do not find is a sure miss unless the dropped data may hold it (before, every such
-- miss was undetermined once a step had been dropped).
--
-- One row a dropped step with fingerprints (a trusted input's too: provenance weighs
-- the user's words against a source's), filled in the append's transaction from the
-- rows the bound deletes, just before it deletes them; and one a call settled with a result after its
-- step was dropped (kind '', seq NULL: a step not known). Rows are only added, and
-- each session's in the order of their ids (one writer at a time), so a reader reads
-- only the rows past the last it read. Bounded per session: once its rows hold
-- 800,000 bytes (interlock.session.history.MAX_PAST_PRINTS fingerprints of 8 bytes)
-- none is added, and a reader that counts that many can tell nothing of the dropped
-- data. `total` is the bytes of the session's rows up to and including each (its
-- newest row's: one index seek, not a sum over the rows, a drop). A row whose fingerprints are NULL marks the dropped data unknown: a session
-- that dropped steps before this schema. Forgotten with its session.

CREATE TABLE session_past_data (
    id           INTEGER PRIMARY KEY,
    tenant       TEXT    NOT NULL,
    session_id   TEXT    NOT NULL,
    seq          INTEGER,
    kind         TEXT    NOT NULL,
    name         TEXT    NOT NULL,
    labels       TEXT    NOT NULL,
    trusted      INTEGER NOT NULL,
    fingerprints BLOB,
    total        INTEGER NOT NULL
);

CREATE INDEX session_past_data_by_session ON session_past_data (tenant, session_id, id);

INSERT INTO session_past_data
    (tenant, session_id, seq, kind, name, labels, trusted, fingerprints, total)
    SELECT s.tenant, s.session_id, NULL, '', '', '[]', 0, NULL, 0 FROM sessions s
    WHERE s.next_seq > 1 AND NOT EXISTS (SELECT 1 FROM session_steps t
        WHERE t.tenant = s.tenant AND t.session_id = s.session_id AND t.seq = 1);

-- The usual step's bound (schema 15's trigger) takes the dropped steps' data in too,
-- before it deletes them.
DROP TRIGGER session_step_usual_drop;

CREATE TRIGGER session_step_usual_drop INSTEAD OF INSERT ON session_step_usual
WHEN NEW.oldest > 0
BEGIN
    INSERT INTO session_past (tenant, session_id, kind, name, labels, n, first_us, last_us)
    SELECT tenant, session_id, kind, name, labels, count(*), min(at_us), max(at_us)
    FROM session_steps WHERE tenant = NEW.tenant AND session_id = NEW.session_id
        AND seq <= NEW.oldest AND executed = 1 AND kind <> 'input'
    GROUP BY tenant, session_id, kind, name, labels
    ON CONFLICT (tenant, session_id, kind, name, labels) DO UPDATE SET
        n = session_past.n + excluded.n,
        first_us = min(session_past.first_us, excluded.first_us),
        last_us = max(session_past.last_us, excluded.last_us);
    INSERT INTO session_past_data
        (tenant, session_id, seq, kind, name, labels, trusted, fingerprints, total)
    SELECT tenant, session_id, seq, kind, name, labels, trusted, fingerprints,
        coalesce((SELECT d.total FROM session_past_data d WHERE d.tenant = NEW.tenant
            AND d.session_id = NEW.session_id ORDER BY d.id DESC LIMIT 1), 0)
        + sum(length(fingerprints)) OVER (ORDER BY seq)
    FROM session_steps WHERE tenant = NEW.tenant AND session_id = NEW.session_id
        AND seq <= NEW.oldest AND length(fingerprints) > 0
        AND coalesce((SELECT d.total FROM session_past_data d WHERE d.tenant = NEW.tenant
            AND d.session_id = NEW.session_id ORDER BY d.id DESC LIMIT 1), 0) < 800000
    ORDER BY seq;
    DELETE FROM session_steps WHERE tenant = NEW.tenant AND session_id = NEW.session_id
        AND seq <= NEW.oldest;
END;
