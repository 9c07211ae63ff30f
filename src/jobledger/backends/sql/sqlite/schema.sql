-- The canonical schema: what the migration chain must produce (tests/test_migrations.py).
-- When you add a migration, change this file to match.

CREATE TABLE jobledger_migrations (version INTEGER PRIMARY KEY, name TEXT NOT NULL, applied_at REAL NOT NULL);


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

-- One row per pruned key: enqueue treats a live tombstone like the job it replaced.
CREATE TABLE jobledger_tombstones (
    queue          TEXT    NOT NULL,
    key            TEXT    NOT NULL,
    job_id         INTEGER NOT NULL,
    task           TEXT    NOT NULL,
    payload_digest TEXT    NOT NULL,
    state          TEXT    NOT NULL,
    finished_at    REAL,
    pruned_at      REAL    NOT NULL,
    expires_at     REAL    NOT NULL,
    PRIMARY KEY (queue, key)
) WITHOUT ROWID;
CREATE INDEX jobledger_tombstones_expires ON jobledger_tombstones (expires_at);

-- One row per named authority ("scheduler:<cohort>"): who holds it, under which token, until when.
CREATE TABLE jobledger_leaders (
    name        TEXT    PRIMARY KEY,
    holder      TEXT    NOT NULL,
    token       TEXT    NOT NULL,
    term        INTEGER NOT NULL,
    lease_until REAL    NOT NULL,
    acquired_at REAL    NOT NULL,
    renewed_at  REAL    NOT NULL
) WITHOUT ROWID;

-- Schedules as the leader last declared them, and how far each has got (cursor_at).
CREATE TABLE jobledger_schedules (
    name             TEXT    PRIMARY KEY,
    cohort           TEXT    NOT NULL,
    cron             TEXT    NOT NULL,
    time_zone        TEXT    NOT NULL,
    catch_up         TEXT    NOT NULL CHECK (catch_up IN ('skip', 'latest', 'all')),
    max_catch_up     INTEGER NOT NULL,
    grace_seconds    REAL    NOT NULL,
    target           TEXT    NOT NULL,
    key_template     TEXT    NOT NULL,
    fan_out          INTEGER NOT NULL,
    cursor_at        REAL    NOT NULL,
    skipped_ticks    INTEGER NOT NULL DEFAULT 0,
    paused           INTEGER NOT NULL DEFAULT 0,
    pause_changed_at REAL,
    pause_changed_by TEXT,
    pause_note       TEXT,
    declared_at      REAL    NOT NULL,
    created_at       REAL    NOT NULL
) WITHOUT ROWID;

-- One row per tick: a tick happens once per schedule and time, whoever leads.
CREATE TABLE jobledger_ticks (
    schedule      TEXT    NOT NULL,
    tick_time     REAL    NOT NULL,
    state         TEXT    NOT NULL CHECK (state IN ('running', 'done')),
    leader        TEXT    NOT NULL,
    term          INTEGER NOT NULL,
    runs          INTEGER NOT NULL DEFAULT 1,
    jobs_created  INTEGER NOT NULL DEFAULT 0,
    jobs_existing INTEGER NOT NULL DEFAULT 0,
    conflicts     INTEGER NOT NULL DEFAULT 0,
    started_at    REAL    NOT NULL,
    finished_at   REAL,
    error         TEXT,
    PRIMARY KEY (schedule, tick_time)
) WITHOUT ROWID;



-- Queues declared with PUT /v1/queues/{name} or `jobledger queues create`: the settings that jobs
-- published over HTTP to the queue are given.
CREATE TABLE jobledger_queues (
    name              TEXT    PRIMARY KEY,
    task              TEXT    NOT NULL,
    max_attempts      INTEGER NOT NULL CHECK (max_attempts BETWEEN 1 AND 1000),
    lease_seconds     REAL    NOT NULL CHECK (lease_seconds > 0),
    backoff_base      REAL    NOT NULL CHECK (backoff_base > 0),
    backoff_cap       REAL    NOT NULL CHECK (backoff_cap >= backoff_base),
    retention_seconds REAL    NOT NULL CHECK (retention_seconds >= 86400),
    require_key       INTEGER NOT NULL DEFAULT 0 CHECK (require_key IN (0, 1)),
    created_at        REAL    NOT NULL,
    updated_at        REAL    NOT NULL
) WITHOUT ROWID;

-- API keys. Only the SHA-256 digest of a key is stored; the key itself is shown once.
CREATE TABLE jobledger_api_keys (
    id              TEXT PRIMARY KEY,
    digest          TEXT NOT NULL UNIQUE,
    name            TEXT NOT NULL,
    scopes          TEXT NOT NULL,
    rate_per_second REAL CHECK (rate_per_second > 0),
    burst           REAL CHECK (burst >= 1),
    created_at      REAL NOT NULL,
    revoked_at      REAL
) WITHOUT ROWID;

-- Rate limits shared by every server process: one "theoretical arrival time" per bucket (GCRA).
CREATE TABLE jobledger_rate_limits (
    bucket TEXT PRIMARY KEY,
    tat    REAL NOT NULL
) WITHOUT ROWID;

-- What a publish over HTTP asked for, so that a replay (same key, same request) can be told from
-- a reuse of the key with another request. job_id ties the row to the job it made.
CREATE TABLE jobledger_publish_requests (
    queue       TEXT    NOT NULL,
    key         TEXT    NOT NULL,
    job_id      INTEGER NOT NULL,
    fingerprint TEXT    NOT NULL,
    api_key_id  TEXT,
    created_at  REAL    NOT NULL,
    PRIMARY KEY (queue, key)
) WITHOUT ROWID;
