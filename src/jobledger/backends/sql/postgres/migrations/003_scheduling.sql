-- Scheduling: leader leases, schedules and their ticks. Runs with search_path set to the target schema.

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
