-- The backend's lifecycle: which migrations a database has.
-- PostgreSQL. {migrations} is the schema-qualified table.

-- name: migration_versions
SELECT version FROM {migrations}
