-- The subscriptions role (005): push subscriptions and their delivery health.
-- PostgreSQL. {jobs}, {attempts}, … are the schema-qualified tables; {now} is the caller's
-- explicit time or the database clock; {limit} is written in as a literal.

-- name: subscription_insert
INSERT INTO {subscriptions} (id, queue, url, secret, timeout_seconds, concurrency,
                             rate_per_second, burst, state, created_at, updated_at)
VALUES (%(id)s, %(queue)s, %(url)s, %(secret)s, %(timeout_seconds)s, %(concurrency)s,
        %(rate_per_second)s, %(burst)s, 'active', {now}, {now})
ON CONFLICT (queue) DO NOTHING
RETURNING id

-- name: subscription_select
SELECT id, queue, url, secret, timeout_seconds, concurrency, rate_per_second, burst, state,
       state_reason, state_actor, state_changed_at, previous_secret, previous_until, created_at,
       updated_at, last_attempt_at, last_success_at, last_failure_at, last_status, last_error,
       consecutive_failures, delivered, failed
FROM {subscriptions} {where}

-- name: subscription_of_queue
SELECT id FROM {subscriptions} WHERE queue = %(queue)s

-- name: subscription_state
UPDATE {subscriptions}
SET state = %(state)s, state_reason = %(reason)s, state_actor = %(actor)s,
    state_changed_at = {now}, updated_at = {now}
WHERE id = %(id)s

-- name: subscription_delete
DELETE FROM {subscriptions} WHERE id = %(id)s

-- name: subscription_rotate
-- The current secret becomes the previous one, signing beside the new one until the overlap
-- ends; with no overlap it stops at once.
UPDATE {subscriptions}
SET previous_secret = CASE WHEN %(overlap)s > 0 THEN secret END,
    previous_until = CASE WHEN %(overlap)s > 0
                          THEN {now} + make_interval(secs => %(overlap)s) END,
    secret = %(secret)s,
    updated_at = {now}
WHERE id = %(id)s

-- name: subscription_record
-- A delivery's outcome on the subscription's health. The last error stays after a success (it
-- is what went wrong last); consecutive_failures tells whether it still does.
UPDATE {subscriptions}
SET last_attempt_at = {now},
    last_success_at = CASE WHEN %(ok)s THEN {now} ELSE last_success_at END,
    last_failure_at = CASE WHEN %(ok)s THEN last_failure_at ELSE {now} END,
    last_status = %(status)s,
    last_error = CASE WHEN %(ok)s THEN last_error ELSE %(error)s END,
    consecutive_failures = CASE WHEN %(ok)s THEN 0 ELSE consecutive_failures + 1 END,
    delivered = delivered + CASE WHEN %(ok)s THEN 1 ELSE 0 END,
    failed = failed + CASE WHEN %(ok)s THEN 0 ELSE 1 END
WHERE id = %(id)s
