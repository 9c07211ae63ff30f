-- The backend's lifecycle: which migrations a database has.
-- SQLite.

-- name: migration_versions
SELECT version FROM jobledger_migrations
