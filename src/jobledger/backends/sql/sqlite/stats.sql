-- The stats role (007): counts per queue, live depths, per-minute rollups.
-- SQLite. Times are seconds since the Unix epoch; {limit} is written in as a literal.

-- name: clock
-- The clock the other statements of a read use: the caller's, or the process's.
SELECT :now

-- name: queue_counts
SELECT queue, state, count(*), sum(attempts) FROM jobledger_jobs GROUP BY queue, state

-- name: queue_oldest_due
-- Pending jobs live in two partial indexes (without a group, with one): one arm each.
SELECT queue, min(run_at), sum(run_at <= :now - :late_after) FROM (
    SELECT queue, run_at FROM jobledger_jobs
    WHERE state = 'pending' AND group_name IS NULL AND run_at <= :now
    UNION ALL
    SELECT queue, run_at FROM jobledger_jobs
    WHERE state = 'pending' AND group_name IS NOT NULL AND run_at <= :now
)
GROUP BY queue

-- name: queue_lease_expiries
SELECT j.queue, count(*) FROM jobledger_attempts a JOIN jobledger_jobs j ON j.id = a.job_id
WHERE a.outcome = 'lease_expired' AND a.finished_at >= :now - 3600
GROUP BY j.queue

-- name: queue_depths
-- Live jobs per queue, each arm read through its partial index, never the whole table: pending
-- (how many are due, and the oldest due run time), leased (how many leases have expired: past
-- lease_until, as the rescue takes them, not at it), dead.
-- INDEXED BY: left alone, SQLite reads the leased arm through the (queue, key) index, which
-- holds every job, to save a sort.
SELECT queue, 'pending', count(*), sum(run_at <= :now),
       min(CASE WHEN run_at <= :now THEN run_at END), :now
FROM (
    SELECT queue, run_at FROM jobledger_jobs INDEXED BY jobledger_jobs_due
    WHERE state = 'pending' AND group_name IS NULL
    UNION ALL
    SELECT queue, run_at FROM jobledger_jobs INDEXED BY jobledger_jobs_group_due
    WHERE state = 'pending' AND group_name IS NOT NULL
)
GROUP BY queue
UNION ALL
SELECT queue, 'leased', count(*), sum(lease_until < :now), NULL, :now
FROM jobledger_jobs INDEXED BY jobledger_jobs_leased WHERE state = 'leased' GROUP BY queue
UNION ALL
SELECT queue, 'dead', count(*), 0, NULL, :now
FROM jobledger_jobs INDEXED BY jobledger_jobs_dead WHERE state = 'dead' GROUP BY queue

-- name: queue_finished_counts
-- Finished jobs have no index of their own (it would cost every completion a write), so this
-- one reads the table; callers cache it for minutes.
SELECT queue, state, count(*) FROM jobledger_jobs WHERE state IN ('done', 'cancelled')
GROUP BY queue, state

-- name: minute_stats_add
INSERT INTO jobledger_minute_stats
    (minute, queue, task, claimed, wait_sum, wait_max, done, retried, dead, run_count, run_sum,
     run_max)
VALUES (:minute, :queue, :task, :claimed, :wait_sum, :wait_max, :done, :retried, :dead,
        :run_count, :run_sum, :run_max)
ON CONFLICT (minute, queue, task) DO UPDATE SET
    claimed = claimed + excluded.claimed,
    wait_sum = wait_sum + excluded.wait_sum,
    wait_max = max(wait_max, excluded.wait_max),
    done = done + excluded.done,
    retried = retried + excluded.retried,
    dead = dead + excluded.dead,
    run_count = run_count + excluded.run_count,
    run_sum = run_sum + excluded.run_sum,
    run_max = max(run_max, excluded.run_max)

-- name: minute_stats_list
SELECT minute, queue, task, claimed, wait_sum, wait_max, done, retried, dead, run_count, run_sum,
       run_max
FROM jobledger_minute_stats WHERE minute >= :since ORDER BY minute, queue, task

-- name: minute_stats_prune
DELETE FROM jobledger_minute_stats WHERE minute < :before
