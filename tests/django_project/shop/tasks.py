"""The project's tasks: plain Django tasks, declared with Django's own ``@task``."""

import asyncio
from datetime import UTC, datetime

import django

if django.VERSION >= (6,):
    from django.tasks import task
else:
    from django_tasks import task

from jobledger import Permanent

from .models import Event


@task
def add(a, b):
    return a + b


@task
def record(label):
    Event.objects.create(label=label)
    return label


@task(queue_name="emails")
def send_digest(customer_id, week):
    Event.objects.create(label=f"digest {customer_id} {week}")
    return f"sent {customer_id}:{week}"


@task
def fail(reason):
    raise ValueError(reason)


@task
def refuse(reason):
    raise Permanent(reason)


@task
def flaky(label):
    """Fails on its first run, succeeds on the next."""
    Event.objects.create(label=label)
    if Event.objects.filter(label=label).count() == 1:
        raise ConnectionError(f"{label}: the provider did not answer")
    return "second time lucky"


class ProviderBusy(Exception):
    """An HTTP client's error that carries the provider's answer (as httpx's does)."""

    def __init__(self, status_code, headers):
        super().__init__(f"HTTP {status_code}")
        self.response = type("Response", (), {"status_code": status_code, "headers": headers})()


@task
def throttled(seconds):
    """The provider answers 503 and asks to be called again in ``seconds``."""
    raise ProviderBusy(503, {"Retry-After": str(seconds)})


@task
def returns_a_datetime():
    """Returns what JSON cannot hold."""
    return datetime.now(UTC)


CONNECTIONS = []
"""The database connection each run of ``which_connection`` used (kept, so none is reused)."""


@task
def which_connection():
    from django.db import connection

    connection.ensure_connection()
    CONNECTIONS.append(connection.connection)
    return len(CONNECTIONS)


@task
async def double(x):
    await asyncio.sleep(0)
    return x * 2


@task(takes_context=True)
def which_attempt(context, label):
    return {"attempt": context.attempt, "id": context.task_result.id, "label": label}
