-- The leader role (003). A leader lease is valid while lease_until > now; every write a
-- leader makes is fenced by leader_fence in the same transaction.
-- SQLite. Times are seconds since the Unix epoch; {limit} is written in as a literal.

-- name: leader_acquire
INSERT INTO jobledger_leaders (name, holder, token, term, lease_until, acquired_at, renewed_at)
VALUES (:name, :holder, lower(hex(randomblob(16))), 1, :now + :ttl, :now, :now)
ON CONFLICT (name) DO UPDATE
SET holder = excluded.holder, token = excluded.token, term = jobledger_leaders.term + 1,
    lease_until = excluded.lease_until, acquired_at = excluded.acquired_at,
    renewed_at = excluded.renewed_at
WHERE jobledger_leaders.lease_until <= excluded.acquired_at
RETURNING name, holder, token, term, lease_until, acquired_at, renewed_at, :now

-- name: leader_renew
UPDATE jobledger_leaders SET lease_until = :now + :ttl, renewed_at = :now
WHERE name = :name AND token = :token AND lease_until > :now
RETURNING name, holder, token, term, lease_until, acquired_at, renewed_at, :now

-- name: leader_release
UPDATE jobledger_leaders SET lease_until = :now, renewed_at = :now
WHERE name = :name AND token = :token AND lease_until > :now

-- name: leader_list
SELECT name, holder, token, term, lease_until, acquired_at, renewed_at, :now
FROM jobledger_leaders ORDER BY name

-- name: leader_fence
SELECT 1 FROM jobledger_leaders WHERE name = :name AND token = :token AND lease_until > :now
