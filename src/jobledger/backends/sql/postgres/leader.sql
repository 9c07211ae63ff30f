-- The leader role (003). A leader lease is valid while lease_until > now; every write a
-- leader makes is fenced by leader_fence in the same transaction.
-- PostgreSQL. {jobs}, {attempts}, … are the schema-qualified tables; {now} is the caller's
-- explicit time or the database clock; {limit} is written in as a literal.

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

-- name: leader_list
SELECT name, holder, token, term, lease_until, acquired_at, renewed_at, {now}
FROM {leaders} ORDER BY name

-- name: leader_fence
SELECT 1 FROM {leaders}
WHERE name = %(name)s AND token = %(token)s::uuid AND lease_until > {now}
FOR SHARE
