-- The canonical SQLite schema: what the migration chain in
-- src/jobledger/backends/sql/sqlite/migrations/ must produce (tests/test_migrations.py).
-- When you add a migration, change this file to match.

CREATE TABLE jobledger_migrations (version INTEGER PRIMARY KEY, name TEXT NOT NULL, applied_at REAL NOT NULL);


CREATE TABLE jobledger_jobs (
    id               INTEGER PRIMARY KEY AUTOINCREMENT,
    queue            TEXT    NOT NULL,
    key              TEXT    NOT NULL,
    task             TEXT    NOT NULL,
    payload          TEXT    NOT NULL,
    state            TEXT    NOT NULL DEFAULT 'pending'
        CHECK (state = 'pending' OR state = 'leased' OR state = 'done' OR state = 'dead'
               OR state = 'cancelled'),
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
    group_name       TEXT,
    result           TEXT,
    trace_context    TEXT,
    -- When the claim began the attempt the job is leased for (016): its attempt's row is
    -- written when the attempt ends.
    leased_at        REAL,
    CONSTRAINT jobledger_jobs_queue_key UNIQUE (queue, key)
);

-- The claim walks this index in order: due pending jobs of a queue without a group, highest
-- priority first. Grouped jobs are claimed through the next three (008_groups.sql).
CREATE INDEX jobledger_jobs_due ON jobledger_jobs (queue, priority DESC, run_at, id)
    WHERE state = 'pending' AND group_name IS NULL;
-- A group's jobs in the order they are claimed.
CREATE INDEX jobledger_jobs_group_due ON jobledger_jobs (queue, group_name, priority DESC, run_at, id)
    WHERE state = 'pending' AND group_name IS NOT NULL;
-- When each group's next job is due (one probe per group). The claim of a group's jobs names
-- jobledger_jobs_group_due (INDEXED BY), so it never reads a whole group through this one.
CREATE INDEX jobledger_jobs_group_next ON jobledger_jobs (queue, group_name, run_at)
    WHERE state = 'pending' AND group_name IS NOT NULL;
-- How many of a group's jobs are leased (bounded by the group's limit).
CREATE INDEX jobledger_jobs_group_leased ON jobledger_jobs (queue, group_name)
    WHERE state = 'leased' AND group_name IS NOT NULL;
-- The rescuer finds expired leases here without touching other rows.
CREATE INDEX jobledger_jobs_leased ON jobledger_jobs (lease_until) WHERE state = 'leased';
-- Dead letters are listed and redriven by queue.
CREATE INDEX jobledger_jobs_dead ON jobledger_jobs (queue, finished_at) WHERE state = 'dead';

