-- Group turns (012): every group with pending jobs has a row in jobledger_groups, so that a
-- grouped claim can walk the groups in the order of their turns (least recently served first,
-- never served first of all: NULLs sort first) and stop after as many as it can serve,
-- instead of finding every group with pending jobs by a skip scan on every claim.

CREATE INDEX jobledger_groups_turn ON jobledger_groups (queue, served_at, name);

-- A grouped job that becomes pending (a new job, a retry, a rescue, a release, a redrive, a
-- resolve to pending) makes sure its group has a row. SQLite has one writer: no prune runs
-- between this and the job's commit.
CREATE TRIGGER jobledger_group_arrives AFTER INSERT ON jobledger_jobs
WHEN NEW.group_name IS NOT NULL AND NEW.state = 'pending'
BEGIN
    INSERT OR IGNORE INTO jobledger_groups (queue, name) VALUES (NEW.queue, NEW.group_name);
END;

CREATE TRIGGER jobledger_group_returns AFTER UPDATE OF state ON jobledger_jobs
WHEN NEW.group_name IS NOT NULL AND NEW.state = 'pending' AND OLD.state <> 'pending'
BEGIN
    INSERT OR IGNORE INTO jobledger_groups (queue, name) VALUES (NEW.queue, NEW.group_name);
END;

INSERT OR IGNORE INTO jobledger_groups (queue, name)
SELECT DISTINCT queue, group_name FROM jobledger_jobs
WHERE state = 'pending' AND group_name IS NOT NULL;
