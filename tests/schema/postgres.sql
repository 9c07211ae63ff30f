-- The canonical PostgreSQL schema: what the migration chain in
-- src/jobledger/backends/sql/postgres/migrations/ must produce (tests/test_migrations.py).
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
    created_at       timestamptz      NOT NULL DEFAULT now(),
    updated_at       timestamptz      NOT NULL DEFAULT now(),
    finished_at      timestamptz,
    last_error       text,
    last_error_class text,
    last_traceback   text,
    correlation_id   text,
    group_name       text,
    result           jsonb,
    trace_context    text,
    -- When the claim began the attempt the job is leased for (016): its attempt's row is
    -- written when the attempt ends.
    leased_at        timestamptz,
    CONSTRAINT jobledger_jobs_queue_key UNIQUE (queue, key)
);

-- The claim walks this index in order: due pending jobs of a queue without a group, highest
-- priority first. Grouped jobs are claimed through the next three (008_groups.sql).
CREATE INDEX jobledger_jobs_due ON jobledger_jobs (queue, priority DESC, run_at, id)
    WHERE state = 'pending' AND group_name IS NULL;
-- A group's jobs in the order they are claimed.
CREATE INDEX jobledger_jobs_group_due ON jobledger_jobs (queue, group_name, priority DESC, run_at, id)
    WHERE state = 'pending' AND group_name IS NOT NULL;
-- When each group's next job is due (one probe per group). Its condition says "group_name > ''"
-- (every group name is at least one character) where the others say "IS NOT NULL": a query
-- names it to use it, and the claim of a group's jobs, which says neither, never reads a whole
-- group through it and sorts (the planner may think a group small when it has just grown).
CREATE INDEX jobledger_jobs_group_next ON jobledger_jobs (queue, group_name, run_at, id)
    WHERE state = 'pending' AND group_name > '';
-- How many of a group's jobs are leased (bounded by the group's limit).
CREATE INDEX jobledger_jobs_group_leased ON jobledger_jobs (queue, group_name)
    WHERE state = 'leased' AND group_name IS NOT NULL;
-- The rescuer finds expired leases here without touching other rows. Its condition names
-- lease_until (every leased job has one) so that only queries about expiry can use it: a write
-- fenced by a lease ("id = … AND state = 'leased'") looks its jobs up by primary key (014).
CREATE INDEX jobledger_jobs_leased ON jobledger_jobs (lease_until)
    WHERE state = 'leased' AND lease_until IS NOT NULL;
-- Dead letters are listed and redriven by queue.
CREATE INDEX jobledger_jobs_dead ON jobledger_jobs (queue, finished_at) WHERE state = 'dead';

