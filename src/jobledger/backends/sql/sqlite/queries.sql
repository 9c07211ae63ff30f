-- Named queries for SQLite. Each block starts with "-- name: <name>".
-- Times are seconds since the Unix epoch. {queues} is a list of :q0, :q1, … placeholders and
-- {limit} a literal; both are filled in per call.

-- name: job_insert
-- A key with a live tombstone (its job was pruned) is not inserted: it still names that job.
INSERT INTO jobledger_jobs (queue, key, task, payload, priority, run_at, max_attempts,
                            attempt_limit, lease_seconds, created_at, updated_at, correlation_id)
SELECT :queue, :key, :task, :payload, :priority, :run_at, :max_attempts, :max_attempts,
       :lease_seconds, :now, :now, :correlation_id
WHERE NOT EXISTS (
    SELECT 1 FROM jobledger_tombstones
    WHERE queue = :queue AND key = :key AND expires_at > :now
)
ON CONFLICT (queue, key) DO NOTHING
RETURNING id

-- name: job_existing
SELECT id, task, payload FROM jobledger_jobs WHERE queue = :queue AND key = :key

-- name: job_claim
UPDATE jobledger_jobs
SET state = 'leased',
    attempts = attempts + 1,
    lease_token = lower(hex(randomblob(16))),
    lease_until = :now + COALESCE(:lease_seconds, lease_seconds),
    leased_by = :worker,
    updated_at = :now
WHERE id IN (
    SELECT id FROM jobledger_jobs
    WHERE state = 'pending' AND queue IN ({queues}) AND run_at <= :now
    ORDER BY priority DESC, run_at, id
    LIMIT {limit}
)
RETURNING id, queue, key, task, payload, attempts, lease_token, lease_until, lease_seconds,
          run_at, priority, correlation_id, attempt_limit

-- name: attempt_open
INSERT INTO jobledger_attempts (job_id, attempt, lease_token, worker, started_at)
VALUES (?, ?, ?, ?, ?)

-- name: job_heartbeat
UPDATE jobledger_jobs
SET lease_until = :now + COALESCE(:lease_seconds, lease_seconds), updated_at = :now
WHERE id = :id AND lease_token = :token AND state = 'leased'
RETURNING lease_until

-- name: job_complete
UPDATE jobledger_jobs
SET state = 'done', lease_until = NULL, finished_at = :now, updated_at = :now
WHERE id = :id AND lease_token = :token AND state = 'leased'

-- name: attempt_close
UPDATE jobledger_attempts
SET finished_at = :now, outcome = :outcome, error_class = :error_class,
    error_message = :message, traceback = :traceback
WHERE job_id = :id AND attempt = :attempt AND outcome IS NULL

-- name: job_fail
UPDATE jobledger_jobs
SET state = CASE WHEN :retry AND attempts < attempt_limit THEN 'pending' ELSE 'dead' END,
    run_at = CASE WHEN :retry AND attempts < attempt_limit THEN COALESCE(:run_at, :now)
                  ELSE run_at END,
    finished_at = CASE WHEN :retry AND attempts < attempt_limit THEN NULL ELSE :now END,
    lease_until = NULL,
    updated_at = :now,
    last_error = :message,
    last_error_class = :error_class,
    last_traceback = :traceback
WHERE id = :id AND lease_token = :token AND state = 'leased'
RETURNING state

-- name: job_release
UPDATE jobledger_jobs
SET state = 'pending', lease_until = NULL, attempt_limit = attempt_limit + 1, updated_at = :now
WHERE id = :id AND lease_token = :token AND state = 'leased'

-- name: job_rescue
UPDATE jobledger_jobs
SET state = CASE WHEN attempts < attempt_limit THEN 'pending' ELSE 'dead' END,
    run_at = CASE WHEN attempts < attempt_limit THEN :now ELSE run_at END,
    finished_at = CASE WHEN attempts < attempt_limit THEN NULL ELSE :now END,
    last_error = 'lease expired at ' || strftime('%Y-%m-%dT%H:%M:%fZ', lease_until, 'unixepoch')
                 || ' (held by ' || COALESCE(leased_by, '?') || ')',
    last_error_class = 'LeaseExpired',
    last_traceback = NULL,
    lease_until = NULL,
    updated_at = :now
WHERE id IN (
    SELECT id FROM jobledger_jobs
    WHERE state = 'leased' AND lease_until < :now
    ORDER BY lease_until
    LIMIT {limit}
)
RETURNING id, queue, key, state, attempts, last_error

