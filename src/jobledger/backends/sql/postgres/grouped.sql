-- The grouped claim: jobs with a group, taken round the groups (docs/groups.md).
-- PostgreSQL. {jobs}, {attempts}, … are the schema-qualified tables; {now} is the caller's
-- explicit time or the database clock; {limit} is written in as a literal, and {queue_rows}
-- as in job_claim (one row of scalar parameters per queue: a generic plan that is kept).

-- name: group_waiting
-- Which of these queues have pending jobs with a group (one probe of the grouped index each).
SELECT q.name FROM unnest(%(queues)s::text[]) AS q(name)
WHERE EXISTS (SELECT 1 FROM {jobs} AS j
              WHERE j.state = 'pending' AND j.group_name IS NOT NULL AND j.queue = q.name)

-- name: group_candidates_turns
-- A grouped claim, first statement (the usual way): the groups' rows in the order of their
-- turns (every group with pending jobs has one: migration 012), each kept if it has a due job,
-- is not paused, is under its leased limit and has a token (as of this statement's snapshot),
-- until {limit} are kept; the rows of those that no other claim holds are locked for this
-- transaction (group_lock). Each queue's walk starts at its "turn_from" (NULL: at the
-- start; grouped.py) and stops after 4 * {limit} + 64 rows (rows of
-- groups without jobs, kept for a day, come first in the order): "more" says some queue has
-- more rows than that, and then a claim that kept fewer than {limit} asks group_candidates,
-- which finds every group. Each group is probed from its floor, as jobledger_group_turns_next
-- probes it (migration 020). A row per group locked ("kept" says how many were kept, locked or
-- not), with its next job as found ("next_at", "next_id") and whether that was found from
-- the start of the group ("exact"); the one row with a NULL name stands for "none locked".
WITH viable AS MATERIALIZED (
    SELECT v.queue, v.name, v.served_at, f.front, v.next_at, v.next_id, v.exact
    FROM {turn_rows} AS q(name, turn_from)
    -- The queue's limits are joined here, outside the walk: joined to each group's row, they
    -- made the walk's order unknown to the planner, which then probed every row of the walk
    -- and sorted them, instead of stopping once {limit} groups are kept.
    LEFT JOIN {group_limits} AS l ON l.queue = q.name
    -- The queue's front: the turn of the first row at or after "turn_from" (as
    -- jobledger_group_turns_from finds it).
    LEFT JOIN LATERAL (
        SELECT g.served_at AS front FROM {groups} AS g
        WHERE g.queue = q.name AND g.served_at >= COALESCE(q.turn_from, '-infinity')
        ORDER BY g.served_at NULLS FIRST, g.name LIMIT 1
    ) AS f ON true
    CROSS JOIN LATERAL (
        SELECT w.queue, w.name, w.served_at, n.next_at, n.next_id, w.exact
        FROM (
            SELECT t.*,
                   -- As jobledger_group_turns_next trusts a floor.
                   (q.turn_from IS NULL OR t.pending_from IS NULL OR t.pending_from_id IS NULL
                    OR t.pending_checked_at IS NULL OR t.pending_checked_at > {now}
                    OR t.pending_checked_at <= {now} - interval '10 seconds') AS exact
            FROM (
                -- As jobledger_group_turns_from (migration 019) walks: the groups never
                -- served, then those served from the queue's "turn_from" on (NULL: from the
                -- start), merged in the turn index's order.
                SELECT * FROM (
                    SELECT g.queue, g.name, g.served_at, g.paused_until, g.tokens,
                           g.refilled_at, g.pending_from, g.pending_from_id,
                           g.pending_checked_at
                    FROM {groups} AS g WHERE g.queue = q.name AND g.served_at IS NULL
                    ORDER BY g.served_at NULLS FIRST, g.name
                    LIMIT 4 * {limit} + 64
                ) AS fresh
                UNION ALL
                SELECT * FROM (
                    SELECT g.queue, g.name, g.served_at, g.paused_until, g.tokens,
                           g.refilled_at, g.pending_from, g.pending_from_id,
                           g.pending_checked_at
                    FROM {groups} AS g
                    WHERE g.queue = q.name AND g.served_at >= COALESCE(q.turn_from, '-infinity')
                    ORDER BY g.served_at NULLS FIRST, g.name
                    LIMIT 4 * {limit} + 64
                ) AS served
                ORDER BY served_at NULLS FIRST, name
                LIMIT 4 * {limit} + 64
            ) AS t
        ) AS w
        -- The group's next job, one probe of its index from the floor (as in
        -- group_candidates' walk); a lateral subquery with a limit, never a join, as which the
        -- planner may read every due job of the queue.
        CROSS JOIN LATERAL (
            SELECT j.run_at AS next_at, j.id AS next_id FROM {jobs} AS j
            WHERE j.state = 'pending' AND j.group_name > '' AND j.queue = w.queue
              AND j.group_name = w.name
              AND (j.run_at, j.id) >= (CASE WHEN w.exact THEN '-infinity' ELSE w.pending_from END,
                                       CASE WHEN w.exact THEN 0 ELSE w.pending_from_id END)
            ORDER BY j.run_at, j.id LIMIT 1
        ) AS n
        WHERE n.next_at <= {now}
          AND {@group_has_room}
        ORDER BY w.served_at NULLS FIRST, w.name
        LIMIT {limit}
    ) AS v
    ORDER BY v.served_at NULLS FIRST, v.queue, v.name
    LIMIT {limit}
), kept AS (
    SELECT count(*) AS kept FROM viable
), locked AS (
    SELECT v.queue, v.name, v.served_at, v.front, v.next_at, v.next_id, v.exact FROM viable AS v
    JOIN {groups} AS g ON g.queue = v.queue AND g.name = v.name
    {@group_lock}
)
-- "more" is counted only when fewer than {limit} were kept (a subquery in a CASE branch not
-- taken is never run): a claim that kept its whole batch does not read the groups' rows again.
-- "front" ends each row: its queue's front, where its next walk may start (grouped.py).
SELECT l.queue, l.name, l.served_at,
       CASE WHEN k.kept < {limit} THEN (
           SELECT count(*) > 4 * {limit} + 64 FROM (
               SELECT 1 FROM {queue_rows} AS q(name)
               CROSS JOIN LATERAL (SELECT 1 FROM {groups} AS g WHERE g.queue = q.name
                                   LIMIT (4 * {limit} + 65)) AS r
           ) AS x)
       ELSE false END AS more,
       k.kept, l.front, l.next_at, l.next_id, l.exact
