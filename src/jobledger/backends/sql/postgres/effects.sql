-- The effects role: side effects recorded by key, fenced by the lease.
-- PostgreSQL. {jobs}, {attempts}, … are the schema-qualified tables; {now} is the caller's
-- explicit time or the database clock; {limit} is written in as a literal.

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
