"""Ledgers in the states an operator meets, for looking at every dashboard page in them: empty;
idle (jobs done, but nothing in the last hour); busy (a queue with retries and dead letters, long
keys and long errors, leased jobs, a paused group, a disabled push subscription, a schedule with
a leader)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

from jobledger import Ledger, Permanent
from jobledger._records import MinuteStats, SubscriptionState
from jobledger._services.subscriptions import create_subscription

#: A key without a space in it: the longest thing a table cell has to hold.
LONG_KEY = "invoice-2026-08-10/customer-4187-" + "x" * 40 + "/attempt-" + "9" * 30
LONG_ERROR = (
    "provider refused the message: 422 Unprocessable Entity "
    + "{'errors': [{'field': 'recipient', 'message': 'address rejected by policy'}]} " * 4
    + "/".join(f"segment{i}" for i in range(30))
)
IDLE_DONE = 55
PAUSED_GROUP = "throttled-tenant-with-a-long-name"


def _clear_rollups(ledger: Ledger) -> None:
    """Forget the per-minute rollups the worker just wrote (they are for this minute)."""
    ledger.backend.stats.minutes_prune(datetime.now(UTC) + timedelta(hours=1))


def empty(tmp: Path) -> Ledger:
    ledger = Ledger(f"sqlite:///{tmp}/empty.db")
    ledger.migrate()
    return ledger


def idle(tmp: Path) -> Ledger:
    """``IDLE_DONE`` jobs done on queue ``reports``, their rollups two hours old."""
    ledger = Ledger(f"sqlite:///{tmp}/idle.db")
    ledger.migrate()
    ledger.task(lambda ctx, n: None, name="report", queue="reports")
    ledger.enqueue_many(
        "report", [{"payload": {"n": n}, "key": f"report-{n}"} for n in range(IDLE_DONE)]
    )
    ledger.run_worker(["reports"], burst=True, handle_signals=False)
    _clear_rollups(ledger)
    old = datetime.now(UTC).replace(second=0, microsecond=0) - timedelta(hours=2)
    ledger.backend.stats.minutes_add(
        [MinuteStats(old, "reports", "report", claimed=IDLE_DONE, wait_sum=1.0, done=IDLE_DONE)]
    )
    return ledger


def busy(tmp: Path) -> Ledger:
    """Queue ``mail``: done, retried and dead jobs (long keys and errors), two leased; queue
    ``tenants`` with a paused group; a disabled push subscription; a schedule and its leader;
    and an hour of per-minute rollups, up to a thousand outcomes a minute."""
    ledger = Ledger(f"sqlite:///{tmp}/busy.db")
    ledger.migrate()

    @ledger.task(queue="mail", max_attempts=3)
    def send(ctx, n: int) -> None:
        if n % 7 == 0:
            raise Permanent(LONG_ERROR)
        if n % 5 == 0:
            raise ConnectionError(f"provider hiccup on message {n}: connection reset by peer")

    @ledger.schedule("*/5 * * * *", name="nightly-digest-for-every-customer-of-the-account")
    @ledger.task(queue="digests")
    def digest(ctx, tick: str) -> None:
        pass

    ledger.enqueue_many(
        send,
        [
            {"payload": {"n": n}, "key": f"{LONG_KEY}-{n}" if n % 7 == 0 else f"message-{n}"}
            for n in range(40)
        ],
    )
    ledger.run_worker(["mail"], burst=True, handle_signals=False)
    ledger.enqueue_many(
        send, [{"payload": {"n": 1000 + n}, "key": f"message-{1000 + n}"} for n in range(2)]
    )
    ledger.backend.jobs.claim(["mail"], "web-1.internal.example:4242:9f3c2a", 2, None)

    for tenant, count in (("flood", 12), (PAUSED_GROUP, 3), ("quiet", 1)):
        for n in range(count):
            ledger.enqueue(
                digest, {"tick": str(n)}, key=f"{tenant}:{n}", queue="tenants", group=tenant
            )
    ledger.set_group_limits("tenants", max_leased=2, rate=5)
    ledger.pause_group(
        "tenants",
        PAUSED_GROUP,
        seconds=900,
        reason="HTTP 429 from the provider: Too Many Requests; retry after 900 seconds",
    )

    sub = create_subscription(
        ledger.backend,
        "hooks",
        "https://hooks.partner.example.com/v2/integrations/jobledger/webhooks/receive/" + "a" * 40,
    )
    ledger.backend.subscriptions.record(
        sub.id, False, 410, "HTTP 410 Gone: the endpoint says it no longer exists"
    )
    ledger.backend.subscriptions.set_state(
        sub.id, SubscriptionState.DISABLED, None, "the endpoint answered 410 Gone"
    )
    create_subscription(ledger.backend, "mail", "https://example.com/hook")

    ledger.scheduler(
        name="scheduler-host-1.internal.example:4242:9f3c2a", lease_seconds=3600
    ).run_once()

    _clear_rollups(ledger)
    now = datetime.now(UTC).replace(second=0, microsecond=0)
    rows = []
    for i in range(60):
        minute = now - timedelta(minutes=i)
        done = 400 + (i * 37) % 600
        rows.append(
            MinuteStats(
                minute,
                "mail",
                "send",
                claimed=done + 30,
                wait_sum=(done + 30) * 0.8,
                wait_max=2.5 + (i % 9),
                done=done,
                retried=20 + i % 13,
                dead=i % 4,
            )
        )
    ledger.backend.stats.minutes_add(rows)
    return ledger