-- One row per attempt, written when the attempt ends (016: while a job is leased, its attempt
-- is its row's); a row still open (written before 016) is closed once, never rewritten after.
CREATE TABLE jobledger_attempts (
    job_id        INTEGER NOT NULL,
    attempt       INTEGER NOT NULL,
    lease_token   TEXT    NOT NULL,
    worker        TEXT    NOT NULL,
    started_at    REAL    NOT NULL,
    finished_at   REAL,
    outcome       TEXT CHECK (outcome = 'done' OR outcome = 'retry' OR outcome = 'dead'
                          OR outcome = 'lease_expired' OR outcome = 'released'
                          OR outcome = 'timed_out'),
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
    updated_at        REAL    NOT NULL,
    timeout_seconds   REAL    CHECK (timeout_seconds > 0)
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


-- Queues whose jobs are delivered through a broker (jobledger outbox route).
CREATE TABLE jobledger_routes (
    queue     TEXT PRIMARY KEY,
    routed_at REAL NOT NULL,
    routed_by TEXT NOT NULL,
    note      TEXT
) WITHOUT ROWID;

-- One row per publication a relay owes the broker. A job has at most one record waiting to be
-- published: a newer one supersedes it (superseded_at), so that a key's messages reach the
-- broker in the order they were written. Records stay, published or superseded, until pruned.
CREATE TABLE jobledger_outbox (
    id            INTEGER PRIMARY KEY AUTOINCREMENT,
    job_id        INTEGER NOT NULL,
    queue         TEXT    NOT NULL,
    key           TEXT    NOT NULL,
    reason        TEXT    NOT NULL
        CHECK (reason IN ('enqueue', 'retry', 'redrive', 'reschedule', 'route', 'republish')),
    available_at  REAL    NOT NULL,
    created_at    REAL    NOT NULL,
    published_at  REAL,
    superseded_at REAL
);

-- The relay reads the due records waiting to be published in this order.
CREATE INDEX jobledger_outbox_due ON jobledger_outbox (available_at, id)
    WHERE published_at IS NULL AND superseded_at IS NULL;
-- A job's records: superseded when it becomes pending again, listed in its history.
CREATE INDEX jobledger_outbox_job ON jobledger_outbox (job_id);

-- A new job in a routed queue gets a record at once.
CREATE TRIGGER jobledger_outbox_enqueued AFTER INSERT ON jobledger_jobs
WHEN EXISTS (SELECT 1 FROM jobledger_routes WHERE queue = NEW.queue)
BEGIN
    INSERT INTO jobledger_outbox (job_id, queue, key, reason, available_at, created_at)
    VALUES (NEW.id, NEW.queue, NEW.key, 'enqueue', NEW.run_at, NEW.created_at);
END;

-- So does a job that becomes pending again (a retry, a rescue, a release, a redrive, a resolve)
-- or whose run time moves while pending; its record waiting to be published, if any, is
-- superseded.
CREATE TRIGGER jobledger_outbox_pending AFTER UPDATE OF state, run_at ON jobledger_jobs
WHEN NEW.state = 'pending' AND (OLD.state <> 'pending' OR NEW.run_at <> OLD.run_at)
     AND EXISTS (SELECT 1 FROM jobledger_routes WHERE queue = NEW.queue)
BEGIN
    UPDATE jobledger_outbox SET superseded_at = NEW.updated_at
    WHERE job_id = NEW.id AND published_at IS NULL AND superseded_at IS NULL;
    INSERT INTO jobledger_outbox (job_id, queue, key, reason, available_at, created_at)
    VALUES (NEW.id, NEW.queue, NEW.key,
            CASE OLD.state WHEN 'leased' THEN 'retry' WHEN 'pending' THEN 'reschedule'
                           ELSE 'redrive' END,
            NEW.run_at, NEW.updated_at);
END;
-- What happened per minute, queue and task. Each worker and server adds its own counts in one
-- upsert per row every few seconds (never on the claim or completion path), so the dashboard
-- reads an hour of throughput and wait times from at most 60 rows per queue and task instead of
-- scanning attempts. Rows older than two days are pruned by the writers.
CREATE TABLE jobledger_minute_stats (
    minute   REAL    NOT NULL,
    queue    TEXT    NOT NULL,
    task     TEXT    NOT NULL,
    claimed  INTEGER NOT NULL DEFAULT 0,
    wait_sum REAL    NOT NULL DEFAULT 0,
    wait_max REAL    NOT NULL DEFAULT 0,
    done     INTEGER NOT NULL DEFAULT 0,
    retried  INTEGER NOT NULL DEFAULT 0,
    dead     INTEGER NOT NULL DEFAULT 0,
    run_count INTEGER NOT NULL DEFAULT 0,
    run_sum  REAL    NOT NULL DEFAULT 0,
    run_max  REAL    NOT NULL DEFAULT 0,
    PRIMARY KEY (minute, queue, task)
) WITHOUT ROWID;

-- Dashboard sessions: the SHA-256 digest of the session cookie, the API key that logged in (its
-- scopes and revocation are checked on every request), and when the session ends.
CREATE TABLE jobledger_sessions (
    digest     TEXT PRIMARY KEY,
    api_key_id TEXT NOT NULL,
    created_at REAL NOT NULL,
    expires_at REAL NOT NULL
) WITHOUT ROWID;
CREATE INDEX jobledger_sessions_expires ON jobledger_sessions (expires_at);

-- Push subscriptions (migration 005): where a queue's jobs are POSTed, signed; state and health.
CREATE TABLE jobledger_subscriptions (
    id                   TEXT    PRIMARY KEY,
    queue                TEXT    NOT NULL UNIQUE,
    url                  TEXT    NOT NULL,
    secret               TEXT    NOT NULL,
    previous_secret      TEXT,
    previous_until       REAL,
    timeout_seconds      REAL    NOT NULL CHECK (timeout_seconds > 0),
    concurrency          INTEGER NOT NULL CHECK (concurrency >= 1),
    rate_per_second      REAL    CHECK (rate_per_second > 0),
    burst                REAL    CHECK (burst >= 1),
    state                TEXT    NOT NULL DEFAULT 'active'
                                 CHECK (state IN ('active', 'paused', 'disabled')),
    state_reason         TEXT,
    state_actor          TEXT,
    state_changed_at     REAL,
    created_at           REAL    NOT NULL,
    updated_at           REAL    NOT NULL,
    last_attempt_at      REAL,
    last_success_at      REAL,
    last_failure_at      REAL,
    last_status          INTEGER,
    last_error           TEXT,
    consecutive_failures INTEGER NOT NULL DEFAULT 0,
    delivered            INTEGER NOT NULL DEFAULT 0,
    failed               INTEGER NOT NULL DEFAULT 0
) WITHOUT ROWID;

-- Per queue: the limits every group of the queue gets. NULL: no limit of that kind.
CREATE TABLE jobledger_group_limits (
    queue         TEXT    PRIMARY KEY,
    max_leased    INTEGER CHECK (max_leased > 0),
    rate          REAL    CHECK (rate > 0),
    burst         REAL    CHECK (burst >= 1),
    updated_at    REAL    NOT NULL
);

-- Per group: its token bucket, when a claim last took its jobs (the round's order), and a
-- pause. Written by the claims (under the write lock) and by pauses; a group without a row
-- has a full bucket, was never served, and is not paused.
CREATE TABLE jobledger_groups (
    queue         TEXT    NOT NULL,
    name          TEXT    NOT NULL,
    tokens        REAL,
    refilled_at   REAL,
    served_at     REAL,
    paused_until  REAL,
    paused_reason TEXT,
    PRIMARY KEY (queue, name)
);

-- The claim walks the groups in the order of their turns.
CREATE INDEX jobledger_groups_turn ON jobledger_groups (queue, served_at, name);

-- A grouped job that becomes pending (a new job, a retry, a rescue, a release, a redrive, a
-- resolve to pending) makes sure its group has a row. SQLite has one writer: no prune runs
-- between this and the job's commit.
CREATE TRIGGER jobledger_group_arrives AFTER INSERT ON jobledger_jobs
WHEN NEW.group_name IS NOT NULL AND NEW.state = 'pending'
BEGIN
    INSERT OR IGNORE INTO jobledger_groups (queue, name) VALUES (NEW.queue, NEW.group_name);
END;

CREATE TRIGGER jobledger_group_returns AFTER UPDATE OF state ON jobledger_jobs
WHEN NEW.group_name IS NOT NULL AND NEW.state = 'pending' AND OLD.state <> 'pending'
BEGIN
    INSERT OR IGNORE INTO jobledger_groups (queue, name) VALUES (NEW.queue, NEW.group_name);
END;
