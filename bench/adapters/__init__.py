"""One adapter per queue under test, each a small command line with the same subcommands
(``setup``, ``info``, ``enqueue``, ``fill``, ``work``, ``produce``), so that the harness drives
every queue the same way. Adapters of other queues run in their own virtualenv and import only
that queue and the standard library (``common``)."""
