-- Attempts written once (016): an attempt's row is inserted when the attempt ends (done,
-- retry, dead, timed out, released, lease expired), no longer inserted at the claim and
-- updated at the end. While a job is leased its attempt is its row's: attempts (the number),
-- lease_token, leased_by (the worker) and leased_at (when the claim began it, new here);
-- attempt_list shows it from there. One write of the attempts table per attempt instead of
-- two, and no dead version of each attempt's row (docs/benchmarks.md, "Attempts written once").
--
-- The attempts of jobs leased now keep their open rows: the write that ends such an attempt
-- fills its row in (each close is an insert that, on a row already there and still open,
-- updates it), and attempt_list shows the row rather than the job's. So does a worker of the
-- version before this one that claims after it: its open row is closed the same way. The one
-- thing lost while workers of both versions run: the rescuer of an old worker, closing a lease
-- that a new worker began and let expire, updates a row that does not exist, so that
-- attempt's row is never written (the job is rescued as before). Stop the workers of the
-- version before 016 once it is applied.
ALTER TABLE jobledger_jobs ADD COLUMN leased_at timestamptz;

UPDATE jobledger_jobs AS j SET leased_at = a.started_at
FROM jobledger_attempts AS a
WHERE j.state = 'leased' AND j.lease_until IS NOT NULL
  AND a.job_id = j.id AND a.attempt = j.attempts;
