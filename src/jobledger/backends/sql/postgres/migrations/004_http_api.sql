-- The HTTP API: declared queues, API keys, rate-limit buckets, and what each publish asked for.
-- Runs with search_path set to the target schema.

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
