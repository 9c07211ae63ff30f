-- Named queries for SQLite. Each block starts with "-- name: <name>".
-- Times are seconds since the Unix epoch. {queues} is a list of :q0, :q1, … placeholders and
-- {limit} a literal; both are filled in per call.

-- name: job_insert
-- A key with a live tombstone (its job was pruned) is not inserted: it still names that job.
INSERT INTO jobledger_jobs (queue, key, task, payload, priority, run_at, max_attempts,
                            attempt_limit, lease_seconds, created_at, updated_at, correlation_id,
                            group_name)
SELECT :queue, :key, :task, :payload, :priority, :run_at, :max_attempts, :max_attempts,
       :lease_seconds, :now, :now, :correlation_id, :group
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
    WHERE state = 'pending' AND group_name IS NULL AND queue IN ({queues}) AND run_at <= :now
    ORDER BY priority DESC, run_at, id
    LIMIT {limit}
)
RETURNING id, queue, key, task, payload, attempts, lease_token, lease_until, lease_seconds,
          run_at, priority, correlation_id, attempt_limit, group_name

-- name: attempt_open
INSERT INTO jobledger_attempts (job_id, attempt, lease_token, worker, started_at)
VALUES (?, ?, ?, ?, ?)

-- name: job_heartbeat
UPDATE jobledger_jobs
SET lease_until = :now + COALESCE(:lease_seconds, lease_seconds), updated_at = :now
WHERE id = :id AND lease_token = :token AND state = 'leased'
RETURNING lease_until

-- name: job_complete
-- The batch completion: leases whose tokens job_lease_tokens just read in the same write
-- transaction ({ids}: a list of ? placeholders).
UPDATE jobledger_jobs
SET state = 'done', lease_until = NULL, finished_at = ?, updated_at = ?
WHERE state = 'leased' AND id IN ({ids})

-- name: attempt_done
UPDATE jobledger_attempts SET finished_at = ?, outcome = 'done'
WHERE job_id = ? AND attempt = ? AND outcome IS NULL

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
RETURNING state, group_name, queue

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

-- Scheduling (003). A leader lease is valid while lease_until > now; every write a leader makes
-- is fenced by leader_fence in the same transaction.

-- name: leader_acquire
INSERT INTO jobledger_leaders (name, holder, token, term, lease_until, acquired_at, renewed_at)
VALUES (:name, :holder, lower(hex(randomblob(16))), 1, :now + :ttl, :now, :now)
ON CONFLICT (name) DO UPDATE
SET holder = excluded.holder, token = excluded.token, term = jobledger_leaders.term + 1,
    lease_until = excluded.lease_until, acquired_at = excluded.acquired_at,
    renewed_at = excluded.renewed_at
WHERE jobledger_leaders.lease_until <= excluded.acquired_at
RETURNING name, holder, token, term, lease_until, acquired_at, renewed_at

-- name: leader_renew
UPDATE jobledger_leaders SET lease_until = :now + :ttl, renewed_at = :now
WHERE name = :name AND token = :token AND lease_until > :now
RETURNING name, holder, token, term, lease_until, acquired_at, renewed_at

-- name: leader_release
UPDATE jobledger_leaders SET lease_until = :now, renewed_at = :now
WHERE name = :name AND token = :token AND lease_until > :now

-- name: leader_list
SELECT name, holder, token, term, lease_until, acquired_at, renewed_at
FROM jobledger_leaders ORDER BY name

-- name: leader_fence
SELECT 1 FROM jobledger_leaders WHERE name = :name AND token = :token AND lease_until > :now

-- name: schedule_declare
INSERT INTO jobledger_schedules (name, cohort, cron, time_zone, catch_up, max_catch_up,
                                 grace_seconds, target, key_template, fan_out, cursor_at,
                                 declared_at, created_at)
VALUES (:name, :cohort, :cron, :time_zone, :catch_up, :max_catch_up, :grace_seconds, :target,
        :key_template, :fan_out, :now, :now, :now)
ON CONFLICT (name) DO UPDATE
SET cohort = excluded.cohort, cron = excluded.cron, time_zone = excluded.time_zone,
    catch_up = excluded.catch_up, max_catch_up = excluded.max_catch_up,
    grace_seconds = excluded.grace_seconds, target = excluded.target,
    key_template = excluded.key_template, fan_out = excluded.fan_out,
    declared_at = excluded.declared_at

