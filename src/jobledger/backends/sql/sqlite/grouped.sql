-- The grouped claim: jobs with a group, taken round the groups (docs/groups.md).
-- SQLite. Times are seconds since the Unix epoch; {limit} is written in as a literal.

-- name: group_waiting
-- Whether any of these queues has pending jobs with a group (one probe of the grouped index).
SELECT 1 FROM jobledger_jobs
WHERE state = 'pending' AND group_name IS NOT NULL AND queue IN ({queues}) LIMIT 1

-- name: group_candidates_turns
-- The groups of a queue with due jobs, not paused, in the order of their turns (never served
-- first, then least recently served), from the groups' rows (every group with pending jobs has
-- one: migration 012), read as the claim needs them; the walk stops after :scan rows (rows of
-- groups without jobs, kept for a day, may come first): group_rows_beyond says whether there
-- are more, and then the claim asks group_candidates, which finds every group.
SELECT t.name, t.served_at, t.tokens, t.refilled_at
FROM (SELECT name, served_at, tokens, refilled_at, paused_until
      FROM jobledger_groups INDEXED BY jobledger_groups_turn
      WHERE queue = :queue ORDER BY served_at, name LIMIT :scan) AS t
WHERE (t.paused_until IS NULL OR t.paused_until <= :now)
  AND EXISTS (SELECT 1 FROM jobledger_jobs AS j INDEXED BY jobledger_jobs_group_next
              WHERE j.state = 'pending' AND j.group_name IS NOT NULL AND j.queue = :queue
                AND j.group_name = t.name AND j.run_at <= :now)

-- name: group_rows_beyond
-- Whether a queue has more than :scan groups' rows.
SELECT count(*) > :scan FROM (SELECT 1 FROM jobledger_groups WHERE queue = :queue LIMIT :scan + 1)

-- name: group_candidates
-- The groups of a queue with due jobs, not paused, least recently served first (never served
-- first of all). The groups are found by a skip scan of the grouped index (one probe per
-- group, however many jobs each has: pending_groups), never by reading the jobs.
WITH RECURSIVE {@pending_groups}
SELECT pending.name, g.served_at, g.tokens, g.refilled_at
FROM pending LEFT JOIN jobledger_groups AS g ON g.queue = :queue AND g.name = pending.name
WHERE pending.name IS NOT NULL
  AND (g.paused_until IS NULL OR g.paused_until <= :now)
  AND (SELECT min(run_at) FROM jobledger_jobs AS j
       WHERE j.state = 'pending' AND j.group_name IS NOT NULL AND j.queue = :queue
         AND j.group_name = pending.name) <= :now
ORDER BY g.served_at IS NOT NULL, g.served_at, pending.name

-- name: group_leased
-- A group's leased jobs, counted up to its limit (no further: the claim needs no more).
SELECT count(*) FROM (
    SELECT 1 FROM jobledger_jobs
    WHERE state = 'leased' AND group_name IS NOT NULL AND queue = :queue AND group_name = :name
    LIMIT :cap
)

-- name: group_due_jobs
-- A group's next due jobs, in claim order. INDEXED BY: left alone, SQLite may read every due
-- job of the group through the (queue, group_name, run_at) index and sort them.
SELECT id FROM jobledger_jobs INDEXED BY jobledger_jobs_group_due
WHERE state = 'pending' AND group_name IS NOT NULL AND queue = :queue AND group_name = :name
  AND run_at <= :now
ORDER BY priority DESC, run_at, id
LIMIT :n

-- name: job_lease_ids
-- The jobs a grouped claim chose ({ids}: their ids, written in), leased as every claim leases.
{@lease_update}
WHERE id IN ({ids}) AND state = 'pending'
{@leased}

-- name: group_served
-- A claim took some of the group's jobs: its bucket as left, and its turn in the round.
INSERT INTO jobledger_groups (queue, name, tokens, refilled_at, served_at)
VALUES (:queue, :name, :tokens, :now, :now)
ON CONFLICT (queue, name) DO UPDATE
SET tokens = excluded.tokens, refilled_at = excluded.refilled_at, served_at = excluded.served_at
