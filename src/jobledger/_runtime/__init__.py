"""The one runtime: claim a batch, hand each job to a runner, record its outcome, renew leases
while it runs, stop cleanly. The polling worker, push delivery, the HTTP pull consumer and the
broker consumer are adapters over it (see docs/architecture.md)."""
