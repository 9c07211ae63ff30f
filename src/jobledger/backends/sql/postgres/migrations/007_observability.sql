-- Observability (007): per-minute rollups of what workers and consumers did, for the dashboard's
-- charts, and the dashboard's login sessions.

-- What happened per minute, queue and task. Each worker and server adds its own counts in one
-- upsert per row every few seconds (never on the claim or completion path), so the dashboard
-- reads an hour of throughput and wait times from at most 60 rows per queue and task instead of
-- scanning attempts. Rows older than two days are pruned by the writers.
CREATE TABLE jobledger_minute_stats (
    minute      timestamptz      NOT NULL,
    queue       text             NOT NULL,
    task        text             NOT NULL,
    claimed     bigint           NOT NULL DEFAULT 0,
    wait_sum    double precision NOT NULL DEFAULT 0,
    wait_max    double precision NOT NULL DEFAULT 0,
    done        bigint           NOT NULL DEFAULT 0,
    retried     bigint           NOT NULL DEFAULT 0,
    dead        bigint           NOT NULL DEFAULT 0,
    run_count   bigint           NOT NULL DEFAULT 0,
    run_sum     double precision NOT NULL DEFAULT 0,
    run_max     double precision NOT NULL DEFAULT 0,
    PRIMARY KEY (minute, queue, task)
);

-- Dashboard sessions: the SHA-256 digest of the session cookie, the API key that logged in (its
-- scopes and revocation are checked on every request), and when the session ends.
CREATE TABLE jobledger_sessions (
    digest     text        PRIMARY KEY,
    api_key_id text        NOT NULL,
    created_at timestamptz NOT NULL,
    expires_at timestamptz NOT NULL
);
CREATE INDEX jobledger_sessions_expires ON jobledger_sessions (expires_at);
