-- The history role: reading jobs, operators' repairs, pruning and purging.
-- PostgreSQL. {jobs}, {attempts}, … are the schema-qualified tables; {now} is the caller's
-- explicit time or the database clock; {limit} is written in as a literal.

-- name: job_redrive
WITH moved AS (
    UPDATE {jobs}
    SET state = 'pending', run_at = {now}, finished_at = NULL, lease_until = NULL,
        attempt_limit = attempts + COALESCE(%(budget)s, max_attempts), updated_at = {now}
    WHERE id = ANY(%(ids)s::bigint[]) AND state IN ('dead', 'cancelled')
    RETURNING id, state
), noted AS (
    INSERT INTO {events} (job_id, at, kind, actor, note)
    SELECT id, {now}, 'redrive', %(actor)s, %(reason)s FROM moved
)
SELECT id FROM moved

-- name: job_resolve
WITH moved AS (
    UPDATE {jobs}
    SET state = %(state)s::text,
        run_at = CASE WHEN %(state)s::text = 'pending' THEN {now} ELSE run_at END,
        finished_at = CASE WHEN %(state)s::text = 'done' THEN {now} ELSE NULL END,
        attempt_limit = CASE WHEN %(state)s::text = 'pending' AND state = 'dead'
                             THEN attempts + max_attempts ELSE attempt_limit END,
        lease_until = NULL,
        updated_at = {now}
    WHERE id = %(id)s AND state IN ('dead', 'pending')
    RETURNING id
), noted AS (
    INSERT INTO {events} (job_id, at, kind, actor, note, detail)
    SELECT id, {now}, 'resolve', %(actor)s, %(note)s, jsonb_build_object('state', %(state)s::text)
    FROM moved
)
SELECT id FROM moved

-- name: job_cancel
WITH moved AS (
    UPDATE {jobs}
    SET state = 'cancelled', finished_at = {now}, updated_at = {now}
    WHERE id = %(id)s AND state = 'pending'
    RETURNING id
), noted AS (
    INSERT INTO {events} (job_id, at, kind, actor, note)
    SELECT id, {now}, 'cancel', %(actor)s, %(reason)s FROM moved
)
SELECT id FROM moved

-- name: event_record
INSERT INTO {events} (job_id, at, kind, actor, note, detail)
VALUES (%(job_id)s, {now}, %(kind)s, %(actor)s, %(note)s, %(detail)s::jsonb)

-- name: attempt_list
SELECT job_id, attempt, lease_token, worker, started_at, finished_at, outcome, error_class,
       error_message, traceback
FROM {attempts} WHERE job_id = %(job_id)s ORDER BY attempt

-- name: event_list
SELECT job_id, at, kind, actor, note, detail FROM {events} WHERE job_id = %(job_id)s ORDER BY id

-- name: job_prune_window
-- The next {limit} jobs by id, oldest first: prune walks the primary key, so no index on the
-- jobs table is needed for it.
SELECT id, created_at FROM {jobs} WHERE id > %(after)s ORDER BY id LIMIT {limit}

-- name: job_prune
-- Of one window, delete the jobs in the given states that finished before the cut-off. A row
-- another transaction changes meanwhile (a redrive) is re-checked after it commits. A job of a
-- declared queue is kept for the queue's retention at least, whatever the cut-off.
DELETE FROM {jobs} AS j
WHERE id > %(after)s AND id <= %(last)s AND state = ANY(%(states)s::text[])
  AND finished_at < %(before)s AND (%(queue)s::text IS NULL OR queue = %(queue)s::text)
  AND NOT EXISTS (
      SELECT 1 FROM {queues} q
      WHERE q.name = j.queue AND j.finished_at >= {now} - make_interval(secs => q.retention_seconds)
  )
RETURNING id, queue, key, task, md5(payload::text), state, finished_at

-- name: job_prune_count
SELECT state, count(*) FROM {jobs} AS j
WHERE id > %(after)s AND id <= %(last)s AND state = ANY(%(states)s::text[])
  AND finished_at < %(before)s AND (%(queue)s::text IS NULL OR queue = %(queue)s::text)
  AND NOT EXISTS (
      SELECT 1 FROM {queues} q
      WHERE q.name = j.queue AND j.finished_at >= {now} - make_interval(secs => q.retention_seconds)
  )
GROUP BY state

-- name: job_history_delete
WITH a AS (
    DELETE FROM {attempts} WHERE job_id = ANY(%(ids)s::bigint[]) RETURNING 1
), e AS (
    DELETE FROM {events} WHERE job_id = ANY(%(ids)s::bigint[]) RETURNING 1
), f AS (
    DELETE FROM {effects}
    WHERE (queue, key) IN (SELECT * FROM unnest(%(queues)s::text[], %(keys)s::text[]))
    RETURNING 1
), p AS (
    DELETE FROM {publish_requests} WHERE job_id = ANY(%(ids)s::bigint[])
)
SELECT (SELECT count(*) FROM a), (SELECT count(*) FROM e), (SELECT count(*) FROM f)

-- name: tombstone_record
INSERT INTO {tombstones} AS t (queue, key, job_id, task, payload_digest, state, finished_at,
                               pruned_at, expires_at)
SELECT queue, key, job_id, task, digest, state, finished_at, {now},
       finished_at + make_interval(secs => %(keep)s)
FROM unnest(%(queues)s::text[], %(keys)s::text[], %(ids)s::bigint[], %(tasks)s::text[],
            %(digests)s::text[], %(states)s::text[], %(finished)s::timestamptz[])
     AS n(queue, key, job_id, task, digest, state, finished_at)
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
RETURNING 1

-- name: tombstone_find
SELECT queue, key, job_id, task, state, finished_at, pruned_at, expires_at FROM {tombstones}
WHERE key = %(key)s AND (%(queue)s::text IS NULL OR queue = %(queue)s::text)
ORDER BY queue

-- name: job_purge
DELETE FROM {jobs} WHERE id = ANY(%(ids)s::bigint[]) RETURNING id, queue, key
