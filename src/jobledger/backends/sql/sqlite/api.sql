-- The api role (004, 007): declared queues, API keys, rate limits, dashboard sessions.
-- SQLite. Times are seconds since the Unix epoch; {limit} is written in as a literal.

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
