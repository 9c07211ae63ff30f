-- The groups role (008): group limits, pauses and the operator's view.
-- SQLite. Times are seconds since the Unix epoch; {limit} is written in as a literal.

-- name: group_pause
-- A pause only ever extends; the reason is the one of the pause in force.
INSERT INTO jobledger_groups (queue, name, paused_until, paused_reason)
VALUES (:queue, :name, :until, :reason)
ON CONFLICT (queue, name) DO UPDATE
SET paused_reason = CASE WHEN COALESCE(jobledger_groups.paused_until, 0) < excluded.paused_until
                         THEN excluded.paused_reason ELSE jobledger_groups.paused_reason END,
    paused_until = max(COALESCE(jobledger_groups.paused_until, 0), excluded.paused_until)
RETURNING paused_until

-- name: group_resume
UPDATE jobledger_groups SET paused_until = NULL, paused_reason = NULL
WHERE queue = :queue AND name = :name AND paused_until > :now

-- name: group_limits_put
INSERT INTO jobledger_group_limits (queue, max_leased, rate, burst, updated_at)
VALUES (:queue, :max_leased, :rate, :burst, :now)
ON CONFLICT (queue) DO UPDATE
SET max_leased = excluded.max_leased, rate = excluded.rate, burst = excluded.burst,
    updated_at = excluded.updated_at

-- name: group_limits_delete
DELETE FROM jobledger_group_limits WHERE queue = :queue

-- name: group_limits_get
SELECT max_leased, rate, burst FROM jobledger_group_limits WHERE queue = :queue

-- name: pending_groups
-- The recursive CTE "pending(name)": the groups of :queue with pending jobs, found by a skip
-- scan of the grouped index (one probe per group, however many jobs each has); its last row
-- is NULL. The grouped claim's group_candidates and group_list include it.
pending(name) AS (
    SELECT min(group_name) FROM jobledger_jobs
    WHERE state = 'pending' AND group_name IS NOT NULL AND queue = :queue
    UNION ALL
    SELECT (SELECT min(group_name) FROM jobledger_jobs
            WHERE state = 'pending' AND group_name IS NOT NULL AND queue = :queue
              AND group_name > pending.name)
    FROM pending WHERE pending.name IS NOT NULL
)

-- name: group_list
-- Groups with pending or leased jobs (two skip scans) or a pause in force, with their counts.
WITH RECURSIVE {@pending_groups}, leased(name) AS (
    SELECT min(group_name) FROM jobledger_jobs
    WHERE state = 'leased' AND group_name IS NOT NULL AND queue = :queue
    UNION ALL
    SELECT (SELECT min(group_name) FROM jobledger_jobs
            WHERE state = 'leased' AND group_name IS NOT NULL AND queue = :queue
              AND group_name > leased.name)
    FROM leased WHERE leased.name IS NOT NULL
), names(name) AS (
    SELECT name FROM pending WHERE name IS NOT NULL
    UNION SELECT name FROM leased WHERE name IS NOT NULL
    UNION SELECT name FROM jobledger_groups WHERE queue = :queue AND paused_until > :now
)
SELECT n.name,
       (SELECT count(*) FROM jobledger_jobs AS j
        WHERE j.state = 'pending' AND j.group_name IS NOT NULL AND j.queue = :queue
          AND j.group_name = n.name),
       (SELECT count(*) FROM jobledger_jobs AS j
        WHERE j.state = 'pending' AND j.group_name IS NOT NULL AND j.queue = :queue
          AND j.group_name = n.name AND j.run_at <= :now),
       (SELECT count(*) FROM jobledger_jobs AS j
        WHERE j.state = 'leased' AND j.group_name IS NOT NULL AND j.queue = :queue
          AND j.group_name = n.name),
       g.paused_until, g.paused_reason, g.served_at, g.tokens, g.refilled_at, :now
FROM names AS n LEFT JOIN jobledger_groups AS g ON g.queue = :queue AND g.name = n.name
ORDER BY n.name

-- name: group_prune_idle
-- The rows of groups idle for :keep seconds: no pending or leased job, no pause in force,
-- neither served nor refilled since. What such a row holds (a full rate bucket, a long-past
-- turn) is what a group without a row starts with, so deleting it changes no claim.
DELETE FROM jobledger_groups WHERE (queue, name) IN (
    SELECT g.queue, g.name FROM jobledger_groups AS g
    WHERE COALESCE(g.paused_until, 0) <= :now
      AND COALESCE(g.served_at, 0) < :now - :keep
      AND COALESCE(g.refilled_at, 0) < :now - :keep
      AND NOT EXISTS (SELECT 1 FROM jobledger_jobs AS j
                      WHERE j.queue = g.queue AND j.group_name = g.name AND j.state = 'pending')
      AND NOT EXISTS (SELECT 1 FROM jobledger_jobs AS j
                      WHERE j.queue = g.queue AND j.group_name = g.name AND j.state = 'leased')
    LIMIT {limit}
)

-- name: group_rows_restore
-- After group_prune_idle, in its transaction: a row for every group with pending jobs that has
-- none (the claim walks the groups' rows: migration 012). Under SQLite's one writer no job can
-- arrive during the prune, so this finds nothing unless a row went missing some other way.
INSERT OR IGNORE INTO jobledger_groups (queue, name)
SELECT DISTINCT queue, group_name FROM jobledger_jobs
WHERE state = 'pending' AND group_name IS NOT NULL
