"""``manage.py shop_scenario NAME``: do what a Django app does with its tasks, and print what
happened as JSON (the test asserts on it). ``all`` runs every scenario in one database."""

import asyncio
import json
from datetime import UTC, datetime, timedelta
from io import StringIO
from zoneinfo import ZoneInfo

from django.core.management import call_command
from django.core.management.base import BaseCommand, CommandError
from django.db import transaction
from django.db.transaction import TransactionManagementError
from django.test import override_settings
from django.utils import timezone

from jobledger import KeyConflict, NotFound, PayloadError
from jobledger._records import Lease
from jobledger.contrib.django import job_key
from jobledger.contrib.django.compat import (
    InvalidTask,
    TaskResultDoesNotExist,
    task_backends,
    task_enqueued,
    task_finished,
    task_started,
)
from shop.models import Event, Order
from shop.orders import place_order, welcome
from shop.tasks import (
    add,
    double,
    fail,
    flaky,
    record,
    refuse,
    returns_a_datetime,
    send_digest,
    throttled,
    which_attempt,
    which_connection,
)


def burst(*queues):
    """``manage.py jobledger_worker --burst``, in this process."""
    out = StringIO()
    args = ["--burst", "--concurrency", "1"] + [f"--queue={q}" for q in queues]
    call_command("jobledger_worker", *args, stdout=out)
    return out.getvalue().strip()


def exists(result_id, backend="default"):
    try:
        task_backends[backend].get_result(result_id)
    except TaskResultDoesNotExist:
        return False
    return True


def in_ledger(result_id, backend="default"):
    """Seen by the ledger's own connection: committed."""
    try:
        task_backends[backend].ledger.job(int(result_id))
    except NotFound:
        return False
    return True


class Rollback(Exception):
    pass


def atomic():
    visible_inside = []
    with transaction.atomic():
        _, kept_id = place_order("kept")  # a savepoint inside this transaction
        visible_inside.append(in_ledger(kept_id))
    try:
        with transaction.atomic():
            _, lost_id = place_order("lost")
            raise Rollback
    except Rollback:
        pass
    lost_exists = exists(lost_id)
    # A transaction that must roll back (an error left an atomic block without a savepoint):
    # the enqueue is refused as any query of the ORM would be.
    try:
        with transaction.atomic():
            try:
                with transaction.atomic(savepoint=False):
                    Order.objects.create(name="broken")
                    raise Rollback
            except Rollback:
                pass
            record.enqueue("broken")
        broken = None
    except TransactionManagementError as exc:
        broken = type(exc).__name__
    auto = record.enqueue("autocommit")
    auto_visible = in_ledger(auto.id)
    ran = burst()
    return {
        "kept_visible_before_commit": visible_inside[0],
        "kept_exists": exists(kept_id),
        "lost_exists": lost_exists,
        "enqueue_in_broken_transaction": broken,
        "autocommit_visible_at_once": auto_visible,
        "orders": sorted(Order.objects.values_list("name", flat=True)),
        "ran": sorted(
            Event.objects.filter(label__in=["kept", "lost", "broken", "autocommit"]).values_list(
                "label", flat=True
            )
        ),
        "worker": ran,
    }


def elsewhere():
    """A backend whose ledger is another database: its enqueue does not join the app's
    transaction."""
    other = record.using(backend="elsewhere")
    try:
        with transaction.atomic():
            result = other.enqueue("elsewhere")
            raise Rollback
    except Rollback:
        pass
    fetched = task_backends["elsewhere"].get_result(result.id)
    fetched.refresh()  # through the backend of its task
    return {
        "exists_after_rollback": exists(result.id, "elsewhere"),
        "backend": result.backend,
        "fetched_task_backend": fetched.task.backend,
        "refreshed_status": fetched.status,
    }


def priority():
    ids = {}
    for label, level in [("p-low", -10), ("p-high", 50), ("p-mid", 0), ("p-top", 100)]:
        ids[label] = record.using(priority=level).enqueue(label).id
    burst()
    order = list(
        Event.objects.filter(label__startswith="p-").order_by("id").values_list("label", flat=True)
    )
    default = task_backends["default"]
    return {
        "order": order,
        "priorities": {label: default.get_result(i).task.priority for label, i in ids.items()},
        "jobledger_priorities": {
            label: default.ledger.job(int(i)).priority for label, i in ids.items()
        },
    }