-- name: schedule_list
SELECT name, cohort, cron, time_zone, catch_up, max_catch_up, grace_seconds, target,
       key_template, fan_out, cursor_at, skipped_ticks, paused, pause_changed_at,
       pause_changed_by, pause_note, declared_at, created_at
FROM jobledger_schedules ORDER BY name

-- name: schedule_pause
UPDATE jobledger_schedules
SET paused = :paused, pause_changed_at = :now, pause_changed_by = :actor, pause_note = :note,
    skipped_ticks = skipped_ticks + CASE WHEN :cursor > cursor_at THEN :skipped ELSE 0 END,
    cursor_at = max(cursor_at, COALESCE(:cursor, cursor_at))
WHERE name = :name

-- name: schedule_advance
UPDATE jobledger_schedules SET cursor_at = :cursor, skipped_ticks = skipped_ticks + :skipped
WHERE name = :name AND cursor_at < :cursor

-- name: schedule_tick_start
INSERT INTO jobledger_ticks (schedule, tick_time, state, leader, term, runs, started_at)
VALUES (:schedule, :tick_time, 'running', :leader, :term, 1, :now)
ON CONFLICT (schedule, tick_time) DO UPDATE
SET runs = jobledger_ticks.runs + 1, leader = excluded.leader, term = excluded.term, error = NULL
WHERE jobledger_ticks.state = 'running'
RETURNING schedule, tick_time, state, leader, term, runs, jobs_created, jobs_existing, conflicts,
          started_at, finished_at, error

-- name: schedule_tick_get
SELECT schedule, tick_time, state, leader, term, runs, jobs_created, jobs_existing, conflicts,
       started_at, finished_at, error
FROM jobledger_ticks WHERE schedule = :schedule AND tick_time = :tick_time

-- name: schedule_tick_progress
UPDATE jobledger_ticks
SET jobs_created = jobs_created + :created, jobs_existing = jobs_existing + :existing,
    conflicts = conflicts + :conflicts
WHERE schedule = :schedule AND tick_time = :tick_time

-- name: schedule_tick_finish
UPDATE jobledger_ticks SET state = 'done', finished_at = :now, error = NULL
WHERE schedule = :schedule AND tick_time = :tick_time AND state = 'running'
RETURNING schedule, tick_time, state, leader, term, runs, jobs_created, jobs_existing, conflicts,
          started_at, finished_at, error

-- name: schedule_tick_error
UPDATE jobledger_ticks SET error = :error
WHERE schedule = :schedule AND tick_time = :tick_time AND state = 'running'

-- name: schedule_tick_prune
-- Finished ticks older than the cut-off and behind their schedule's cursor: no scheduler looks
-- at them again (only the tick history does).
DELETE FROM jobledger_ticks WHERE (schedule, tick_time) IN (
    SELECT t.schedule, t.tick_time FROM jobledger_schedules AS s
    JOIN jobledger_ticks AS t ON t.schedule = s.name AND t.tick_time < s.cursor_at
                             AND t.tick_time < :before
    WHERE t.state = 'done'
    LIMIT {limit}
)

-- name: schedule_tick_list
-- {where} is built from fixed clauses; {limit} is a literal.
SELECT schedule, tick_time, state, leader, term, runs, jobs_created, jobs_existing, conflicts,
       started_at, finished_at, error
FROM jobledger_ticks WHERE {where} ORDER BY tick_time DESC, schedule LIMIT {limit}
-- name: tombstone_live
SELECT job_id, task, payload_digest FROM jobledger_tombstones
WHERE queue = :queue AND key = :key AND expires_at > :now

-- name: job_prune_window
-- The next {limit} jobs by id, oldest first: prune walks the primary key, so no index on the
-- jobs table is needed for it.
SELECT id, created_at FROM jobledger_jobs WHERE id > :after ORDER BY id LIMIT {limit}

