"""Scheduling: cron schedules whose ticks enqueue jobs.

- ``cron``: 5-field cron expressions in IANA time zones, with cron's daylight-saving rules;
- ``schedule``: ``Schedule``, ``Tick``, targets, and the ledger's book of schedules.

The loop that holds a cohort's leader lease and runs its ticks is a background looper:
``jobledger.maintenance.scheduler``. The rows the backends store are in ``jobledger._records``.
See docs/scheduling.md.
"""
