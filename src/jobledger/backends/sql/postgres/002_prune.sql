-- Pruning: finished jobs are found by state and age without a table scan, and the keys of
-- pruned jobs keep blocking duplicates until their tombstone expires. Runs with search_path
-- set to the target schema.

-- Prune walks this index oldest first, one state at a time. Only done, dead and cancelled jobs
-- have a finish time (the predicate is written so that SQLite's planner can match it too).
CREATE INDEX jobledger_jobs_finished ON jobledger_jobs (state, finished_at)
    WHERE finished_at IS NOT NULL;

-- One row per pruned key: enqueue treats a live tombstone like the job it replaced.
CREATE TABLE jobledger_tombstones (
    queue          text        NOT NULL,
    key            text        NOT NULL,
    job_id         bigint      NOT NULL,
    task           text        NOT NULL,
    payload_digest text        NOT NULL,
    state          text        NOT NULL,
    finished_at    timestamptz,
    pruned_at      timestamptz NOT NULL,
    expires_at     timestamptz NOT NULL,
    PRIMARY KEY (queue, key)
);
CREATE INDEX jobledger_tombstones_expires ON jobledger_tombstones (expires_at);
