-- The jobs role: inserts, publishing, claims, lease renewals and outcomes (the hot path).
-- SQLite. Times are seconds since the Unix epoch; {limit} is written in as a literal.

-- name: job_insert
INSERT INTO jobledger_jobs (queue, key, task, payload, priority, run_at, max_attempts,
                            attempt_limit, lease_seconds, created_at, updated_at, correlation_id,
                            group_name)
SELECT :queue, :key, :task, :payload, :priority, :run_at, :max_attempts, :max_attempts,
       :lease_seconds, :now, :now, :correlation_id, :group
{@job_insert_unless_known}

-- name: job_insert_traced
-- job_insert with the enqueue's trace context: a statement of its own, so that the common
-- enqueue (no trace context) binds and writes nothing more for it, row by row.
INSERT INTO jobledger_jobs (queue, key, task, payload, priority, run_at, max_attempts,
                            attempt_limit, lease_seconds, created_at, updated_at, correlation_id,
                            group_name, trace_context)
SELECT :queue, :key, :task, :payload, :priority, :run_at, :max_attempts, :max_attempts,
       :lease_seconds, :now, :now, :correlation_id, :group, :trace_context
{@job_insert_unless_known}

-- name: job_insert_unless_known
-- A key with a live tombstone (its job was pruned) is not inserted: it still names that job.
WHERE NOT EXISTS (
    SELECT 1 FROM jobledger_tombstones
    WHERE queue = :queue AND key = :key AND expires_at > :now
)
ON CONFLICT (queue, key) DO NOTHING
RETURNING id