FROM kept AS k LEFT JOIN locked AS l ON true

-- name: group_candidates
-- A grouped claim, first statement when group_candidates_turns stopped short: the groups
-- with due jobs, not paused, under their leased limit and with a token (as of this
-- statement's snapshot), least recently served first; the rows of the first {limit} of them
-- that no other claim holds are locked for this transaction (group_lock). The groups
-- are found by a skip scan of the grouped index (one probe per group, however many jobs each
-- has), never by reading the jobs.
WITH RECURSIVE walk AS (
    -- Each step reads one index entry: the next group's first pending job by run time.
    SELECT q.name AS queue, f.group_name AS name, f.run_at
    FROM {queue_rows} AS q(name)
    CROSS JOIN LATERAL (
        SELECT j.group_name, j.run_at FROM {jobs} AS j
        WHERE j.state = 'pending' AND j.group_name > '' AND j.queue = q.name
        ORDER BY j.group_name, j.run_at LIMIT 1
    ) AS f
    UNION ALL
    SELECT w.queue, f.group_name, f.run_at
    FROM walk AS w
    CROSS JOIN LATERAL (
        SELECT j.group_name, j.run_at FROM {jobs} AS j
        WHERE j.state = 'pending' AND j.group_name > '' AND j.queue = w.queue
          AND j.group_name > w.name
        ORDER BY j.group_name, j.run_at LIMIT 1
    ) AS f
), viable AS MATERIALIZED (
    SELECT w.queue, w.name, w.served_at
    FROM (
        SELECT k.queue, k.name, k.run_at, g.served_at, g.paused_until, g.tokens, g.refilled_at
        FROM walk AS k
        LEFT JOIN {groups} AS g ON g.queue = k.queue AND g.name = k.name
    ) AS w
    LEFT JOIN {group_limits} AS l ON l.queue = w.queue
    WHERE w.run_at <= {now} AND {@group_has_room}
    ORDER BY w.served_at NULLS FIRST, w.queue, w.name
    LIMIT {limit}
)
SELECT v.queue, v.name, v.served_at FROM viable AS v
JOIN {groups} AS g ON g.queue = v.queue AND g.name = v.name
{@group_lock}

-- name: group_lock
-- How a grouped claim holds a group until it commits: a row lock on the group's row, taken
-- without waiting (a group another claim holds is skipped). Row locks live in the row, so a
-- claim over 500 groups takes nothing from the server's shared lock table (advisory locks, one
-- per group, filled it: twelve transactions of 1,000 each, and every lock in the database
-- failed until they ended). NO KEY UPDATE: an enqueue's KEY SHARE lock on its group's row
-- (migration 012) does not stand in the way, and two claims exclude each other.
FOR NO KEY UPDATE OF g SKIP LOCKED

