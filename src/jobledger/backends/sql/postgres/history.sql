-- The history role: reading jobs, operators' repairs, pruning and purging.
-- PostgreSQL. {jobs}, {attempts}, … are the schema-qualified tables; {now} is the caller's
-- explicit time or the database clock; {limit} is written in as a literal.

-- name: job_find
-- {where} is built from fixed clauses, {order} is one of a fixed few, {page} a LIMIT or nothing.
SELECT id, queue, key, task, payload, state, priority, run_at, attempts, max_attempts,
       attempt_limit, lease_seconds, lease_until, lease_token, leased_by, created_at, updated_at,
       finished_at, last_error, last_error_class, last_traceback, correlation_id, group_name,
       CAST(result AS TEXT)
FROM {jobs} WHERE {where} ORDER BY {order} {page}

-- name: attempt_list
-- The attempts that ended, each a row; the one running while the job is leased, which has no
-- row yet (jobs.sql, attempt_close); and the one that completed a job done, which never gets
-- one (jobs.sql, done_rest). Those two are read from the job's row. A row opened before 016
-- stands for the job's attempt instead: still open when its job is done, it ended so.
SELECT a.job_id, a.attempt, a.lease_token, a.worker, a.started_at,
       COALESCE(a.finished_at, d.finished_at), COALESCE(a.outcome, d.outcome), a.error_class,
       a.error_message, a.traceback
FROM {attempts} AS a
LEFT JOIN (SELECT j.attempts, j.finished_at, 'done'::text AS outcome FROM {jobs} AS j
           WHERE j.id = %(job_id)s AND j.state = 'done') AS d
    ON d.attempts = a.attempt AND a.outcome IS NULL
WHERE a.job_id = %(job_id)s
UNION ALL
SELECT j.id, j.attempts, j.lease_token, j.leased_by, COALESCE(j.leased_at, j.updated_at),
       CASE WHEN j.state = 'done' THEN j.finished_at END,
       CASE WHEN j.state = 'done' THEN 'done' END, NULL, NULL, NULL
FROM {jobs} AS j
WHERE j.id = %(job_id)s AND (j.state = 'leased' OR (j.state = 'done' AND j.attempts > 0))
  AND NOT EXISTS (SELECT 1 FROM {attempts} AS a WHERE a.job_id = j.id AND a.attempt = j.attempts)
ORDER BY attempt

-- name: event_list
SELECT job_id, at, kind, actor, note, detail FROM {events} WHERE job_id = %(job_id)s ORDER BY id

-- name: event_record
INSERT INTO {events} (job_id, at, kind, actor, note, detail)
SELECT e.job_id, {now}, e.kind, e.actor, e.note, e.detail::jsonb
FROM unnest(%(job_id)s::bigint[], %(kind)s::text[], %(actor)s::text[], %(note)s::text[],
            %(detail)s::text[]) AS e(job_id, kind, actor, note, detail)

-- name: job_redrive
-- {ids} is "id = ANY(%(ids)s::bigint[])".
UPDATE {jobs}
SET state = 'pending', run_at = {now}, finished_at = NULL, lease_until = NULL,
    attempt_limit = attempts + COALESCE(%(budget)s, max_attempts), updated_at = {now}
WHERE {ids} AND state IN ('dead', 'cancelled')
RETURNING id

-- name: job_resolve
UPDATE {jobs}
SET state = %(state)s::text,
    run_at = CASE WHEN %(state)s::text = 'pending' THEN {now} ELSE run_at END,
    finished_at = CASE WHEN %(state)s::text = 'done' THEN {now} ELSE NULL END,
    attempt_limit = CASE WHEN %(state)s::text = 'pending'
                         THEN attempts + max_attempts ELSE attempt_limit END,
    lease_until = NULL,
    updated_at = {now}
WHERE id = %(id)s AND state IN ('dead', 'pending')
  AND (state = 'dead' OR NOT %(only_dead)s::bool)
RETURNING id

-- name: job_cancel
UPDATE {jobs}
SET state = 'cancelled', finished_at = {now}, updated_at = {now}
WHERE id = %(id)s AND state = 'pending'
RETURNING id

