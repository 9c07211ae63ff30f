-- Each group's floor (020): where the probes of its pending jobs start. A claim leases a group's
-- jobs, and each one's entries in jobledger_jobs_group_due and jobledger_jobs_group_next stay,
-- dead, at the start of the group's range until vacuum removes them. While a long transaction
-- elsewhere holds back the xmin horizon, vacuum removes none, and every probe of the group
-- (is a job due? which jobs?) visits each one's row: measured, a claim of 10 from one group
-- grew from 2.7 to 15.4 ms over 30,000 jobs claimed. So a claim that serves a group writes, in the
-- same row write as its turn, the run time and id of the group's first pending job as its walk
-- found it ("pending_from", "pending_from_id": no pending job of the group comes earlier in
-- that order, as of that walk), and the next walk's probes start there. Jobs that become pending below a floor afterwards (another
-- process's release, a job dated in the past, an enqueue whose transaction began before the
-- claim's and ended after it) are found by a probe from the start of the group, which a walk
-- makes when the floor was last checked from the start ("pending_checked_at") more than ten
-- seconds before its own time, or after it, or when the walk itself starts from the start
-- (postgres/grouped.py). NULL: no floor.
ALTER TABLE jobledger_groups
    ADD COLUMN pending_from timestamptz,
    ADD COLUMN pending_from_id bigint,
    ADD COLUMN pending_checked_at timestamptz;

-- A group's next job, now by run time and id: the jobs of one enqueue share a run time, and a
-- floor of a run time alone would leave every claimed one of them before the probe's start.
DROP INDEX jobledger_jobs_group_next;
CREATE INDEX jobledger_jobs_group_next ON jobledger_jobs (queue, group_name, run_at, id)
    WHERE state = 'pending' AND group_name > '';

-- The walk of jobledger_group_turns_from (019), each group's due probe starting at its floor
-- when the floor may be trusted; each row adds the group's next job as found (its run time
-- "next_at" and id "next_id") and whether it was found from the start of the group ("exact"). The function of 019 stays for
-- workers of the version before.
CREATE FUNCTION jobledger_group_turns_next(
    p_queue text, p_now timestamptz, p_keep int, p_scan int, p_from timestamptz
)
RETURNS TABLE (
    queue text, name text, served_at timestamptz, front timestamptz, next_at timestamptz,
    next_id bigint, exact boolean
)
LANGUAGE plpgsql STABLE
SET search_path FROM CURRENT SET enable_seqscan = off SET enable_bitmapscan = off
AS $$
DECLARE
    v_front timestamptz;
BEGIN
    SELECT g.served_at INTO v_front FROM jobledger_groups AS g
    WHERE g.queue = p_queue AND g.served_at >= COALESCE(p_from, '-infinity')
    ORDER BY g.served_at NULLS FIRST, g.name
    LIMIT 1;
    RETURN QUERY
    SELECT w.queue, w.name, w.served_at, v_front, n.next_at, n.next_id, w.exact
    FROM (
        SELECT t.*,
               -- A floor is trusted on a walk from the front, checked from the start within
               -- the last ten seconds of this walk's time (cursor.LONGEST).
               (p_from IS NULL OR t.pending_from IS NULL OR t.pending_from_id IS NULL
                OR t.pending_checked_at IS NULL
                OR t.pending_checked_at > p_now
                OR t.pending_checked_at <= p_now - interval '10 seconds') AS exact
        FROM (
            SELECT * FROM (
                SELECT g.queue, g.name, g.served_at, g.paused_until, g.pending_from,
                       g.pending_from_id, g.pending_checked_at
                FROM jobledger_groups AS g WHERE g.queue = p_queue AND g.served_at IS NULL
                ORDER BY g.served_at NULLS FIRST, g.name
                LIMIT p_scan
            ) AS fresh
            UNION ALL
            SELECT * FROM (
                SELECT g.queue, g.name, g.served_at, g.paused_until, g.pending_from,
                       g.pending_from_id, g.pending_checked_at
                FROM jobledger_groups AS g
                WHERE g.queue = p_queue AND g.served_at >= COALESCE(p_from, '-infinity')
                ORDER BY g.served_at NULLS FIRST, g.name
                LIMIT p_scan
            ) AS served
            ORDER BY served_at NULLS FIRST, name
            LIMIT p_scan
        ) AS t
    ) AS w
    -- The group's next job, one probe of its index from the floor (a range of the index whose
    -- start skips the dead entries below it).
    CROSS JOIN LATERAL (
        SELECT j.run_at AS next_at, j.id AS next_id FROM jobledger_jobs AS j
        WHERE j.state = 'pending' AND j.group_name > '' AND j.queue = w.queue
          AND j.group_name = w.name
          AND (j.run_at, j.id) >= (CASE WHEN w.exact THEN '-infinity' ELSE w.pending_from END,
                                   CASE WHEN w.exact THEN 0 ELSE w.pending_from_id END)
        ORDER BY j.run_at, j.id LIMIT 1
    ) AS n
    WHERE n.next_at <= p_now
      AND (w.paused_until IS NULL OR w.paused_until <= p_now)
    ORDER BY w.served_at NULLS FIRST, w.name
    LIMIT p_keep;
END
$$;
