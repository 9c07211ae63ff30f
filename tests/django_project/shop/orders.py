from django.db import transaction

from jobledger.contrib.django import job_key

from .models import Order
from .tasks import record


def place_order(name):
    with transaction.atomic():
        order = Order.objects.create(name=name)
        # The job commits with the order, or neither exists.
        result = record.enqueue(name)
    return order, result.id


def welcome(user_id):
    with job_key(f"welcome:{user_id}"):
        return record.enqueue(f"welcome {user_id}")
