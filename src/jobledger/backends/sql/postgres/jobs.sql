-- The jobs role: inserts, publishing, claims, lease renewals and outcomes (the hot path).
-- PostgreSQL. {jobs}, {attempts}, … are the schema-qualified tables; {now} is the caller's
-- explicit time or the database clock; {limit} is written in as a literal.

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
-- The payload as text: compared by its numbers' decimal values (common.same_payload), which
-- psycopg's reading of jsonb into floats would not keep.
SELECT id, queue, key, task, payload::text FROM {jobs}
WHERE (queue, key) IN (SELECT * FROM unnest(%(queue)s::text[], %(key)s::text[]))

-- name: job_claim
-- One index scan per queue (a "queue = ANY(…)" filter cannot use the index's order), each
-- skipping rows other workers hold; then the best {limit} across the queues. Rows locked here
-- but not taken are unlocked again when the statement's transaction commits. {queue_rows} is
-- a VALUES list of one row per queue, each a scalar parameter (PostgresDatabase.statement):
-- the generic plan of the prepared claim then knows how many queues it scans, costs what the
-- custom plans cost, and PostgreSQL keeps it after five runs instead of planning every claim
-- again (over an array it guessed 10-100 rows, and planned every run: 0.3-0.5 ms of a claim).
WITH picked AS (
    SELECT c.id FROM {queue_rows} AS q(name)
    CROSS JOIN LATERAL (
        SELECT id, priority, run_at FROM {jobs}
        WHERE state = 'pending' AND group_name IS NULL AND queue = q.name AND run_at <= {now}
        ORDER BY priority DESC, run_at, id
        LIMIT {limit}
        FOR UPDATE SKIP LOCKED
    ) AS c
    ORDER BY c.priority DESC, c.run_at, c.id
    LIMIT {limit}
), {@lease_picked}

-- name: job_claim_after
-- job_claim, each queue's scan starting past a position (priority, run_at, id) that this
-- process has already consumed (postgres/cursor.py): while a long transaction elsewhere holds
-- back vacuum, the index entries of every job claimed since it began are still there, at the
-- front of jobledger_jobs_due, and a scan from the start visits each one's dead row. The
-- first branch starts at the position (an index condition, not a filter: the scan descends
-- straight to it); the second takes the lower priorities, read only when the first has too
-- few (each branch locks in a subquery of its own: FOR UPDATE is not allowed on a UNION's
-- member). A queue without a position passes priority 2^31 (above any integer): its first
-- branch is empty, its second the whole queue. {position_rows}: a VALUES list of one row per
-- queue (its name and position), as {queue_rows} in job_claim.
WITH picked AS (
    SELECT c.id
    FROM {position_rows} AS q(name, priority, run_at, id)
    CROSS JOIN LATERAL (
        SELECT * FROM (
            SELECT id, priority, run_at FROM {jobs}
            WHERE state = 'pending' AND group_name IS NULL AND queue = q.name
              AND run_at <= {now} AND priority = q.priority AND (run_at, id) > (q.run_at, q.id)
            ORDER BY priority DESC, run_at, id
            LIMIT {limit}
            FOR UPDATE SKIP LOCKED
        ) AS a
        UNION ALL
        SELECT * FROM (
            SELECT id, priority, run_at FROM {jobs}
            WHERE state = 'pending' AND group_name IS NULL AND queue = q.name
              AND run_at <= {now} AND priority < q.priority
            ORDER BY priority DESC, run_at, id
            LIMIT {limit}
            FOR UPDATE SKIP LOCKED
        ) AS b
        LIMIT {limit}
    ) AS c
    ORDER BY c.priority DESC, c.run_at, c.id
    LIMIT {limit}
), {@lease_picked}

-- name: lease_set
-- How a claim leases a job: a new token, one more attempt, a lease from now. Every claim
-- (job_claim, group_claim, job_claim_keys) includes it. The token is drawn from the claim's
-- own random %(claim)s and the job's id: should the claim commit and its answer be lost, the
-- claimer can still tell its jobs (job_claim_unanswered) — and nobody else can name a token.
SET state = 'leased',
    attempts = j.attempts + 1,
    lease_token = md5(%(claim)s || j.id::text)::uuid,
    lease_until = {now} + make_interval(secs => COALESCE(%(lease_seconds)s, j.lease_seconds)),
    leased_by = %(worker)s,
    leased_at = {now},
    updated_at = {now}

-- name: lease_opened
-- The rows a claim's "claimed" CTE returns: included by every claim (lease_picked,
-- job_claim_keys). The attempt the claim begins is the job row's (attempts, lease_token,
-- leased_by, leased_at) until it ends; its row in {attempts} is written then (attempt_close).
RETURNING j.id, j.queue, j.key, j.task, j.payload, j.attempts, j.lease_token, j.lease_until,
          j.lease_seconds, j.run_at, j.priority, j.correlation_id, j.attempt_limit,
          j.group_name, j.trace_context

