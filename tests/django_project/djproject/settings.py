"""Settings of the test project. The database comes from the environment (the test makes a
fresh one per run): ``JOBLEDGER_DJANGO_DATABASE`` is ``DATABASES["default"]`` as JSON, and
``JOBLEDGER_DJANGO_LEDGER_URL`` the ledger of the second backend, which has a database of its own.
"""

import json
import os

import django

from jobledger import Backoff

SECRET_KEY = "not-a-secret: the test project only"
DEBUG = False
USE_TZ = True
TIME_ZONE = "UTC"
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
ROOT_URLCONF = None

INSTALLED_APPS = [
    # Django 6 has the Tasks framework built in; Django 5.2 has it from the backport.
    *(["django_tasks"] if django.VERSION < (6,) else []),
    "jobledger.contrib.django",
    "shop",
]

DATABASES = {"default": json.loads(os.environ["JOBLEDGER_DJANGO_DATABASE"])}

if os.environ.get("JOBLEDGER_DJANGO_WITHOUT_APP"):  # what the system checks say without it
    INSTALLED_APPS.remove("jobledger.contrib.django")

# The tasks and settings docs/integrations.md shows (## Django).
TASKS = {
    "default": {
        "BACKEND": "jobledger.contrib.django.TaskBackend",
        "QUEUES": ["default", "emails"],
        "OPTIONS": {
            "max_attempts": 5,
            "tasks": {
                # A business key: the digest of one customer and week is one job, however
                # often it is enqueued.
                "shop.tasks.send_digest": {"key": "{customer_id}:{week}"},
                # Failed for good at its first exception, as Django's own backends do.
                "shop.tasks.fail": {"max_attempts": 1},
                "shop.tasks.flaky": {
                    "max_attempts": 3,
                    "backoff": Backoff(base=0.001, cap=0.001, jitter=False),
                },
            },
        },
    },
    # Jobs in a ledger database of their own: not part of the app's transactions.
    "elsewhere": {
        "BACKEND": "jobledger.contrib.django.TaskBackend",
        "OPTIONS": {"url": os.environ["JOBLEDGER_DJANGO_LEDGER_URL"]},
    },
}
