-- The HTTP API: declared queues, API keys, rate-limit buckets, and what each publish asked for.
-- Times are seconds since the Unix epoch (REAL), UTC.

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
