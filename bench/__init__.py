"""jobledger's benchmark suite: ``python -m bench`` (or ``make bench``).

Measures enqueue, drain, steady state, idle latency, claim latency at scale and worker memory on
SQLite and PostgreSQL, next to the floor (bare SQL from one connection) and, with ``--compare``,
next to other Python PostgreSQL queues installed into a virtualenv outside the repository.
See docs/benchmarks.md.
"""
