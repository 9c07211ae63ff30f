-- The schedules role (003): schedules, their cursors and ticks.
-- SQLite. Times are seconds since the Unix epoch; {limit} is written in as a literal.

-- name: schedule_declare
INSERT INTO jobledger_schedules (name, cohort, cron, time_zone, catch_up, max_catch_up,
                                 grace_seconds, target, key_template, fan_out, cursor_at,
                                 declared_at, created_at)
VALUES (:name, :cohort, :cron, :time_zone, :catch_up, :max_catch_up, :grace_seconds, :target,
        :key_template, :fan_out, :now, :now, :now)
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
FROM jobledger_schedules ORDER BY name

-- name: schedule_pause
UPDATE jobledger_schedules
SET paused = :paused, pause_changed_at = :now, pause_changed_by = :actor, pause_note = :note,
    skipped_ticks = skipped_ticks + CASE WHEN :cursor > cursor_at THEN :skipped ELSE 0 END,
    cursor_at = max(cursor_at, COALESCE(:cursor, cursor_at))
WHERE name = :name

-- name: schedule_advance
UPDATE jobledger_schedules SET cursor_at = :cursor, skipped_ticks = skipped_ticks + :skipped
WHERE name = :name AND cursor_at < :cursor

-- name: schedule_tick_start
INSERT INTO jobledger_ticks (schedule, tick_time, state, leader, term, runs, started_at)
VALUES (:schedule, :tick_time, 'running', :leader, :term, 1, :now)
ON CONFLICT (schedule, tick_time) DO UPDATE
SET runs = jobledger_ticks.runs + 1, leader = excluded.leader, term = excluded.term, error = NULL
WHERE jobledger_ticks.state = 'running'
RETURNING schedule, tick_time, state, leader, term, runs, jobs_created, jobs_existing, conflicts,
          started_at, finished_at, error

-- name: schedule_tick_get
SELECT schedule, tick_time, state, leader, term, runs, jobs_created, jobs_existing, conflicts,
       started_at, finished_at, error
FROM jobledger_ticks WHERE schedule = :schedule AND tick_time = :tick_time

-- name: schedule_tick_progress
UPDATE jobledger_ticks
SET jobs_created = jobs_created + :created, jobs_existing = jobs_existing + :existing,
    conflicts = conflicts + :conflicts
WHERE schedule = :schedule AND tick_time = :tick_time

-- name: schedule_tick_finish
UPDATE jobledger_ticks SET state = 'done', finished_at = :now, error = NULL
WHERE schedule = :schedule AND tick_time = :tick_time AND state = 'running'
RETURNING schedule, tick_time, state, leader, term, runs, jobs_created, jobs_existing, conflicts,
          started_at, finished_at, error

-- name: schedule_tick_error
UPDATE jobledger_ticks SET error = :error
WHERE schedule = :schedule AND tick_time = :tick_time AND state = 'running'

-- name: schedule_tick_prune
-- Finished ticks older than the cut-off and behind their schedule's cursor: no scheduler looks
-- at them again (only the tick history does).
DELETE FROM jobledger_ticks WHERE (schedule, tick_time) IN (
    SELECT t.schedule, t.tick_time FROM jobledger_schedules AS s
    JOIN jobledger_ticks AS t ON t.schedule = s.name AND t.tick_time < s.cursor_at
                             AND t.tick_time < :before
    WHERE t.state = 'done'
    LIMIT {limit}
)

-- name: schedule_tick_list
-- {where} is built from fixed clauses; {limit} is a literal.
SELECT schedule, tick_time, state, leader, term, runs, jobs_created, jobs_existing, conflicts,
       started_at, finished_at, error
FROM jobledger_ticks WHERE {where} ORDER BY tick_time DESC, schedule LIMIT {limit}
