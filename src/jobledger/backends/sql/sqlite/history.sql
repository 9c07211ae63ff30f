-- The history role: reading jobs, operators' repairs, pruning and purging.
-- SQLite. Times are seconds since the Unix epoch; {limit} is written in as a literal.

-- name: job_find
-- {where} is built from fixed clauses, {order} is one of a fixed few, {page} a LIMIT or nothing.
SELECT id, queue, key, task, payload, state, priority, run_at, attempts, max_attempts,
       attempt_limit, lease_seconds, lease_until, lease_token, leased_by, created_at, updated_at,
       finished_at, last_error, last_error_class, last_traceback, correlation_id, group_name,
       CAST(result AS TEXT)
FROM jobledger_jobs WHERE {where} ORDER BY {order} {page}

-- name: attempt_list
-- The attempts that ended, each a row; the one running while the job is leased, which has no
-- row yet (jobs.sql, attempt_close); and the one that completed a job done, which never gets
-- one (jobs.sql, job_complete). Those two are read from the job's row. A row opened before
-- 016 stands for the job's attempt instead: still open when its job is done, it ended so.
SELECT a.job_id, a.attempt, a.lease_token, a.worker, a.started_at,
       COALESCE(a.finished_at, d.finished_at), COALESCE(a.outcome, d.outcome), a.error_class,
       a.error_message, a.traceback
FROM jobledger_attempts AS a
LEFT JOIN (SELECT j.attempts, j.finished_at, 'done' AS outcome FROM jobledger_jobs AS j
           WHERE j.id = :job_id AND j.state = 'done') AS d
    ON d.attempts = a.attempt AND a.outcome IS NULL
WHERE a.job_id = :job_id
UNION ALL
SELECT j.id, j.attempts, j.lease_token, j.leased_by, COALESCE(j.leased_at, j.updated_at),
       CASE WHEN j.state = 'done' THEN j.finished_at END,
       CASE WHEN j.state = 'done' THEN 'done' END, NULL, NULL, NULL
FROM jobledger_jobs AS j
WHERE j.id = :job_id AND (j.state = 'leased' OR (j.state = 'done' AND j.attempts > 0))
  AND NOT EXISTS (SELECT 1 FROM jobledger_attempts AS a
                  WHERE a.job_id = j.id AND a.attempt = j.attempts)
ORDER BY attempt

-- name: event_list
SELECT job_id, at, kind, actor, note, detail FROM jobledger_events WHERE job_id = :job_id ORDER BY id

-- name: event_record
INSERT INTO jobledger_events (job_id, at, kind, actor, note, detail)
VALUES (:job_id, :now, :kind, :actor, :note, :detail)

-- name: job_redrive
-- {ids} is "id IN (:ids0, :ids1, …)".
UPDATE jobledger_jobs
SET state = 'pending', run_at = :now, finished_at = NULL, lease_until = NULL,
    attempt_limit = attempts + COALESCE(:budget, max_attempts), updated_at = :now
WHERE {ids} AND state IN ('dead', 'cancelled')
RETURNING id

-- name: job_resolve
UPDATE jobledger_jobs
SET state = :state,
    run_at = CASE WHEN :state = 'pending' THEN :now ELSE run_at END,
    finished_at = CASE WHEN :state = 'done' THEN :now ELSE NULL END,
    attempt_limit = CASE WHEN :state = 'pending'
                         THEN attempts + max_attempts ELSE attempt_limit END,
    lease_until = NULL,
    updated_at = :now
WHERE id = :id AND state IN ('dead', 'pending') AND (state = 'dead' OR NOT :only_dead)
RETURNING id

-- name: job_cancel
UPDATE jobledger_jobs
SET state = 'cancelled', finished_at = :now, updated_at = :now
WHERE id = :id AND state = 'pending'
RETURNING id

-- name: job_prune_where
-- The jobs of a window that a prune takes: in the given states ({states}: "state IN (…)"),
-- finished before the cut-off, and older than the retention of their queue if it is a declared
-- queue (job_prune and job_prune_count include it).
WHERE id > :after AND id <= :last AND {states} AND finished_at < :before
  AND (:queue IS NULL OR queue = :queue)
  AND NOT EXISTS (
      SELECT 1 FROM jobledger_queues q
      WHERE q.name = j.queue AND j.finished_at >= :now - q.retention_seconds
  )

-- name: job_prune_window
-- The next {limit} jobs by id, oldest first: prune walks the primary key, so no index on the
-- jobs table is needed for it.
SELECT id, created_at FROM jobledger_jobs WHERE id > :after ORDER BY id LIMIT {limit}

-- name: job_prune
-- Of one window, the jobs a prune takes; read under the write lock, then deleted with
-- job_delete.
SELECT id, queue, key, task, payload, state, finished_at, attempts FROM jobledger_jobs AS j
{@job_prune_where}
ORDER BY id

-- name: job_prune_count
-- What job_prune would take, by state (a dry run).
SELECT state, count(*) FROM jobledger_jobs AS j
{@job_prune_where}
GROUP BY state

-- name: job_purge
-- {ids} is "id IN (:ids0, :ids1, …)". Read under the write lock, then deleted with job_delete.
SELECT id, queue, key FROM jobledger_jobs WHERE {ids}

-- name: job_delete
DELETE FROM jobledger_jobs WHERE id = ?

-- name: attempt_delete
DELETE FROM jobledger_attempts WHERE job_id = ?

-- name: attempt_has_row
-- Whether attempt ? of job ? has a row (the attempt that completed a job done has none).
SELECT 1 FROM jobledger_attempts WHERE job_id = ? AND attempt = ?

-- name: event_delete
DELETE FROM jobledger_events WHERE job_id = ?

-- name: effect_delete
DELETE FROM jobledger_effects WHERE queue = ? AND key = ?

-- name: publish_request_delete
DELETE FROM jobledger_publish_requests WHERE job_id = ?

-- name: tombstone_record
INSERT INTO jobledger_tombstones (queue, key, job_id, task, payload_digest, state, finished_at,
                                  pruned_at, expires_at)
VALUES (:queue, :key, :job_id, :task, :payload_digest, :state, :finished_at, :now,
        :finished_at + :keep)
ON CONFLICT (queue, key) DO UPDATE
SET job_id = excluded.job_id, task = excluded.task, payload_digest = excluded.payload_digest,
    state = excluded.state, finished_at = excluded.finished_at, pruned_at = excluded.pruned_at,
    expires_at = excluded.expires_at

-- name: tombstone_prune
DELETE FROM jobledger_tombstones WHERE (queue, key) IN (
    SELECT queue, key FROM jobledger_tombstones
    WHERE expires_at <= :now ORDER BY expires_at LIMIT {limit}
)

-- name: tombstone_find
SELECT queue, key, job_id, task, state, finished_at, pruned_at, expires_at
FROM jobledger_tombstones
WHERE key = :key AND (:queue IS NULL OR queue = :queue)
ORDER BY queue