-- name: lease_picked
-- The end of a claim (job_claim) after its "picked" CTE has locked the jobs to take: lease
-- them and return them. group_claim writes the served groups in between.
{@lease_claimed}
{@lease_returned}

-- name: lease_claimed
-- "= ANY(ARRAY(…))": the rows are fetched by primary key (a join with the CTE is planned for an
-- unknown number of rows: a hash join over every pending job). No "state = 'pending'" here:
-- "picked" locked these rows after checking it, and a condition on state would let the planner
-- read the whole index of pending jobs for it.
claimed AS (
    UPDATE {jobs} AS j
    {@lease_set}
    WHERE j.id = ANY(ARRAY(SELECT id FROM picked))
    {@lease_opened}
)

-- name: lease_returned
-- Payload and token as text: the worker parses the JSON itself, and a token stays a string.
SELECT id, queue, key, task, payload::text, attempts, lease_token::text, lease_until,
       lease_seconds, run_at, priority, correlation_id, attempt_limit, group_name, trace_context
FROM claimed

-- name: held_leases
-- The jobs whose lease is still held under %(ids)s and %(tokens)s: the fence of every write by
-- a lease (job_heartbeat, job_complete, job_release include it; job_complete_results and
-- job_fail write it out). "j.id = ANY(…)" fetches the batch by primary key (the index of
-- leased jobs, whose condition also names lease_until, is no way in: 014); the ids go through
-- "ARRAY(SELECT unnest(…))", an array whose length the planner does not see, as the claim's
-- (lease_claimed): seeing 500 ids, it priced 500 probes of the primary key above one read of
-- a table it believed small, and read the whole jobs table on every completion while that
-- table was unanalyzed or under ~100,000 rows (2.2 ms of a completion of 500 at 20,000 jobs,
-- growing with the table). The state is compared with a value the planner does not look
-- into, "(SELECT 'leased')": statistics taken while few jobs were leased made "state =
-- 'leased'" look as if it kept one row, and the planner then rescanned every pair for each
-- row of the batch (500 leases: 250,000 comparisons, 40 ms instead of 9) or read the whole
-- table for that one row.
FROM unnest(%(ids)s::bigint[], %(tokens)s::uuid[]) AS l(id, token)
WHERE j.id = ANY(ARRAY(SELECT unnest(%(ids)s::bigint[])))
  AND j.id = l.id AND j.lease_token = l.token
  AND j.state = (SELECT 'leased')

-- name: job_heartbeat
UPDATE {jobs} AS j
SET lease_until = {now} + make_interval(secs => COALESCE(%(lease_seconds)s, j.lease_seconds)),
    updated_at = {now}
{@held_leases}
RETURNING j.id, j.lease_until

-- name: job_complete
-- The batch completion. "told" wakes whoever waits for these jobs' results (ledger.result with
-- a timeout): one NOTIFY for the whole batch, naming its queue, when someone waits, unless
-- %(tell)s is false (a completion in the handler's transaction tells once its result is
-- written: job_result_store).
WITH done AS (
    UPDATE {jobs} AS j
    SET state = 'done', lease_until = NULL, finished_at = {now}, updated_at = {now}
    {@held_leases}
    RETURNING j.id, j.queue
), {@done_rest}

-- name: job_complete_results
-- The batch completion when some handlers returned a value: %(results)s is the JSON text of
-- each lease's result (NULL for a handler that returned None), in the order of %(ids)s.
WITH done AS (
    UPDATE {jobs} AS j
    SET state = 'done', lease_until = NULL, finished_at = {now}, updated_at = {now},
        result = l.result::jsonb
    FROM unnest(%(ids)s::bigint[], %(tokens)s::uuid[], %(results)s::text[])
         AS l(id, token, result)
    WHERE j.id = ANY(ARRAY(SELECT unnest(%(ids)s::bigint[])))
      AND j.id = l.id AND j.lease_token = l.token
      AND j.state = (SELECT 'leased')  -- (as held_leases)
    RETURNING j.id, j.queue
), {@done_rest}