def run_after():
    later_at = timezone.now() + timedelta(hours=1)
    later = record.using(run_after=later_at).enqueue("r-later")
    now = record.enqueue("r-now")
    burst()
    result = task_backends["default"].get_result(later.id)
    return {
        "ran": sorted(Event.objects.filter(label__startswith="r-").values_list("label", flat=True)),
        "later_status": result.status,
        "later_run_after_seconds": abs((result.task.run_after - later_at).total_seconds()),
        "now_status": task_backends["default"].get_result(now.id).status,
    }


def naive_times():
    """With USE_TZ = False, Django's times are naive, in TIME_ZONE."""
    with override_settings(USE_TZ=False, TIME_ZONE="Europe/Berlin"):
        later_at = datetime.now() + timedelta(hours=3)  # naive, in Berlin
        later = record.using(run_after=later_at).enqueue("n-later")
        result = task_backends["default"].get_result(later.id)
        job = task_backends["default"].ledger.job(int(later.id))
        return {
            "run_after_naive": timezone.is_naive(result.task.run_after),
            "run_after_kept": abs((result.task.run_after - later_at).total_seconds()) < 0.001,
            "enqueued_at_naive": timezone.is_naive(result.enqueued_at),
            "run_at_utc": job.run_at.isoformat(),
            "expected_utc": later_at.replace(tzinfo=ZoneInfo("Europe/Berlin"))
            .astimezone(UTC)
            .isoformat(),
        }


def queues():
    try:
        record.using(queue_name="nowhere")
        refused = None
    except InvalidTask as exc:
        refused = str(exc)
    mail = send_digest.enqueue(customer_id=1, week="2026-W01")
    plain = record.enqueue("q-plain")
    burst("default")
    after_default = task_backends["default"].get_result(mail.id).status
    burst("emails")
    try:
        burst("nowhere")
        unknown = None
    except CommandError as exc:
        unknown = str(exc)
    return {
        "refused": refused,
        "mail_queue": task_backends["default"].ledger.job(int(mail.id)).queue,
        "mail_after_default_worker": after_default,
        "mail_after_emails_worker": task_backends["default"].get_result(mail.id).status,
        "plain": task_backends["default"].get_result(plain.id).status,
        "unknown_queue": unknown,
    }


