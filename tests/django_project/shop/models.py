from django.db import models


class Order(models.Model):
    name = models.CharField(max_length=100)


class Event(models.Model):
    """What the tasks did, in the order they did it."""

    label = models.CharField(max_length=100)
