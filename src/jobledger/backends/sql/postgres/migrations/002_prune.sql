-- Pruning: the keys of pruned jobs keep blocking duplicates until their tombstone expires.
-- (Prune finds old finished jobs by walking the primary key from the oldest job: no index is
-- added to the jobs table, whose every index costs the claim and completion path.) Runs with
-- search_path set to the target schema.

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
