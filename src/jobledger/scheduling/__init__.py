"""Scheduling: cron schedules whose ticks enqueue jobs, and the one scheduler that runs them.

- ``cron``: 5-field cron expressions in IANA time zones, with cron's daylight-saving rules;
- ``records``: the rows the backends store (leader leases, schedules, ticks) — a leaf module;
- ``schedule``: ``Schedule``, ``Tick``, targets, and the ledger's book of schedules;
- ``scheduler``: the loop that holds the leader lease of a cohort and records its ticks.

See docs/scheduling.md. This package's ``__init__`` imports nothing, so that the backends can
import ``records`` without pulling in the rest.
"""
