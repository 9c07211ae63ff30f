-- Timeouts (009): an attempt that runs past its task's timeout is closed with an outcome of its
-- own, and a declared queue's timeout is the default of its tasks and of the jobs published to
-- it over HTTP.

-- SQLite cannot change a CHECK constraint in place: the attempts table is rebuilt with the new
-- outcome allowed (every row copied, inside the migration's transaction).
CREATE TABLE jobledger_attempts_009 (
    job_id        INTEGER NOT NULL,
    attempt       INTEGER NOT NULL,
    lease_token   TEXT    NOT NULL,
    worker        TEXT    NOT NULL,
    started_at    REAL    NOT NULL,
    finished_at   REAL,
    outcome       TEXT CHECK (outcome IN ('done', 'retry', 'dead', 'lease_expired', 'released',
                                          'timed_out')),
    error_class   TEXT,
    error_message TEXT,
    traceback     TEXT,
    PRIMARY KEY (job_id, attempt)
) WITHOUT ROWID;
INSERT INTO jobledger_attempts_009 SELECT * FROM jobledger_attempts;
DROP TABLE jobledger_attempts;
ALTER TABLE jobledger_attempts_009 RENAME TO jobledger_attempts;
CREATE INDEX jobledger_attempts_expired ON jobledger_attempts (finished_at)
    WHERE outcome = 'lease_expired';

ALTER TABLE jobledger_queues ADD COLUMN timeout_seconds REAL CHECK (timeout_seconds > 0);
