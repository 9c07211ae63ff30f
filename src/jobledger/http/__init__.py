"""The HTTP API (``jobledger serve``): publish with an Idempotency-Key, pull consumers, queues,
API keys, dead letters. A thin adapter over the ledger; see docs/http-api.md.

    from jobledger import Ledger
    from jobledger.http import create_app

    app = create_app(Ledger("postgresql://…"))   # any ASGI server: uvicorn module:app
"""

from __future__ import annotations

from .api import Call, Operation, Param, Reply, RouteGroup, json_response
from .app import create_app
from .problems import Problem
from .state import ServerSettings, ServerState, Service

__all__ = [
    "Call",
    "Operation",
    "Param",
    "Problem",
    "Reply",
    "RouteGroup",
    "ServerSettings",
    "ServerState",
    "Service",
    "create_app",
    "json_response",
]
