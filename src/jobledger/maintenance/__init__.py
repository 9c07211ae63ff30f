"""The background loopers, one a file, and the one leader election every singleton uses.

- ``looper.Looper``: a thread that runs a pass every interval, backs off while the database is
  unavailable, and logs (never dies of) a bug;
- ``rescuer.Rescuer``: expired leases back to pending (or dead) — one rescuer for every
  transport, run by workers, ``jobledger serve`` and push delivery alike;
- ``pruner.Pruner``: the small tables' housekeeping (sessions, rollups, published outbox
  records, expired tombstones);
- ``scheduler.Scheduler``: the scheduler tick, under a leader lease per cohort;
- ``rollups.RollupFlusher``: writes the per-minute rollups the observers added up;
- ``leader.LeaderElection``: one named authority at a time (lease, term, the leader's fence).
"""