-- One row per attempt, written when the attempt ends (016: while a job is leased, its attempt
-- is its row's); a row still open (written before 016) is closed once, never rewritten after.
CREATE TABLE jobledger_attempts (
    job_id        bigint      NOT NULL,
    attempt       integer     NOT NULL,
    lease_token   uuid        NOT NULL,
    worker        text        NOT NULL,
    started_at    timestamptz NOT NULL,
    finished_at   timestamptz,
    outcome       text CHECK (outcome IN ('done', 'retry', 'dead', 'lease_expired', 'released',
                                          'timed_out')),
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
    updated_at        timestamptz      NOT NULL,
    timeout_seconds   double precision CHECK (timeout_seconds > 0)
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


-- Queues whose jobs are delivered through a broker (jobledger outbox route).
CREATE TABLE jobledger_routes (
    queue     text        PRIMARY KEY,
    routed_at timestamptz NOT NULL,
    routed_by text        NOT NULL,
    note      text
);

-- One row per publication a relay owes the broker. A job has at most one record waiting to be
-- published: a newer one supersedes it (superseded_at), so that a key's messages reach the
-- broker in the order they were written. Records stay, published or superseded, until pruned.
CREATE TABLE jobledger_outbox (
    id            bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    job_id        bigint      NOT NULL,
    queue         text        NOT NULL,
    key           text        NOT NULL,
    reason        text        NOT NULL
        CHECK (reason IN ('enqueue', 'retry', 'redrive', 'reschedule', 'route', 'republish')),
    available_at  timestamptz NOT NULL,
    created_at    timestamptz NOT NULL,
    published_at  timestamptz,
    superseded_at timestamptz
);

-- The relay reads the due records waiting to be published in this order. Its condition names
-- available_at (never NULL) so that only queries about availability can use it: a lookup of one
-- job's waiting record goes by jobledger_outbox_job (015).
CREATE INDEX jobledger_outbox_due ON jobledger_outbox (available_at, id)
    WHERE published_at IS NULL AND superseded_at IS NULL AND available_at IS NOT NULL;
-- A job's records: superseded when it becomes pending again, listed in its history.
CREATE INDEX jobledger_outbox_job ON jobledger_outbox (job_id);

-- A new job in a routed queue gets a record at once: one statement per insert statement (a
-- bulk enqueue pays once), and nothing but an empty-table probe while no queue is routed.
CREATE FUNCTION jobledger_outbox_enqueued() RETURNS trigger
LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
BEGIN
    IF EXISTS (SELECT 1 FROM jobledger_routes) THEN
        INSERT INTO jobledger_outbox (job_id, queue, key, reason, available_at, created_at)
        SELECT n.id, n.queue, n.key, 'enqueue', n.run_at, n.created_at
        FROM inserted AS n
        WHERE n.queue IN (SELECT queue FROM jobledger_routes)
        ORDER BY n.id;
    END IF;
    RETURN NULL;
END
$$;

CREATE TRIGGER jobledger_outbox_enqueued AFTER INSERT ON jobledger_jobs
    REFERENCING NEW TABLE AS inserted
    FOR EACH STATEMENT EXECUTE FUNCTION jobledger_outbox_enqueued();

-- So does a job that becomes pending again (a retry, a rescue, a release, a redrive, a resolve)
-- or whose run time moves while pending; its record waiting to be published, if any, is
-- superseded. The WHEN clause keeps claims and completions from calling the function at all.
CREATE FUNCTION jobledger_outbox_pending() RETURNS trigger
LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
BEGIN
    IF EXISTS (SELECT 1 FROM jobledger_routes WHERE queue = NEW.queue) THEN
        UPDATE jobledger_outbox SET superseded_at = NEW.updated_at
        WHERE job_id = NEW.id AND published_at IS NULL AND superseded_at IS NULL;
        INSERT INTO jobledger_outbox (job_id, queue, key, reason, available_at, created_at)
        VALUES (NEW.id, NEW.queue, NEW.key,
                CASE OLD.state WHEN 'leased' THEN 'retry' WHEN 'pending' THEN 'reschedule'
                               ELSE 'redrive' END,
                NEW.run_at, NEW.updated_at);
    END IF;
    RETURN NULL;
END
$$;

CREATE TRIGGER jobledger_outbox_pending AFTER UPDATE OF state, run_at ON jobledger_jobs
    FOR EACH ROW
    WHEN (NEW.state = 'pending' AND (OLD.state <> 'pending' OR NEW.run_at <> OLD.run_at))
    EXECUTE FUNCTION jobledger_outbox_pending();
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

-- Push subscriptions (migration 005): where a queue's jobs are POSTed, signed; state and health.
CREATE TABLE jobledger_subscriptions (
    id                   text             PRIMARY KEY,
    queue                text             NOT NULL UNIQUE,
    url                  text             NOT NULL,
    secret               text             NOT NULL,
    previous_secret      text,
    previous_until       timestamptz,
    timeout_seconds      double precision NOT NULL CHECK (timeout_seconds > 0),
    concurrency          integer          NOT NULL CHECK (concurrency >= 1),
    rate_per_second      double precision CHECK (rate_per_second > 0),
    burst                double precision CHECK (burst >= 1),
    state                text             NOT NULL DEFAULT 'active'
                                          CHECK (state IN ('active', 'paused', 'disabled')),
    state_reason         text,
    state_actor          text,
    state_changed_at     timestamptz,
    created_at           timestamptz      NOT NULL,
    updated_at           timestamptz      NOT NULL,
    last_attempt_at      timestamptz,
    last_success_at      timestamptz,
    last_failure_at      timestamptz,
    last_status          integer,
    last_error           text,
    consecutive_failures integer          NOT NULL DEFAULT 0,
    delivered            bigint           NOT NULL DEFAULT 0,
    failed               bigint           NOT NULL DEFAULT 0
);

-- Per queue: the limits every group of the queue gets. NULL: no limit of that kind.
CREATE TABLE jobledger_group_limits (
    queue      text             PRIMARY KEY,
    max_leased integer          CHECK (max_leased > 0),
    rate       double precision CHECK (rate > 0),
    burst      double precision CHECK (burst >= 1),
    updated_at timestamptz      NOT NULL
);

-- Per group: its token bucket, when a claim last took its jobs (the round's order), and a
-- pause. Written by the claims (under a per-group lock) and by pauses; every group with
-- pending jobs has one (the trigger below); a row without a bucket is a full bucket, without
-- a turn a group never served.
CREATE TABLE jobledger_groups (
    queue         text             NOT NULL,
    name          text             NOT NULL,
    tokens        double precision,
    refilled_at   timestamptz,
    served_at     timestamptz,
    paused_until  timestamptz,
    paused_reason text,
    -- Its floor: the run time and id of its first pending job, as the claim that wrote it
    -- found; and when that was last found from the start of the group (migration 020).
    pending_from  timestamptz,
    pending_from_id bigint,
    pending_checked_at timestamptz,
    PRIMARY KEY (queue, name)
);

-- The claim walks the groups in the order of their turns.
CREATE INDEX jobledger_groups_turn ON jobledger_groups (queue, served_at NULLS FIRST, name);

-- A grouped job that becomes pending (a new job, a retry, a rescue, a release, a redrive, a
-- resolve to pending) makes sure its group has a row, and holds a KEY SHARE lock on it until
-- its transaction ends: claims and pauses update the row beside that lock without waiting, and
-- the pruner, whose DELETE conflicts with it, skips the row (SKIP LOCKED) instead of deleting
-- it under a job it cannot see yet. A row deleted meanwhile is inserted again (the loop).
CREATE FUNCTION jobledger_group_arrives() RETURNS trigger
LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
BEGIN
    LOOP
        PERFORM 1 FROM jobledger_groups
        WHERE queue = NEW.queue AND name = NEW.group_name
        FOR KEY SHARE;
        EXIT WHEN FOUND;
        INSERT INTO jobledger_groups (queue, name) VALUES (NEW.queue, NEW.group_name)
        ON CONFLICT DO NOTHING;
    END LOOP;
    RETURN NULL;
END
$$;

-- The WHEN clauses keep jobs without a group, claims and completions from calling it at all.
CREATE TRIGGER jobledger_group_arrives AFTER INSERT ON jobledger_jobs
    FOR EACH ROW WHEN (NEW.group_name IS NOT NULL AND NEW.state = 'pending')
    EXECUTE FUNCTION jobledger_group_arrives();
CREATE TRIGGER jobledger_group_returns AFTER UPDATE OF state ON jobledger_jobs
    FOR EACH ROW
    WHEN (NEW.group_name IS NOT NULL AND NEW.state = 'pending' AND OLD.state <> 'pending')
    EXECUTE FUNCTION jobledger_group_arrives();

-- The grouped claim in one statement walks the turns through these (planned on the turn
-- index whether or not the groups table was analyzed).
-- The first groups of a queue in the order of their turns (never served first, then least
-- recently served) that have a due job (one probe of the grouped index each) and are not
-- paused: at most "keep" of them, from the first "scan" rows of the walk.
CREATE FUNCTION jobledger_group_turns(p_queue text, p_now timestamptz, p_keep int, p_scan int)
RETURNS TABLE (queue text, name text, served_at timestamptz)
LANGUAGE plpgsql STABLE
SET search_path FROM CURRENT SET enable_seqscan = off SET enable_bitmapscan = off
AS $$
BEGIN
    RETURN QUERY
    SELECT w.queue, w.name, w.served_at
    FROM (
        SELECT g.queue, g.name, g.served_at, g.paused_until
        FROM jobledger_groups AS g WHERE g.queue = p_queue
        ORDER BY g.served_at NULLS FIRST, g.name
        LIMIT p_scan
    ) AS w
    WHERE (SELECT j.run_at <= p_now FROM jobledger_jobs AS j
           WHERE j.state = 'pending' AND j.group_name > '' AND j.queue = w.queue
             AND j.group_name = w.name
           ORDER BY j.run_at LIMIT 1)
      AND (w.paused_until IS NULL OR w.paused_until <= p_now)
    ORDER BY w.served_at NULLS FIRST, w.name
    LIMIT p_keep;
END
$$;

-- The same walk from a position (019): p_from is the least turn it reads (NULL: from the
-- start); groups never served come first either way. "front": the turn of the first row at
-- or after p_from.
CREATE FUNCTION jobledger_group_turns_from(
    p_queue text, p_now timestamptz, p_keep int, p_scan int, p_from timestamptz
)
RETURNS TABLE (queue text, name text, served_at timestamptz, front timestamptz)
LANGUAGE plpgsql STABLE
SET search_path FROM CURRENT SET enable_seqscan = off SET enable_bitmapscan = off
AS $$
DECLARE
    v_front timestamptz;
BEGIN
    SELECT g.served_at INTO v_front FROM jobledger_groups AS g
    WHERE g.queue = p_queue AND g.served_at >= COALESCE(p_from, '-infinity')
    ORDER BY g.served_at NULLS FIRST, g.name
    LIMIT 1;
    RETURN QUERY
    SELECT w.queue, w.name, w.served_at, v_front
    FROM (
        -- Two ranges of the turn index, merged in its order (never served, then from p_from
        -- on): the walk stops as soon as it has kept p_keep, whatever p_scan allows.
        SELECT * FROM (
            SELECT g.queue, g.name, g.served_at, g.paused_until
            FROM jobledger_groups AS g WHERE g.queue = p_queue AND g.served_at IS NULL
            ORDER BY g.served_at NULLS FIRST, g.name
            LIMIT p_scan
        ) AS fresh
        UNION ALL
        SELECT * FROM (
            SELECT g.queue, g.name, g.served_at, g.paused_until
            FROM jobledger_groups AS g
            WHERE g.queue = p_queue AND g.served_at >= COALESCE(p_from, '-infinity')
            ORDER BY g.served_at NULLS FIRST, g.name
            LIMIT p_scan
        ) AS served
        ORDER BY served_at NULLS FIRST, name
        LIMIT p_scan
    ) AS w
    WHERE (SELECT j.run_at <= p_now FROM jobledger_jobs AS j
           WHERE j.state = 'pending' AND j.group_name > '' AND j.queue = w.queue
             AND j.group_name = w.name
           ORDER BY j.run_at LIMIT 1)
      AND (w.paused_until IS NULL OR w.paused_until <= p_now)
    ORDER BY w.served_at NULLS FIRST, w.name
    LIMIT p_keep;
END
$$;

-- The same walk, each group's due probe from its floor when it may be trusted (020): a
-- walk from the front, the floor checked from the start within the last ten seconds of its
-- time. "next_at", "next_id": the group's next job as found; "exact": found from the start.
CREATE FUNCTION jobledger_group_turns_next(
    p_queue text, p_now timestamptz, p_keep int, p_scan int, p_from timestamptz
)
RETURNS TABLE (
    queue text, name text, served_at timestamptz, front timestamptz, next_at timestamptz,
    next_id bigint, exact boolean
)
LANGUAGE plpgsql STABLE
SET search_path FROM CURRENT SET enable_seqscan = off SET enable_bitmapscan = off
AS $$
DECLARE
    v_front timestamptz;
BEGIN
    SELECT g.served_at INTO v_front FROM jobledger_groups AS g
    WHERE g.queue = p_queue AND g.served_at >= COALESCE(p_from, '-infinity')
    ORDER BY g.served_at NULLS FIRST, g.name
    LIMIT 1;
    RETURN QUERY
    SELECT w.queue, w.name, w.served_at, v_front, n.next_at, n.next_id, w.exact
    FROM (
        SELECT t.*,
               -- A floor is trusted on a walk from the front, checked from the start within
               -- the last ten seconds of this walk's time (cursor.LONGEST).
               (p_from IS NULL OR t.pending_from IS NULL OR t.pending_from_id IS NULL
                OR t.pending_checked_at IS NULL
                OR t.pending_checked_at > p_now
                OR t.pending_checked_at <= p_now - interval '10 seconds') AS exact
        FROM (
            SELECT * FROM (
                SELECT g.queue, g.name, g.served_at, g.paused_until, g.pending_from,
                       g.pending_from_id, g.pending_checked_at
                FROM jobledger_groups AS g WHERE g.queue = p_queue AND g.served_at IS NULL
                ORDER BY g.served_at NULLS FIRST, g.name
                LIMIT p_scan
            ) AS fresh
            UNION ALL
            SELECT * FROM (
                SELECT g.queue, g.name, g.served_at, g.paused_until, g.pending_from,
                       g.pending_from_id, g.pending_checked_at
                FROM jobledger_groups AS g
                WHERE g.queue = p_queue AND g.served_at >= COALESCE(p_from, '-infinity')
                ORDER BY g.served_at NULLS FIRST, g.name
                LIMIT p_scan
            ) AS served
            ORDER BY served_at NULLS FIRST, name
            LIMIT p_scan
        ) AS t
    ) AS w
    -- The group's next job, one probe of its index from the floor (a range of the index whose
    -- start skips the dead entries below it).
    CROSS JOIN LATERAL (
        SELECT j.run_at AS next_at, j.id AS next_id FROM jobledger_jobs AS j
        WHERE j.state = 'pending' AND j.group_name > '' AND j.queue = w.queue
          AND j.group_name = w.name
          AND (j.run_at, j.id) >= (CASE WHEN w.exact THEN '-infinity' ELSE w.pending_from END,
                                   CASE WHEN w.exact THEN 0 ELSE w.pending_from_id END)
        ORDER BY j.run_at, j.id LIMIT 1
    ) AS n
    WHERE n.next_at <= p_now
      AND (w.paused_until IS NULL OR w.paused_until <= p_now)
    ORDER BY w.served_at NULLS FIRST, w.name
    LIMIT p_keep;
END
$$;

-- Whether a queue has more than n groups' rows (read through an index, n + 1 at most).
CREATE FUNCTION jobledger_group_rows_over(p_queue text, p_n int) RETURNS boolean
LANGUAGE plpgsql STABLE
SET search_path FROM CURRENT SET enable_seqscan = off SET enable_bitmapscan = off
AS $$
BEGIN
    RETURN (SELECT count(*) > p_n
            FROM (SELECT 1 FROM jobledger_groups AS g WHERE g.queue = p_queue
                  LIMIT p_n + 1) AS r);
END
$$;
