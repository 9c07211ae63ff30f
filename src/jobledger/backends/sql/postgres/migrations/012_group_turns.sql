-- Group turns (012): every group with pending jobs has a row in jobledger_groups, so that a
-- grouped claim can walk the groups in the order of their turns (least recently served first,
-- never served first of all) and stop after as many as it can serve, instead of finding every
-- group with pending jobs by a skip scan of the grouped index on every claim.

CREATE INDEX jobledger_groups_turn ON jobledger_groups (queue, served_at NULLS FIRST, name);

-- A grouped job that becomes pending (a new job, a retry, a rescue, a release, a redrive, a
-- resolve to pending) makes sure its group has a row, and holds a KEY SHARE lock on it until
-- its transaction ends: claims and pauses update the row beside that lock without waiting, and
-- the pruner, whose DELETE conflicts with it, skips the row (SKIP LOCKED) instead of deleting
-- it under a job it cannot see yet. A row deleted meanwhile is inserted again (the loop).
CREATE FUNCTION jobledger_group_arrives() RETURNS trigger
LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
BEGIN
    LOOP
        PERFORM 1 FROM jobledger_groups
        WHERE queue = NEW.queue AND name = NEW.group_name
        FOR KEY SHARE;
        EXIT WHEN FOUND;
        INSERT INTO jobledger_groups (queue, name) VALUES (NEW.queue, NEW.group_name)
        ON CONFLICT DO NOTHING;
    END LOOP;
    RETURN NULL;
END
$$;

-- The WHEN clauses keep jobs without a group, claims and completions from calling it at all.
CREATE TRIGGER jobledger_group_arrives AFTER INSERT ON jobledger_jobs
    FOR EACH ROW WHEN (NEW.group_name IS NOT NULL AND NEW.state = 'pending')
    EXECUTE FUNCTION jobledger_group_arrives();
CREATE TRIGGER jobledger_group_returns AFTER UPDATE OF state ON jobledger_jobs
    FOR EACH ROW
    WHEN (NEW.group_name IS NOT NULL AND NEW.state = 'pending' AND OLD.state <> 'pending')
    EXECUTE FUNCTION jobledger_group_arrives();

INSERT INTO jobledger_groups (queue, name)
SELECT DISTINCT queue, group_name FROM jobledger_jobs
WHERE state = 'pending' AND group_name IS NOT NULL
ON CONFLICT DO NOTHING;
