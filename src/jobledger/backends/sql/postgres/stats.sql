-- The stats role (007): counts per queue, live depths, per-minute rollups.
-- PostgreSQL. {jobs}, {attempts}, … are the schema-qualified tables; {now} is the caller's
-- explicit time or the database clock; {limit} is written in as a literal.

-- name: clock
-- The clock the other statements of a read use: the caller's, or the database's.
SELECT {now}

-- name: queue_counts
SELECT queue, state, count(*), sum(attempts) FROM {jobs} GROUP BY queue, state

-- name: queue_oldest_due
-- Pending jobs live in two partial indexes (without a group, with one): one arm each.
SELECT queue, min(run_at), count(*) FILTER (
           WHERE run_at <= {now} - make_interval(secs => %(late_after)s))
FROM (
    SELECT queue, run_at FROM {jobs}
    WHERE state = 'pending' AND group_name IS NULL AND run_at <= {now}
    UNION ALL
    SELECT queue, run_at FROM {jobs}
    WHERE state = 'pending' AND group_name IS NOT NULL AND run_at <= {now}
) AS p
GROUP BY queue

-- name: queue_lease_expiries
SELECT j.queue, count(*) FROM {attempts} a JOIN {jobs} j ON j.id = a.job_id
WHERE a.outcome = 'lease_expired' AND a.finished_at >= {now} - interval '1 hour'
GROUP BY j.queue

-- name: queue_depths
-- Live jobs per queue, each arm read through its partial index, never the whole table: pending
-- (how many are due, and the oldest due run time), leased (how many leases have expired: past
-- lease_until, as the rescue takes them, not at it), dead.
-- "lease_until IS NOT NULL" (true of every leased job) names jobledger_jobs_leased's condition.
SELECT queue, 'pending', count(*), count(*) FILTER (WHERE run_at <= {now}),
       min(run_at) FILTER (WHERE run_at <= {now}), {now}
FROM (
    SELECT queue, run_at FROM {jobs} WHERE state = 'pending' AND group_name IS NULL
    UNION ALL
    SELECT queue, run_at FROM {jobs} WHERE state = 'pending' AND group_name IS NOT NULL
) AS p
GROUP BY queue
UNION ALL
SELECT queue, 'leased', count(*), count(*) FILTER (WHERE lease_until < {now}), NULL, {now}
FROM {jobs} WHERE state = 'leased' AND lease_until IS NOT NULL GROUP BY queue
UNION ALL
SELECT queue, 'dead', count(*), 0, NULL, {now}
FROM {jobs} WHERE state = 'dead' GROUP BY queue

-- name: queue_finished_counts
-- Finished jobs have no index of their own (it would cost every completion a write), so this
-- one reads the table; callers cache it for minutes.
SELECT queue, state, count(*) FROM {jobs} WHERE state IN ('done', 'cancelled') GROUP BY queue, state

-- name: minute_stats_add
-- Rows arrive sorted by (minute, queue, task), so two writers lock them in the same order.
INSERT INTO {minute_stats} AS s
    (minute, queue, task, claimed, wait_sum, wait_max, done, retried, dead, run_count, run_sum,
     run_max)
SELECT * FROM unnest(%(minute)s::timestamptz[], %(queue)s::text[], %(task)s::text[],
                     %(claimed)s::bigint[], %(wait_sum)s::float8[], %(wait_max)s::float8[],
                     %(done)s::bigint[], %(retried)s::bigint[], %(dead)s::bigint[], %(run_count)s::bigint[],
                     %(run_sum)s::float8[], %(run_max)s::float8[])
ON CONFLICT (minute, queue, task) DO UPDATE SET
    claimed = s.claimed + excluded.claimed,
    wait_sum = s.wait_sum + excluded.wait_sum,
    wait_max = greatest(s.wait_max, excluded.wait_max),
    done = s.done + excluded.done,
    retried = s.retried + excluded.retried,
    dead = s.dead + excluded.dead,
    run_count = s.run_count + excluded.run_count,
    run_sum = s.run_sum + excluded.run_sum,
    run_max = greatest(s.run_max, excluded.run_max)

-- name: minute_stats_list
SELECT minute, queue, task, claimed, wait_sum, wait_max, done, retried, dead, run_count, run_sum,
       run_max
FROM {minute_stats} WHERE minute >= %(since)s ORDER BY minute, queue, task

-- name: minute_stats_prune
DELETE FROM {minute_stats} WHERE minute < %(before)s
