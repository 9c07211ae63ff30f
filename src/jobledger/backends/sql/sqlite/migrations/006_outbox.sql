-- The outbox: queues routed to a broker, and one record per time a job of such a queue became
-- pending, written by triggers in the transaction that made it pending. A relay publishes the
-- records to the broker. Times are Unix epoch seconds (REAL).

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
