"""The quick tour from the README, runnable: `make demo` (or `python examples/quick_tour.py`).

It uses a throw-away SQLite file and a fake e-mail provider on 127.0.0.1 that honours
Idempotency-Key, so nothing needs setting up.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import httpx

from jobledger import Ledger, check_response
from jobledger.testing.fakeprovider import FakeProvider

workdir = Path(tempfile.mkdtemp(prefix="jobledger-tour-"))
ledger = Ledger(f"sqlite:///{workdir / 'jobs.db'}")
provider = FakeProvider().start()


@ledger.task(queue="digests", max_attempts=8, lease_seconds=60)
def send_digest(ctx, customer_id: int, week: str) -> None:
    """Send one customer's weekly digest, once, whatever retries happen."""
    response = httpx.post(
        f"{provider.url}/send",
        json={"to": f"customer-{customer_id}", "week": week},
        headers={"Idempotency-Key": ctx.key},
    )
    check_response(response)  # 429/5xx → retry with backoff; other 4xx → dead


first = ledger.enqueue(send_digest, {"customer_id": 4187, "week": "2026-W33"}, key="4187:2026-W33")
again = ledger.enqueue(send_digest, {"customer_id": 4187, "week": "2026-W33"}, key="4187:2026-W33")
print(f"enqueue 4187:2026-W33 → job {first.id}, created={first.created}")
print(f"enqueue it again      → job {again.id}, created={again.created} (one key, one job)")

stats = ledger.run_worker(queues=["digests"], concurrency=4, burst=True)
job = ledger.job_by_key("4187:2026-W33")
print(
    f"worker: {stats.completed} completed; job {job.id} is {job.state.value} after {job.attempts} attempt(s)"
)
print(f"provider: {provider.stats()}")
provider.stop()
ledger.close()
