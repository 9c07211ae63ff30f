"""The role implementations both dialects share, written once over a dialect's database object
(``database.Database``): leader leases, schedules, the outbox, push subscriptions, the HTTP
API's storage, groups, statistics, effects and most of the history. What genuinely differs
between the dialects — the claim, the enqueue, completions, pruning — is in ``sqlite/`` and
``postgres/``."""