-- name: job_prune_pick
-- Of one window, the jobs prune takes: in the given states ({states} is a literal list of state
-- names), finished before the cut-off and
-- older than the retention of their queue, if it is a declared queue.
SELECT id, queue, key, task, payload, state, finished_at FROM jobledger_jobs AS j
WHERE id > :after AND id <= :last AND state IN ({states}) AND finished_at < :before
  AND (:queue IS NULL OR queue = :queue)
  AND NOT EXISTS (
      SELECT 1 FROM jobledger_queues q
      WHERE q.name = j.queue AND j.finished_at >= :now - q.retention_seconds
  )
ORDER BY id

-- name: job_delete
DELETE FROM jobledger_jobs WHERE id = ?

-- name: attempt_delete
DELETE FROM jobledger_attempts WHERE job_id = ?

-- name: event_delete
DELETE FROM jobledger_events WHERE job_id = ?

-- name: effect_delete
DELETE FROM jobledger_effects WHERE queue = ? AND key = ?

-- name: publish_request_delete
DELETE FROM jobledger_publish_requests WHERE job_id = ?

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

-- The HTTP API (migration 004) -------------------------------------------------------------------

-- name: queue_exists
SELECT 1 FROM jobledger_queues WHERE name = :name

-- name: queue_put
INSERT INTO jobledger_queues (name, task, max_attempts, lease_seconds, backoff_base, backoff_cap,
                              retention_seconds, require_key, created_at, updated_at)
VALUES (:name, :task, :max_attempts, :lease_seconds, :backoff_base, :backoff_cap,
        :retention_seconds, :require_key, :now, :now)
ON CONFLICT (name) DO UPDATE SET
    task = excluded.task, max_attempts = excluded.max_attempts,
    lease_seconds = excluded.lease_seconds, backoff_base = excluded.backoff_base,
    backoff_cap = excluded.backoff_cap, retention_seconds = excluded.retention_seconds,
    require_key = excluded.require_key, updated_at = excluded.updated_at

-- name: queue_select
SELECT name, task, max_attempts, lease_seconds, backoff_base, backoff_cap, retention_seconds,
       require_key, created_at, updated_at
FROM jobledger_queues

-- name: apikey_insert
INSERT INTO jobledger_api_keys (id, digest, name, scopes, rate_per_second, burst, created_at)
VALUES (:id, :digest, :name, :scopes, :rate_per_second, :burst, :now)

-- name: apikey_select
SELECT id, name, scopes, rate_per_second, burst, created_at, revoked_at FROM jobledger_api_keys

-- name: apikey_revoke
UPDATE jobledger_api_keys SET revoked_at = :now WHERE id = :id AND revoked_at IS NULL

-- name: ratelimit_take
-- GCRA: a request of `cost` is allowed when the bucket's theoretical arrival time, advanced by
-- cost * interval, stays within burst * interval of now. Refused requests change nothing.
INSERT INTO jobledger_rate_limits (bucket, tat) VALUES (:bucket, :now + :cost * :interval)
ON CONFLICT (bucket) DO UPDATE
SET tat = max(jobledger_rate_limits.tat, :now) + :cost * :interval
WHERE max(jobledger_rate_limits.tat, :now) + :cost * :interval - :now <= :burst * :interval
RETURNING tat

-- name: ratelimit_get
SELECT tat FROM jobledger_rate_limits WHERE bucket = :bucket

-- name: publish_existing
SELECT j.id, j.payload, p.fingerprint
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

-- Outbox (006). Triggers write the records (see 006_outbox.sql); these queries route queues,
-- hand due records to a relay, mark them published, and claim a job by its key for a consumer.

-- name: route_add
INSERT INTO jobledger_routes (queue, routed_at, routed_by, note)
VALUES (:queue, :now, :actor, :note)
ON CONFLICT (queue) DO NOTHING

-- name: route_backfill
-- Pending jobs of a queue just routed: they were enqueued before the route existed.
INSERT INTO jobledger_outbox (job_id, queue, key, reason, available_at, created_at)
SELECT id, queue, key, 'route', run_at, :now FROM (
    SELECT id, queue, key, run_at FROM jobledger_jobs
    WHERE queue = :queue AND state = 'pending' AND group_name IS NULL
    UNION ALL
    SELECT id, queue, key, run_at FROM jobledger_jobs
    WHERE queue = :queue AND state = 'pending' AND group_name IS NOT NULL
)
ORDER BY run_at, id

