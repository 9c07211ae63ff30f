-- Named queries for PostgreSQL. Each block starts with "-- name: <name>".
-- {jobs}, {attempts}, {events}, {effects} are the schema-qualified tables; {now} is the caller's
-- explicit time or the database clock; {limit} is written in as a literal so that the cached
-- plan of the claim always walks the index (a parameter LIMIT can make a generic plan scan).

-- name: job_insert
-- {new_columns}, {new_arrays} and {new_select} are the columns of a new job as the backend lists
-- them (postgres.py, NEW_JOB_COLUMNS): one list for every insert of a job.
WITH new AS (
    SELECT * FROM unnest({new_arrays}) AS n({new_columns})
), inserted AS (
    INSERT INTO {jobs} ({new_columns}, attempt_limit, created_at, updated_at)
    SELECT {new_select}, max_attempts, {now}, {now}
    FROM new
    WHERE NOT EXISTS (
        SELECT 1 FROM {tombstones} AS t
        WHERE t.queue = new.queue AND t.key = new.key AND t.expires_at > {now}
    )
    ON CONFLICT (queue, key) DO NOTHING
    RETURNING id, queue, key
), woken AS (
    SELECT pg_notify(%(channel)s, queue) FROM (SELECT DISTINCT queue FROM inserted) AS q
)
SELECT id, queue, key, (SELECT count(*) FROM woken) FROM inserted

-- name: job_existing
SELECT id, queue, key, task, payload FROM {jobs}
WHERE (queue, key) IN (SELECT * FROM unnest(%(queue)s::text[], %(key)s::text[]))

