-- The groups role (008): group limits, pauses and the operator's view.
-- PostgreSQL. {jobs}, {attempts}, … are the schema-qualified tables; {now} is the caller's
-- explicit time or the database clock; {limit} is written in as a literal.

-- name: group_pause
-- A pause only ever extends; the reason is the one of the pause in force.
INSERT INTO {groups} AS g (queue, name, paused_until, paused_reason)
VALUES (%(queue)s, %(name)s, %(until)s, %(reason)s)
ON CONFLICT (queue, name) DO UPDATE
SET paused_reason = CASE WHEN g.paused_until IS NULL OR g.paused_until < excluded.paused_until
                         THEN excluded.paused_reason ELSE g.paused_reason END,
    paused_until = GREATEST(g.paused_until, excluded.paused_until)
RETURNING paused_until

-- name: group_resume
UPDATE {groups} SET paused_until = NULL, paused_reason = NULL
WHERE queue = %(queue)s AND name = %(name)s AND paused_until > {now}

-- name: group_limits_put
INSERT INTO {group_limits} (queue, max_leased, rate, burst, updated_at)
VALUES (%(queue)s, %(max_leased)s, %(rate)s, %(burst)s, {now})
ON CONFLICT (queue) DO UPDATE
SET max_leased = excluded.max_leased, rate = excluded.rate, burst = excluded.burst,
    updated_at = excluded.updated_at

-- name: group_limits_delete
DELETE FROM {group_limits} WHERE queue = %(queue)s

-- name: group_limits_get
SELECT max_leased, rate, burst FROM {group_limits} WHERE queue = %(queue)s

-- name: group_list
-- Groups with pending or leased jobs (two skip scans) or a pause in force, with their counts.
WITH RECURSIVE pending AS (
    SELECT (SELECT group_name FROM {jobs}
            WHERE state = 'pending' AND group_name IS NOT NULL AND queue = %(queue)s
            ORDER BY group_name LIMIT 1) AS name
    UNION ALL
    SELECT (SELECT group_name FROM {jobs}
            WHERE state = 'pending' AND group_name IS NOT NULL AND queue = %(queue)s
              AND group_name > p.name
            ORDER BY group_name LIMIT 1)
    FROM pending AS p WHERE p.name IS NOT NULL
), leased AS (
    SELECT (SELECT group_name FROM {jobs}
            WHERE state = 'leased' AND group_name IS NOT NULL AND queue = %(queue)s
            ORDER BY group_name LIMIT 1) AS name
    UNION ALL
    SELECT (SELECT group_name FROM {jobs}
            WHERE state = 'leased' AND group_name IS NOT NULL AND queue = %(queue)s
              AND group_name > l.name
            ORDER BY group_name LIMIT 1)
    FROM leased AS l WHERE l.name IS NOT NULL
), names AS (
    SELECT name FROM pending WHERE name IS NOT NULL
    UNION SELECT name FROM leased WHERE name IS NOT NULL
    UNION SELECT name FROM {groups} WHERE queue = %(queue)s AND paused_until > {now}
)
SELECT n.name,
       (SELECT count(*) FROM {jobs} AS j
        WHERE j.state = 'pending' AND j.group_name IS NOT NULL AND j.queue = %(queue)s
          AND j.group_name = n.name),
       (SELECT count(*) FROM {jobs} AS j
        WHERE j.state = 'pending' AND j.group_name IS NOT NULL AND j.queue = %(queue)s
          AND j.group_name = n.name AND j.run_at <= {now}),
       (SELECT count(*) FROM {jobs} AS j
        WHERE j.state = 'leased' AND j.group_name IS NOT NULL AND j.queue = %(queue)s
          AND j.group_name = n.name),
       g.paused_until, g.paused_reason, g.served_at, g.tokens, g.refilled_at, {now}
FROM names AS n LEFT JOIN {groups} AS g ON g.queue = %(queue)s AND g.name = n.name
ORDER BY n.name

-- name: group_prune_idle
-- The rows of groups idle for %(keep)s seconds: no pending or leased job, no pause in force,
-- neither served nor refilled since. What such a row holds (a full rate bucket, a long-past
-- turn) is what a group without a row starts with, so deleting it changes no claim.
DELETE FROM {groups} WHERE (queue, name) IN (
    SELECT g.queue, g.name FROM {groups} AS g
    WHERE (g.paused_until IS NULL OR g.paused_until <= {now})
      AND (g.served_at IS NULL OR g.served_at < {now} - make_interval(secs => %(keep)s))
      AND (g.refilled_at IS NULL OR g.refilled_at < {now} - make_interval(secs => %(keep)s))
      AND NOT EXISTS (SELECT 1 FROM {jobs} AS j
                      WHERE j.queue = g.queue AND j.group_name = g.name AND j.state = 'pending')
      AND NOT EXISTS (SELECT 1 FROM {jobs} AS j
                      WHERE j.queue = g.queue AND j.group_name = g.name AND j.state = 'leased')
    LIMIT {limit}
    FOR UPDATE SKIP LOCKED
)

-- name: group_rows_restore
-- After group_prune_idle, in its transaction and a new snapshot: a row for every group with
-- pending jobs that has none. The prune skipped the rows of groups whose jobs are being written
-- (their lock); a job committed after the prune's snapshot, before its lock, is seen here.
WITH RECURSIVE walk AS (
    SELECT f.queue, f.group_name AS name FROM (
        SELECT queue, group_name FROM {jobs}
        WHERE state = 'pending' AND group_name > ''
        ORDER BY queue, group_name LIMIT 1) AS f
    UNION ALL
    SELECT f.queue, f.group_name FROM walk AS w
    CROSS JOIN LATERAL (
        SELECT queue, group_name FROM {jobs}
        WHERE state = 'pending' AND group_name > '' AND (queue, group_name) > (w.queue, w.name)
        ORDER BY queue, group_name LIMIT 1) AS f
)
INSERT INTO {groups} (queue, name)
SELECT queue, name FROM walk
ON CONFLICT DO NOTHING
