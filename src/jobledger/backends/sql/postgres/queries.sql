-- Named queries for PostgreSQL. Each block starts with "-- name: <name>".
-- {jobs}, {attempts}, {events}, {effects} are the schema-qualified tables; {now} is the caller's
-- explicit time or the database clock; {limit} is written in as a literal so that the cached
-- plan of the claim always walks the index (a parameter LIMIT can make a generic plan scan).

-- name: job_insert
WITH new AS (
    SELECT * FROM unnest(
        %(queue)s::text[], %(key)s::text[], %(task)s::text[], %(payload)s::text[],
        %(priority)s::int[], %(run_at)s::timestamptz[], %(max_attempts)s::int[],
        %(lease_seconds)s::float8[], %(correlation_id)s::text[]
    ) AS n(queue, key, task, payload, priority, run_at, max_attempts, lease_seconds, correlation_id)
), inserted AS (
    INSERT INTO {jobs} (queue, key, task, payload, priority, run_at, max_attempts, attempt_limit,
                        lease_seconds, created_at, updated_at, correlation_id)
    SELECT queue, key, task, payload::jsonb, priority, COALESCE(run_at, {now}), max_attempts,
           max_attempts, lease_seconds, {now}, {now}, correlation_id
    FROM new
    ON CONFLICT (queue, key) DO NOTHING
    RETURNING id, queue, key
), woken AS (
    SELECT pg_notify(%(channel)s, queue) FROM (SELECT DISTINCT queue FROM inserted) AS q
)
SELECT id, queue, key, (SELECT count(*) FROM woken) FROM inserted

-- name: job_insert_one
-- One job (a plain enqueue): scalar parameters cost less to send than nine one-element arrays.
WITH inserted AS (
    INSERT INTO {jobs} (queue, key, task, payload, priority, run_at, max_attempts, attempt_limit,
                        lease_seconds, created_at, updated_at, correlation_id)
    VALUES (%(queue)s::text, %(key)s::text, %(task)s::text, %(payload)s::jsonb, %(priority)s::int,
            COALESCE(%(run_at)s::timestamptz, {now}), %(max_attempts)s::int,
            %(max_attempts)s::int, %(lease_seconds)s::float8, {now}, {now},
            %(correlation_id)s::text)
    ON CONFLICT (queue, key) DO NOTHING
    RETURNING id, queue, key
), woken AS (
    SELECT pg_notify(%(channel)s, queue) FROM inserted
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
        WHERE state = 'pending' AND queue = q.name AND run_at <= {now}
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
              j.lease_seconds, j.run_at, j.priority, j.correlation_id, j.attempt_limit
), opened AS (
    INSERT INTO {attempts} (job_id, attempt, lease_token, worker, started_at)
    SELECT id, attempts, lease_token, %(worker)s, {now} FROM claimed
)
-- Payload and token as text: the worker parses the JSON itself, and a token stays a string.
SELECT id, queue, key, task, payload::text, attempts, lease_token::text, lease_until,
       lease_seconds, run_at, priority, correlation_id, attempt_limit
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
    RETURNING j.id, j.state, j.attempts
), closed AS (
    UPDATE {attempts} AS a
    SET finished_at = {now},
        outcome = CASE moved.state WHEN 'dead' THEN 'dead' ELSE 'retry' END,
        error_class = f.error_class, error_message = f.message, traceback = f.traceback
    FROM moved JOIN f ON f.id = moved.id
    WHERE a.job_id = moved.id AND a.attempt = moved.attempts
)
SELECT id, state FROM moved

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
SELECT queue, state, count(*) FROM {jobs} GROUP BY queue, state

-- name: queue_oldest_due
SELECT q.queue,
       (SELECT min(run_at) FROM {jobs} j
        WHERE j.queue = q.queue AND j.state = 'pending' AND j.run_at <= {now}),
       (SELECT count(*) FROM {jobs} j
        WHERE j.queue = q.queue AND j.state = 'pending'
          AND j.run_at <= {now} - make_interval(secs => %(late_after)s))
FROM (SELECT DISTINCT queue FROM {jobs} WHERE state = 'pending') AS q

-- name: queue_lease_expiries
SELECT j.queue, count(*) FROM {attempts} a JOIN {jobs} j ON j.id = a.job_id
WHERE a.outcome = 'lease_expired' AND a.finished_at >= {now} - interval '1 hour'
GROUP BY j.queue

