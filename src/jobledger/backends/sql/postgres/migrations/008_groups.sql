-- Groups (008): tenant isolation. A job may carry a group (a tenant, a customer, a downstream
-- host); per queue, a limit on how many of a group's jobs are leased at once and a rate (token
-- bucket) per group, both enforced by the claim; claims go round the groups, least recently
-- served first; a group can be paused as a whole (a 429 with Retry-After).

ALTER TABLE jobledger_jobs ADD COLUMN group_name text;

-- The claim of jobs without a group walks this index, as before; grouped jobs are claimed
-- through the next three, so a flood of one group's jobs is never read by the other claims.
DROP INDEX jobledger_jobs_due;
CREATE INDEX jobledger_jobs_due ON jobledger_jobs (queue, priority DESC, run_at, id)
    WHERE state = 'pending' AND group_name IS NULL;
-- A group's jobs in the order they are claimed.
CREATE INDEX jobledger_jobs_group_due ON jobledger_jobs (queue, group_name, priority DESC, run_at, id)
    WHERE state = 'pending' AND group_name IS NOT NULL;
-- When each group's next job is due (one probe per group). Its condition says "group_name > ''"
-- (every group name is at least one character) where the others say "IS NOT NULL": a query
-- names it to use it, and the claim of a group's jobs, which says neither, never reads a whole
-- group through it and sorts (the planner may think a group small when it has just grown).
CREATE INDEX jobledger_jobs_group_next ON jobledger_jobs (queue, group_name, run_at)
    WHERE state = 'pending' AND group_name > '';
-- How many of a group's jobs are leased (bounded by the group's limit).
CREATE INDEX jobledger_jobs_group_leased ON jobledger_jobs (queue, group_name)
    WHERE state = 'leased' AND group_name IS NOT NULL;

-- Per queue: the limits every group of the queue gets. NULL: no limit of that kind.
CREATE TABLE jobledger_group_limits (
    queue      text             PRIMARY KEY,
    max_leased integer          CHECK (max_leased > 0),
    rate       double precision CHECK (rate > 0),
    burst      double precision CHECK (burst >= 1),
    updated_at timestamptz      NOT NULL
);

-- Per group: its token bucket, when a claim last took its jobs (the round's order), and a
-- pause. Written by the claims (under a per-group lock) and by pauses; a group without a row
-- has a full bucket, was never served, and is not paused.
CREATE TABLE jobledger_groups (
    queue         text             NOT NULL,
    name          text             NOT NULL,
    tokens        double precision,
    refilled_at   timestamptz,
    served_at     timestamptz,
    paused_until  timestamptz,
    paused_reason text,
    PRIMARY KEY (queue, name)
);
