-- The relay's index by availability (015): jobledger_outbox_due holds the same records as
-- before (available_at is never NULL), but its condition now names available_at too, so that
-- only a query that says something of available_at can use it: the relay's read of due
-- records ("available_at <= now") and a route's discard of what it owes.
--
-- Before, a lookup of one job's waiting record ("job_id = … AND published_at IS NULL AND
-- superseded_at IS NULL": the trigger that supersedes it when the job becomes pending again,
-- republish's check for each job) matched the index's condition, and when the table's
-- statistics counted few waiting records the planner read the whole index and filtered it by
-- job instead of using jobledger_outbox_job: during a broker outage, whose backlog is exactly
-- what that index holds, every retry of a routed job walked the backlog (as 014 did for leases).
DROP INDEX jobledger_outbox_due;
CREATE INDEX jobledger_outbox_due ON jobledger_outbox (available_at, id)
    WHERE published_at IS NULL AND superseded_at IS NULL AND available_at IS NOT NULL;
