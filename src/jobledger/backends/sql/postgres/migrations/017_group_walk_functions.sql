-- The walk of the groups' turns as functions (017), for the grouped claim in one statement
-- (group_claim_unlimited in grouped.sql): each is planned under its own settings, which keep
-- the planner on the turn index. Until something analyzes the groups table (it fills from
-- empty, by trigger; where autovacuum is off, never), the planner takes a queue for a few
-- dozen groups and reads every row of the queue's groups to sort them: 16 ms a claim of 10
-- at 50,000 groups instead of 2. A statement of its own cannot set them for itself (the
-- two-statement claim does, with SET LOCAL in its transaction); a function's SET clause
-- holds while it runs, its query planned included. STABLE: they read in the snapshot of the
-- statement that calls them. Nothing else changes: a worker of the version before keeps
-- claiming as it did (in two statements), beside workers of this one.

-- The first groups of a queue in the order of their turns (never served first, then least
-- recently served) that have a due job (one probe of the grouped index each) and are not
-- paused: at most "keep" of them, from the first "scan" rows of the walk.
CREATE FUNCTION jobledger_group_turns(p_queue text, p_now timestamptz, p_keep int, p_scan int)
RETURNS TABLE (queue text, name text, served_at timestamptz)
LANGUAGE plpgsql STABLE
SET search_path FROM CURRENT SET enable_seqscan = off SET enable_bitmapscan = off
AS $$
BEGIN
    RETURN QUERY
    SELECT w.queue, w.name, w.served_at
    FROM (
        SELECT g.queue, g.name, g.served_at, g.paused_until
        FROM jobledger_groups AS g WHERE g.queue = p_queue
        ORDER BY g.served_at NULLS FIRST, g.name
        LIMIT p_scan
    ) AS w
    WHERE (SELECT j.run_at <= p_now FROM jobledger_jobs AS j
           WHERE j.state = 'pending' AND j.group_name > '' AND j.queue = w.queue
             AND j.group_name = w.name
           ORDER BY j.run_at LIMIT 1)
      AND (w.paused_until IS NULL OR w.paused_until <= p_now)
    ORDER BY w.served_at NULLS FIRST, w.name
    LIMIT p_keep;
END
$$;

-- Whether a queue has more than n groups' rows (read through an index, n + 1 at most).
CREATE FUNCTION jobledger_group_rows_over(p_queue text, p_n int) RETURNS boolean
LANGUAGE plpgsql STABLE
SET search_path FROM CURRENT SET enable_seqscan = off SET enable_bitmapscan = off
AS $$
BEGIN
    RETURN (SELECT count(*) > p_n
            FROM (SELECT 1 FROM jobledger_groups AS g WHERE g.queue = p_queue
                  LIMIT p_n + 1) AS r);
END
$$;
