-- The ledger's tables. Times are seconds since the Unix epoch (REAL), UTC.

CREATE TABLE jobledger_jobs (
    id               INTEGER PRIMARY KEY AUTOINCREMENT,
    queue            TEXT    NOT NULL,
    key              TEXT    NOT NULL,
    task             TEXT    NOT NULL,
    payload          TEXT    NOT NULL,
    state            TEXT    NOT NULL DEFAULT 'pending'
        CHECK (state IN ('pending', 'leased', 'done', 'dead', 'cancelled')),
    priority         INTEGER NOT NULL DEFAULT 0,
    run_at           REAL    NOT NULL,
    attempts         INTEGER NOT NULL DEFAULT 0,
    max_attempts     INTEGER NOT NULL CHECK (max_attempts > 0),
    attempt_limit    INTEGER NOT NULL,
    lease_seconds    REAL    NOT NULL CHECK (lease_seconds > 0),
    lease_until      REAL,
    lease_token      TEXT,
    leased_by        TEXT,
    created_at       REAL    NOT NULL,
    updated_at       REAL    NOT NULL,
    finished_at      REAL,
    last_error       TEXT,
    last_error_class TEXT,
    last_traceback   TEXT,
    correlation_id   TEXT,
    CONSTRAINT jobledger_jobs_queue_key UNIQUE (queue, key)
);

-- The claim walks this index in order: due pending jobs of a queue, highest priority first.
CREATE INDEX jobledger_jobs_due ON jobledger_jobs (queue, priority DESC, run_at, id)
    WHERE state = 'pending';
-- The rescuer finds expired leases here without touching other rows.
CREATE INDEX jobledger_jobs_leased ON jobledger_jobs (lease_until) WHERE state = 'leased';
-- Dead letters are listed and redriven by queue.
CREATE INDEX jobledger_jobs_dead ON jobledger_jobs (queue, finished_at) WHERE state = 'dead';

-- One row per claim; closed once with its outcome, never rewritten after.
CREATE TABLE jobledger_attempts (
    job_id        INTEGER NOT NULL,
    attempt       INTEGER NOT NULL,
    lease_token   TEXT    NOT NULL,
    worker        TEXT    NOT NULL,
    started_at    REAL    NOT NULL,
    finished_at   REAL,
    outcome       TEXT CHECK (outcome IN ('done', 'retry', 'dead', 'lease_expired', 'released')),
    error_class   TEXT,
    error_message TEXT,
    traceback     TEXT,
    PRIMARY KEY (job_id, attempt)
) WITHOUT ROWID;

-- Lease expiries of the last hour are counted from here (status, alerts).
CREATE INDEX jobledger_attempts_expired ON jobledger_attempts (finished_at)
    WHERE outcome = 'lease_expired';

-- Operator actions and refused late writes, per job.
CREATE TABLE jobledger_events (
    id     INTEGER PRIMARY KEY AUTOINCREMENT,
    job_id INTEGER NOT NULL,
    at     REAL    NOT NULL,
    kind   TEXT    NOT NULL,
    actor  TEXT,
    note   TEXT,
    detail TEXT
);
CREATE INDEX jobledger_events_job ON jobledger_events (job_id, id);

-- Side effects that must happen once per key.
CREATE TABLE jobledger_effects (
    queue       TEXT    NOT NULL,
    key         TEXT    NOT NULL,
    effect      TEXT    NOT NULL,
    job_id      INTEGER NOT NULL,
    attempt     INTEGER NOT NULL,
    recorded_at REAL    NOT NULL,
    detail      TEXT,
    PRIMARY KEY (queue, key, effect)
) WITHOUT ROWID;
