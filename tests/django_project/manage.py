#!/usr/bin/env python
"""The Django project of jobledger's Django tests (tests/contrib/test_django.py)."""

import os
import sys

if __name__ == "__main__":
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "djproject.settings")
    from django.core.management import execute_from_command_line

    execute_from_command_line(sys.argv)
