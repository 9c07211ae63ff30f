-- The subscriptions role (005): push subscriptions and their delivery health.
-- SQLite. Times are seconds since the Unix epoch; {limit} is written in as a literal.

-- name: subscription_insert
INSERT INTO jobledger_subscriptions (id, queue, url, secret, timeout_seconds, concurrency,
                                     rate_per_second, burst, state, created_at, updated_at)
VALUES (:id, :queue, :url, :secret, :timeout_seconds, :concurrency, :rate_per_second, :burst,
        'active', :now, :now)
ON CONFLICT (queue) DO NOTHING
RETURNING id

-- name: subscription_select
SELECT id, queue, url, secret, timeout_seconds, concurrency, rate_per_second, burst, state,
       state_reason, state_actor, state_changed_at, previous_secret, previous_until, created_at,
       updated_at, last_attempt_at, last_success_at, last_failure_at, last_status, last_error,
       consecutive_failures, delivered, failed
FROM jobledger_subscriptions {where}

-- name: subscription_of_queue
SELECT id FROM jobledger_subscriptions WHERE queue = :queue

-- name: subscription_state
UPDATE jobledger_subscriptions
SET state = :state, state_reason = :reason, state_actor = :actor, state_changed_at = :now,
    updated_at = :now
WHERE id = :id

-- name: subscription_delete
DELETE FROM jobledger_subscriptions WHERE id = :id

-- name: subscription_rotate
-- The current secret becomes the previous one, signing beside the new one until the overlap
-- ends; with no overlap it stops at once.
UPDATE jobledger_subscriptions
SET previous_secret = CASE WHEN :overlap > 0 THEN secret END,
    previous_until = CASE WHEN :overlap > 0 THEN :now + :overlap END,
    secret = :secret,
    updated_at = :now
WHERE id = :id

-- name: subscription_record
-- A delivery's outcome on the subscription's health. The last error stays after a success (it
-- is what went wrong last); consecutive_failures tells whether it still does.
UPDATE jobledger_subscriptions
SET last_attempt_at = :now,
    last_success_at = CASE WHEN :ok THEN :now ELSE last_success_at END,
    last_failure_at = CASE WHEN :ok THEN last_failure_at ELSE :now END,
    last_status = :status,
    last_error = CASE WHEN :ok THEN last_error ELSE :error END,
    consecutive_failures = CASE WHEN :ok THEN 0 ELSE consecutive_failures + 1 END,
    delivered = delivered + CASE WHEN :ok THEN 1 ELSE 0 END,
    failed = failed + CASE WHEN :ok THEN 0 ELSE 1 END
WHERE id = :id
