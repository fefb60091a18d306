-- Interlock schema 15 (SQLite): a session's past (issue 18, docs/sessions-store.md) —
-- the counts of its executed call steps that left the history past the bound, per
-- kind, name and labels (how many, the first and last at_us), so that a whole-session
-- count (`after:` without `within`, CEL's session.count) stays exact past max_steps.
-- Filled in the append's transaction from the rows the bound deletes, just before it
-- deletes them. A row of empty kind marks the past overflowed (its counts cannot be
-- told): a session that dropped steps before this schema, or a call settled as run
-- after its step was dropped. Forgotten with its session.

CREATE TABLE session_past (
    tenant     TEXT    NOT NULL,
    session_id TEXT    NOT NULL,
    kind       TEXT    NOT NULL,
    name       TEXT    NOT NULL,
    labels     TEXT    NOT NULL,
    n          INTEGER NOT NULL,
    first_us   INTEGER NOT NULL,
    last_us    INTEGER NOT NULL,
    PRIMARY KEY (tenant, session_id, kind, name, labels)
) WITHOUT ROWID;

INSERT INTO session_past (tenant, session_id, kind, name, labels, n, first_us, last_us)
    SELECT s.tenant, s.session_id, '', '', '', 0, 0, 0 FROM sessions s
    WHERE s.next_seq > 1 AND NOT EXISTS (SELECT 1 FROM session_steps t
        WHERE t.tenant = s.tenant AND t.session_id = s.session_id AND t.seq = 1);

-- The usual step (schema 14), its bound now in a trigger of its own that fires only
-- when the step takes the session past the bound (WHEN: a session within its bound
-- runs neither the past's upsert nor the DELETE): the steps it drops counted into the
-- past first, then deleted. Either trigger's RAISE undoes the whole statement, the
-- other's writes too, so their order does not matter.
DROP TRIGGER session_step_usual_insert;

CREATE TRIGGER session_step_usual_insert INSTEAD OF INSERT ON session_step_usual
BEGIN
    UPDATE sessions SET next_seq = NEW.seq + 1, version = NEW.version,
        touched_us = NEW.at_us, labels = COALESCE(NEW.labels, labels)
    WHERE tenant = NEW.tenant AND session_id = NEW.session_id
        AND version = NEW.version - 1 AND next_seq = NEW.seq
        AND created_us = NEW.created_us;
    SELECT RAISE(ABORT, 'interlock-unusual') WHERE changes() = 0;
    INSERT INTO session_steps (tenant, session_id, seq, at_us, kind, name, verdict,
        decision_id, labels, fingerprints, trusted, executed, changed)
    VALUES (NEW.tenant, NEW.session_id, NEW.seq, NEW.at_us, NEW.kind, NEW.name,
        NEW.verdict, NEW.decision_id, NEW.step_labels, NEW.fingerprints, NEW.trusted,
        NEW.executed, NEW.version);
END;

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
    DELETE FROM session_steps WHERE tenant = NEW.tenant AND session_id = NEW.session_id
        AND seq <= NEW.oldest;
END;
