"""A worker app for the groups tests: one task whose group is its tenant.

Each handler appends "start" and "end" lines with the wall clock to the file in
``TENANT_EVENTS`` (one line per write, so processes can share the file). The tenant named in
``TENANT_THROTTLED`` gets a 429: ``Retry(after=TENANT_PAUSE, scope="group")``.
"""

from __future__ import annotations

import os
import time

from jobledger import Ledger, Retry

ledger = Ledger()
EVENTS = os.environ.get("TENANT_EVENTS")
THROTTLED = os.environ.get("TENANT_THROTTLED", "")
PAUSE = float(os.environ.get("TENANT_PAUSE", "1"))
HANDLER_SECONDS = float(os.environ.get("TENANT_HANDLER_SECONDS", "0"))


def _event(kind: str, tenant: str, n: int) -> None:
    if EVENTS:
        line = f"{kind} {tenant} {n} {time.time():.6f} {os.getpid()}\n".encode()
        fd = os.open(EVENTS, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, line)
        finally:
            os.close(fd)


@ledger.task(queue="tenants", group="{tenant}", lease_seconds=30)
def call(ctx, tenant: str, n: int) -> None:
    _event("start", tenant, n)
    try:
        if tenant == THROTTLED:
            raise Retry("HTTP 429 Too Many Requests", after=PAUSE, scope="group")
        if HANDLER_SECONDS:
            time.sleep(HANDLER_SECONDS)
    finally:
        _event("end", tenant, n)
