"""The jobs role on PostgreSQL: inserts, publishing, claims, lease renewals and outcomes.

The hot path. A claim is one ``FOR UPDATE SKIP LOCKED`` statement (prepared: its generic plan is
checked by tests/test_claim_plan.py); completions, failures and renewals are one statement per
batch over arrays of ids and tokens, never prepared (see ``database._configure``); the single
enqueue goes through its own prepared statement (``prepared.py``).

A publish takes, per key, a transaction-level advisory lock **without waiting**
(``pg_try_advisory_xact_lock``). A key whose lock is held belongs to a publish still in flight in
another transaction — in this server process or any other — and is reported as ``in_flight``
instead of queueing behind it. The lock ends with the transaction, so a crashed server never
leaves a key stuck.
"""

from __future__ import annotations

import logging
import re
import threading
import time
import uuid
from collections import deque
from collections.abc import Generator, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from datetime import datetime
from operator import attrgetter
from typing import Any

import psycopg
import psycopg.errors

from ..._faults import fault_point
from ..._records import (
    ClaimedJob,
    FailResult,
    Failure,
    InsertResult,
    JobRow,
    JobState,
    KeyClaim,
    Lease,
    NewJob,
    OnConflict,
    PublishItem,
    PublishOutcome,
    PublishStatus,
    RescueResult,
    created_results,
)
from ...errors import BackendUnavailable
from ..common import (
    ClaimTurns,
    pause_reason,
    publish_compare,
    resolve_inserts,
)
from ..history import History
from ..jobs import Jobs, LeaseSeconds, Now
from ..rows import JOB_COLUMNS, claimed_job, job_row
from .cursor import ClaimCursor
from .database import PostgresDatabase, queue_params
from .database import to_time as _utc
from .grouped import GroupedClaim
from .newjob import new_job_arrays, new_job_copy_pieces, new_job_values, text_array
from .plan import Atomic, Copy, Plan, Quick, Statement, run, run_steps
from .prepared import PreparedStatement

__all__ = ["PostgresJobs"]

#: Claims kept to give back (``PostgresJobs._give_back_unanswered``): a claim that commits
#: without its answer is one that the connection's end caught at its commit — the first of an
#: outage's failed claims; those after it never reach the server. The first ones are kept.
MAX_UNANSWERED = 32

log = logging.getLogger("jobledger.worker")

#: From this many jobs a batch of new keys goes in by ``COPY`` (``_copy_fresh``); smaller ones as
#: one statement over array literals (``job_insert_fresh``). Measured on one connection, jobs
#: built beforehand, 5 alternating rounds (docs/benchmarks.md): COPY 1.09× the arrays at 100
#: jobs, 1.26× at 1,000, 1.38× at 5,000; at 20 the two were level within the noise, and the
#: COPY's extra round trips weigh more the smaller the batch.
COPY_FROM = 100

_queue_of = attrgetter("queue")
_key_of = attrgetter("key")


_UUID = re.compile(
    r"[0-9a-fA-F]{8}-?[0-9a-fA-F]{4}-?[0-9a-fA-F]{4}-?[0-9a-fA-F]{4}-?[0-9a-fA-F]{12}"
)


