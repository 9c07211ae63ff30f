"""Every record the ledger stores or hands between its layers, in one place and apart from the
services that read and write them. A leaf package: its modules import only each other, the error
types and the retry policy's ``Backoff`` value.

- ``jobs``: states, job rows, attempts, events, tombstones; new jobs, leases, failures, results;
  what a prune removed;
- ``stats``: queue counts, live depths, per-minute rollups;
- ``schedules``: leader leases, schedules and their ticks;
- ``outbox``: broker routes, outbox records, claims by key;
- ``groups``: group limits and status, and the arithmetic of a group's bucket;
- ``queues``: declared queues and their settings;
- ``keys``: API keys and their scopes;
- ``subscriptions``: push subscriptions;
- ``checks``: the checks on payloads, keys, names and numbers that records and callers share.
"""

from __future__ import annotations

from . import checks, groups, jobs, keys, outbox, queues, schedules, stats, subscriptions
from .checks import *  # noqa: F403
from .groups import *  # noqa: F403
from .jobs import *  # noqa: F403
from .keys import *  # noqa: F403
from .outbox import *  # noqa: F403
from .queues import *  # noqa: F403
from .schedules import *  # noqa: F403
from .stats import *  # noqa: F403
from .subscriptions import *  # noqa: F403

__all__ = sorted(
    jobs.__all__
    + stats.__all__
    + schedules.__all__
    + outbox.__all__
    + groups.__all__
    + queues.__all__
    + keys.__all__
    + subscriptions.__all__
    + checks.__all__
)
