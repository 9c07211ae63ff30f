-- The outbox role (006). Triggers write the records (see migrations/006_outbox.sql); these
-- queries route queues, hand due records to a relay and mark them published.
-- PostgreSQL. {jobs}, {attempts}, … are the schema-qualified tables; {now} is the caller's
-- explicit time or the database clock; {limit} is written in as a literal.

-- name: route_lock
-- Routing a queue must not race with jobs becoming pending in it: wait for the transactions
-- writing jobs now, and hold new ones back until the route (and its backfill) commit.
LOCK TABLE {jobs} IN SHARE MODE

-- name: route_add
INSERT INTO {routes} (queue, routed_at, routed_by, note)
VALUES (%(queue)s, {now}, %(actor)s, %(note)s)
ON CONFLICT (queue) DO NOTHING

-- name: route_backfill
-- Pending jobs of a queue just routed: they were enqueued before the route existed.
INSERT INTO {outbox} (job_id, queue, key, reason, available_at, created_at)
SELECT id, queue, key, 'route', run_at, {now} FROM (
    SELECT id, queue, key, run_at FROM {jobs}
    WHERE queue = %(queue)s AND state = 'pending' AND group_name IS NULL
    UNION ALL
    SELECT id, queue, key, run_at FROM {jobs}
    WHERE queue = %(queue)s AND state = 'pending' AND group_name IS NOT NULL
) AS p
ORDER BY run_at, id

-- name: route_remove
DELETE FROM {routes} WHERE queue = %(queue)s

-- name: route_discard
-- "available_at IS NOT NULL" (true of every record) names the condition of
-- jobledger_outbox_due, so that the records waiting are read through it, not the whole table.
DELETE FROM {outbox}
WHERE queue = %(queue)s AND published_at IS NULL AND superseded_at IS NULL
  AND available_at IS NOT NULL

-- name: route_list
SELECT queue, routed_at, routed_by, note FROM {routes} ORDER BY queue

-- name: outbox_due
-- {queue_in} is "1 = 1" or "queue = ANY(%(queues)s::text[])"; {limit} is a literal.
SELECT id, job_id, queue, key, reason, available_at, created_at, published_at, superseded_at
FROM {outbox}
WHERE published_at IS NULL AND superseded_at IS NULL AND available_at <= {now}
  AND {queue_in}
ORDER BY available_at, id
LIMIT {limit}

-- name: outbox_mark
UPDATE {outbox} SET published_at = {now}
WHERE id = ANY(%(id)s::bigint[]) AND published_at IS NULL

-- name: outbox_list
-- {where} is built from fixed clauses; {limit} is a literal.
SELECT id, job_id, queue, key, reason, available_at, created_at, published_at, superseded_at
FROM {outbox} WHERE {where} ORDER BY id DESC LIMIT {limit}

-- name: outbox_stats
SELECT queue,
       count(*) FILTER (WHERE published_at IS NULL AND superseded_at IS NULL),
       count(*) FILTER (WHERE published_at IS NULL AND superseded_at IS NULL
                          AND available_at <= {now}),
       min(available_at) FILTER (WHERE published_at IS NULL AND superseded_at IS NULL
                                   AND available_at <= {now}),
       max(published_at),
       {now}
FROM {outbox} GROUP BY queue

-- name: outbox_prune
DELETE FROM {outbox}
WHERE id IN (SELECT id FROM {outbox}
             WHERE COALESCE(published_at, superseded_at) < %(before)s LIMIT {limit})

-- name: outbox_republish
-- Pending jobs of a routed queue, due at or before the caller's threshold (due that long or
-- longer), that have no record waiting to be published: the broker lost their message (or it
-- was purged). One new record each.
INSERT INTO {outbox} (job_id, queue, key, reason, available_at, created_at)
SELECT j.id, j.queue, j.key, 'republish', {now}, {now} FROM (
    SELECT id, queue, key, run_at FROM {jobs}
    WHERE state = 'pending' AND group_name IS NULL AND queue = %(queue)s
      AND run_at <= %(due_before)s
    UNION ALL
    SELECT id, queue, key, run_at FROM {jobs}
    WHERE state = 'pending' AND group_name IS NOT NULL AND queue = %(queue)s
      AND run_at <= %(due_before)s
) AS j
WHERE j.queue IN (SELECT queue FROM {routes})
  AND NOT EXISTS (SELECT 1 FROM {outbox} AS o
                  WHERE o.job_id = j.id AND o.published_at IS NULL AND o.superseded_at IS NULL)
ORDER BY j.run_at, j.id
LIMIT {limit}
