-- Attempts written once (016): an attempt's row is inserted when the attempt ends (done,
-- retry, dead, timed out, released, lease expired), no longer inserted at the claim and
-- updated at the end. While a job is leased its attempt is its row's: attempts (the number),
-- lease_token, leased_by (the worker) and leased_at (when the claim began it, new here);
-- attempt_list shows it from there. One write of the attempts table per attempt instead of
-- two (docs/benchmarks.md, "Attempts written once").
--
-- The attempts of jobs leased now keep their open rows: the write that ends such an attempt
-- fills its row in (each close is an insert that, on a row already there and still open,
-- updates it), and attempt_list shows the row rather than the job's. A worker of the version
-- before 016 that still runs writes attempts the old way: stop those once it is applied (see
-- PostgreSQL's 016 for the one row that would be lost).
ALTER TABLE jobledger_jobs ADD COLUMN leased_at REAL;

UPDATE jobledger_jobs
SET leased_at = (SELECT a.started_at FROM jobledger_attempts AS a
                 WHERE a.job_id = jobledger_jobs.id AND a.attempt = jobledger_jobs.attempts)
WHERE state = 'leased';