def results():
    ledger = task_backends["default"].ledger
    # Claimed by a worker that gave it back before running it (as at a graceful stop): no
    # attempt of the task's.
    given_back = add.enqueue(3, 4)
    [claimed] = ledger.backend.jobs.claim(["default"], "gave-it-back", 1)
    ledger.backend.jobs.release([Lease(claimed.id, claimed.lease_token, claimed.attempt)])
    added = add.enqueue(2, 3)
    before = added.status
    failed = fail.enqueue("boom")
    refused = refuse.enqueue("no way")
    ctx = which_attempt.enqueue("ctx")
    lucky = flaky.enqueue("f-lucky")
    busy = throttled.enqueue(3600)
    not_json = returns_a_datetime.enqueue()
    cancelled = record.using(run_after=timezone.now() + timedelta(hours=1)).enqueue("c-cancel")
    ledger.cancel(int(cancelled.id), actor="support", reason="the customer left")
    plain = ledger.enqueue("nightly", {"n": 1}, key="nightly:1", queue="nightly")
    burst()
    # Its retry is due a millisecond after its failure: a burst that ended just before that
    # leaves it to the next one.
    for _ in range(100):
        if flaky.get_result(lucky.id).is_finished:
            break
        burst()
    added.refresh()
    failure = fail.get_result(failed.id)
    lucky_result = flaky.get_result(lucky.id)
    refusal = refuse.get_result(refused.id)
    busy_result = throttled.get_result(busy.id)
    not_json_result = returns_a_datetime.get_result(not_json.id)
    cancelled_result = record.get_result(cancelled.id)
    given_back_result = add.get_result(given_back.id)
    return {
        "before": before,
        "id_is_job_id": added.id == str(int(added.id)),
        "status": added.status,
        "return_value": added.return_value,
        "times_in_order": added.enqueued_at <= added.started_at <= added.finished_at,
        "attempts": added.attempts,
        "worker_ids": len(added.worker_ids),
        "errors": len(added.errors),
        "failed_status": failure.status,
        "failed_errors": [
            (e.exception_class_path, e.exception_class.__name__, e.traceback)
            for e in failure.errors
        ],
        "failed_finished": failure.finished_at is not None,
        "refused_status": refusal.status,
        "refused_error": [e.exception_class_path for e in refusal.errors],
        "context": which_attempt.get_result(ctx.id).return_value,
        "context_id": ctx.id,
        "lucky_status": lucky_result.status,
        "lucky_return_value": lucky_result.return_value,
        "lucky_attempts": lucky_result.attempts,
        "lucky_errors": [e.exception_class_path for e in lucky_result.errors],
        "lucky_started_at_first": lucky_result.started_at < lucky_result.last_attempted_at,
        "missing": not exists("999999999") and not exists("not-a-number"),
        # Its id in Arabic-Indic digits: int() reads them as the id itself.
        "unicode_digit_missing": not exists(
            "".join(chr(0x660 + int(d)) for d in str(given_back.id))
        ),
        "plain_job_missing": not exists(str(plain.id)),
        "busy_status": busy_result.status,
        "busy_errors": [e.exception_class_path for e in busy_result.errors],
        "busy_retry_in": (ledger.job(int(busy.id)).run_at - timezone.now()).total_seconds(),
        "not_json_status": not_json_result.status,
        "not_json_attempts": not_json_result.attempts,
        "not_json_errors": [e.exception_class_path for e in not_json_result.errors],
        "not_json_traceback": "".join(e.traceback for e in not_json_result.errors),
        "cancelled_status": cancelled_result.status,
        "cancelled_finished": cancelled_result.finished_at is not None,
        "given_back_claimed": claimed.id == int(given_back.id),
        "given_back_status": given_back_result.status,
        "given_back_attempts": given_back_result.attempts,
        "given_back_workers": given_back_result.worker_ids,
    }


def connections():
    """The worker closes a task's old database connections around each run, as Django's
    request cycle does (CONN_MAX_AGE 0: each run gets a fresh one)."""
    from shop import tasks

    which_connection.enqueue()
    which_connection.enqueue()
    burst()
    first, second = tasks.CONNECTIONS
    return {
        "runs": len(tasks.CONNECTIONS),
        "fresh": first is not second,
        "closed": _closed(first),
        "last_closed": _closed(second),  # after its task, not only before the next one
    }


def _closed(dbapi_connection):
    try:
        dbapi_connection.cursor().execute("SELECT 1")
    except Exception:
        return True
    return False


def async_tasks():
    sync_enqueued = double.enqueue(21)

    async def from_a_coroutine():
        result = await double.aenqueue(4)
        return result.id

    async_id = asyncio.run(from_a_coroutine())
    burst()

    async def read():
        return await double.aget_result(async_id)

    async_result = asyncio.run(read())
    return {
        "sync_enqueued": double.get_result(sync_enqueued.id).return_value,
        "async_enqueued": async_result.return_value,
        "status": async_result.status,
    }


