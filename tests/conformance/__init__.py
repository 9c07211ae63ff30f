"""One behaviour suite that SQLite and PostgreSQL must both pass, case by case, each on a fresh
schema, every time-dependent call with an explicit ``now``. Each storage role has its cases:
jobs (test_enqueue, test_hot_path, test_leases, test_retries, test_worker), history
(test_history, test_operators, test_prune), effects (test_effects), leader (test_leader),
schedules (test_schedules), outbox (test_outbox), subscriptions (test_subscriptions), api
(test_api), groups (test_groups), stats (test_stats)."""
