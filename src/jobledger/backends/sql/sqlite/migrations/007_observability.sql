-- Observability (007): per-minute rollups of what workers and consumers did, for the dashboard's
-- charts, and the dashboard's login sessions. Times are seconds since the Unix epoch (REAL), UTC.

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