-- name: route_remove
DELETE FROM jobledger_routes WHERE queue = :queue

-- name: route_discard
DELETE FROM jobledger_outbox
WHERE queue = :queue AND published_at IS NULL AND superseded_at IS NULL

-- name: route_list
SELECT queue, routed_at, routed_by, note FROM jobledger_routes ORDER BY queue

-- name: outbox_due
-- {queues} is "1 = 1" or "queue IN (:q0, …)"; {limit} is a literal.
SELECT id, job_id, queue, key, reason, available_at, created_at, published_at, superseded_at
FROM jobledger_outbox
WHERE published_at IS NULL AND superseded_at IS NULL AND available_at <= :now AND {queues}
ORDER BY available_at, id
LIMIT {limit}

-- name: outbox_mark
UPDATE jobledger_outbox SET published_at = :now WHERE id = :id AND published_at IS NULL

-- name: outbox_list
-- {where} is built from fixed clauses; {limit} is a literal.
SELECT id, job_id, queue, key, reason, available_at, created_at, published_at, superseded_at
FROM jobledger_outbox WHERE {where} ORDER BY id DESC LIMIT {limit}

-- name: outbox_stats
SELECT queue,
       sum(published_at IS NULL AND superseded_at IS NULL),
       sum(published_at IS NULL AND superseded_at IS NULL AND available_at <= :now),
       min(CASE WHEN published_at IS NULL AND superseded_at IS NULL AND available_at <= :now
                THEN available_at END),
       max(published_at)
FROM jobledger_outbox GROUP BY queue

-- name: outbox_prune
DELETE FROM jobledger_outbox
WHERE id IN (SELECT id FROM jobledger_outbox
             WHERE COALESCE(published_at, superseded_at) < :before LIMIT {limit})

-- name: outbox_republish
-- Pending jobs of a routed queue, due for longer than the caller's threshold, that have no
-- record waiting to be published: the broker lost their message (or it was purged). One new
-- record each.
INSERT INTO jobledger_outbox (job_id, queue, key, reason, available_at, created_at)
SELECT j.id, j.queue, j.key, 'republish', :now, :now FROM (
    SELECT id, queue, key, run_at FROM jobledger_jobs
    WHERE state = 'pending' AND group_name IS NULL AND queue = :queue AND run_at <= :due_before
    UNION ALL
    SELECT id, queue, key, run_at FROM jobledger_jobs
    WHERE state = 'pending' AND group_name IS NOT NULL AND queue = :queue
      AND run_at <= :due_before
) AS j
WHERE j.queue IN (SELECT queue FROM jobledger_routes)
  AND NOT EXISTS (SELECT 1 FROM jobledger_outbox AS o
                  WHERE o.job_id = j.id AND o.published_at IS NULL AND o.superseded_at IS NULL)
ORDER BY j.run_at, j.id
LIMIT {limit}

-- name: job_claim_keys
-- One job; the backend runs it for each wanted key inside one BEGIN IMMEDIATE transaction.
UPDATE jobledger_jobs
SET state = 'leased',
    attempts = attempts + 1,
    lease_token = lower(hex(randomblob(16))),
    lease_until = :now + COALESCE(:lease_seconds, lease_seconds),
    leased_by = :worker,
    updated_at = :now
WHERE queue = :queue AND key = :key AND state = 'pending' AND run_at <= :now
  AND NOT EXISTS (SELECT 1 FROM jobledger_groups AS g
                  WHERE jobledger_jobs.group_name IS NOT NULL AND g.queue = jobledger_jobs.queue
                    AND g.name = jobledger_jobs.group_name AND g.paused_until > :now)
RETURNING id, queue, key, task, payload, attempts, lease_token, lease_until, lease_seconds,
          run_at, priority, correlation_id, attempt_limit, group_name
-- Observability (007).

-- name: queue_depths
-- Live jobs per queue, each arm read through its partial index, never the whole table: pending
-- (how many are due, and the oldest due run time), leased (how many leases have expired), dead.
-- INDEXED BY: left alone, SQLite reads the leased arm through the (queue, key) index, which
-- holds every job, to save a sort.
SELECT queue, 'pending', count(*), sum(run_at <= :now),
       min(CASE WHEN run_at <= :now THEN run_at END)
