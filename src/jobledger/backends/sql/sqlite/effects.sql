-- The effects role: side effects recorded by key, fenced by the lease.
-- SQLite. Times are seconds since the Unix epoch; {limit} is written in as a literal.

-- name: effect_holder
SELECT attempts FROM jobledger_jobs WHERE id = :job_id AND lease_token = :token AND state = 'leased'

-- name: effect_record
INSERT INTO jobledger_effects (queue, key, effect, job_id, attempt, recorded_at, detail)
VALUES (:queue, :key, :effect, :job_id, :attempt, :now, :detail)
ON CONFLICT (queue, key, effect) DO NOTHING

-- name: effect_get
SELECT queue, key, effect, job_id, attempt, recorded_at, detail FROM jobledger_effects
WHERE queue = :queue AND key = :key AND effect = :effect

-- name: effect_list
SELECT queue, key, effect, job_id, attempt, recorded_at, detail FROM jobledger_effects
WHERE queue = :queue AND key = :key ORDER BY recorded_at, effect