-- name: done_rest
-- What every completion does after marking its jobs done: tell waiters. The attempt that
-- ended gets no row in {attempts}: a job done is never leased again, so its own row keeps that
-- attempt whole (its number, token, worker, start and end), and attempt_list and
-- attempt_settled read it there (a row written before this, or by a worker of an earlier
-- version, is read as it is). Most jobs end in one attempt that succeeds: a completion of
-- 1,000 jobs writes 1,000 rows and 2,000 index entries less (docs/benchmarks-log.md).
told AS (
    {@finished_notify}
    FROM done HAVING CASE WHEN count(*) > 0 AND %(tell)s::bool THEN {@someone_waits} END
)
SELECT id, (SELECT count(*) FROM told) FROM done

-- name: attempt_close
-- How every end of an attempt but success writes its row (job_fail, job_release,
-- job_claim_unanswered, job_rescue): inserted now, from the job's row as the fenced update
-- returned it — the attempt's number, token, worker and start (leased_at: NULL only for a job
-- leased before 016, whose open row, kept, has the start) — then the outcome and its error
-- class, message and traceback, in the order of the SELECT between the two fragments.
INSERT INTO {attempts} AS a
    (job_id, attempt, lease_token, worker, started_at, outcome, error_class, error_message,
     traceback, finished_at)
SELECT c.job_id, c.attempt, c.lease_token, COALESCE(c.worker, '?'),
       COALESCE(c.started_at, {now}), c.outcome, c.error_class, c.error_message, c.traceback,
       {now}
FROM (

-- name: attempt_closed_once
-- The end of attempt_close. A row already there is an attempt opened before 016 (or by a
-- worker of that version): still open, it is closed by this write; closed, it stays as it is.
-- The fenced update before it lets each attempt end once, so no other conflict arises.
) AS c(job_id, attempt, lease_token, worker, started_at, outcome, error_class, error_message,
       traceback)
ON CONFLICT (job_id, attempt) DO UPDATE
SET finished_at = excluded.finished_at, outcome = excluded.outcome,
    error_class = excluded.error_class, error_message = excluded.error_message,
    traceback = excluded.traceback
WHERE a.outcome IS NULL

-- name: someone_waits
-- True when a process waits for results: each listening connection for them holds the shared
-- lock {waiters_lock} (postgres/listener.py). Taking it exclusively fails then; when nobody
-- waits it succeeds, held until this transaction ends, and nothing is told: a drain without
-- waiters pays no NOTIFY (whose commit PostgreSQL serialises with every other notifying
-- commit). A listener that locks while this transaction holds the lock waits for its commit,
-- then looks at the jobs. Another completion holding it meanwhile makes this one tell anyway.
NOT pg_try_advisory_xact_lock({waiters_lock})

-- name: finished_notify
-- One NOTIFY on the channel of finished jobs, naming their queue when they are all of one
-- (empty otherwise: then the waiters of every queue look again). min and max, not a sorted
-- DISTINCT: one pass over the batch, compared byte by byte.
SELECT pg_notify({finish_channel}, CASE WHEN min(queue COLLATE "C") = max(queue COLLATE "C")
                                        THEN min(queue COLLATE "C") ELSE '' END)

-- name: job_result_store
-- The result of a job its handler completed in its own transaction (ctx.transaction()),
-- written once the handler returned, fenced by the lease that completed it.
WITH stored AS (
    UPDATE {jobs} SET result = %(result)s::jsonb
    WHERE id = %(id)s AND lease_token = %(token)s::uuid AND state = 'done'
    RETURNING id, queue
), told AS (
    {@finished_notify}
    FROM stored HAVING CASE WHEN count(*) > 0 THEN {@someone_waits} END
)
SELECT id, (SELECT count(*) FROM told) FROM stored

