"""Who this process is, in the names it leaves in the ledger (attempts, leases, ticks)."""

from __future__ import annotations

import os
import socket
import uuid

__all__ = ["default_worker_name"]


def default_worker_name() -> str:
    """``host:pid:random`` — unique per worker, readable in a job's attempt history."""
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:6]}"
