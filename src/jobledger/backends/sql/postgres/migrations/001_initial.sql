-- The ledger's tables. Runs with search_path set to the target schema.

CREATE TABLE jobledger_jobs (
    id               bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    queue            text             NOT NULL,
    key              text             NOT NULL,
    task             text             NOT NULL,
    payload          jsonb            NOT NULL,
    state            text             NOT NULL DEFAULT 'pending'
        CHECK (state IN ('pending', 'leased', 'done', 'dead', 'cancelled')),
    priority         integer          NOT NULL DEFAULT 0,
    run_at           timestamptz      NOT NULL,
    attempts         integer          NOT NULL DEFAULT 0,
    max_attempts     integer          NOT NULL CHECK (max_attempts > 0),
    attempt_limit    integer          NOT NULL,
    lease_seconds    double precision NOT NULL CHECK (lease_seconds > 0),
    lease_until      timestamptz,
    lease_token      uuid,
    leased_by        text,
    created_at       timestamptz      NOT NULL,
    updated_at       timestamptz      NOT NULL,
    finished_at      timestamptz,
    last_error       text,
    last_error_class text,
    last_traceback   text,
    correlation_id   text,
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
    job_id        bigint      NOT NULL,
    attempt       integer     NOT NULL,
    lease_token   uuid        NOT NULL,
    worker        text        NOT NULL,
    started_at    timestamptz NOT NULL,
    finished_at   timestamptz,
    outcome       text CHECK (outcome IN ('done', 'retry', 'dead', 'lease_expired', 'released')),
    error_class   text,
    error_message text,
    traceback     text,
    PRIMARY KEY (job_id, attempt)
);

-- Lease expiries of the last hour are counted from here (status, alerts).
CREATE INDEX jobledger_attempts_expired ON jobledger_attempts (finished_at)
    WHERE outcome = 'lease_expired';

-- Operator actions and refused late writes, per job.
CREATE TABLE jobledger_events (
    id     bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    job_id bigint      NOT NULL,
    at     timestamptz NOT NULL,
    kind   text        NOT NULL,
    actor  text,
    note   text,
    detail jsonb
);
CREATE INDEX jobledger_events_job ON jobledger_events (job_id, id);

-- Side effects that must happen once per key.
CREATE TABLE jobledger_effects (
    queue       text        NOT NULL,
    key         text        NOT NULL,
    effect      text        NOT NULL,
    job_id      bigint      NOT NULL,
    attempt     integer     NOT NULL,
    recorded_at timestamptz NOT NULL,
    detail      jsonb,
    PRIMARY KEY (queue, key, effect)
);
