-- Pruning: the keys of pruned jobs keep blocking duplicates until their tombstone expires.
-- (Prune finds old finished jobs by walking the primary key from the oldest job: no index is
-- added to the jobs table, whose every index costs the claim and completion path.)

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