-- name: group_picked
-- The jobs a grouped claim takes (group_claim, group_claim_unlimited): up to "take" due jobs of
-- each group of "allowed" (its queue, name, order "ord", "take", and "floor_at", "floor_id":
-- no pending job of the group comes earlier by run time and id, as its walk found; NULL: none
-- known), locked, one per group per round in the groups' order, {limit} in all. The floor is
-- a condition on the index's entries, so the dead entries of the jobs claimed before it are
-- passed over without reading their rows (migration 020). Each group's jobs are numbered once, over the
-- whole batch (numbered inside the lateral probe, each group paid a sort and a window of its
-- own: 0.5 ms of a claim over 500).
picked AS (
    SELECT p.id FROM (
        SELECT s.id, a.ord,
               row_number() OVER (PARTITION BY a.ord ORDER BY s.priority DESC, s.run_at, s.id)
                   AS rn
        FROM allowed AS a
        CROSS JOIN LATERAL (
            SELECT id, priority, run_at FROM {jobs}
            WHERE state = 'pending' AND group_name IS NOT NULL AND queue = a.queue
              AND group_name = a.name AND run_at <= {now}
              AND (run_at, id) >= (COALESCE(a.floor_at, '-infinity'), COALESCE(a.floor_id, 0))
            ORDER BY priority DESC, run_at, id
            LIMIT GREATEST(a.take, 0)
            FOR UPDATE SKIP LOCKED
        ) AS s
        WHERE a.take > 0
    ) AS p
    ORDER BY p.rn, p.ord
    LIMIT {limit}
)