-- name: job_stage_create
-- A bulk enqueue COPYs its rows into this per-connection table, then inserts them in one
-- statement: COPY costs far less per row than binding nine arrays.
CREATE TEMPORARY TABLE IF NOT EXISTS jobledger_staging (
    queue text, key text, task text, payload text, priority int, run_at timestamptz,
    max_attempts int, lease_seconds float8, correlation_id text
) ON COMMIT DELETE ROWS

-- name: job_stage_copy
COPY jobledger_staging (queue, key, task, payload, priority, run_at, max_attempts,
                        lease_seconds, correlation_id) FROM STDIN

-- name: job_insert_staged
WITH inserted AS (
    INSERT INTO {jobs} (queue, key, task, payload, priority, run_at, max_attempts, attempt_limit,
                        lease_seconds, created_at, updated_at, correlation_id)
    SELECT queue, key, task, payload::jsonb, priority, COALESCE(run_at, {now}), max_attempts,
           max_attempts, lease_seconds, {now}, {now}, correlation_id
    FROM jobledger_staging
    ON CONFLICT (queue, key) DO NOTHING
    RETURNING id, queue, key
), woken AS (
    SELECT pg_notify(%(channel)s, queue) FROM (SELECT DISTINCT queue FROM inserted) AS q
)
SELECT id, queue, key, (SELECT count(*) FROM woken) FROM inserted

-- name: job_insert_at_once
-- A batch in one statement (one round trip, its own transaction). Arrays come as literals.
-- Rows come back tagged: 'c' created by this statement, 'e' existed before it, and one 'v'
-- row. With %(strict)s (on_conflict "raise"), a key that exists with another task or payload,
-- or that another transaction inserted meanwhile, fails the whole statement — nothing of it is
-- written — through a cast that cannot succeed; the caller then takes the transactional path.
WITH new AS (
    SELECT * FROM unnest(
        %(queue)s::text[], %(key)s::text[], %(task)s::text[], %(payload)s::jsonb[],
        %(priority)s::int[], %(run_at)s::timestamptz[], %(max_attempts)s::int[],
        %(lease_seconds)s::float8[], %(correlation_id)s::text[]
    ) AS n(queue, key, task, payload, priority, run_at, max_attempts, lease_seconds, correlation_id)
), inserted AS (
    INSERT INTO {jobs} (queue, key, task, payload, priority, run_at, max_attempts, attempt_limit,
                        lease_seconds, created_at, updated_at, correlation_id)
    SELECT queue, key, task, payload, priority, COALESCE(run_at, {now}), max_attempts,
           max_attempts, lease_seconds, {now}, {now}, correlation_id
    FROM new
    ON CONFLICT (queue, key) DO NOTHING
    RETURNING id, queue, key
), existing AS (
    -- Only the keys not inserted are looked up (usually none). The statement's snapshot holds
    -- the rows from before it: the jobs it inserted are not among them.
    SELECT j.id, j.queue, j.key, j.task, j.payload FROM {jobs} AS j
    WHERE (j.queue, j.key) IN (SELECT queue, key FROM new EXCEPT SELECT queue, key FROM inserted)
), woken AS (
    SELECT pg_notify(%(channel)s, queue) FROM (SELECT DISTINCT queue FROM inserted) AS q
), verdict AS (
    SELECT CASE WHEN %(strict)s AND (
        EXISTS (SELECT 1 FROM existing AS e JOIN new AS n ON (n.queue, n.key) = (e.queue, e.key)
                WHERE e.task <> n.task OR e.payload <> n.payload)
        OR (SELECT count(*) FROM inserted) + (SELECT count(*) FROM existing)
           < (SELECT count(*) FROM (SELECT DISTINCT queue, key FROM new) AS d)
    ) THEN ('jobledger: key conflict in batch of ' || (SELECT count(*) FROM new))::bigint
    ELSE (SELECT count(*) FROM woken) END AS v
)
SELECT 'c', id, queue, key, NULL::text, NULL::text FROM inserted
UNION ALL
SELECT 'e', id, queue, key, task, payload::text FROM existing
UNION ALL
SELECT 'v', v, NULL, NULL, NULL, NULL FROM verdict