-- name: job_prune_where
-- The jobs of a window that a prune takes: in the given states ({states}: "state = ANY(…)"),
-- finished before the cut-off, and kept for the retention of their queue at least if it is a
-- declared queue (job_prune and job_prune_count include it).
WHERE id > %(after)s AND id <= %(last)s AND {states}
  AND finished_at < %(before)s AND (%(queue)s::text IS NULL OR queue = %(queue)s::text)
  AND NOT EXISTS (
      SELECT 1 FROM {queues} q
      WHERE q.name = j.queue AND j.finished_at >= {now} - make_interval(secs => q.retention_seconds)
  )

-- name: job_prune_window
-- The next {limit} jobs by id, oldest first: prune walks the primary key, so no index on the
-- jobs table is needed for it.
SELECT id, created_at FROM {jobs} WHERE id > %(after)s ORDER BY id LIMIT {limit}

-- name: job_prune
-- Of one window, delete the jobs a prune takes. A row another transaction changes meanwhile (a
-- redrive) is re-checked after it commits.
DELETE FROM {jobs} AS j
{@job_prune_where}
RETURNING id, queue, key, task, md5(payload::text), state, finished_at, attempts

-- name: job_prune_count
-- What job_prune would delete, by state (a dry run).
SELECT state, count(*) FROM {jobs} AS j
{@job_prune_where}
GROUP BY state

-- name: job_purge
-- {ids} is "id = ANY(%(ids)s::bigint[])".
DELETE FROM {jobs} WHERE {ids} RETURNING id, queue, key

-- name: job_history_delete
-- What is left of deleted jobs: their attempts, events, effects and publish records. The
-- attempts counted: the rows deleted, and the attempt that completed each job done
-- (%(done_ids)s, %(done_attempts)s) where it had none (its job's row kept it: jobs.sql,
-- done_rest).
WITH a AS (
    DELETE FROM {attempts} WHERE job_id = ANY(%(ids)s::bigint[]) RETURNING job_id, attempt
), e AS (
    DELETE FROM {events} WHERE job_id = ANY(%(ids)s::bigint[]) RETURNING 1
), f AS (
    DELETE FROM {effects}
    WHERE (queue, key) IN (SELECT * FROM unnest(%(queues)s::text[], %(keys)s::text[]))
    RETURNING 1
), p AS (
    DELETE FROM {publish_requests} WHERE job_id = ANY(%(ids)s::bigint[])
)
SELECT (SELECT count(*) FROM a)
       + (SELECT count(*)
          FROM unnest(%(done_ids)s::bigint[], %(done_attempts)s::int[]) AS d(job_id, attempt)
          WHERE NOT EXISTS (SELECT 1 FROM a WHERE a.job_id = d.job_id AND a.attempt = d.attempt)),
       (SELECT count(*) FROM e), (SELECT count(*) FROM f)

-- name: tombstone_record
INSERT INTO {tombstones} AS t (queue, key, job_id, task, payload_digest, state, finished_at,
                               pruned_at, expires_at)
SELECT n.queue, n.key, n.job_id, n.task, n.payload_digest, n.state, n.finished_at, {now},
       n.finished_at + make_interval(secs => %(keep)s)
FROM unnest(%(queue)s::text[], %(key)s::text[], %(job_id)s::bigint[], %(task)s::text[],
            %(payload_digest)s::text[], %(state)s::text[], %(finished_at)s::timestamptz[])
     AS n(queue, key, job_id, task, payload_digest, state, finished_at)
ON CONFLICT (queue, key) DO UPDATE
SET job_id = excluded.job_id, task = excluded.task, payload_digest = excluded.payload_digest,
    state = excluded.state, finished_at = excluded.finished_at, pruned_at = excluded.pruned_at,
    expires_at = excluded.expires_at

-- name: tombstone_prune
DELETE FROM {tombstones} WHERE (queue, key) IN (
    SELECT queue, key FROM {tombstones}
    WHERE expires_at <= {now} ORDER BY expires_at LIMIT {limit}
    FOR UPDATE SKIP LOCKED
)

-- name: tombstone_find
SELECT queue, key, job_id, task, state, finished_at, pruned_at, expires_at FROM {tombstones}
WHERE key = %(key)s AND (%(queue)s::text IS NULL OR queue = %(queue)s::text)
ORDER BY queue