-- name: job_fail
WITH f AS (
    SELECT * FROM unnest(
        %(ids)s::bigint[], %(tokens)s::uuid[], %(retry)s::bool[], %(run_at)s::timestamptz[],
        %(error_class)s::text[], %(message)s::text[], %(traceback)s::text[],
        %(timed_out)s::bool[]
    ) AS f(id, token, retry, run_at, error_class, message, traceback, timed_out)
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
    WHERE j.id = ANY(ARRAY(SELECT unnest(%(ids)s::bigint[])))
      AND j.id = f.id AND j.lease_token = f.token
      AND j.state = (SELECT 'leased')  -- (as held_leases)
    RETURNING j.id, j.state, j.attempts, j.group_name, j.queue, j.priority, j.run_at,
              j.lease_token, j.leased_by, j.leased_at
), closed AS (
    {@attempt_close}
    SELECT moved.id, moved.attempts, moved.lease_token, moved.leased_by, moved.leased_at,
           CASE WHEN f.timed_out THEN 'timed_out'
                WHEN moved.state = 'dead' THEN 'dead' ELSE 'retry' END,
           f.error_class, f.message, f.traceback
    FROM moved JOIN f ON f.id = moved.id
    {@attempt_closed_once}
), told AS (
    {@finished_notify}
    FROM moved WHERE state = 'dead' HAVING CASE WHEN count(*) > 0 THEN {@someone_waits} END
)
SELECT id, state, group_name, queue, (SELECT count(*) FROM told), priority, run_at FROM moved

-- name: job_release
WITH released AS (
    UPDATE {jobs} AS j
    SET state = 'pending', lease_until = NULL, attempt_limit = j.attempt_limit + 1,
        updated_at = {now}
    {@held_leases}
    RETURNING j.id, j.attempts, j.queue, j.priority, j.run_at, j.group_name, j.lease_token,
              j.leased_by, j.leased_at
), closed AS (
    {@attempt_close}
    SELECT id, attempts, lease_token, leased_by, leased_at, 'released', NULL, NULL, NULL
    FROM released
    {@attempt_closed_once}
)
SELECT id, queue, priority, run_at, group_name FROM released

-- name: job_claim_unanswered
-- The jobs a claim leased whose answer never reached the claimer (the server went away at the
-- commit; or the claim was sent again on another connection, and the first had committed):
-- leased by %(worker)s under the tokens of %(claim)s, and not among %(returned)s (what the
-- claimer did get). Nobody holds their tokens, so nobody can run them: they are given back
-- as a release gives them back (pending, the attempt not charged, closed as 'released')
-- instead of waiting for their leases to expire and being charged an attempt. "lease_until IS
-- NOT NULL" (true of every leased job) names the condition of jobledger_jobs_leased, so that
-- the leased jobs are read through it rather than the whole table.
WITH lost AS (
    UPDATE {jobs} AS j
    SET state = 'pending', lease_until = NULL, attempt_limit = j.attempt_limit + 1,
        updated_at = {now}
    WHERE j.state = 'leased' AND j.lease_until IS NOT NULL AND j.leased_by = %(worker)s
      AND j.lease_token = md5(%(claim)s || j.id::text)::uuid
      AND NOT j.id = ANY(%(returned)s::bigint[])
    RETURNING j.id, j.attempts, j.queue, j.priority, j.run_at, j.group_name, j.lease_token,
              j.leased_by, j.leased_at
), closed AS (
    {@attempt_close}
    SELECT id, attempts, lease_token, leased_by, leased_at, 'released', NULL, NULL, NULL
    FROM lost
    {@attempt_closed_once}
)
SELECT id, queue, priority, run_at, group_name FROM lost

-- name: attempt_settled
-- What the attempts of these leases came to, for those closed under their own tokens: the
-- recorder asks when a write by a lease was refused, for the write may be its own, committed
-- before an earlier try lost its answer (the server went away at the commit). A timed-out
-- attempt says whether its job was retried or is dead (while the job is still at it).
SELECT a.job_id,
       CASE WHEN a.outcome <> 'timed_out' THEN a.outcome
            WHEN j.attempts = a.attempt AND j.state = 'dead' THEN 'dead' ELSE 'retry' END
FROM unnest(%(ids)s::bigint[], %(tokens)s::uuid[]) AS l(id, token)
JOIN {attempts} AS a ON a.job_id = l.id AND a.lease_token = l.token
JOIN {jobs} AS j ON j.id = a.job_id
WHERE a.finished_at IS NOT NULL
UNION ALL
-- A job done under the lease: its last attempt is its row's (done_rest), unless a row closed
-- it (a completion before the attempt's row was left out), which the first half read.
SELECT j.id, 'done'
FROM unnest(%(ids)s::bigint[], %(tokens)s::uuid[]) AS l(id, token)
JOIN {jobs} AS j ON j.id = l.id AND j.lease_token = l.token
WHERE j.state = 'done'
  AND NOT EXISTS (SELECT 1 FROM {attempts} AS a
                  WHERE a.job_id = j.id AND a.attempt = j.attempts AND a.finished_at IS NOT NULL)

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
    RETURNING j.id, j.queue, j.key, j.state, j.attempts, j.last_error, j.priority, j.run_at,
              j.group_name, j.lease_token, j.leased_by, j.leased_at
), closed AS (
    {@attempt_close}
    SELECT id, attempts, lease_token, leased_by, leased_at, 'lease_expired', 'LeaseExpired',
           last_error, NULL
    FROM moved
    {@attempt_closed_once}
), told AS (
    {@finished_notify}
    FROM moved WHERE state = 'dead' HAVING CASE WHEN count(*) > 0 THEN {@someone_waits} END
)
SELECT id, queue, key, state, attempts, (SELECT count(*) FROM told), priority, run_at, group_name
FROM moved

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

