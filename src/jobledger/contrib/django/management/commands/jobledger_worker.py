"""``python manage.py jobledger_worker``: run the jobs of a jobledger task backend."""

from __future__ import annotations

import math
from argparse import ArgumentParser, ArgumentTypeError
from typing import Any

from django.core.management.base import BaseCommand, CommandError


def _positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise ArgumentTypeError(f"must be a whole number >= 1, got {text!r}")
    return value


def _seconds(text: str) -> float:
    value = float(text)
    if not math.isfinite(value) or value < 0:
        raise ArgumentTypeError(f"must be a number of seconds >= 0, got {text!r}")
    return value


class Command(BaseCommand):  # type: ignore[misc]
    help = (
        "Run the jobs of a jobledger task backend: claim due jobs under a lease, run their Django "
        "tasks with CONCURRENCY threads (async tasks on an event loop), record each outcome, "
        "retry failures by their backoff, and rescue the jobs of crashed workers. SIGTERM or "
        "Ctrl-C stops claiming and lets running tasks finish within --grace seconds."
    )

    def add_arguments(self, parser: ArgumentParser) -> None:
        parser.add_argument(
            "--backend",
            default="default",
            help="The alias in TASKS of a jobledger.contrib.django.TaskBackend (default: %(default)s).",
        )
        parser.add_argument(
            "--queue",
            "--queues",
            dest="queues",
            action="append",
            default=None,
            help="A queue to work on (repeat it, or separate names with commas); each must be "
            "one of the backend's QUEUES. Default: all of the backend's QUEUES.",
        )
        parser.add_argument("--burst", action="store_true", help="Run what is due now, then exit.")
        parser.add_argument(
            "--concurrency",
            type=_positive_int,
            default=4,
            help="Tasks run at once, each on a thread of its own (default: %(default)s).",
        )
        parser.add_argument(
            "--batch-size",
            type=_positive_int,
            default=10,
            help="Jobs claimed per statement (default: %(default)s).",
        )
        parser.add_argument(
            "--grace",
            type=_seconds,
            default=30.0,
            help="Seconds running tasks get to finish after a stop signal (default: %(default)s).",
        )
        parser.add_argument(
            "--poll-interval",
            type=_seconds,
            default=None,
            help="Longest sleep between claims when idle (default 1 s on PostgreSQL, which "
            "wakes on LISTEN, 0.25 s on SQLite).",
        )
        parser.add_argument(
            "--name",
            default=None,
            help="This worker's name in the jobs' attempts, TaskResult.worker_ids "
            "(default: host:pid:random).",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        from ...backend import TaskBackend
        from ...compat import task_backends

        alias = options["backend"]
        if alias not in task_backends.settings:
            raise CommandError(f"no task backend {alias!r} in TASKS")
        backend = task_backends[alias]
        if not isinstance(backend, TaskBackend):
            raise CommandError(
                f"TASKS[{alias!r}] is {type(backend).__name__}, not jobledger.contrib.django.TaskBackend"
            )
        queues = sorted(
            {q.strip() for given in options["queues"] or [] for q in given.split(",") if q.strip()}
        ) or sorted(backend.queues)
        unknown = sorted(set(queues) - set(backend.queues))
        if unknown:
            raise CommandError(
                f"queues {unknown} are not in TASKS[{alias!r}]['QUEUES'] ({sorted(backend.queues)})"
            )
        if not queues:
            raise CommandError(f"TASKS[{alias!r}] has no QUEUES to work on")
        ledger = backend.ledger
        ledger.open()
        stats = ledger.run_worker(
            queues,
            concurrency=options["concurrency"],
            batch_size=min(options["batch_size"], 1000),
            burst=options["burst"],
            grace_seconds=options["grace"],
            poll_interval=options["poll_interval"],
            name=options["name"],
        )
        if options["verbosity"] >= 1:
            self.stdout.write(
                f"jobledger worker on {', '.join(queues)}: claimed {stats.claimed}, "
                f"completed {stats.completed}, retried {stats.retried}, failed {stats.dead}, "
                f"rescued {stats.rescued}"
            )
