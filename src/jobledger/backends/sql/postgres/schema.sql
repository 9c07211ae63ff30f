-- The canonical schema: what the migration chain must produce (tests/test_migrations.py).
-- When you add a migration, change this file to match.

CREATE TABLE jobledger_migrations (version integer PRIMARY KEY, name text NOT NULL, applied_at timestamptz NOT NULL DEFAULT now());


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

-- One row per pruned key: enqueue treats a live tombstone like the job it replaced.
CREATE TABLE jobledger_tombstones (
    queue          text        NOT NULL,
    key            text        NOT NULL,
    job_id         bigint      NOT NULL,
    task           text        NOT NULL,
    payload_digest text        NOT NULL,
    state          text        NOT NULL,
    finished_at    timestamptz,
    pruned_at      timestamptz NOT NULL,
    expires_at     timestamptz NOT NULL,
    PRIMARY KEY (queue, key)
);
CREATE INDEX jobledger_tombstones_expires ON jobledger_tombstones (expires_at);

-- One row per named authority ("scheduler:<cohort>"): who holds it, under which token, until when.
CREATE TABLE jobledger_leaders (
    name        text        PRIMARY KEY,
    holder      text        NOT NULL,
    token       uuid        NOT NULL,
    term        bigint      NOT NULL,
    lease_until timestamptz NOT NULL,
    acquired_at timestamptz NOT NULL,
    renewed_at  timestamptz NOT NULL
);

-- Schedules as the leader last declared them, and how far each has got (cursor_at).
CREATE TABLE jobledger_schedules (
    name             text             PRIMARY KEY,
    cohort           text             NOT NULL,
    cron             text             NOT NULL,
    time_zone        text             NOT NULL,
    catch_up         text             NOT NULL CHECK (catch_up IN ('skip', 'latest', 'all')),
    max_catch_up     integer          NOT NULL,
    grace_seconds    double precision NOT NULL,
    target           text             NOT NULL,
    key_template     text             NOT NULL,
    fan_out          boolean          NOT NULL,
    cursor_at        timestamptz      NOT NULL,
    skipped_ticks    bigint           NOT NULL DEFAULT 0,
    paused           boolean          NOT NULL DEFAULT false,
    pause_changed_at timestamptz,
    pause_changed_by text,
    pause_note       text,
    declared_at      timestamptz      NOT NULL,
    created_at       timestamptz      NOT NULL
);

-- One row per tick: a tick happens once per schedule and time, whoever leads.
CREATE TABLE jobledger_ticks (
    schedule      text        NOT NULL,
    tick_time     timestamptz NOT NULL,
    state         text        NOT NULL CHECK (state IN ('running', 'done')),
    leader        text        NOT NULL,
    term          bigint      NOT NULL,
    runs          integer     NOT NULL DEFAULT 1,
    jobs_created  bigint      NOT NULL DEFAULT 0,
    jobs_existing bigint      NOT NULL DEFAULT 0,
    conflicts     bigint      NOT NULL DEFAULT 0,
    started_at    timestamptz NOT NULL,
    finished_at   timestamptz,
    error         text,
    PRIMARY KEY (schedule, tick_time)
);



-- Queues declared with PUT /v1/queues/{name} or `jobledger queues create`: the settings that jobs
-- published over HTTP to the queue are given.
CREATE TABLE jobledger_queues (
    name              text             PRIMARY KEY,
    task              text             NOT NULL,
    max_attempts      integer          NOT NULL CHECK (max_attempts BETWEEN 1 AND 1000),
    lease_seconds     double precision NOT NULL CHECK (lease_seconds > 0),
    backoff_base      double precision NOT NULL CHECK (backoff_base > 0),
    backoff_cap       double precision NOT NULL CHECK (backoff_cap >= backoff_base),
    retention_seconds double precision NOT NULL CHECK (retention_seconds >= 86400),
    require_key       boolean          NOT NULL DEFAULT false,
    created_at        timestamptz      NOT NULL,
    updated_at        timestamptz      NOT NULL
);

-- API keys. Only the SHA-256 digest of a key is stored; the key itself is shown once.
CREATE TABLE jobledger_api_keys (
    id              text             PRIMARY KEY,
    digest          text             NOT NULL UNIQUE,
    name            text             NOT NULL,
    scopes          text             NOT NULL,
    rate_per_second double precision CHECK (rate_per_second > 0),
    burst           double precision CHECK (burst >= 1),
    created_at      timestamptz      NOT NULL,
    revoked_at      timestamptz
);

-- Rate limits shared by every server process: one "theoretical arrival time" per bucket (GCRA),
-- in seconds since the Unix epoch.
CREATE TABLE jobledger_rate_limits (
    bucket text             PRIMARY KEY,
    tat    double precision NOT NULL
);

-- What a publish over HTTP asked for, so that a replay (same key, same request) can be told from
-- a reuse of the key with another request. job_id ties the row to the job it made.
CREATE TABLE jobledger_publish_requests (
    queue       text        NOT NULL,
    key         text        NOT NULL,
    job_id      bigint      NOT NULL,
    fingerprint text        NOT NULL,
    api_key_id  text,
    created_at  timestamptz NOT NULL,
    PRIMARY KEY (queue, key)
);
