-- Groups (008): tenant isolation. A job may carry a group (a tenant, a customer, a downstream
-- host); per queue, a limit on how many of a group's jobs are leased at once and a rate (token
-- bucket) per group, both enforced by the claim; claims go round the groups, least recently
-- served first; a group can be paused as a whole (a 429 with Retry-After). Times are seconds since the Unix epoch.

ALTER TABLE jobledger_jobs ADD COLUMN group_name TEXT;

-- The claim of jobs without a group walks this index, as before; grouped jobs are claimed
-- through the next three, so a flood of one group's jobs is never read by the other claims.
DROP INDEX jobledger_jobs_due;
CREATE INDEX jobledger_jobs_due ON jobledger_jobs (queue, priority DESC, run_at, id)
    WHERE state = 'pending' AND group_name IS NULL;
-- A group's jobs in the order they are claimed.
CREATE INDEX jobledger_jobs_group_due ON jobledger_jobs (queue, group_name, priority DESC, run_at, id)
    WHERE state = 'pending' AND group_name IS NOT NULL;
-- When each group's next job is due (one probe per group). The claim of a group's jobs names
-- jobledger_jobs_group_due (INDEXED BY), so it never reads a whole group through this one.
CREATE INDEX jobledger_jobs_group_next ON jobledger_jobs (queue, group_name, run_at)
    WHERE state = 'pending' AND group_name IS NOT NULL;
-- How many of a group's jobs are leased (bounded by the group's limit).
CREATE INDEX jobledger_jobs_group_leased ON jobledger_jobs (queue, group_name)
    WHERE state = 'leased' AND group_name IS NOT NULL;

-- Per queue: the limits every group of the queue gets. NULL: no limit of that kind.
CREATE TABLE jobledger_group_limits (
    queue         TEXT    PRIMARY KEY,
    max_leased    INTEGER CHECK (max_leased > 0),
    rate          REAL    CHECK (rate > 0),
    burst         REAL    CHECK (burst >= 1),
    updated_at    REAL    NOT NULL
);

-- Per group: its token bucket, when a claim last took its jobs (the round's order), and a
-- pause. Written by the claims (under the write lock) and by pauses; a group without a row
-- has a full bucket, was never served, and is not paused.
CREATE TABLE jobledger_groups (
    queue         TEXT    NOT NULL,
    name          TEXT    NOT NULL,
    tokens        REAL,
    refilled_at   REAL,
    served_at     REAL,
    paused_until  REAL,
    paused_reason TEXT,
    PRIMARY KEY (queue, name)
);