-- name: group_has_room
-- Whether the group "w" (its row's columns, NULL without one) under the limits "l" of its
-- queue may be served: not paused, under its leased limit, with a token. A clock behind the
-- last refill adds no tokens and takes none away (GREATEST(0, …), as group_claim counts them).
(w.paused_until IS NULL OR w.paused_until <= {now})
AND (l.max_leased IS NULL OR l.max_leased > (
     SELECT count(*) FROM (
         SELECT 1 FROM {jobs} AS j
         WHERE j.state = 'leased' AND j.group_name IS NOT NULL AND j.queue = w.queue
           AND j.group_name = w.name
         LIMIT l.max_leased) AS x))
AND (l.rate IS NULL OR w.tokens IS NULL
     OR w.tokens + l.rate * GREATEST(0, extract(epoch FROM {now} - w.refilled_at)) >= 1)

-- name: group_claim
-- A grouped claim, second statement: the locked groups as they are now (a new snapshot, taken
-- after the locks: every claim that held one of them before has committed), each group's
-- allowance (free lease slots and whole tokens, as _records.allowance counts them) and at most
-- %(share)s (grouped.py), up to that many due jobs of each group, one per group per round in
-- the groups' order (as %(queues)s and %(names)s list them: "ord"), {limit} in all, each
-- group's jobs from its floor (%(floor_ats)s, %(floor_ids)s: its next job as the first
-- statement found; NULL: from the start); leased as job_claim leases; and each served group's
-- bucket as left, its turn and its floor (checked from the start now where %(exacts)s says
-- the first statement's probe was; a group without a floor keeps the one it had).
WITH current AS (
    SELECT a.queue, a.name, a.ord, a.floor_at, a.floor_id, a.exact, l.max_leased,
           -- The bucket now (_records.tokens_now): NULL without a rate.
           CASE WHEN l.rate IS NULL THEN NULL
                WHEN g.tokens IS NULL OR g.refilled_at IS NULL
                     THEN COALESCE(l.burst, GREATEST(1, l.rate))
                ELSE LEAST(COALESCE(l.burst, GREATEST(1, l.rate)),
                           g.tokens + l.rate
                                      * GREATEST(0, extract(epoch FROM {now} - g.refilled_at)))
           END AS tokens
    FROM unnest(%(queues)s::text[], %(names)s::text[], %(floor_ats)s::timestamptz[],
                %(floor_ids)s::bigint[], %(exacts)s::bool[])
        WITH ORDINALITY AS a(queue, name, floor_at, floor_id, exact, ord)
    LEFT JOIN {groups} AS g ON g.queue = a.queue AND g.name = a.name
    LEFT JOIN {group_limits} AS l ON l.queue = a.queue
    WHERE g.paused_until IS NULL OR g.paused_until <= {now}
), allowed AS (
    SELECT c.queue, c.name, c.ord, c.tokens, c.floor_at, c.floor_id, c.exact,
           LEAST({limit}, %(share)s::int, COALESCE(floor(c.tokens)::int, {limit}),
                 COALESCE(c.max_leased - (
                     SELECT count(*) FROM (
                         SELECT 1 FROM {jobs} AS j
                         WHERE j.state = 'leased' AND j.group_name IS NOT NULL
                           AND j.queue = c.queue AND j.group_name = c.name
                         LIMIT COALESCE(c.max_leased, 0)) AS x), {limit})) AS take
    FROM current AS c
), {@group_picked}, {@lease_claimed}, served AS (
    INSERT INTO {groups} AS g
        (queue, name, tokens, refilled_at, served_at, pending_from, pending_from_id,
         pending_checked_at)
    SELECT a.queue, a.name, a.tokens - t.taken, {now}, {now}, a.floor_at, a.floor_id,
           CASE WHEN a.exact THEN {now} END
    FROM allowed AS a
    JOIN (SELECT queue, group_name, count(*) AS taken FROM claimed GROUP BY queue, group_name)
        AS t ON t.queue = a.queue AND t.group_name = a.name
    ON CONFLICT (queue, name) DO UPDATE
    SET tokens = excluded.tokens, refilled_at = excluded.refilled_at,
        served_at = excluded.served_at,
        pending_from = COALESCE(excluded.pending_from, g.pending_from),
        pending_from_id = CASE WHEN excluded.pending_from IS NULL THEN g.pending_from_id
                               ELSE excluded.pending_from_id END,
        pending_checked_at = COALESCE(excluded.pending_checked_at, g.pending_checked_at)
)
{@lease_returned}

-- name: group_claim_unlimited
-- A grouped claim in one statement, its own transaction, for queues without group limits
-- (neither a leased limit nor a rate): with nothing to count under the groups' locks it needs
-- no snapshot taken after them. It walks each queue's turns from its "turn_from"
-- ({group_turns_next}, migrations 017, 019 and 020: planned on the turn index whether or not
-- the groups table was analyzed; each group's probes from its floor, unless the walk starts
-- from the start) and locks the first {limit} groups that no other claim holds, their pause
-- checked again on each row as locked; then, as group_claim, leases up to each one's share of
-- the batch, one job per group per round, each group's jobs from the next run time its walk
-- found; and writes the served groups' turns and floors (that next run time; checked from the
-- start now if the walk's probe was).
-- Every row ends with "limited" (a queue of the claim has limits: nothing was claimed, the
-- claim goes the two-statement way), "more" (as in group_candidates_turns), "share", and each
-- queue's front as its walk found it ("front_queues", "front_turns": where the next walk may
-- start, grouped.py); a claim that leased nothing returns one row whose job columns are NULL.
WITH limited AS MATERIALIZED (
    SELECT EXISTS (
        SELECT 1 FROM {queue_rows} AS q(name)
        JOIN {group_limits} AS l ON l.queue = q.name
        WHERE l.max_leased IS NOT NULL OR l.rate IS NOT NULL
    ) AS limited
), viable AS MATERIALIZED (
    SELECT v.queue, v.name, v.served_at, v.front, v.next_at, v.next_id, v.exact
    FROM {turn_rows} AS q(name, turn_from)
    CROSS JOIN LATERAL {group_turns_next}(q.name, {now}, {limit}, 4 * {limit} + 64, q.turn_from)
        AS v
    WHERE NOT (SELECT x.limited FROM limited AS x)
    ORDER BY v.served_at NULLS FIRST, v.queue, v.name
    LIMIT {limit}
), locked AS (
    -- One probe of the groups' key per group kept (a join may read the whole table for them
    -- before it is analyzed).
    SELECT v.queue, v.name, v.served_at, v.next_at, v.next_id FROM viable AS v
    CROSS JOIN LATERAL (
        SELECT 1 FROM {groups} AS g
        WHERE g.queue = v.queue AND g.name = v.name
          AND (g.paused_until IS NULL OR g.paused_until <= {now})
        {@group_lock}
    ) AS g
), allowed AS (
    -- The locked groups in the order of their turns, each allowed its share of the batch.
    SELECT k.queue, k.name, k.next_at AS floor_at, k.next_id AS floor_id,
           row_number() OVER (ORDER BY k.served_at NULLS FIRST, k.queue, k.name) AS ord,
           ({limit} + count(*) OVER () - 1) / count(*) OVER () AS take
    FROM locked AS k
), {@group_picked}, {@lease_claimed}, served AS (
    -- As group_claim writes them: no bucket (the queue has no rate), the turn now; and the
    -- floor, with the time it was checked from the start (kept if this walk's probe was not).
    INSERT INTO {groups} AS g
        (queue, name, tokens, refilled_at, served_at, pending_from, pending_from_id,
         pending_checked_at)
    SELECT v.queue, v.name, NULL::float8, {now}, {now}, v.next_at, v.next_id,
           CASE WHEN v.exact THEN {now} END
    FROM viable AS v
    WHERE EXISTS (SELECT 1 FROM claimed AS c
                  WHERE c.queue = v.queue AND c.group_name = v.name)
    ON CONFLICT (queue, name) DO UPDATE
    SET tokens = excluded.tokens, refilled_at = excluded.refilled_at,
        served_at = excluded.served_at, pending_from = excluded.pending_from,
        pending_from_id = excluded.pending_from_id, pending_checked_at = COALESCE(excluded.pending_checked_at, g.pending_checked_at)
), returned AS (
    {@lease_returned}
), front AS (
    -- Each queue's front, as its walk found it: where its next walk may start.
    SELECT v.queue, min(v.front) AS turn FROM viable AS v
    WHERE v.front IS NOT NULL GROUP BY v.queue
)
SELECT r.*, x.limited,
       -- Counted only when fewer than {limit} groups were kept (see group_candidates_turns),
       -- and not for a claim that goes the two-statement way anyway.
       CASE WHEN NOT x.limited AND (SELECT count(*) FROM viable) < {limit} THEN (
           SELECT bool_or({group_rows_over}(q.name, 4 * {limit} + 64))
           FROM {queue_rows} AS q(name))
       ELSE false END AS more,
       (SELECT max(a.take) FROM allowed AS a) AS share,
       (SELECT array_agg(f.queue ORDER BY f.queue) FROM front AS f) AS front_queues,
       (SELECT array_agg(f.turn ORDER BY f.queue) FROM front AS f) AS front_turns
FROM limited AS x LEFT JOIN returned AS r ON true
