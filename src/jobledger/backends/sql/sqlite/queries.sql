-- Named queries for SQLite. Each block starts with "-- name: <name>".
-- Times are seconds since the Unix epoch. {queues} is a list of :q0, :q1, … placeholders and
-- {limit} a literal; both are filled in per call.

-- name: job_insert
INSERT INTO jobledger_jobs (queue, key, task, payload, priority, run_at, max_attempts,
                            attempt_limit, lease_seconds, created_at, updated_at, correlation_id)
VALUES (:queue, :key, :task, :payload, :priority, :run_at, :max_attempts, :max_attempts,
        :lease_seconds, :now, :now, :correlation_id)
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
SELECT queue, state, count(*) FROM jobledger_jobs GROUP BY queue, state

-- name: queue_oldest_due
SELECT queue, min(run_at), sum(run_at <= :now - :late_after) FROM jobledger_jobs
WHERE state = 'pending' AND run_at <= :now
GROUP BY queue

-- name: queue_lease_expiries
SELECT j.queue, count(*) FROM jobledger_attempts a JOIN jobledger_jobs j ON j.id = a.job_id
WHERE a.outcome = 'lease_expired' AND a.finished_at >= :now - 3600
GROUP BY j.queue

-- name: job_lease_tokens
-- The current tokens of leased jobs among {ids} (a list of ? placeholders), read inside the
-- write transaction that then completes them: nothing can change in between.
SELECT id, lease_token FROM jobledger_jobs WHERE state = 'leased' AND id IN ({ids})
