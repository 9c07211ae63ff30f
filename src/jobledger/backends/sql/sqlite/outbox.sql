-- The outbox role (006). Triggers write the records (see migrations/006_outbox.sql); these
-- queries route queues, hand due records to a relay and mark them published.
-- SQLite. Times are seconds since the Unix epoch; {limit} is written in as a literal.

-- name: route_lock
-- Routing a queue must not race with jobs becoming pending in it. On SQLite the route's write
-- transaction already holds every other writer back: nothing more to lock.
SELECT 1

-- name: route_add
INSERT INTO jobledger_routes (queue, routed_at, routed_by, note)
VALUES (:queue, :now, :actor, :note)
ON CONFLICT (queue) DO NOTHING

-- name: route_backfill
-- Pending jobs of a queue just routed: they were enqueued before the route existed.
INSERT INTO jobledger_outbox (job_id, queue, key, reason, available_at, created_at)
SELECT id, queue, key, 'route', run_at, :now FROM (
    SELECT id, queue, key, run_at FROM jobledger_jobs
    WHERE queue = :queue AND state = 'pending' AND group_name IS NULL
    UNION ALL
    SELECT id, queue, key, run_at FROM jobledger_jobs
    WHERE queue = :queue AND state = 'pending' AND group_name IS NOT NULL
)
ORDER BY run_at, id

-- name: route_remove
DELETE FROM jobledger_routes WHERE queue = :queue

-- name: route_discard
DELETE FROM jobledger_outbox
WHERE queue = :queue AND published_at IS NULL AND superseded_at IS NULL

-- name: route_list
SELECT queue, routed_at, routed_by, note FROM jobledger_routes ORDER BY queue

-- name: outbox_due
-- {queue_in} is "1 = 1" or "queue IN (:queues0, …)"; {limit} is a literal.
SELECT id, job_id, queue, key, reason, available_at, created_at, published_at, superseded_at
FROM jobledger_outbox
WHERE published_at IS NULL AND superseded_at IS NULL AND available_at <= :now AND {queue_in}
ORDER BY available_at, id
LIMIT {limit}

-- name: outbox_mark
UPDATE jobledger_outbox SET published_at = :now WHERE id = :id AND published_at IS NULL

-- name: outbox_list
-- {where} is built from fixed clauses; {limit} is a literal.
SELECT id, job_id, queue, key, reason, available_at, created_at, published_at, superseded_at
FROM jobledger_outbox WHERE {where} ORDER BY id DESC LIMIT {limit}

-- name: outbox_stats
SELECT queue,
       sum(published_at IS NULL AND superseded_at IS NULL),
       sum(published_at IS NULL AND superseded_at IS NULL AND available_at <= :now),
       min(CASE WHEN published_at IS NULL AND superseded_at IS NULL AND available_at <= :now
                THEN available_at END),
       max(published_at),
       :now
FROM jobledger_outbox GROUP BY queue

-- name: outbox_prune
DELETE FROM jobledger_outbox
WHERE id IN (SELECT id FROM jobledger_outbox
             WHERE COALESCE(published_at, superseded_at) < :before LIMIT {limit})

-- name: outbox_republish
-- Pending jobs of a routed queue, due at or before the caller's threshold (due that long or
-- longer), that have no record waiting to be published: the broker lost their message (or it
-- was purged). One new record each.
INSERT INTO jobledger_outbox (job_id, queue, key, reason, available_at, created_at)
SELECT j.id, j.queue, j.key, 'republish', :now, :now FROM (
    SELECT id, queue, key, run_at FROM jobledger_jobs
    WHERE state = 'pending' AND group_name IS NULL AND queue = :queue AND run_at <= :due_before
    UNION ALL
    SELECT id, queue, key, run_at FROM jobledger_jobs
    WHERE state = 'pending' AND group_name IS NOT NULL AND queue = :queue
      AND run_at <= :due_before
) AS j
WHERE j.queue IN (SELECT queue FROM jobledger_routes)
  AND NOT EXISTS (SELECT 1 FROM jobledger_outbox AS o
                  WHERE o.job_id = j.id AND o.published_at IS NULL AND o.superseded_at IS NULL)
ORDER BY j.run_at, j.id
LIMIT {limit}
