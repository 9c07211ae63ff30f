-- The api role (004, 007): declared queues, API keys, rate limits, dashboard sessions.
-- PostgreSQL. {jobs}, {attempts}, … are the schema-qualified tables; {now} is the caller's
-- explicit time or the database clock; {limit} is written in as a literal.

-- name: queue_insert
-- A queue declared for the first time; nothing when it exists (queue_update then). A
-- concurrent first declaration waits for this one to commit, and then inserts nothing.
INSERT INTO {queues} (name, task, max_attempts, lease_seconds, backoff_base, backoff_cap,
                      retention_seconds, require_key, created_at, updated_at, timeout_seconds)
VALUES (%(name)s, %(task)s, %(max_attempts)s, %(lease_seconds)s, %(backoff_base)s,
        %(backoff_cap)s, %(retention_seconds)s, %(require_key)s, {now}, {now},
        %(timeout_seconds)s)
ON CONFLICT (name) DO NOTHING
RETURNING name, task, max_attempts, lease_seconds, backoff_base, backoff_cap, retention_seconds,
          require_key, created_at, updated_at, timeout_seconds

-- name: queue_update
UPDATE {queues}
SET task = %(task)s, max_attempts = %(max_attempts)s, lease_seconds = %(lease_seconds)s,
    backoff_base = %(backoff_base)s, backoff_cap = %(backoff_cap)s,
    retention_seconds = %(retention_seconds)s, require_key = %(require_key)s,
    timeout_seconds = %(timeout_seconds)s, updated_at = {now}
WHERE name = %(name)s
RETURNING name, task, max_attempts, lease_seconds, backoff_base, backoff_cap, retention_seconds,
          require_key, created_at, updated_at, timeout_seconds

-- name: queue_select
SELECT name, task, max_attempts, lease_seconds, backoff_base, backoff_cap, retention_seconds,
       require_key, created_at, updated_at, timeout_seconds
FROM {queues} {where}

-- name: apikey_insert
INSERT INTO {api_keys} (id, digest, name, scopes, rate_per_second, burst, created_at)
VALUES (%(id)s, %(digest)s, %(name)s, %(scopes)s, %(rate_per_second)s, %(burst)s, {now})
RETURNING id, name, scopes, rate_per_second, burst, created_at, revoked_at

-- name: apikey_select
SELECT id, name, scopes, rate_per_second, burst, created_at, revoked_at FROM {api_keys}
{where}

-- name: apikey_revoke
UPDATE {api_keys} SET revoked_at = {now} WHERE id = %(id)s AND revoked_at IS NULL

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
-- How far ahead of the clock the bucket is.
SELECT tat - extract(epoch FROM {now})::float8 FROM {rate_limits} WHERE bucket = %(bucket)s

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
DELETE FROM {sessions} WHERE expires_at <= {now}
