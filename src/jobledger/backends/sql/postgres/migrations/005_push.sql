-- Push subscriptions: the queue whose jobs are POSTed, where, how (signing secret, limits), its
-- state, and its health as the delivery loop last saw it. A queue has at most one subscription.
-- Runs with search_path set to the target schema.
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
