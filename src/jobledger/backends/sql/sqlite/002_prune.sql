-- Pruning: finished jobs are found by state and age without a table scan, and the keys of
-- pruned jobs keep blocking duplicates until their tombstone expires.

-- Prune walks this index oldest first, one state at a time. Only done, dead and cancelled jobs
-- have a finish time (the predicate is written so that SQLite's planner can match it too).
CREATE INDEX jobledger_jobs_finished ON jobledger_jobs (state, finished_at)
    WHERE finished_at IS NOT NULL;

-- One row per pruned key: enqueue treats a live tombstone like the job it replaced.
CREATE TABLE jobledger_tombstones (
    queue          TEXT    NOT NULL,
    key            TEXT    NOT NULL,
    job_id         INTEGER NOT NULL,
    task           TEXT    NOT NULL,
    payload_digest TEXT    NOT NULL,
    state          TEXT    NOT NULL,
    finished_at    REAL,
    pruned_at      REAL    NOT NULL,
    expires_at     REAL    NOT NULL,
    PRIMARY KEY (queue, key)
) WITHOUT ROWID;
CREATE INDEX jobledger_tombstones_expires ON jobledger_tombstones (expires_at);