-- name: job_insert_rows
-- A batch of new jobs, many in one statement: {rows} is one "(?, …)" of 11 values per job
-- (queue, key, task, payload, priority, run_at, max_attempts, lease_seconds, correlation_id,
-- group, trace_context: job_insert_traced's), after ?1, the insert's time; a chunk in which
-- no job has a group or a trace context has NULL for those two in its rows. No RETURNING:
-- under the write lock the jobs of one transaction get consecutive ids, in the order of the
-- rows, so when every job was inserted the last id says them all; when one was not (a known
-- key, a live tombstone, a key twice in the batch) the caller rolls the batch back and goes
-- job by job.
INSERT INTO jobledger_jobs (queue, key, task, payload, priority, run_at, max_attempts,
                            attempt_limit, lease_seconds, created_at, updated_at, correlation_id,
                            group_name, trace_context)
SELECT v.column1, v.column2, v.column3, v.column4, v.column5, v.column6, v.column7, v.column7,
       v.column8, ?1, ?1, v.column9, v.column10, v.column11
FROM (VALUES {rows}) AS v
WHERE NOT EXISTS (
    SELECT 1 FROM jobledger_tombstones AS t
    WHERE t.queue = v.column1 AND t.key = v.column2 AND t.expires_at > ?1
)
ON CONFLICT (queue, key) DO NOTHING

-- name: job_existing
SELECT id, task, payload FROM jobledger_jobs WHERE queue = :queue AND key = :key

-- name: lease_update
-- How a claim leases a job: a new token, one more attempt, a lease from now. Every claim
-- (job_claim, job_claim_keys, job_lease_ids) includes it, and then "leased". The attempt it
-- begins is the job row's (attempts, lease_token, leased_by, leased_at) until it ends; its
-- row in jobledger_attempts is written then (attempt_close), unless it completes the job,
-- whose row keeps it (job_complete).
UPDATE jobledger_jobs
SET state = 'leased',
    attempts = attempts + 1,
    lease_token = lower(hex(randomblob(16))),
    lease_until = :now + COALESCE(:lease_seconds, lease_seconds),
    leased_by = :worker,
    leased_at = :now,
    updated_at = :now

-- name: leased
-- What a claim returns of each job it leased.
RETURNING id, queue, key, task, payload, attempts, lease_token, lease_until, lease_seconds,
          run_at, priority, correlation_id, attempt_limit, group_name, trace_context

-- name: job_claim
-- {queues} is a list of :q0, :q1, … placeholders, filled in per call.
{@lease_update}
WHERE id IN (
    SELECT id FROM jobledger_jobs
    WHERE state = 'pending' AND group_name IS NULL AND queue IN ({queues}) AND run_at <= :now
    ORDER BY priority DESC, run_at, id
    LIMIT {limit}
)
{@leased}

-- name: job_heartbeat
UPDATE jobledger_jobs
SET lease_until = :now + COALESCE(:lease_seconds, lease_seconds), updated_at = :now
WHERE id = :id AND lease_token = :token AND state = 'leased'
RETURNING lease_until

-- name: job_complete
-- The batch completion, fenced in the statement: ?1 the time, then {leases}, one "(?, ?)" per
-- lease (the job's id and the lease's token). A job is done only if it is leased under that
-- token; the jobs it completed come back, so a stale lease is told from a current one.
-- The attempt that ended gets no row in jobledger_attempts: a job done is never leased again,
-- so its row keeps that attempt whole, and attempt_list and attempt_settled read it there
-- (as postgres/jobs.sql, done_rest).
UPDATE jobledger_jobs
SET state = 'done', lease_until = NULL, finished_at = ?1, updated_at = ?1
FROM (VALUES {leases}) AS held
WHERE jobledger_jobs.id = held.column1 AND jobledger_jobs.lease_token = held.column2
  AND jobledger_jobs.state = 'leased'
RETURNING jobledger_jobs.id, jobledger_jobs.lease_token

-- name: job_result
-- The result of a job just completed in the same write transaction (only for handlers that
-- returned a value; the others keep NULL).
UPDATE jobledger_jobs SET result = ? WHERE id = ?

-- name: job_result_store
-- The result of a job its handler completed in its own transaction (ctx.transaction()),
-- written once the handler returned, fenced by the lease that completed it.
UPDATE jobledger_jobs SET result = :result
WHERE id = :id AND lease_token = :token AND state = 'done'

-- name: attempt_close
-- The attempt of job :id that ended (failed, timed out, released, its lease expired), written
-- now from the job's row; :attempt is the attempt that ended (the
-- job's, the write that ended it being fenced by its lease).
INSERT INTO jobledger_attempts
    (job_id, attempt, lease_token, worker, started_at, finished_at, outcome, error_class,
     error_message, traceback)
SELECT id, :attempt, lease_token, COALESCE(leased_by, '?'), COALESCE(leased_at, :now), :now,
       :outcome, :error_class, :message, :traceback
FROM jobledger_jobs WHERE id = :id
{@attempt_closed_once}

-- name: attempt_closed_once
-- The end of attempt_close. A row already there is an attempt opened before
-- 016 (or by a worker of that version): still open, it is closed by this write; closed, it
-- stays as it is. The fenced update before it lets each attempt end once, so no other
-- conflict arises.
ON CONFLICT (job_id, attempt) DO UPDATE SET finished_at = excluded.finished_at,
    outcome = excluded.outcome, error_class = excluded.error_class,
    error_message = excluded.error_message, traceback = excluded.traceback
WHERE jobledger_attempts.outcome IS NULL

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
RETURNING state, group_name, queue

-- name: job_release
UPDATE jobledger_jobs
SET state = 'pending', lease_until = NULL, attempt_limit = attempt_limit + 1, updated_at = :now
WHERE id = :id AND lease_token = :token AND state = 'leased'

-- name: attempt_settled
-- What the attempt of one lease came to, if it was closed under its own token (the recorder
-- asks when a write by the lease was refused: the write may be its own, committed before an
-- earlier try lost its answer). A timed-out attempt says whether its job was retried or is dead.
SELECT CASE WHEN a.outcome <> 'timed_out' THEN a.outcome
            WHEN j.attempts = a.attempt AND j.state = 'dead' THEN 'dead' ELSE 'retry' END
FROM jobledger_attempts AS a JOIN jobledger_jobs AS j ON j.id = a.job_id
WHERE a.job_id = :id AND a.lease_token = :token AND a.finished_at IS NOT NULL
UNION ALL
-- A job done under the lease: its last attempt is its row's (job_complete), unless a row
-- closed it (a completion before the attempt's row was left out), which the first half read.
SELECT 'done' FROM jobledger_jobs AS j
WHERE j.id = :id AND j.lease_token = :token AND j.state = 'done'
  AND NOT EXISTS (SELECT 1 FROM jobledger_attempts AS a
                  WHERE a.job_id = j.id AND a.attempt = j.attempts AND a.finished_at IS NOT NULL)

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

-- name: tombstone_live
SELECT job_id, task, payload_digest FROM jobledger_tombstones
WHERE queue = :queue AND key = :key AND expires_at > :now

-- name: publish_existing
SELECT j.id, j.payload, p.fingerprint, j.task
FROM jobledger_jobs j
LEFT JOIN jobledger_publish_requests p ON p.queue = j.queue AND p.key = j.key AND p.job_id = j.id
WHERE j.queue = :queue AND j.key = :key

-- name: publish_record
INSERT INTO jobledger_publish_requests (queue, key, job_id, fingerprint, api_key_id, created_at)
VALUES (:queue, :key, :job_id, :fingerprint, :api_key_id, :now)
ON CONFLICT (queue, key) DO UPDATE SET
    job_id = excluded.job_id, fingerprint = excluded.fingerprint,
    api_key_id = excluded.api_key_id, created_at = excluded.created_at

-- name: publish_job_state
SELECT state, run_at FROM jobledger_jobs WHERE id = :id

-- name: job_claim_keys
-- One job; the backend runs it for each wanted key inside one BEGIN IMMEDIATE transaction.
{@lease_update}
WHERE queue = :queue AND key = :key AND state = 'pending' AND run_at <= :now
  AND NOT EXISTS (SELECT 1 FROM jobledger_groups AS g
                  WHERE jobledger_jobs.group_name IS NOT NULL AND g.queue = jobledger_jobs.queue
                    AND g.name = jobledger_jobs.group_name AND g.paused_until > :now)
{@leased}

-- name: group_paused_until
SELECT paused_until FROM jobledger_groups
WHERE queue = :queue AND name = :name AND paused_until > :now
