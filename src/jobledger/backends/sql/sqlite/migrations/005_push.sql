-- Push subscriptions: the queue whose jobs are POSTed, where, how (signing secret, limits), its
-- state, and its health as the delivery loop last saw it. A queue has at most one subscription.
-- Times are seconds since the Unix epoch (REAL), UTC.
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