class PostgresJobs(Jobs):
    """``Jobs`` for PostgreSQL."""

    #: A batch of new keys this large goes in by ``COPY``, a piece at a time (``_copy_fresh``).
    stream_from = COPY_FROM

    def __init__(self, db: PostgresDatabase, history: History):
        self._db = db
        self._history = history
        self._grouped = GroupedClaim(db)
        self._turns = ClaimTurns()
        self._cursor = ClaimCursor()
        self._unanswered: deque[tuple[str, str, list[int]]] = deque()
        """Claims that may have committed without their answer reaching this process: the
        claim's token source, the worker, the ids it did get (see ``_give_back_unanswered``)."""
        self._unanswered_lock = threading.Lock()
        self._insert_one_text = db.sql["job_insert_one"]
        self._insert_one_statement = PreparedStatement(
            "jobledger_job_insert_one", self._insert_one_text, prepare=db.prepares
        )

    def rewind(self) -> bool:
        """The next claim scans from the start (and walks the groups' turns from the start):
        jobs were made pending again elsewhere in this process (an operator's repair), perhaps
        ahead of the claims' positions, or a burst worker is about to decide that nothing is
        due."""
        walked_elsewhere = self._grouped.turns.rewind()
        return self._cursor.rewind() or walked_elsewhere

    def _insert(
        self, jobs: Sequence[NewJob], now: datetime | None, conn: Any, on_conflict: OnConflict
    ) -> list[InsertResult]:
        single = conn is None and len(jobs) == 1
        results = self._insert_one(jobs[0], now) if single else None
        if results is None:
            plan = self.insert_plan(jobs, now, conn is not None, on_conflict, one_sent=single)
            results = run(self._db, plan, conn)
        self.placed(jobs, now)
        return results

    def _insert_one(self, job: NewJob, now: datetime | None) -> list[InsertResult] | None:
        """The plan's first step for one job, sent without driving the plan: a single enqueue
        is mostly the Python around its one statement (docs/benchmarks.md). None when the key
        was known: the rest of the plan runs then."""
        statement, params = self._insert_one_statement, self._one_params(job, now)
        return _one_created(self._db.quickly(lambda c: statement.rows(c, params)))

    def _one_params(self, job: NewJob, now: datetime | None) -> dict[str, Any]:
        """The parameters of ``job_insert_one``: one new job in one statement, which answers
        no row when its key is known (then nothing was written, and the checked path does the
        whole work)."""
        one = new_job_values(job)
        one["channel"] = self._db.channel
        one["now"] = now
        return one

    def placed(self, jobs: Sequence[NewJob], now: datetime | None) -> None:
        """``jobs`` were inserted by this process at ``now``, by this role or by its asyncio
        twin (``aio.py``): the next claim looks from the start if one is ahead of a position
        (or below a group's floor)."""
        self._cursor.placed(jobs, now)
        self._grouped.turns.placed(jobs, now)

    def _returned(
        self, jobs: Iterable[tuple[str, int, datetime, int, str | None]], now: datetime | None
    ) -> None:
        """Jobs this process made pending again at ``now``, each as (queue, priority, run time,
        id, group): as ``placed``."""
        jobs = list(jobs)
        self._cursor.returned(jobs, now)
        self._grouped.turns.returned(jobs)

    def insert_plan(
        self,
        jobs: Sequence[NewJob],
        now: datetime | None,
        in_caller_transaction: bool,
        on_conflict: OnConflict,
        one_sent: bool = False,
    ) -> Plan[list[InsertResult]]:
        """The enqueue, as a plan (see ``plan.py``): driven in a thread by ``insert``, and under
        asyncio by ``aio.PostgresAsyncJobs``. Without the caller's transaction, one job is one prepared
        statement, a small batch of new keys one statement, a large one a ``COPY`` in one
        transaction; a known key (or the caller's transaction) takes the checked path.
        ``one_sent``: the one job's statement was sent already and found its key known."""
        if not jobs:
            return []
        channel = self._db.channel
        if not in_caller_transaction and len(jobs) == 1:
            if not one_sent:
                one = Quick(
                    self._insert_one_text,
                    self._one_params(jobs[0], now),
                    self._insert_one_statement,
                )
                inserted = _one_created((yield one))
                if inserted is not None:
                    return inserted
        elif not in_caller_transaction and len(jobs) >= COPY_FROM:
            # A large batch by COPY, every key new; else it rolls back and the checked path runs.
            try:
                ids = yield Atomic(self._copy_fresh(jobs, now))
            except (psycopg.errors.UniqueViolation, _Known):
                pass  # a key is known, or named twice in the batch
            else:
                return created_results(map(int, ids))
        elif not in_caller_transaction and _consistent(jobs):
            # The common enqueue in one statement, one round trip: every key new (no job and no
            # live tombstone has it); else nothing was written, and the checked path runs.
            params = new_job_arrays(jobs) | {"channel": channel, "now": now}
            try:
                rows = yield Quick(self._db.sql["job_insert_fresh"], params)
            except psycopg.errors.InvalidTextRepresentation as exc:
                if "jobledger: not all keys were new" not in str(exc):
                    raise
                # another transaction inserted one of them meanwhile
            else:
                created = {(r[2], r[3]): r[1] for r in rows if r[0] == "c"}
                if not any(r[0] == "v" and r[1] < 0 for r in rows):
                    return resolve_inserts(jobs, created, {}, on_conflict)
        for _ in range(3):
            results = yield Atomic(self._insert_checked(jobs, now, on_conflict))
            if results is not None:
                return results  # type: ignore[no-any-return]
            # A conflicting row vanished between the insert and the read (pruned without a
            # tombstone): try again.
        raise BackendUnavailable(f"enqueue into {self._db.url.redacted} kept racing with pruning")

    def _copy_fresh(
        self, jobs: Sequence[NewJob], now: datetime | None
    ) -> Generator[Statement | Copy, Any, list[str]]:
        """Insert a batch whose keys are all new by ``COPY``, in one transaction; the jobs'
        ids, in order. Raises ``UniqueViolation`` (a key has a job, or is in the batch twice) or
        ``_Known`` (a live tombstone holds a key), and the transaction rolls back."""
        sql = self._db.sql
        ((clock, ids),) = yield Statement(sql["job_copy_start"], {"now": now, "n": len(jobs)})
        taken: list[str] = ids[1:-1].split(",")
        if now is None:  # the database's clock: the created and updated times by default
            yield Copy(
                sql["job_copy_on_server_clock"],
                new_job_copy_pieces(jobs, taken, clock, with_times=False),
            )
        else:
            yield Copy(sql["job_copy"], new_job_copy_pieces(jobs, taken, clock))
        queues = list(map(_queue_of, jobs))
        params = {
            "queue": text_array(queues),
            "key": text_array(list(map(_key_of, jobs))),
            "queues": list(dict.fromkeys(queues)),
            "channel": self._db.channel,
            "now": now,
        }
        ((held, _),) = yield Statement(sql["job_copy_end"], params)
        if held:
            raise _Known
        return taken

    def _insert_checked(
        self, jobs: Sequence[NewJob], now: datetime | None, on_conflict: OnConflict
    ) -> Generator[Statement, Any, list[InsertResult] | None]:
        """Any enqueue, in a transaction: insert, then look at tombstones and existing keys.
        None when a conflicting row vanished meanwhile (the caller tries again)."""
        sql = self._db.sql
        params = new_job_arrays(jobs) | {"channel": self._db.channel, "now": now}
        idents = list(dict.fromkeys((j.queue, j.key) for j in jobs))
        rows = yield Statement(sql["job_insert"], params)
        created = {(r[1], r[2]): r[0] for r in rows}
        pruned = yield from self._tombstoned(idents, now)
        undo = [created.pop(i) for i in list(created) if i in pruned]
        if undo:
            # The insert waited on the key while a prune deleted its job, and went ahead
            # when the prune committed; the prune's tombstone, visible now, wins.
            yield Statement(sql["job_insert_undo"], {"ids": undo})
        missing = [i for i in idents if i not in created and i not in pruned]
        existing: dict[tuple[str, str], tuple[int, str, Any]] = {}
        if missing:
            found = yield Statement(
                sql["job_existing"],
                {"queue": [m[0] for m in missing], "key": [m[1] for m in missing]},
            )
            existing = {(r[1], r[2]): (r[0], r[3], r[4]) for r in found}
        if not all(m in existing for m in missing):
            return None
        same = yield from self._same_payload(jobs, pruned)
        return resolve_inserts(jobs, created, existing, on_conflict, same)

    def _tombstoned(
        self, idents: list[tuple[str, str]], now: datetime | None
    ) -> Generator[Statement, Any, dict[tuple[str, str], tuple[int, str, str]]]:
        rows = yield Statement(
            self._db.sql["tombstone_live"],
            {"queue": [i[0] for i in idents], "key": [i[1] for i in idents], "now": now},
        )
        return {(r[0], r[1]): (r[2], r[3], r[4]) for r in rows}

    def _same_payload(
        self,
        jobs: Sequence[NewJob],
        pruned: dict[tuple[str, str], tuple[int, str, str]],
    ) -> Generator[Statement, Any, dict[tuple[str, str], tuple[int, str, Any]]]:
        """For keys held by tombstones: (job id, task, a test that a payload is the pruned one).

        Payloads are compared by the digest of their ``jsonb`` text, as the prune computed it."""
        if not pruned:
            return {}
        payloads = list({j.payload_json for j in jobs if (j.queue, j.key) in pruned})
        digests = dict((yield Statement(self._db.sql["payload_digest"], {"payloads": payloads})))
        return {
            ident: (job_id, task, lambda job, d=digest: digests.get(job.payload_json) == d)
            for ident, (job_id, task, digest) in pruned.items()
        }

    def _claim(
        self, queues: Sequence[str], worker: str, limit: int, now: Now, lease_seconds: LeaseSeconds
    ) -> list[ClaimedJob]:
        if not queues:
            return []
        with self._claiming(worker, now) as claim:
            return self._claim_as(claim, queues, worker, limit, now, lease_seconds)

    def _claim_as(
        self,
        claim: str,
        queues: Sequence[str],
        worker: str,
        limit: int,
        now: Now,
        lease_seconds: LeaseSeconds,
    ) -> list[ClaimedJob]:
        params = queue_params(queues) | {
            "worker": worker,
            "now": now,
            "lease_seconds": lease_seconds,
            "claim": claim,
        }
        prepared = self._db.prepared
        resent = self._db.resent

        def plain(n: int) -> list[Any]:
            after = self._cursor.after(queues, now)
            rows: list[Any] = []
            if after is not None:
                started = time.perf_counter()
                claim_after = prepared("job_claim_after", n, len(queues))
                rows = self._db.quick_prepared(claim_after, params | after)
                self._cursor.claimed_after(time.perf_counter() - started)
            if after is None or (not rows and self._cursor.found_nothing()):
                started = time.perf_counter()
                rows = self._db.quick_prepared(prepared("job_claim", n, len(queues)), params)
                self._cursor.scanned_from_start(time.perf_counter() - started, len(rows))
            self._cursor.advance_rows(rows, queue=1, priority=10, run_at=9, job_id=0)
            return rows

        def grouped(n: int) -> list[Any]:
            return self._grouped.claim(queues, worker, n, now, lease_seconds, claim)

        if self._grouped.waiting(queues):
            rows = self._turns.claim(plain, grouped, limit)
        else:
            rows = plain(limit)
        if self._db.resent != resent:
            # A statement was sent again (perhaps another thread's): this claim's first send
            # may have committed, its jobs leased under tokens nobody got.
            self._may_have_committed(claim, worker, [r[0] for r in rows])
            self._give_back_unanswered(now)
        return [claimed_job(r, _utc) for r in rows]

    @contextmanager
    def _claiming(self, worker: str, now: Now) -> Iterator[str]:
        """Around every claim (``claim``, ``claim_keys``): first give back the jobs of claims
        whose answer was lost; then the random value this claim draws its tokens from
        (``lease_set``), kept should the claim fail without knowing whether it committed."""
        if self._unanswered:
            self._give_back_unanswered(now)
        claim = uuid.uuid4().hex
        down = self._db.outage.down
        try:
            yield claim
        except BackendUnavailable:
            if not down:  # known down before: the claim was never sent
                self._may_have_committed(claim, worker, [])
            raise

    def _may_have_committed(self, claim: str, worker: str, returned: list[int]) -> None:
        """Keep a claim whose answer may have been lost, to give its jobs back."""
        if len(self._unanswered) < MAX_UNANSWERED:
            self._unanswered.append((claim, worker, returned))

    def _give_back_unanswered(self, now: Now) -> None:
        """Give back the jobs of claims whose answer was lost (``job_claim_unanswered``):
        pending again, their attempts not charged, instead of leased to nobody until their
        leases expire. Kept to try again while the database is unavailable."""
        with self._unanswered_lock:
            while self._unanswered:
                claim, worker, returned = self._unanswered[0]
                rows = self._db.run(
                    "job_claim_unanswered",
                    {"claim": claim, "worker": worker, "returned": returned, "now": now},
                )
                self._unanswered.popleft()
                if rows:
                    self._returned(((r[1], r[2], r[3], r[0], r[4]) for r in rows), now)
                    log.warning(
                        "gave back %d jobs that a claim by %s leased but whose answer was lost "
                        "(the connection failed at its commit): pending again, not charged",
                        len(rows),
                        worker,
                    )

    @staticmethod
    def _lease_params(leases: Sequence[Lease]) -> dict[str, Any]:
        """Ids and tokens as array literals: one string each, which costs a fraction of what
        binding a list element by element does. A token that is not a UUID cannot be any job's
        current token, so it is left out (its lease is reported stale)."""
        held = [lease for lease in leases if _UUID.fullmatch(lease.token)]
        return {
            "ids": "{" + ",".join([str(int(lease.job_id)) for lease in held]) + "}",
            "tokens": "{" + ",".join([lease.token for lease in held]) + "}",
        }

    def _heartbeat(
        self, leases: Sequence[Lease], now: Now, lease_seconds: LeaseSeconds
    ) -> dict[int, datetime]:
        params = self._lease_params(leases) | {"now": now, "lease_seconds": lease_seconds}
        return {r[0]: _utc(r[1]) for r in self._db.quick(self._db.sql["job_heartbeat"], params)}  # type: ignore[misc]

    def _complete(
        self, leases: Sequence[Lease], now: Now, conn: Any, results: Mapping[int, str] | None
    ) -> set[int]:
        params = self._lease_params(leases) | {"now": now, "tell": conn is None}
        name = "job_complete"
        if results:
            # Only a batch with a result pays for binding one more array (element by element).
            held = [lease for lease in leases if _UUID.fullmatch(lease.token)]
            params["results"] = [results.get(lease.job_id) for lease in held]
            name = "job_complete_results"
        if conn is None:
            rows = self._db.hot(self._db.sql[name], params)
        else:
            rows = self._db.run(name, params, conn=conn)
        return {r[0] for r in rows}

    def store_result(self, lease: Lease, result: str | None) -> bool:
        if not _UUID.fullmatch(lease.token):
            return False
        params = {"id": lease.job_id, "token": lease.token, "result": result}
        return bool(self._db.run("job_result_store", params))

    def _fail(self, failures: Sequence[Failure], now: Now) -> list[FailResult]:
        sent = [f for f in failures if _UUID.fullmatch(f.lease.token)]
        params = {
            "ids": [f.lease.job_id for f in sent],
            "tokens": [f.lease.token for f in sent],
            "retry": [f.retry for f in sent],
            "run_at": [f.run_at for f in sent],
            "error_class": [f.error_class for f in sent],
            "message": [f.message for f in sent],
            "traceback": [f.traceback for f in sent],
            "timed_out": [f.timed_out for f in sent],
            "now": now,
        }
        pauses = {f.lease.job_id: f for f in sent if f.pause_group_until is not None}
        if not pauses:
            rows = self._db.hot(self._db.sql["job_fail"], params)
        else:
            # The failure and its group's pause commit together: no claim in between takes
            # the group's other jobs.
            with self._db.transaction() as c:
                rows = c.execute(self._db.sql["job_fail"], params).fetchall()
                for job_id, _, group, queue, *_ in rows:
                    failure = pauses.get(job_id)
                    if failure is not None and group is not None:
                        c.execute(
                            self._db.sql["group_pause"],
                            {
                                "queue": queue,
                                "name": group,
                                "until": failure.pause_group_until,
                                "reason": pause_reason(failure),
                            },
                        )
        moved = {r[0]: JobState(r[1]) for r in rows}
        self._returned(((r[3], r[5], r[6], r[0], r[2]) for r in rows if r[1] == "pending"), now)
        return [FailResult(f.lease.job_id, moved.get(f.lease.job_id)) for f in failures]

    def _settled(self, leases: Sequence[Lease]) -> dict[int, str]:
        return dict(self._db.run("attempt_settled", self._lease_params(leases)))

    def _release(self, leases: Sequence[Lease], now: Now) -> set[int]:
        rows = self._db.run("job_release", self._lease_params(leases) | {"now": now})
        self._returned(((r[1], r[2], r[3], r[0], r[4]) for r in rows), now)
        return {r[0] for r in rows}

    def _rescue(self, now: Now, limit: int) -> list[RescueResult]:
        rows = self._db.run("job_rescue", {"now": now}, limit=limit)
        self._returned(((r[1], r[6], r[7], r[0], r[8]) for r in rows if r[3] == "pending"), now)
        return [RescueResult(r[0], r[1], r[2], JobState(r[3]), r[4]) for r in rows]

    def _claim_keys(
        self, wanted: Sequence[tuple[str, str]], worker: str, now: Now, lease_seconds: LeaseSeconds
    ) -> list[KeyClaim]:
        pairs = {"queues": [q for q, _ in wanted], "keys": [k for _, k in wanted]}
        params = pairs | {"worker": worker, "now": now, "lease_seconds": lease_seconds}
        with self._claiming(worker, now) as claim, self._db.transaction() as c:
            params["claim"] = claim
            rows = c.execute(self._db.sql["job_claim_keys"], params).fetchall()
            claimed = {(r[1], r[2]): claimed_job(r, _utc) for r in rows}
            # The others as they are now (and a pair named twice: claimed for its first mention).
            rest = [p for p in dict.fromkeys(wanted) if p not in claimed or wanted.count(p) > 1]
            current: dict[tuple[str, str], JobRow] = {}
            if rest:
                found = c.execute(
                    f"SELECT {JOB_COLUMNS} FROM {self._db.tables['jobs']} WHERE (queue, key) IN "
                    "(SELECT * FROM unnest(%(queues)s::text[], %(keys)s::text[]))",
                    {"queues": [q for q, _ in rest], "keys": [k for _, k in rest]},
                ).fetchall()
                current = {(r[1], r[2]): job_row(r, _utc) for r in found}
            grouped = {(j.queue, j.group) for j in current.values() if j.group is not None}
            paused: dict[tuple[str, str | None], datetime | None] = {}
            if grouped:
                paused = {
                    (r[0], r[1]): _utc(r[2])
                    for r in c.execute(
                        self._db.sql["group_paused_until"],
                        {
                            "queues": [q for q, _ in grouped],
                            "names": [n for _, n in grouped],
                            "now": now,
                        },
                    ).fetchall()
                }
        results = []
        for pair in wanted:
            job = claimed.pop(pair, None)
            if job is not None:
                results.append(KeyClaim(job))
                continue
            row = current.get(pair)
            until = None if row is None else paused.get((row.queue, row.group))
            results.append(KeyClaim(None, row, until))
        return results

    def _publish(self, items: Sequence[PublishItem], now: Now) -> list[PublishOutcome]:
        for _ in range(3):
            try:
                outcomes = self._publish_once(items, now)
                self.placed([i.job for i in items], now)
                return outcomes
            except _Again:
                continue
        raise BackendUnavailable("publish kept racing with pruning; try again")

    def _publish_once(
        self, items: Sequence[PublishItem], now: datetime | None
    ) -> list[PublishOutcome]:
        sql = self._db.sql
        with self._db.transaction() as c:
            idents = list(dict.fromkeys(f"{i.job.queue}\n{i.job.key}" for i in items))
            locks = c.execute(
                sql["publish_try_locks"].encode(),
                {"prefix": f"jobledger:{self._db.schema}:", "keys": idents},
            ).fetchall()
            busy = {ident for ident, got in locks if not got}
            fault_point("publish.in_transaction")
            todo = [i for i in items if f"{i.job.queue}\n{i.job.key}" not in busy]
            jobs = [i.job for i in todo]
            created: dict[tuple[str, str], int] = {}
            if jobs:
                inserted = c.execute(
                    sql["job_insert"].encode(),
                    new_job_arrays(jobs) | {"channel": self._db.channel, "now": now},
                ).fetchall()
                created = {(r[1], r[2]): r[0] for r in inserted}
            # Keys whose jobs were pruned are held by tombstones, as for any enqueue.
            idents_of_jobs = list(dict.fromkeys((j.queue, j.key) for j in jobs))
            pruned = run_steps(c, self._tombstoned(idents_of_jobs, now))
            undo = [created.pop(i) for i in list(created) if i in pruned]
            if undo:
                c.execute(sql["job_insert_undo"].encode(), {"ids": undo})
            same_pruned = run_steps(c, self._same_payload(jobs, pruned))
            missing = [
                (j.queue, j.key)
                for j in jobs
                if (j.queue, j.key) not in created and (j.queue, j.key) not in pruned
            ]
            existing: dict[tuple[str, str], tuple[int, str, Any, str | None]] = {}
            if missing:
                found = c.execute(
                    sql["publish_existing"].encode(),
                    {"queue": [m[0] for m in missing], "key": [m[1] for m in missing]},
                ).fetchall()
                existing = {(r[1], r[2]): (r[0], r[5], r[3], r[4]) for r in found}
                if any(m not in existing for m in missing):
                    # The row that made the insert conflict vanished before we read it (pruned):
                    # roll back and try again.
                    raise _Again
            statuses: list[tuple[PublishStatus, int | None]] = []
            first: dict[tuple[str, str], PublishItem] = {}
            records: list[tuple[PublishItem, int]] = []
            for item in items:
                ident = (item.job.queue, item.job.key)
                if f"{ident[0]}\n{ident[1]}" in busy:
                    statuses.append(("in_flight", None))
                elif ident in created and ident not in first:
                    first[ident] = item
                    records.append((item, created[ident]))
                    statuses.append(("created", created[ident]))
                elif ident in first:
                    same = first[ident].fingerprint == item.fingerprint
                    statuses.append(("replayed" if same else "conflict", created[ident]))
                elif ident in same_pruned:
                    job_id, task, is_same = same_pruned[ident]
                    same = task == item.job.task and is_same(item.job)
                    statuses.append(("replayed" if same else "conflict", job_id))
                else:
                    job_id, task, payload, fingerprint = existing[ident]
                    statuses.append((publish_compare(item, task, payload, fingerprint), job_id))
            if records:
                c.execute(
                    sql["publish_record"].encode(),
                    {
                        "queue": [i.job.queue for i, _ in records],
                        "key": [i.job.key for i, _ in records],
                        "job_id": [job_id for _, job_id in records],
                        "fingerprint": [i.fingerprint for i, _ in records],
                        "api_key_id": [i.api_key_id for i, _ in records],
                        "now": now,
                    },
                )
            ids = sorted({job_id for _, job_id in statuses if job_id is not None})
            rows = (
                c.execute(sql["publish_job_state"].encode(), {"ids": ids}).fetchall() if ids else []
            )
        state = {r[0]: (JobState(r[1]), _utc(r[2])) for r in rows}
        for ident, (job_id, _task, _digest) in pruned.items():
            for tomb in self._history.tombstones(ident[1], ident[0]):
                if tomb.job_id == job_id:
                    state[job_id] = (tomb.state, tomb.finished_at or tomb.pruned_at)
        return [
            PublishOutcome(status, job_id, *state[job_id])
            if job_id is not None
            else PublishOutcome(status)
            for status, job_id in statuses
        ]


class _Again(Exception):
    """The publish transaction must be run again."""


def _one_created(rows: list[Any]) -> list[InsertResult] | None:
    """What ``job_insert_one`` answered: the job it created, or None when the key was known."""
    if rows and rows[0][0] is not None:
        return [InsertResult(int(rows[0][0]), True)]
    return None


class _Known(Exception):
    """A key of a batch inserted by ``COPY`` is held by a tombstone: roll it back."""


def _consistent(jobs: Sequence[NewJob]) -> bool:
    """False when one key appears twice in the batch with another task or payload (a conflict
    the database cannot see within one statement)."""
    seen: dict[tuple[str, str], tuple[str, str]] = {}
    for j in jobs:
        first = seen.setdefault((j.queue, j.key), (j.task, j.payload_json))
        if first != (j.task, j.payload_json):
            return False
    return True