-- name: job_redrive
UPDATE jobledger_jobs
SET state = 'pending', run_at = :now, finished_at = NULL, lease_until = NULL,
    attempt_limit = attempts + COALESCE(:budget, max_attempts), updated_at = :now
WHERE id = :id AND state IN ('dead', 'cancelled')

-- name: job_resolve
UPDATE jobledger_jobs
SET state = :state,
    run_at = CASE WHEN :state = 'pending' THEN :now ELSE run_at END,
    finished_at = CASE WHEN :state = 'done' THEN :now ELSE NULL END,
    attempt_limit = CASE WHEN :state = 'pending' AND state = 'dead'
                         THEN attempts + max_attempts ELSE attempt_limit END,
    lease_until = NULL,
    updated_at = :now
WHERE id = :id AND state IN ('dead', 'pending')

-- name: job_cancel
UPDATE jobledger_jobs
SET state = 'cancelled', finished_at = :now, updated_at = :now
WHERE id = :id AND state = 'pending'

-- name: event_record
INSERT INTO jobledger_events (job_id, at, kind, actor, note, detail)
VALUES (:job_id, :now, :kind, :actor, :note, :detail)

-- name: effect_holder
SELECT attempts FROM jobledger_jobs WHERE id = :job_id AND lease_token = :token AND state = 'leased'

-- name: effect_record
INSERT INTO jobledger_effects (queue, key, effect, job_id, attempt, recorded_at, detail)
VALUES (:queue, :key, :effect, :job_id, :attempt, :now, :detail)
ON CONFLICT (queue, key, effect) DO NOTHING

-- name: effect_get
SELECT queue, key, effect, job_id, attempt, recorded_at, detail FROM jobledger_effects
WHERE queue = :queue AND key = :key AND effect = :effect

-- name: effect_list
SELECT queue, key, effect, job_id, attempt, recorded_at, detail FROM jobledger_effects
WHERE queue = :queue AND key = :key ORDER BY recorded_at, effect

-- name: attempt_list
SELECT job_id, attempt, lease_token, worker, started_at, finished_at, outcome, error_class,
       error_message, traceback
FROM jobledger_attempts WHERE job_id = :job_id ORDER BY attempt

-- name: event_list
SELECT job_id, at, kind, actor, note, detail FROM jobledger_events WHERE job_id = :job_id ORDER BY id

-- name: queue_counts
SELECT queue, state, count(*), sum(attempts) FROM jobledger_jobs GROUP BY queue, state

-- name: queue_oldest_due
SELECT queue, min(run_at), sum(run_at <= :now - :late_after) FROM jobledger_jobs
WHERE state = 'pending' AND run_at <= :now
GROUP BY queue

-- name: queue_lease_expiries
SELECT j.queue, count(*) FROM jobledger_attempts a JOIN jobledger_jobs j ON j.id = a.job_id
WHERE a.outcome = 'lease_expired' AND a.finished_at >= :now - 3600
GROUP BY j.queue

-- name: tombstone_live
SELECT job_id, task, payload_digest FROM jobledger_tombstones
WHERE queue = :queue AND key = :key AND expires_at > :now

-- name: job_prune_window
-- The next {limit} jobs by id, oldest first: prune walks the primary key, so no index on the
-- jobs table is needed for it.
SELECT id, created_at FROM jobledger_jobs WHERE id > :after ORDER BY id LIMIT {limit}

-- name: job_prune_pick
-- Of one window, the jobs prune takes: in the given states ({states} is a literal list of state
-- names), finished before the cut-off.
SELECT id, queue, key, task, payload, state, finished_at FROM jobledger_jobs
WHERE id > :after AND id <= :last AND state IN ({states}) AND finished_at < :before
  AND (:queue IS NULL OR queue = :queue)
ORDER BY id

-- name: job_delete
DELETE FROM jobledger_jobs WHERE id = ?

-- name: attempt_delete
DELETE FROM jobledger_attempts WHERE job_id = ?

-- name: event_delete
DELETE FROM jobledger_events WHERE job_id = ?

-- name: effect_delete
DELETE FROM jobledger_effects WHERE queue = ? AND key = ?

-- name: tombstone_record
INSERT INTO jobledger_tombstones (queue, key, job_id, task, payload_digest, state, finished_at,
                                  pruned_at, expires_at)
VALUES (:queue, :key, :job_id, :task, :payload_digest, :state, :finished_at, :now, :expires_at)
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
