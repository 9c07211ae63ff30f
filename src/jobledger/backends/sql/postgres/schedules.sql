-- The schedules role (003): schedules, their cursors and ticks.
-- PostgreSQL. {jobs}, {attempts}, … are the schema-qualified tables; {now} is the caller's
-- explicit time or the database clock; {limit} is written in as a literal.

-- name: schedule_declare
INSERT INTO {schedules} (name, cohort, cron, time_zone, catch_up, max_catch_up, grace_seconds,
                         target, key_template, fan_out, cursor_at, declared_at, created_at)
SELECT d.*, {now}, {now}, {now} FROM unnest(
    %(name)s::text[], %(cohort)s::text[], %(cron)s::text[], %(time_zone)s::text[],
    %(catch_up)s::text[], %(max_catch_up)s::int[], %(grace_seconds)s::float8[],
    %(target)s::text[], %(key_template)s::text[], %(fan_out)s::bool[]
) AS d
ON CONFLICT (name) DO UPDATE
SET cohort = excluded.cohort, cron = excluded.cron, time_zone = excluded.time_zone,
    catch_up = excluded.catch_up, max_catch_up = excluded.max_catch_up,
    grace_seconds = excluded.grace_seconds, target = excluded.target,
    key_template = excluded.key_template, fan_out = excluded.fan_out,
    declared_at = excluded.declared_at

-- name: schedule_list
SELECT name, cohort, cron, time_zone, catch_up, max_catch_up, grace_seconds, target,
       key_template, fan_out, cursor_at, skipped_ticks, paused, pause_changed_at,
       pause_changed_by, pause_note, declared_at, created_at
FROM {schedules} ORDER BY name

-- name: schedule_pause
UPDATE {schedules}
SET paused = %(paused)s, pause_changed_at = {now}, pause_changed_by = %(actor)s,
    pause_note = %(note)s,
    skipped_ticks = skipped_ticks
        + CASE WHEN %(cursor)s::timestamptz > cursor_at THEN %(skipped)s ELSE 0 END,
    cursor_at = GREATEST(cursor_at, COALESCE(%(cursor)s::timestamptz, cursor_at))
WHERE name = %(name)s

-- name: schedule_advance
UPDATE {schedules} SET cursor_at = %(cursor)s, skipped_ticks = skipped_ticks + %(skipped)s
WHERE name = %(name)s AND cursor_at < %(cursor)s

-- name: schedule_tick_start
INSERT INTO {ticks} AS t (schedule, tick_time, state, leader, term, runs, started_at)
VALUES (%(schedule)s, %(tick_time)s, 'running', %(leader)s, %(term)s, 1, {now})
ON CONFLICT (schedule, tick_time) DO UPDATE
SET runs = t.runs + 1, leader = excluded.leader, term = excluded.term, error = NULL
WHERE t.state = 'running'
RETURNING schedule, tick_time, state, leader, term, runs, jobs_created, jobs_existing, conflicts,
          started_at, finished_at, error

-- name: schedule_tick_get
SELECT schedule, tick_time, state, leader, term, runs, jobs_created, jobs_existing, conflicts,
       started_at, finished_at, error
FROM {ticks} WHERE schedule = %(schedule)s AND tick_time = %(tick_time)s

-- name: schedule_tick_progress
UPDATE {ticks}
SET jobs_created = jobs_created + %(created)s, jobs_existing = jobs_existing + %(existing)s,
    conflicts = conflicts + %(conflicts)s
WHERE schedule = %(schedule)s AND tick_time = %(tick_time)s

-- name: schedule_tick_finish
UPDATE {ticks} SET state = 'done', finished_at = {now}, error = NULL
WHERE schedule = %(schedule)s AND tick_time = %(tick_time)s AND state = 'running'
RETURNING schedule, tick_time, state, leader, term, runs, jobs_created, jobs_existing, conflicts,
          started_at, finished_at, error

-- name: schedule_tick_error
UPDATE {ticks} SET error = %(error)s
WHERE schedule = %(schedule)s AND tick_time = %(tick_time)s AND state = 'running'

-- name: schedule_tick_prune
-- Finished ticks older than the cut-off and behind their schedule's cursor: no scheduler looks
-- at them again (only the tick history does). Each schedule's are found through the primary
-- key (schedule, tick_time).
DELETE FROM {ticks} WHERE (schedule, tick_time) IN (
    SELECT t.schedule, t.tick_time FROM {schedules} AS s
    JOIN {ticks} AS t ON t.schedule = s.name AND t.tick_time < s.cursor_at
                     AND t.tick_time < %(before)s
    WHERE t.state = 'done'
    LIMIT {limit}
)

-- name: schedule_tick_list
-- {where} is built from fixed clauses; {limit} is a literal.
SELECT schedule, tick_time, state, leader, term, runs, jobs_created, jobs_existing, conflicts,
       started_at, finished_at, error
FROM {ticks} WHERE {where} ORDER BY tick_time DESC, schedule LIMIT {limit}
