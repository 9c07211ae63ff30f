-- The api role (004, 007): declared queues, API keys, rate limits, dashboard sessions.
-- SQLite. Times are seconds since the Unix epoch; {limit} is written in as a literal.

-- name: queue_insert
-- A queue declared for the first time; nothing when it exists (queue_update then).
INSERT INTO jobledger_queues (name, task, max_attempts, lease_seconds, backoff_base, backoff_cap,
                              retention_seconds, require_key, created_at, updated_at, timeout_seconds)
VALUES (:name, :task, :max_attempts, :lease_seconds, :backoff_base, :backoff_cap,
        :retention_seconds, :require_key, :now, :now, :timeout_seconds)
ON CONFLICT (name) DO NOTHING
RETURNING name, task, max_attempts, lease_seconds, backoff_base, backoff_cap, retention_seconds,
          require_key, created_at, updated_at, timeout_seconds

-- name: queue_update
UPDATE jobledger_queues
SET task = :task, max_attempts = :max_attempts, lease_seconds = :lease_seconds,
    backoff_base = :backoff_base, backoff_cap = :backoff_cap,
    retention_seconds = :retention_seconds, require_key = :require_key,
    timeout_seconds = :timeout_seconds, updated_at = :now
WHERE name = :name
RETURNING name, task, max_attempts, lease_seconds, backoff_base, backoff_cap, retention_seconds,
          require_key, created_at, updated_at, timeout_seconds

-- name: queue_select
SELECT name, task, max_attempts, lease_seconds, backoff_base, backoff_cap, retention_seconds,
       require_key, created_at, updated_at, timeout_seconds
FROM jobledger_queues {where}

-- name: apikey_insert
INSERT INTO jobledger_api_keys (id, digest, name, scopes, rate_per_second, burst, created_at)
VALUES (:id, :digest, :name, :scopes, :rate_per_second, :burst, :now)
RETURNING id, name, scopes, rate_per_second, burst, created_at, revoked_at

-- name: apikey_select
SELECT id, name, scopes, rate_per_second, burst, created_at, revoked_at FROM jobledger_api_keys
{where}

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
-- How far ahead of the clock the bucket is.
SELECT tat - :now FROM jobledger_rate_limits WHERE bucket = :bucket

-- name: session_insert
INSERT INTO jobledger_sessions (digest, api_key_id, created_at, expires_at)
VALUES (:digest, :api_key_id, :now, :now + :ttl)
RETURNING expires_at

-- name: session_get
SELECT k.id, k.name, k.scopes, k.rate_per_second, k.burst, k.created_at, k.revoked_at
FROM jobledger_sessions s JOIN jobledger_api_keys k ON k.id = s.api_key_id
WHERE s.digest = :digest AND s.expires_at > :now

-- name: session_delete
DELETE FROM jobledger_sessions WHERE digest = :digest

-- name: session_prune
DELETE FROM jobledger_sessions WHERE expires_at <= :now
