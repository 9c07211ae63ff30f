-- The effects role: side effects recorded by key, fenced by the lease.
-- PostgreSQL. {jobs}, {attempts}, … are the schema-qualified tables; {now} is the caller's
-- explicit time or the database clock; {limit} is written in as a literal.

-- name: effect_record
-- The effect, recorded for the attempt that holds the lease; nothing when the lease is not
-- held or the effect is recorded already (effect_holder tells which).
INSERT INTO {effects} (queue, key, effect, job_id, attempt, recorded_at, detail)
SELECT %(queue)s, %(key)s, %(effect)s, id, attempts, {now}, %(detail)s::jsonb FROM {jobs}
WHERE id = %(job_id)s AND lease_token = %(token)s::uuid AND state = 'leased'
ON CONFLICT (queue, key, effect) DO NOTHING

-- name: effect_holder
SELECT attempts FROM {jobs}
WHERE id = %(job_id)s AND lease_token = %(token)s::uuid AND state = 'leased'

-- name: effect_get
SELECT queue, key, effect, job_id, attempt, recorded_at, detail FROM {effects}
WHERE queue = %(queue)s AND key = %(key)s AND effect = %(effect)s

-- name: effect_list
SELECT queue, key, effect, job_id, attempt, recorded_at, detail FROM {effects}
WHERE queue = %(queue)s AND key = %(key)s ORDER BY recorded_at, effect