def keys():
    first = send_digest.enqueue(customer_id=4187, week="2026-W33")
    again = send_digest.enqueue(customer_id=4187, week="2026-W33")
    other_week = send_digest.enqueue(customer_id=4187, week="2026-W34")
    with job_key("manual-1"):
        keyed = add.enqueue(1, 1)
        keyed_again = add.enqueue(1, 1)
    try:
        with job_key("manual-1"):
            add.enqueue(2, 2)
        conflict = None
    except KeyConflict as exc:
        conflict = type(exc).__name__
    plain = add.enqueue(1, 1)
    plain_again = add.enqueue(1, 1)
    welcomed, welcomed_again = welcome(7), welcome(7)
    with transaction.atomic():  # twice in one transaction, before it commits
        with job_key("in-one-transaction"):
            once = record.enqueue("k-once")
            twice = record.enqueue("k-once")
        twice_status = twice.status
    # Once its job is done, an enqueue of its key answers the done job, with what it returned.
    burst("emails")
    done_again = send_digest.enqueue(customer_id=4187, week="2026-W33")
    return {
        "done_again": [
            done_again.id == first.id,
            done_again.status,
            done_again.return_value if done_again.is_finished else None,
        ],
        "same_in_transaction": once.id == twice.id and twice_status == "READY",
        "welcome_same_id": welcomed.id == welcomed_again.id,
        "welcome_key": task_backends["default"].ledger.job(int(welcomed.id)).key,
        "digest_same_id": first.id == again.id,
        "digest_key": task_backends["default"].ledger.job(int(first.id)).key,
        "other_week_new": other_week.id != first.id,
        "keyed_same_id": keyed.id == keyed_again.id,
        "keyed_key": task_backends["default"].ledger.job(int(keyed.id)).key,
        "conflict": conflict,
        "unkeyed_new_each_time": plain.id != plain_again.id,
    }


def json_only():
    try:
        add.enqueue(timezone.now(), 1)
        refused = None
    except PayloadError as exc:
        refused = str(exc)
    tuple_args = add.enqueue((1, 2), [3])
    return {
        "refused": refused,
        "tuple_args": task_backends["default"].get_result(tuple_args.id).args,
    }


def signals():
    seen = []

    def on(signal_name):
        def receive(sender, task_result, **kwargs):
            seen.append([signal_name, task_result.task.name, task_result.status])

        return receive

    receivers = {"enqueued": on("enqueued"), "started": on("started"), "finished": on("finished")}
    task_enqueued.connect(receivers["enqueued"])
    task_started.connect(receivers["started"])
    task_finished.connect(receivers["finished"])
    try:
        with transaction.atomic():
            add.enqueue(1, 2)
            inside = list(seen)
        try:
            with transaction.atomic():
                fail.enqueue("rolled back")
                raise Rollback
        except Rollback:
            pass
        fail.enqueue("for real")
        # The second enqueue of a key makes no job, even before the first is committed.
        with transaction.atomic(), job_key("signalled-once"):
            add.enqueue(5, 5)
            add.enqueue(5, 5)
        retried = flaky.enqueue("s-flaky")  # fails once: READY again, not finished
        burst()
        for _ in range(100):
            if flaky.get_result(retried.id).is_finished:
                break
            burst()
    finally:
        task_enqueued.disconnect(receivers["enqueued"])
        task_started.disconnect(receivers["started"])
        task_finished.disconnect(receivers["finished"])
    return {"inside_atomic": inside, "seen": seen}


SCENARIOS = {
    "atomic": atomic,
    "elsewhere": elsewhere,
    "priority": priority,
    "run_after": run_after,
    "naive_times": naive_times,
    "queues": queues,
    "results": results,
    "async_tasks": async_tasks,
    "connections": connections,
    "keys": keys,
    "json_only": json_only,
    "signals": signals,
}


def enqueue_for_command():
    return {"id": add.enqueue(20, 22).id}


def result_of(result_id):
    result = add.get_result(result_id)
    facts = {"status": result.status}
    if result.is_finished:
        facts["return_value"] = result.return_value
    return facts


class Command(BaseCommand):
    help = "Run a scenario of the test project's tasks and print what happened as JSON."

    def add_arguments(self, parser):
        parser.add_argument("name", choices=[*SCENARIOS, "all", "enqueue", "result"])
        parser.add_argument("result_id", nargs="?")

    def handle(self, *args, name, result_id, **options):
        call_command("migrate", verbosity=0)
        if name == "enqueue":
            facts = enqueue_for_command()
        elif name == "result":
            facts = result_of(result_id)
        elif name == "all":
            facts = {scenario: run() for scenario, run in SCENARIOS.items()}
        else:
            facts = SCENARIOS[name]()
        self.stdout.write(json.dumps(facts, default=str))
