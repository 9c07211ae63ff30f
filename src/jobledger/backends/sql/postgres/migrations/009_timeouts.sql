-- Timeouts (009): an attempt that runs past its task's timeout is closed with an outcome of its
-- own, and a declared queue's timeout is the default of its tasks and of the jobs published to
-- it over HTTP.

ALTER TABLE jobledger_attempts DROP CONSTRAINT jobledger_attempts_outcome_check;
ALTER TABLE jobledger_attempts ADD CONSTRAINT jobledger_attempts_outcome_check
    CHECK (outcome IN ('done', 'retry', 'dead', 'lease_expired', 'released', 'timed_out'));

ALTER TABLE jobledger_queues ADD COLUMN timeout_seconds double precision
    CHECK (timeout_seconds > 0);
