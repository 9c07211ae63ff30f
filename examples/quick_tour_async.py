"""The README's quick tour from asyncio code: `python examples/quick_tour_async.py`.

The same ledger through ``AsyncLedger``: the same task decorator and semantics, every call
awaited. A throw-away SQLite file and a fake e-mail provider on 127.0.0.1 that honours
Idempotency-Key, so nothing needs setting up.
"""

from __future__ import annotations

import asyncio
import tempfile
from pathlib import Path

import httpx

from jobledger import AsyncLedger, check_response
from jobledger.testing.fakeprovider import FakeProvider

workdir = Path(tempfile.mkdtemp(prefix="jobledger-tour-"))
aledger = AsyncLedger(f"sqlite:///{workdir / 'jobs.db'}")
provider = FakeProvider().start()


@aledger.task(queue="digests", max_attempts=8, lease_seconds=60)
async def send_digest(ctx, customer_id: int, week: str) -> None:
    """Send one customer's weekly digest, once, whatever retries happen."""
    async with httpx.AsyncClient() as client:
        response = await client.post(
            f"{provider.url}/send",
            json={"to": f"customer-{customer_id}", "week": week},
            headers={"Idempotency-Key": ctx.key},
        )
    check_response(response)  # 429/5xx → retry with backoff; other 4xx → dead


async def main() -> None:
    async with aledger:
        digest = {"customer_id": 4187, "week": "2026-W33"}
        first = await aledger.enqueue(send_digest, digest, key="4187:2026-W33")
        again = await aledger.enqueue(send_digest, digest, key="4187:2026-W33")
        print(f"enqueue 4187:2026-W33 → job {first.id}, created={first.created}")
        print(f"enqueue it again      → job {again.id}, created={again.created} (one key, one job)")

        # Drain what is due, then return (a worker of the sync ledger, on a thread).
        worker = aledger.worker(queues=["digests"], concurrency=4, burst=True)
        stats = await asyncio.to_thread(worker.run)
        job = await aledger.job_by_key("4187:2026-W33")
        print(
            f"worker: {stats.completed} completed; job {job.id} is {job.state.value} "
            f"after {job.attempts} attempt(s)"
        )
        print(f"provider: {provider.stats()}")


asyncio.run(main())
provider.stop()
