"""The project's tasks: plain Django tasks, declared with Django's own ``@task``."""

import asyncio

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