FROM (
    SELECT queue, run_at FROM jobledger_jobs INDEXED BY jobledger_jobs_due
    WHERE state = 'pending' AND group_name IS NULL
    UNION ALL
    SELECT queue, run_at FROM jobledger_jobs INDEXED BY jobledger_jobs_group_due
    WHERE state = 'pending' AND group_name IS NOT NULL
)
GROUP BY queue
UNION ALL
SELECT queue, 'leased', count(*), sum(lease_until <= :now), NULL
FROM jobledger_jobs INDEXED BY jobledger_jobs_leased WHERE state = 'leased' GROUP BY queue
UNION ALL
SELECT queue, 'dead', count(*), 0, NULL
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

-- name: session_insert
INSERT INTO jobledger_sessions (digest, api_key_id, created_at, expires_at)
VALUES (:digest, :api_key_id, :now, :now + :ttl)

-- name: session_get
SELECT k.id, k.name, k.scopes, k.rate_per_second, k.burst, k.created_at, k.revoked_at
FROM jobledger_sessions s JOIN jobledger_api_keys k ON k.id = s.api_key_id
WHERE s.digest = :digest AND s.expires_at > :now

-- name: session_delete
DELETE FROM jobledger_sessions WHERE digest = :digest

-- name: session_prune
DELETE FROM jobledger_sessions WHERE expires_at <= :now

-- Push subscriptions (migration 005) -------------------------------------------------------------

-- name: subscription_insert
INSERT INTO jobledger_subscriptions (id, queue, url, secret, timeout_seconds, concurrency,
                                     rate_per_second, burst, state, created_at, updated_at)
VALUES (:id, :queue, :url, :secret, :timeout_seconds, :concurrency, :rate_per_second, :burst,
        'active', :now, :now)
ON CONFLICT (queue) DO NOTHING
RETURNING id

-- name: subscription_select
SELECT id, queue, url, secret, timeout_seconds, concurrency, rate_per_second, burst, state,
       state_reason, state_actor, state_changed_at, previous_secret, previous_until, created_at,
       updated_at, last_attempt_at, last_success_at, last_failure_at, last_status, last_error,
       consecutive_failures, delivered, failed
FROM jobledger_subscriptions

-- name: subscription_state
UPDATE jobledger_subscriptions
SET state = :state, state_reason = :reason, state_actor = :actor, state_changed_at = :now,
    updated_at = :now
WHERE id = :id

-- name: subscription_delete
DELETE FROM jobledger_subscriptions WHERE id = :id

-- name: subscription_rotate
-- The current secret becomes the previous one, signing beside the new one until the overlap
-- ends; with no overlap it stops at once.
UPDATE jobledger_subscriptions
SET previous_secret = CASE WHEN :overlap > 0 THEN secret END,
    previous_until = CASE WHEN :overlap > 0 THEN :now + :overlap END,
    secret = :secret,
    updated_at = :now
WHERE id = :id

-- name: subscription_record
-- A delivery's outcome on the subscription's health. The last error stays after a success (it
-- is what went wrong last); consecutive_failures tells whether it still does.
UPDATE jobledger_subscriptions
SET last_attempt_at = :now,
    last_success_at = CASE WHEN :ok THEN :now ELSE last_success_at END,
    last_failure_at = CASE WHEN :ok THEN last_failure_at ELSE :now END,
    last_status = :status,
    last_error = CASE WHEN :ok THEN last_error ELSE :error END,
    consecutive_failures = CASE WHEN :ok THEN 0 ELSE consecutive_failures + 1 END,
    delivered = delivered + CASE WHEN :ok THEN 1 ELSE 0 END,
    failed = failed + CASE WHEN :ok THEN 0 ELSE 1 END
WHERE id = :id
-- name: job_lease_tokens
-- The current tokens of leased jobs among {ids} (a list of ? placeholders), read inside the
-- write transaction that then completes them: nothing can change in between.
SELECT id, lease_token FROM jobledger_jobs WHERE state = 'leased' AND id IN ({ids})

-- Groups (008).

