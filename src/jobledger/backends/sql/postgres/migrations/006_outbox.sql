-- The outbox: queues routed to a broker, and one record per time a job of such a queue became
-- pending, written by triggers in the transaction that made it pending. A relay publishes the
-- records to the broker. Runs with search_path set to the target schema; the trigger functions
-- keep that search_path (SET search_path FROM CURRENT), so they find this schema's tables
-- whatever the caller's search_path is.

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

-- The relay reads the due records waiting to be published in this order.
CREATE INDEX jobledger_outbox_due ON jobledger_outbox (available_at, id)
    WHERE published_at IS NULL AND superseded_at IS NULL;
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
