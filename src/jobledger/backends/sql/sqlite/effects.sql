-- The effects role: side effects recorded by key, fenced by the lease.
-- SQLite. Times are seconds since the Unix epoch; {limit} is written in as a literal.

-- name: effect_record
-- The effect, recorded for the attempt that holds the lease; nothing when the lease is not
-- held or the effect is recorded already (effect_holder tells which).
INSERT INTO jobledger_effects (queue, key, effect, job_id, attempt, recorded_at, detail)
SELECT :queue, :key, :effect, id, attempts, :now, :detail FROM jobledger_jobs
WHERE id = :job_id AND lease_token = :token AND state = 'leased'
ON CONFLICT (queue, key, effect) DO NOTHING

-- name: effect_holder
SELECT attempts FROM jobledger_jobs WHERE id = :job_id AND lease_token = :token AND state = 'leased'

-- name: effect_get
SELECT queue, key, effect, job_id, attempt, recorded_at, detail FROM jobledger_effects
WHERE queue = :queue AND key = :key AND effect = :effect

-- name: effect_list
SELECT queue, key, effect, job_id, attempt, recorded_at, detail FROM jobledger_effects
WHERE queue = :queue AND key = :key ORDER BY recorded_at, effect
