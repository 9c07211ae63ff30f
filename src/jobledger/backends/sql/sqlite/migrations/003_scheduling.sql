-- Scheduling: leader leases, schedules and their ticks. Times are Unix epoch seconds (REAL).

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
