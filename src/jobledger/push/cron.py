"""Cron to URL: a schedule whose ticks are POSTed to an endpoint, signed, by the delivery loop.

``HttpTarget`` is a ``ScheduleTarget``: each tick enqueues a job (key: the tick's key, such as
``nightly-report:2026-08-10``) in the target's queue, and the queue's subscription — which must
post to the target's URL — delivers it like any other job, with the tick's key as
``webhook-id``. The signing secret is the subscription's::

    ledger.schedules.add(Schedule(
        "nightly-report", "30 2 * * *", tz="Europe/Berlin",
        target=HttpTarget("https://reports.example.com/hooks/nightly"),
    ))

    $ jobledger subscriptions create --queue cron.nightly-report \\
          --endpoint https://reports.example.com/hooks/nightly      # prints the secret, once

Before each tick the scheduler asks the target to ``prepare``: it checks that the queue has a
subscription to the URL — creating it when ``secret`` was given — and otherwise fails the tick,
which is retried with a growing delay and shows the reason in ``jobledger schedules``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .._records import encode_payload, validate_queue_name, validate_task_name, validate_url
from .._services.subscriptions import create_subscription
from .._webhooks import secret_bytes
from ..errors import ConfigError, NotFound, SubscriptionExists
from ..scheduling.schedule import tick_payload

if TYPE_CHECKING:
    from .._ledger import Ledger
    from ..scheduling.schedule import Entity, Schedule, Tick

__all__ = ["HttpTarget"]


class HttpTarget:
    """Ticks become signed POSTs to ``url``.

    - ``queue``: where the ticks' jobs wait for delivery (default ``cron.<schedule name>``);
      its subscription must post to ``url``;
    - ``event_type``: the ``type`` of each delivery (default ``schedule.<schedule name>``);
    - ``payload``: the delivery's ``data``: a dict, a function of the tick (and the entity, for
      fan-out), or None for ``{"schedule", "tick", "local"}`` (+ ``"entity"``);
    - ``secret``: when given, ``prepare`` creates the subscription if the queue has none, with
      this secret; without it the subscription must be created beforehand.
    """

    def __init__(
        self,
        url: str,
        *,
        queue: str | None = None,
        event_type: str | None = None,
        payload: dict[str, Any] | Any = None,
        secret: str | None = None,
    ):
        self.url = validate_url(url)
        self._queue = None if queue is None else validate_queue_name(queue)
        self._event_type = None if event_type is None else validate_task_name(event_type)
        if payload is not None and not (isinstance(payload, dict) or callable(payload)):
            raise ConfigError("payload must be a dict, a function of the tick, or None")
        if isinstance(payload, dict):
            encode_payload(payload)
        self._payload = payload
        if secret is not None:
            secret_bytes(secret)
        self._secret = secret
        self._fan_out = False

    def __repr__(self) -> str:
        return f"HttpTarget({self.url!r}, queue={self._queue!r})"

    @property
    def task(self) -> str:
        """The task name of the ticks' jobs: the deliveries' ``type``."""
        return self._event_type or "schedule"

    @property
    def queue(self) -> str | None:
        return self._queue

    @property
    def label(self) -> str:
        return f"POST {self.url} (queue {self._queue})"

    def check(self, schedule: Schedule) -> None:
        self._fan_out = schedule.fan_out
        if self._queue is None:
            try:
                self._queue = validate_queue_name(f"cron.{schedule.name}")
            except ConfigError:
                raise ConfigError(
                    f"schedule {schedule.name!r}: pass queue=... (a name such as "
                    "'cron.reports') for its deliveries"
                ) from None
        if self._event_type is None:
            try:
                self._event_type = validate_task_name(f"schedule.{schedule.name}")
            except ConfigError:
                raise ConfigError(
                    f"schedule {schedule.name!r}: pass event_type=... (a name such as "
                    "'report.nightly') for its deliveries"
                ) from None

    def payload(self, tick: Tick, entity: Entity | None) -> dict[str, Any]:
        default = {
            "schedule": tick.schedule,
            "tick": tick.iso,
            "local": tick.local.isoformat(timespec="minutes"),
        }
        return tick_payload(self._payload, self._fan_out, tick, entity, default)

    def prepare(self, ledger: Ledger, tick: Tick) -> None:
        """Before a tick enqueues: the queue's subscription exists and posts to ``url``."""
        queue = self._queue
        assert queue is not None
        backend = ledger.backend
        sub = next((s for s in backend.subscriptions.all() if s.queue == queue), None)
        if sub is None and self._secret is not None:
            try:
                sub = create_subscription(backend, queue, self.url, secret=self._secret)
            except SubscriptionExists:
                sub = next((s for s in backend.subscriptions.all() if s.queue == queue), None)
        if sub is None:
            raise NotFound(
                f"schedule {tick.schedule!r} posts through queue {queue!r}, which has no "
                f"subscription: create it with `jobledger subscriptions create --queue {queue} "
                f"--endpoint {self.url}` (it prints the secret to give the endpoint), or pass "
                "secret=... to HttpTarget"
            )
        if sub.url != self.url:
            raise ConfigError(
                f"schedule {tick.schedule!r} posts to {self.url}, but subscription {sub.id} of "
                f"queue {queue!r} posts to {sub.url}; give the schedule its own queue "
                "(HttpTarget(queue=...)) or fix the subscription"
            )
