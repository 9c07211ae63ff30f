"""The worker's per-minute rollup of claims (``MinuteStatsRecorder.claimed``): its sums per queue
and task, whatever the order of a batch's jobs and however many share their times."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from hypothesis import given
from hypothesis import strategies as st

from jobledger._records import ClaimedJob
from jobledger.observability.rollup import MinuteStatsRecorder

T0 = datetime(2026, 8, 10, 6, 0, tzinfo=UTC)

_job = st.tuples(
    st.sampled_from(["a", "b"]),  # queue
    st.sampled_from(["t", "u"]),  # task
    st.integers(0, 3),  # seconds the run time lies before T0
    st.integers(0, 1),  # which of two claim times
    st.sampled_from([30.0, 60.0]),  # lease length
)


def _claimed(n: int, queue: str, task: str, before: int, claim: int, lease: float) -> ClaimedJob:
    until = T0 + timedelta(seconds=60 + claim * 0.5)  # (not from the lease: it varies alone)
    run_at = T0 - timedelta(seconds=before) + timedelta(seconds=0.25 * (before == 3))
    return ClaimedJob(n, queue, f"k{n}", task, {}, 1, "0" * 32, until, lease, run_at, 0, None)


@given(st.lists(_job, max_size=40))
def test_a_batchs_waits_add_up_per_queue_and_task(spec):
    jobs = [_claimed(n, *s) for n, s in enumerate(spec)]
    recorder = MinuteStatsRecorder(clock=lambda: T0.timestamp())
    recorder.claimed(jobs)
    got = {
        (r.queue, r.task): (r.claimed, round(r.wait_sum, 6), r.wait_max) for r in recorder.take()
    }
    expected: dict[tuple[str, str], list[float]] = {}
    for job in jobs:
        wait = (job.lease_until - job.run_at).total_seconds() - job.lease_seconds
        expected.setdefault((job.queue, job.task), []).append(max(wait, 0.0))
    assert got == {k: (len(v), round(sum(v), 6), max(v)) for k, v in expected.items()}