-- name: publish_try_locks
-- Each key's "in flight" marker: a transaction-level advisory lock, taken without waiting. A key
-- whose lock another open transaction holds is being published right now by another request.
SELECT k, pg_try_advisory_xact_lock(hashtextextended(%(prefix)s || k, 0))
FROM unnest(%(keys)s::text[]) AS k

-- name: publish_existing
-- The payload as text, as in job_existing.
SELECT j.id, j.queue, j.key, j.payload::text, p.fingerprint, j.task
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
    {@lease_set}
    FROM (SELECT DISTINCT id FROM picked) AS p
    WHERE j.id = p.id AND j.state = 'pending'
    {@lease_opened}
)
SELECT * FROM claimed

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
-- written, and the caller takes the checked path. One INSERT with its checks in its WHERE and
-- the NOTIFY in its RETURNING, without common table expressions: 1-3 % less time a call than
-- the same checks as a CTE of the key's rows beside a CTE of the insert (python -m
-- bench.single_parts, docs/benchmarks-log.md).
INSERT INTO {jobs} ({new_columns}, attempt_limit, created_at, updated_at)
SELECT {new_select}, max_attempts, {now}, {now}
FROM (SELECT {new_values}) AS new
WHERE NOT EXISTS (SELECT 1 FROM {jobs} WHERE queue = %(queue)s AND key = %(key)s)
  AND NOT EXISTS (
    SELECT 1 FROM {tombstones}
    WHERE queue = %(queue)s AND key = %(key)s AND expires_at > {now}
  )
ON CONFLICT (queue, key) DO NOTHING
RETURNING id, pg_notify(%(channel)s, %(queue)s)

-- name: job_copy_start
-- A large batch of new keys goes in by COPY (job_copy), which returns nothing: its ids are
-- taken from the jobs' sequence first, in one statement with the insert's time. In a
-- transaction, so {now} is the time of every statement after it too. OFFSET 0 keeps the
-- planner from pulling the sequence's lookup up into the call of nextval: without it the
-- name was looked up in the catalog again for every id (3-4 ms a batch of 1,000 instead of
-- 0.5).
SELECT {now}, ARRAY(SELECT nextval(s.seq) FROM generate_series(1, %(n)s::int))::text
FROM (SELECT pg_get_serial_sequence('{jobs}', 'id')::regclass AS seq OFFSET 0) AS s

-- name: job_copy
-- The rows as newjob.new_job_copy writes them. A key that a job has (committed, or committed
-- while the COPY waited on it), or that the batch names twice, fails the unique constraint:
-- the transaction rolls back and the checked path runs.
COPY {jobs} ({copy_columns}) FROM STDIN

-- name: job_copy_on_server_clock
-- job_copy by the database's clock (no explicit now): the created and updated times are left
-- to their defaults, now(), which is the {now} of job_copy_start in this transaction — two
-- timestamps a row the server does not parse (12 % of the COPY, docs/benchmarks-log.md).
COPY {jobs} ({copy_columns_on_server_clock}) FROM STDIN

-- name: job_copy_end
-- After the COPY, in a statement of its own (a new snapshot under READ COMMITTED): does a live
-- tombstone hold one of the keys? One committed before the COPY, or by a prune that the COPY
-- waited for (it deleted the job that had the key), is seen here: then the transaction rolls
-- back and the checked path runs. Else the queues are told (delivered on commit).
SELECT EXISTS (
    SELECT 1 FROM unnest(%(queue)s::text[], %(key)s::text[]) AS k(queue, key)
    JOIN {tombstones} AS t ON t.queue = k.queue AND t.key = k.key
    WHERE t.expires_at > {now}
), (SELECT count(*) FROM (SELECT pg_notify(%(channel)s, q) FROM unnest(%(queues)s::text[]) AS q) AS n)