-- name: group_waiting
-- Whether any of these queues has pending jobs with a group (one probe of the grouped index).
SELECT 1 FROM jobledger_jobs
WHERE state = 'pending' AND group_name IS NOT NULL AND queue IN ({queues}) LIMIT 1

-- name: group_candidates
-- The groups of a queue with due jobs, not paused, least recently served first (never served
-- first of all). The groups are found by a skip scan of the grouped index (one probe per
-- group, however many jobs each has), never by reading the jobs.
WITH RECURSIVE walk(name) AS (
    SELECT min(group_name) FROM jobledger_jobs
    WHERE state = 'pending' AND group_name IS NOT NULL AND queue = :queue
    UNION ALL
    SELECT (SELECT min(group_name) FROM jobledger_jobs
            WHERE state = 'pending' AND group_name IS NOT NULL AND queue = :queue
              AND group_name > walk.name)
    FROM walk WHERE walk.name IS NOT NULL
)
SELECT walk.name, g.served_at, g.tokens, g.refilled_at
FROM walk LEFT JOIN jobledger_groups AS g ON g.queue = :queue AND g.name = walk.name
WHERE walk.name IS NOT NULL
  AND (g.paused_until IS NULL OR g.paused_until <= :now)
  AND (SELECT min(run_at) FROM jobledger_jobs AS j
       WHERE j.state = 'pending' AND j.group_name IS NOT NULL AND j.queue = :queue
         AND j.group_name = walk.name) <= :now
ORDER BY g.served_at IS NOT NULL, g.served_at, walk.name

-- name: group_leased
-- A group's leased jobs, counted up to its limit (no further: the claim needs no more).
SELECT count(*) FROM (
    SELECT 1 FROM jobledger_jobs
    WHERE state = 'leased' AND group_name IS NOT NULL AND queue = :queue AND group_name = :name
    LIMIT :cap
)

-- name: group_due_jobs
-- A group's next due jobs, in claim order. INDEXED BY: left alone, SQLite may read every due
-- job of the group through the (queue, group_name, run_at) index and sort them.
SELECT id FROM jobledger_jobs INDEXED BY jobledger_jobs_group_due
WHERE state = 'pending' AND group_name IS NOT NULL AND queue = :queue AND group_name = :name
  AND run_at <= :now
ORDER BY priority DESC, run_at, id
LIMIT :n

-- name: job_lease_ids
UPDATE jobledger_jobs
SET state = 'leased',
    attempts = attempts + 1,
    lease_token = lower(hex(randomblob(16))),
    lease_until = :now + COALESCE(:lease_seconds, lease_seconds),
    leased_by = :worker,
    updated_at = :now
WHERE id IN ({ids}) AND state = 'pending'
RETURNING id, queue, key, task, payload, attempts, lease_token, lease_until, lease_seconds,
          run_at, priority, correlation_id, attempt_limit, group_name

-- name: group_served
-- A claim took some of the group's jobs: its bucket as left, and its turn in the round.
INSERT INTO jobledger_groups (queue, name, tokens, refilled_at, served_at)
VALUES (:queue, :name, :tokens, :now, :now)
ON CONFLICT (queue, name) DO UPDATE
SET tokens = excluded.tokens, refilled_at = excluded.refilled_at, served_at = excluded.served_at

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

-- name: group_list
-- Groups with pending or leased jobs (two skip scans) or a pause in force, with their counts.
WITH RECURSIVE pending(name) AS (
    SELECT min(group_name) FROM jobledger_jobs
    WHERE state = 'pending' AND group_name IS NOT NULL AND queue = :queue
    UNION ALL
    SELECT (SELECT min(group_name) FROM jobledger_jobs
            WHERE state = 'pending' AND group_name IS NOT NULL AND queue = :queue
              AND group_name > pending.name)
    FROM pending WHERE pending.name IS NOT NULL
), leased(name) AS (
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
       g.paused_until, g.paused_reason, g.served_at, g.tokens, g.refilled_at
FROM names AS n LEFT JOIN jobledger_groups AS g ON g.queue = :queue AND g.name = n.name
ORDER BY n.name

-- name: group_paused_until
SELECT paused_until FROM jobledger_groups
WHERE queue = :queue AND name = :name AND paused_until > :now