-- name: job_claim
-- One index scan per queue (a "queue = ANY(…)" filter cannot use the index's order), each
-- skipping rows other workers hold; then the best {limit} across the queues. Rows locked here
-- but not taken are unlocked again when the statement's transaction commits.
WITH picked AS (
    SELECT c.id FROM unnest(%(queues)s::text[]) AS q(name)
    CROSS JOIN LATERAL (
        SELECT id, priority, run_at FROM {jobs}
        WHERE state = 'pending' AND group_name IS NULL AND queue = q.name AND run_at <= {now}
        ORDER BY priority DESC, run_at, id
        LIMIT {limit}
        FOR UPDATE SKIP LOCKED
    ) AS c
    ORDER BY c.priority DESC, c.run_at, c.id
    LIMIT {limit}
), claimed AS (
    UPDATE {jobs} AS j
    SET state = 'leased',
        attempts = j.attempts + 1,
        lease_token = gen_random_uuid(),
        lease_until = {now} + make_interval(secs => COALESCE(%(lease_seconds)s, j.lease_seconds)),
        leased_by = %(worker)s,
        updated_at = {now}
    -- "= ANY(ARRAY(…))": the rows are fetched by primary key (a join with the CTE is planned
    -- for an unknown number of rows: a hash join over every pending job). No "state =
    -- 'pending'" here: "picked" locked these rows after checking it, and a condition on state
    -- would let the planner read the whole index of pending jobs for it.
    WHERE j.id = ANY(ARRAY(SELECT id FROM picked))
    RETURNING j.id, j.queue, j.key, j.task, j.payload, j.attempts, j.lease_token, j.lease_until,
              j.lease_seconds, j.run_at, j.priority, j.correlation_id, j.attempt_limit,
              j.group_name
), opened AS (
    INSERT INTO {attempts} (job_id, attempt, lease_token, worker, started_at)
    SELECT id, attempts, lease_token, %(worker)s, {now} FROM claimed
)
-- Payload and token as text: the worker parses the JSON itself, and a token stays a string.
SELECT id, queue, key, task, payload::text, attempts, lease_token::text, lease_until,
       lease_seconds, run_at, priority, correlation_id, attempt_limit, group_name
FROM claimed

-- name: job_heartbeat
UPDATE {jobs} AS j
SET lease_until = {now} + make_interval(secs => COALESCE(%(lease_seconds)s, j.lease_seconds)),
    updated_at = {now}
FROM unnest(%(ids)s::bigint[], %(tokens)s::uuid[]) AS l(id, token)
WHERE j.id = ANY(%(ids)s::bigint[]) AND j.id = l.id AND j.lease_token = l.token
  AND j.state = 'leased'
RETURNING j.id, j.lease_until

-- name: job_complete
WITH done AS (
    UPDATE {jobs} AS j
    SET state = 'done', lease_until = NULL, finished_at = {now}, updated_at = {now}
    FROM unnest(%(ids)s::bigint[], %(tokens)s::uuid[]) AS l(id, token)
    -- "j.id = ANY(…)" lets the planner fetch the batch by primary key instead of joining
    -- with every leased job.
    WHERE j.id = ANY(%(ids)s::bigint[]) AND j.id = l.id AND j.lease_token = l.token
      AND j.state = 'leased'
    RETURNING j.id, j.attempts
), closed AS (
    UPDATE {attempts} AS a SET finished_at = {now}, outcome = 'done'
    FROM done WHERE a.job_id = done.id AND a.attempt = done.attempts
)
SELECT id FROM done

-- name: job_fail
WITH f AS (
    SELECT * FROM unnest(
        %(ids)s::bigint[], %(tokens)s::uuid[], %(retry)s::bool[], %(run_at)s::timestamptz[],
        %(error_class)s::text[], %(message)s::text[], %(traceback)s::text[]
    ) AS f(id, token, retry, run_at, error_class, message, traceback)
), moved AS (
    UPDATE {jobs} AS j
    SET state = CASE WHEN f.retry AND j.attempts < j.attempt_limit THEN 'pending' ELSE 'dead' END,
        run_at = CASE WHEN f.retry AND j.attempts < j.attempt_limit
                      THEN COALESCE(f.run_at, {now}) ELSE j.run_at END,
        finished_at = CASE WHEN f.retry AND j.attempts < j.attempt_limit THEN NULL ELSE {now} END,
        lease_until = NULL,
        updated_at = {now},
        last_error = f.message,
        last_error_class = f.error_class,
        last_traceback = f.traceback
    FROM f
    WHERE j.id = ANY(%(ids)s::bigint[]) AND j.id = f.id AND j.lease_token = f.token
      AND j.state = 'leased'
    RETURNING j.id, j.state, j.attempts, j.group_name, j.queue
), closed AS (
    UPDATE {attempts} AS a
    SET finished_at = {now},
        outcome = CASE moved.state WHEN 'dead' THEN 'dead' ELSE 'retry' END,
        error_class = f.error_class, error_message = f.message, traceback = f.traceback
    FROM moved JOIN f ON f.id = moved.id
    WHERE a.job_id = moved.id AND a.attempt = moved.attempts
)
SELECT id, state, group_name, queue FROM moved

-- name: job_release
WITH released AS (
    UPDATE {jobs} AS j
    SET state = 'pending', lease_until = NULL, attempt_limit = j.attempt_limit + 1,
        updated_at = {now}
    FROM unnest(%(ids)s::bigint[], %(tokens)s::uuid[]) AS l(id, token)
    WHERE j.id = ANY(%(ids)s::bigint[]) AND j.id = l.id AND j.lease_token = l.token
      AND j.state = 'leased'
    RETURNING j.id, j.attempts
), closed AS (
    UPDATE {attempts} AS a SET finished_at = {now}, outcome = 'released'
    FROM released WHERE a.job_id = released.id AND a.attempt = released.attempts
)
SELECT id FROM released

-- name: job_rescue
WITH expired AS (
    SELECT id FROM {jobs}
    WHERE state = 'leased' AND lease_until < {now}
    ORDER BY lease_until
    LIMIT {limit}
    FOR UPDATE SKIP LOCKED
), moved AS (
    UPDATE {jobs} AS j
    SET state = CASE WHEN j.attempts < j.attempt_limit THEN 'pending' ELSE 'dead' END,
        run_at = CASE WHEN j.attempts < j.attempt_limit THEN {now} ELSE j.run_at END,
        finished_at = CASE WHEN j.attempts < j.attempt_limit THEN NULL ELSE {now} END,
        last_error = 'lease expired at ' || to_char(j.lease_until AT TIME ZONE 'UTC',
                     'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"') || ' (held by ' || COALESCE(j.leased_by, '?') || ')',
        last_error_class = 'LeaseExpired',
        last_traceback = NULL,
        lease_until = NULL,
        updated_at = {now}
    WHERE j.id = ANY(ARRAY(SELECT id FROM expired)) AND j.state = 'leased'
      AND j.lease_until < {now}
    RETURNING j.id, j.queue, j.key, j.state, j.attempts, j.last_error
), closed AS (
    UPDATE {attempts} AS a
    SET finished_at = {now}, outcome = 'lease_expired', error_class = 'LeaseExpired',
        error_message = moved.last_error
    FROM moved WHERE a.job_id = moved.id AND a.attempt = moved.attempts
)
SELECT id, queue, key, state, attempts FROM moved

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

-- name: effect_record
WITH holder AS (
    SELECT id, attempts FROM {jobs}
    WHERE id = %(job_id)s AND lease_token = %(token)s::uuid AND state = 'leased'
), recorded AS (
    INSERT INTO {effects} (queue, key, effect, job_id, attempt, recorded_at, detail)
    SELECT %(queue)s, %(key)s, %(effect)s, id, attempts, {now}, %(detail)s::jsonb FROM holder
    ON CONFLICT (queue, key, effect) DO NOTHING
    RETURNING 1
)
SELECT (SELECT count(*) FROM holder), (SELECT count(*) FROM recorded)

-- name: effect_get
SELECT queue, key, effect, job_id, attempt, recorded_at, detail FROM {effects}
WHERE queue = %(queue)s AND key = %(key)s AND effect = %(effect)s

-- name: effect_list
SELECT queue, key, effect, job_id, attempt, recorded_at, detail FROM {effects}
WHERE queue = %(queue)s AND key = %(key)s ORDER BY recorded_at, effect

-- name: attempt_list
SELECT job_id, attempt, lease_token, worker, started_at, finished_at, outcome, error_class,
       error_message, traceback
FROM {attempts} WHERE job_id = %(job_id)s ORDER BY attempt

-- name: event_list
SELECT job_id, at, kind, actor, note, detail FROM {events} WHERE job_id = %(job_id)s ORDER BY id

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

-- Scheduling (003). {leaders}, {schedules}, {ticks} are the schema-qualified tables. A leader
-- lease is valid while lease_until > now; every write a leader makes is fenced by leader_fence
-- in the same transaction, which also holds the lease row so no takeover commits meanwhile.

-- name: leader_acquire
INSERT INTO {leaders} AS l (name, holder, token, term, lease_until, acquired_at, renewed_at)
VALUES (%(name)s, %(holder)s, gen_random_uuid(), 1, {now} + make_interval(secs => %(ttl)s),
        {now}, {now})
ON CONFLICT (name) DO UPDATE
SET holder = excluded.holder, token = excluded.token, term = l.term + 1,
    lease_until = excluded.lease_until, acquired_at = excluded.acquired_at,
    renewed_at = excluded.renewed_at
WHERE l.lease_until <= excluded.acquired_at
RETURNING name, holder, token, term, lease_until, acquired_at, renewed_at, {now}

-- name: leader_renew
UPDATE {leaders}
SET lease_until = {now} + make_interval(secs => %(ttl)s), renewed_at = {now}
WHERE name = %(name)s AND token = %(token)s::uuid AND lease_until > {now}
RETURNING name, holder, token, term, lease_until, acquired_at, renewed_at, {now}

-- name: leader_release
UPDATE {leaders} SET lease_until = {now}, renewed_at = {now}
WHERE name = %(name)s AND token = %(token)s::uuid AND lease_until > {now}
RETURNING name

-- name: leader_list
SELECT name, holder, token, term, lease_until, acquired_at, renewed_at, {now}
FROM {leaders} ORDER BY name

-- name: leader_fence
SELECT 1 FROM {leaders}
WHERE name = %(name)s AND token = %(token)s::uuid AND lease_until > {now}
FOR SHARE

-- name: schedule_declare
INSERT INTO {schedules} (name, cohort, cron, time_zone, catch_up, max_catch_up, grace_seconds,
                         target, key_template, fan_out, cursor_at, declared_at, created_at)
SELECT d.*, {now}, {now}, {now} FROM unnest(
    %(name)s::text[], %(cohort)s::text[], %(cron)s::text[], %(time_zone)s::text[],
    %(catch_up)s::text[], %(max_catch_up)s::int[], %(grace_seconds)s::float8[],
    %(target)s::text[], %(key_template)s::text[], %(fan_out)s::bool[]
) AS d
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
FROM {schedules} ORDER BY name

-- name: schedule_pause
UPDATE {schedules}
SET paused = %(paused)s, pause_changed_at = {now}, pause_changed_by = %(actor)s,
    pause_note = %(note)s,
    skipped_ticks = skipped_ticks
        + CASE WHEN %(cursor)s::timestamptz > cursor_at THEN %(skipped)s ELSE 0 END,
    cursor_at = GREATEST(cursor_at, COALESCE(%(cursor)s::timestamptz, cursor_at))
WHERE name = %(name)s
RETURNING name

-- name: schedule_advance
UPDATE {schedules} SET cursor_at = %(cursor)s, skipped_ticks = skipped_ticks + %(skipped)s
WHERE name = %(name)s AND cursor_at < %(cursor)s

-- name: schedule_tick_start
INSERT INTO {ticks} AS t (schedule, tick_time, state, leader, term, runs, started_at)
VALUES (%(schedule)s, %(tick_time)s, 'running', %(leader)s, %(term)s, 1, {now})
ON CONFLICT (schedule, tick_time) DO UPDATE
SET runs = t.runs + 1, leader = excluded.leader, term = excluded.term, error = NULL
WHERE t.state = 'running'
RETURNING schedule, tick_time, state, leader, term, runs, jobs_created, jobs_existing, conflicts,
          started_at, finished_at, error

-- name: schedule_tick_get
SELECT schedule, tick_time, state, leader, term, runs, jobs_created, jobs_existing, conflicts,
       started_at, finished_at, error
FROM {ticks} WHERE schedule = %(schedule)s AND tick_time = %(tick_time)s

-- name: schedule_tick_progress
UPDATE {ticks}
SET jobs_created = jobs_created + %(created)s, jobs_existing = jobs_existing + %(existing)s,
    conflicts = conflicts + %(conflicts)s
WHERE schedule = %(schedule)s AND tick_time = %(tick_time)s

-- name: schedule_tick_finish
UPDATE {ticks} SET state = 'done', finished_at = {now}, error = NULL
WHERE schedule = %(schedule)s AND tick_time = %(tick_time)s AND state = 'running'
RETURNING schedule, tick_time, state, leader, term, runs, jobs_created, jobs_existing, conflicts,
          started_at, finished_at, error

-- name: schedule_tick_error
UPDATE {ticks} SET error = %(error)s
WHERE schedule = %(schedule)s AND tick_time = %(tick_time)s AND state = 'running'

-- name: schedule_tick_prune
-- Finished ticks older than the cut-off and behind their schedule's cursor: no scheduler looks
-- at them again (only the tick history does). Each schedule's are found through the primary
-- key (schedule, tick_time).
DELETE FROM {ticks} WHERE (schedule, tick_time) IN (
    SELECT t.schedule, t.tick_time FROM {schedules} AS s
    JOIN {ticks} AS t ON t.schedule = s.name AND t.tick_time < s.cursor_at
                     AND t.tick_time < %(before)s
    WHERE t.state = 'done'
    LIMIT {limit}
)
RETURNING 1

-- name: schedule_tick_list
-- {where} is built from fixed clauses; {limit} is a literal.
SELECT schedule, tick_time, state, leader, term, runs, jobs_created, jobs_existing, conflicts,
       started_at, finished_at, error
FROM {ticks} WHERE {where} ORDER BY tick_time DESC, schedule LIMIT {limit}
-- name: tombstone_live
-- Tombstones still blocking these keys. Run after the insert, in a statement of its own: under
-- READ COMMITTED it sees a prune that committed while the insert waited on the key.
SELECT t.queue, t.key, t.job_id, t.task, t.payload_digest FROM {tombstones} AS t
JOIN unnest(%(queue)s::text[], %(key)s::text[]) AS k(queue, key)
  ON t.queue = k.queue AND t.key = k.key
WHERE t.expires_at > {now}

-- name: payload_digest
SELECT p, md5(p::jsonb::text) FROM unnest(%(payloads)s::text[]) AS p

-- name: job_insert_undo
DELETE FROM {jobs} WHERE id = ANY(%(ids)s::bigint[])

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

-- The HTTP API (migration 004) -------------------------------------------------------------------

-- name: queue_put
INSERT INTO {queues} AS q (name, task, max_attempts, lease_seconds, backoff_base, backoff_cap,
                           retention_seconds, require_key, created_at, updated_at)
VALUES (%(name)s, %(task)s, %(max_attempts)s, %(lease_seconds)s, %(backoff_base)s,
        %(backoff_cap)s, %(retention_seconds)s, %(require_key)s, {now}, {now})
ON CONFLICT (name) DO UPDATE SET
    task = excluded.task, max_attempts = excluded.max_attempts,
    lease_seconds = excluded.lease_seconds, backoff_base = excluded.backoff_base,
    backoff_cap = excluded.backoff_cap, retention_seconds = excluded.retention_seconds,
    require_key = excluded.require_key, updated_at = excluded.updated_at
RETURNING name, task, max_attempts, lease_seconds, backoff_base, backoff_cap, retention_seconds,
          require_key, created_at, updated_at, (xmax = 0) AS inserted

-- name: queue_select
SELECT name, task, max_attempts, lease_seconds, backoff_base, backoff_cap, retention_seconds,
       require_key, created_at, updated_at
FROM {queues}

-- name: apikey_insert
INSERT INTO {api_keys} (id, digest, name, scopes, rate_per_second, burst, created_at)
VALUES (%(id)s, %(digest)s, %(name)s, %(scopes)s, %(rate_per_second)s, %(burst)s, {now})

-- name: apikey_select
SELECT id, name, scopes, rate_per_second, burst, created_at, revoked_at FROM {api_keys}

-- name: apikey_revoke
UPDATE {api_keys} SET revoked_at = {now} WHERE id = %(id)s AND revoked_at IS NULL RETURNING id

-- name: ratelimit_take
-- GCRA: a request of `cost` is allowed when the bucket's theoretical arrival time, advanced by
-- cost * interval, stays within burst * interval of now. Refused requests change nothing. The
-- clock is the database's, so that every server process agrees on it.
WITH clock AS (SELECT extract(epoch FROM {now})::float8 AS t)
INSERT INTO {rate_limits} AS r (bucket, tat)
SELECT %(bucket)s, clock.t + %(cost)s * %(interval)s FROM clock
ON CONFLICT (bucket) DO UPDATE
SET tat = GREATEST(r.tat, (SELECT t FROM clock)) + %(cost)s * %(interval)s
WHERE GREATEST(r.tat, (SELECT t FROM clock)) + %(cost)s * %(interval)s
      - (SELECT t FROM clock) <= %(burst)s * %(interval)s
RETURNING r.tat

-- name: ratelimit_get
SELECT tat - extract(epoch FROM {now})::float8 FROM {rate_limits} WHERE bucket = %(bucket)s

-- name: publish_try_locks
-- Each key's "in flight" marker: a transaction-level advisory lock, taken without waiting. A key
-- whose lock another open transaction holds is being published right now by another request.
SELECT k, pg_try_advisory_xact_lock(hashtextextended(%(prefix)s || k, 0))
FROM unnest(%(keys)s::text[]) AS k

-- name: publish_existing
SELECT j.id, j.queue, j.key, j.payload, p.fingerprint
FROM {jobs} j
LEFT JOIN {publish_requests} p ON p.queue = j.queue AND p.key = j.key AND p.job_id = j.id
WHERE (j.queue, j.key) IN (SELECT * FROM unnest(%(queue)s::text[], %(key)s::text[]))

-- name: publish_record
INSERT INTO {publish_requests} (queue, key, job_id, fingerprint, api_key_id, created_at)
SELECT *, {now} FROM unnest(%(queue)s::text[], %(key)s::text[], %(job_id)s::bigint[],
                            %(fingerprint)s::text[], %(api_key_id)s::text[])
ON CONFLICT (queue, key) DO UPDATE SET
    job_id = excluded.job_id, fingerprint = excluded.fingerprint,
    api_key_id = excluded.api_key_id, created_at = excluded.created_at

-- name: publish_job_state
SELECT id, state, run_at FROM {jobs} WHERE id = ANY(%(ids)s::bigint[])

-- Outbox (006). {routes} and {outbox} are the schema-qualified tables. Triggers write the
-- records (see 006_outbox.sql); these queries route queues, hand due records to a relay, mark
-- them published, and claim a job by its key for a consumer.

-- name: route_lock
-- Routing a queue must not race with jobs becoming pending in it: wait for the transactions
-- writing jobs now, and hold new ones back until the route (and its backfill) commit.
LOCK TABLE {jobs} IN SHARE MODE

-- name: route_add
INSERT INTO {routes} (queue, routed_at, routed_by, note)
VALUES (%(queue)s, {now}, %(actor)s, %(note)s)
ON CONFLICT (queue) DO NOTHING
RETURNING queue

-- name: route_backfill
-- Pending jobs of a queue just routed: they were enqueued before the route existed.
INSERT INTO {outbox} (job_id, queue, key, reason, available_at, created_at)
SELECT id, queue, key, 'route', run_at, {now} FROM (
    SELECT id, queue, key, run_at FROM {jobs}
    WHERE queue = %(queue)s AND state = 'pending' AND group_name IS NULL
    UNION ALL
    SELECT id, queue, key, run_at FROM {jobs}
    WHERE queue = %(queue)s AND state = 'pending' AND group_name IS NOT NULL
) AS p
ORDER BY run_at, id

-- name: route_remove
DELETE FROM {routes} WHERE queue = %(queue)s RETURNING queue

-- name: route_discard
DELETE FROM {outbox}
WHERE queue = %(queue)s AND published_at IS NULL AND superseded_at IS NULL

-- name: route_list
SELECT queue, routed_at, routed_by, note FROM {routes} ORDER BY queue

-- name: outbox_due
-- {limit} is a literal. %(queues)s is NULL for every queue.
SELECT id, job_id, queue, key, reason, available_at, created_at, published_at, superseded_at
FROM {outbox}
WHERE published_at IS NULL AND superseded_at IS NULL AND available_at <= {now}
  AND (%(queues)s::text[] IS NULL OR queue = ANY(%(queues)s::text[]))
ORDER BY available_at, id
LIMIT {limit}

-- name: outbox_mark
UPDATE {outbox} SET published_at = {now}
WHERE id = ANY(%(ids)s::bigint[]) AND published_at IS NULL
RETURNING id

-- name: outbox_list
-- {where} is built from fixed clauses; {limit} is a literal.
SELECT id, job_id, queue, key, reason, available_at, created_at, published_at, superseded_at
FROM {outbox} WHERE {where} ORDER BY id DESC LIMIT {limit}

-- name: outbox_stats
SELECT queue,
       count(*) FILTER (WHERE published_at IS NULL AND superseded_at IS NULL),
       count(*) FILTER (WHERE published_at IS NULL AND superseded_at IS NULL
                          AND available_at <= {now}),
       min(available_at) FILTER (WHERE published_at IS NULL AND superseded_at IS NULL
                                   AND available_at <= {now}),
       max(published_at),
       {now}
FROM {outbox} GROUP BY queue

-- name: outbox_prune
DELETE FROM {outbox}
WHERE id IN (SELECT id FROM {outbox}
             WHERE COALESCE(published_at, superseded_at) < %(before)s LIMIT {limit})

-- name: outbox_republish
-- Pending jobs of a routed queue, due for longer than the caller's threshold, that have no
-- record waiting to be published: the broker lost their message (or it was purged). One new
-- record each.
INSERT INTO {outbox} (job_id, queue, key, reason, available_at, created_at)
SELECT j.id, j.queue, j.key, 'republish', {now}, {now} FROM (
    SELECT id, queue, key, run_at FROM {jobs}
    WHERE state = 'pending' AND group_name IS NULL AND queue = %(queue)s
      AND run_at <= %(due_before)s
    UNION ALL
    SELECT id, queue, key, run_at FROM {jobs}
    WHERE state = 'pending' AND group_name IS NOT NULL AND queue = %(queue)s
      AND run_at <= %(due_before)s
) AS j
WHERE j.queue IN (SELECT queue FROM {routes})
  AND NOT EXISTS (SELECT 1 FROM {outbox} AS o
                  WHERE o.job_id = j.id AND o.published_at IS NULL AND o.superseded_at IS NULL)
ORDER BY j.run_at, j.id
LIMIT {limit}

-- name: job_claim_keys
-- The wanted jobs that are pending and due, locked in id order and skipping rows another
-- transaction holds (no waiting, no deadlock between consumers claiming overlapping keys).
WITH picked AS (
    SELECT j.id FROM {jobs} AS j
    JOIN unnest(%(queues)s::text[], %(keys)s::text[]) AS w(queue, key)
      ON j.queue = w.queue AND j.key = w.key
    WHERE j.state = 'pending' AND j.run_at <= {now}
      AND NOT EXISTS (SELECT 1 FROM {groups} AS g
                      WHERE j.group_name IS NOT NULL AND g.queue = j.queue
                        AND g.name = j.group_name AND g.paused_until > {now})
    ORDER BY j.id
    FOR UPDATE OF j SKIP LOCKED
), claimed AS (
    UPDATE {jobs} AS j
    SET state = 'leased',
        attempts = j.attempts + 1,
        lease_token = gen_random_uuid(),
        lease_until = {now} + make_interval(secs => COALESCE(%(lease_seconds)s, j.lease_seconds)),
        leased_by = %(worker)s,
        updated_at = {now}
    FROM (SELECT DISTINCT id FROM picked) AS p
    WHERE j.id = p.id AND j.state = 'pending'
    RETURNING j.id, j.queue, j.key, j.task, j.payload, j.attempts, j.lease_token, j.lease_until,
              j.lease_seconds, j.run_at, j.priority, j.correlation_id, j.attempt_limit,
              j.group_name
), opened AS (
    INSERT INTO {attempts} (job_id, attempt, lease_token, worker, started_at)
    SELECT id, attempts, lease_token, %(worker)s, {now} FROM claimed
)
SELECT * FROM claimed
-- Observability (007). {minute_stats} and {sessions} are the schema-qualified tables.

-- name: queue_depths
-- Live jobs per queue, each arm read through its partial index, never the whole table: pending
-- (how many are due, and the oldest due run time), leased (how many leases have expired), dead.
SELECT queue, 'pending', count(*), count(*) FILTER (WHERE run_at <= {now}),
       min(run_at) FILTER (WHERE run_at <= {now}), {now}
FROM (
    SELECT queue, run_at FROM {jobs} WHERE state = 'pending' AND group_name IS NULL
    UNION ALL
    SELECT queue, run_at FROM {jobs} WHERE state = 'pending' AND group_name IS NOT NULL
) AS p
GROUP BY queue
UNION ALL
SELECT queue, 'leased', count(*), count(*) FILTER (WHERE lease_until <= {now}), NULL, {now}
FROM {jobs} WHERE state = 'leased' GROUP BY queue
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
WITH gone AS (DELETE FROM {minute_stats} WHERE minute < %(before)s RETURNING 1)
SELECT count(*) FROM gone

-- name: session_insert
INSERT INTO {sessions} (digest, api_key_id, created_at, expires_at)
VALUES (%(digest)s, %(api_key_id)s, {now}, {now} + make_interval(secs => %(ttl)s))
RETURNING expires_at

-- name: session_get
SELECT k.id, k.name, k.scopes, k.rate_per_second, k.burst, k.created_at, k.revoked_at
FROM {sessions} s JOIN {api_keys} k ON k.id = s.api_key_id
WHERE s.digest = %(digest)s AND s.expires_at > {now}

-- name: session_delete
DELETE FROM {sessions} WHERE digest = %(digest)s

-- name: session_prune
WITH gone AS (DELETE FROM {sessions} WHERE expires_at <= {now} RETURNING 1)
SELECT count(*) FROM gone

-- Push subscriptions (migration 005) -------------------------------------------------------------

-- name: subscription_insert
INSERT INTO {subscriptions} (id, queue, url, secret, timeout_seconds, concurrency,
                             rate_per_second, burst, state, created_at, updated_at)
VALUES (%(id)s, %(queue)s, %(url)s, %(secret)s, %(timeout_seconds)s, %(concurrency)s,
        %(rate_per_second)s, %(burst)s, 'active', {now}, {now})
ON CONFLICT (queue) DO NOTHING
RETURNING id

-- name: subscription_select
SELECT id, queue, url, secret, timeout_seconds, concurrency, rate_per_second, burst, state,
       state_reason, state_actor, state_changed_at, previous_secret, previous_until, created_at,
       updated_at, last_attempt_at, last_success_at, last_failure_at, last_status, last_error,
       consecutive_failures, delivered, failed
FROM {subscriptions}

-- name: subscription_state
UPDATE {subscriptions}
SET state = %(state)s, state_reason = %(reason)s, state_actor = %(actor)s,
    state_changed_at = {now}, updated_at = {now}
WHERE id = %(id)s
RETURNING id

-- name: subscription_delete
DELETE FROM {subscriptions} WHERE id = %(id)s RETURNING id

-- name: subscription_rotate
-- The current secret becomes the previous one, signing beside the new one until the overlap
-- ends; with no overlap it stops at once.
UPDATE {subscriptions}
SET previous_secret = CASE WHEN %(overlap)s > 0 THEN secret END,
    previous_until = CASE WHEN %(overlap)s > 0
                          THEN {now} + make_interval(secs => %(overlap)s) END,
    secret = %(secret)s,
    updated_at = {now}
WHERE id = %(id)s
RETURNING id

-- name: subscription_record
-- A delivery's outcome on the subscription's health. The last error stays after a success (it
-- is what went wrong last); consecutive_failures tells whether it still does.
UPDATE {subscriptions}
SET last_attempt_at = {now},
    last_success_at = CASE WHEN %(ok)s THEN {now} ELSE last_success_at END,
    last_failure_at = CASE WHEN %(ok)s THEN last_failure_at ELSE {now} END,
    last_status = %(status)s,
    last_error = CASE WHEN %(ok)s THEN last_error ELSE %(error)s END,
    consecutive_failures = CASE WHEN %(ok)s THEN 0 ELSE consecutive_failures + 1 END,
    delivered = delivered + CASE WHEN %(ok)s THEN 1 ELSE 0 END,
    failed = failed + CASE WHEN %(ok)s THEN 0 ELSE 1 END
WHERE id = %(id)s
-- name: job_insert_fresh
-- The common enqueue in one statement (one round trip, its own transaction; the arrays come as
-- literals): every key new — no job has it and no live tombstone holds it. If one is known,
-- nothing is inserted and the 'v' row is -1: the caller takes the checked path (job_insert in
-- a transaction). If another transaction inserted one of the keys meanwhile, the statement
-- fails through a cast that cannot succeed, so that nothing of the batch is written then either.
-- The keys are looked up one by one (a LATERAL subquery with a LIMIT is always a nested loop
-- over the unique indexes): as an EXISTS … OR EXISTS filter PostgreSQL may plan a hashed
-- subplan instead, which reads the whole jobs table for every batch.
WITH new AS (
    SELECT * FROM unnest({new_arrays}) AS n({new_columns})
), known AS (
    SELECT 1 FROM new AS n, LATERAL (
        SELECT 1 FROM {jobs} AS j WHERE j.queue = n.queue AND j.key = n.key
        UNION ALL
        SELECT 1 FROM {tombstones} AS t
        WHERE t.queue = n.queue AND t.key = n.key AND t.expires_at > {now}
        LIMIT 1
    ) AS k
    LIMIT 1
), inserted AS (
    INSERT INTO {jobs} ({new_columns}, attempt_limit, created_at, updated_at)
    SELECT {new_select}, max_attempts, {now}, {now}
    FROM new
    WHERE NOT EXISTS (SELECT 1 FROM known)
    ON CONFLICT (queue, key) DO NOTHING
    RETURNING id, queue, key
), woken AS (
    SELECT pg_notify(%(channel)s, queue) FROM (SELECT DISTINCT queue FROM inserted) AS q
), verdict AS (
    SELECT CASE
        WHEN EXISTS (SELECT 1 FROM known) THEN -1
        WHEN (SELECT count(*) FROM inserted)
             < (SELECT count(*) FROM (SELECT DISTINCT queue, key FROM new) AS d)
        THEN ('jobledger: not all keys were new in a batch of '
              || (SELECT count(*) FROM new))::bigint
        ELSE (SELECT count(*) FROM woken)
    END AS v
)
SELECT 'c', id, queue, key FROM inserted
UNION ALL
SELECT 'v', v, NULL, NULL FROM verdict

-- Groups (008). {groups} and {group_limits} are the schema-qualified tables.

-- name: group_waiting
-- Which of these queues have pending jobs with a group (one probe of the grouped index each).
SELECT q.name FROM unnest(%(queues)s::text[]) AS q(name)
WHERE EXISTS (SELECT 1 FROM {jobs} AS j
              WHERE j.state = 'pending' AND j.group_name IS NOT NULL AND j.queue = q.name)

-- name: group_candidates
-- A grouped claim, first statement: the groups with due jobs, not paused, under their leased
-- limit and with a token (as of this statement's snapshot), least recently served first; the
-- first {limit} of them that no other claim holds are locked for this transaction. The groups
-- are found by a skip scan of the grouped index (one probe per group, however many jobs each
-- has), never by reading the jobs.
WITH RECURSIVE walk AS (
    -- Each step reads one index entry: the next group's first pending job by run time.
    SELECT q.name AS queue, f.group_name AS name, f.run_at
    FROM unnest(%(queues)s::text[]) AS q(name)
    CROSS JOIN LATERAL (
        SELECT j.group_name, j.run_at FROM {jobs} AS j
        WHERE j.state = 'pending' AND j.group_name > '' AND j.queue = q.name
        ORDER BY j.group_name, j.run_at LIMIT 1
    ) AS f
    UNION ALL
    SELECT w.queue, f.group_name, f.run_at
    FROM walk AS w
    CROSS JOIN LATERAL (
        SELECT j.group_name, j.run_at FROM {jobs} AS j
        WHERE j.state = 'pending' AND j.group_name > '' AND j.queue = w.queue
          AND j.group_name > w.name
        ORDER BY j.group_name, j.run_at LIMIT 1
    ) AS f
), viable AS MATERIALIZED (
    SELECT w.queue, w.name, g.served_at
    FROM walk AS w
    LEFT JOIN {groups} AS g ON g.queue = w.queue AND g.name = w.name
    LEFT JOIN {group_limits} AS l ON l.queue = w.queue
    WHERE w.run_at <= {now}
      AND (g.paused_until IS NULL OR g.paused_until <= {now})
      AND (l.max_leased IS NULL OR l.max_leased > (
           SELECT count(*) FROM (
               SELECT 1 FROM {jobs} AS j
               WHERE j.state = 'leased' AND j.group_name IS NOT NULL AND j.queue = w.queue
                 AND j.group_name = w.name
               LIMIT l.max_leased) AS x))
      AND (l.rate IS NULL OR g.tokens IS NULL
           OR g.tokens + l.rate * extract(epoch FROM {now} - g.refilled_at) >= 1)
    ORDER BY g.served_at NULLS FIRST, w.queue, w.name
    LIMIT {limit}
)
SELECT queue, name, served_at FROM viable
WHERE pg_try_advisory_xact_lock(%(lock_space)s, hashtext(queue || '/' || name))

-- name: group_state
-- A grouped claim, second statement: the locked groups as they are now (a new snapshot, taken
-- after the locks: every claim that held one of them before has committed), with the clock.
SELECT a.queue, a.name,
       (SELECT count(*) FROM (
            SELECT 1 FROM {jobs} AS j
            WHERE j.state = 'leased' AND j.group_name IS NOT NULL AND j.queue = a.queue
              AND j.group_name = a.name
            LIMIT COALESCE(l.max_leased, 0)) AS x),
       g.tokens, g.refilled_at, g.paused_until, l.max_leased, l.rate, l.burst, {now}
FROM unnest(%(queues)s::text[], %(names)s::text[]) AS a(queue, name)
LEFT JOIN {groups} AS g ON g.queue = a.queue AND g.name = a.name
LEFT JOIN {group_limits} AS l ON l.queue = a.queue

-- name: group_claim
-- A grouped claim, third statement: up to "take" due jobs of each locked group, one per group
-- per round in the groups' order, {limit} in all; leased as job_claim leases.
WITH picked AS (
    SELECT c.id
    FROM unnest(%(queues)s::text[], %(names)s::text[], %(take)s::int[], %(ord)s::int[])
        AS a(queue, name, take, ord)
    CROSS JOIN LATERAL (
        SELECT s.id, row_number() OVER (ORDER BY s.priority DESC, s.run_at, s.id) AS rn
        FROM (
            SELECT id, priority, run_at FROM {jobs}
            WHERE state = 'pending' AND group_name IS NOT NULL AND queue = a.queue
              AND group_name = a.name AND run_at <= {now}
            ORDER BY priority DESC, run_at, id
            LIMIT a.take
            FOR UPDATE SKIP LOCKED
        ) AS s
    ) AS c
    ORDER BY c.rn, a.ord
    LIMIT {limit}
), claimed AS (
    UPDATE {jobs} AS j
    SET state = 'leased',
        attempts = j.attempts + 1,
        lease_token = gen_random_uuid(),
        lease_until = {now} + make_interval(secs => COALESCE(%(lease_seconds)s, j.lease_seconds)),
        leased_by = %(worker)s,
        updated_at = {now}
    WHERE j.id = ANY(ARRAY(SELECT id FROM picked))
    RETURNING j.id, j.queue, j.key, j.task, j.payload, j.attempts, j.lease_token, j.lease_until,
              j.lease_seconds, j.run_at, j.priority, j.correlation_id, j.attempt_limit,
              j.group_name
), opened AS (
    INSERT INTO {attempts} (job_id, attempt, lease_token, worker, started_at)
    SELECT id, attempts, lease_token, %(worker)s, {now} FROM claimed
)
SELECT id, queue, key, task, payload::text, attempts, lease_token::text, lease_until,
       lease_seconds, run_at, priority, correlation_id, attempt_limit, group_name
FROM claimed

-- name: group_served
-- A claim took some of these groups' jobs: each bucket as left, and each group's turn.
INSERT INTO {groups} (queue, name, tokens, refilled_at, served_at)
SELECT queue, name, tokens, %(at)s, %(at)s
FROM unnest(%(queues)s::text[], %(names)s::text[], %(tokens)s::float8[]) AS a(queue, name, tokens)
ON CONFLICT (queue, name) DO UPDATE
SET tokens = excluded.tokens, refilled_at = excluded.refilled_at, served_at = excluded.served_at

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
RETURNING name

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

-- name: group_paused_until
-- Of these groups, the ones paused now, and until when.
SELECT queue, name, paused_until FROM {groups}
WHERE (queue, name) IN (SELECT * FROM unnest(%(queues)s::text[], %(names)s::text[]))
  AND paused_until > {now}
-- name: job_insert_one
-- One job, the common case of job_insert_fresh with scalar parameters (a plan that PostgreSQL
-- caches generically and that costs a third less to run than the batch statement for one row).
-- The checks are the batch's: in the statement's snapshot no job and no live tombstone has the
-- key (a job being pruned is still seen, so a prune in flight sends us to the checked path).
-- No row back: the key was known (or another transaction inserted it meanwhile), nothing was
-- written, and the caller takes the checked path.
WITH known AS (
    SELECT 1 FROM {jobs} WHERE queue = %(queue)s AND key = %(key)s
    UNION ALL
    SELECT 1 FROM {tombstones}
    WHERE queue = %(queue)s AND key = %(key)s AND expires_at > {now}
), inserted AS (
    INSERT INTO {jobs} ({new_columns}, attempt_limit, created_at, updated_at)
    SELECT {new_select}, max_attempts, {now}, {now}
    FROM (SELECT {new_values}) AS new
    WHERE NOT EXISTS (SELECT 1 FROM known)
    ON CONFLICT (queue, key) DO NOTHING
    RETURNING id
)
SELECT id, pg_notify(%(channel)s, %(queue)s) FROM inserted
