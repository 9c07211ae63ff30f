-- A job's created and updated times default to the transaction's clock (018), so that a bulk
-- enqueue by COPY without an explicit clock leaves them to the server instead of sending, and
-- the server parsing, two timestamps a row (the COPY's time is that clock already: see
-- job_copy_start). Every other insert names both, as before.
ALTER TABLE jobledger_jobs
    ALTER COLUMN created_at SET DEFAULT now(),
    ALTER COLUMN updated_at SET DEFAULT now();
