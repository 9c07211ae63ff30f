"""A Django database as a jobledger URL: the same SQLite file, or the same PostgreSQL database
(psycopg 3), so that the ledger's tables live beside the application's and an enqueue joins
the application's transaction."""

from __future__ import annotations

import os
from typing import Any
from urllib.parse import quote, urlencode

from django.core.exceptions import ImproperlyConfigured

__all__ = ["ledger_url"]

# Django's own OPTIONS of a PostgreSQL database, which are not libpq connection parameters.
_DJANGO_ONLY = {"assume_role", "cursor_factory", "isolation_level", "pool", "server_side_binding"}


def ledger_url(alias: str, schema: str | None = None) -> str:
    """The jobledger URL of the Django database ``alias`` as it is configured now (a test
    runner's test database included). ``schema``: where the PostgreSQL tables go."""
    from django.db import connections

    if alias not in connections.settings:
        raise ImproperlyConfigured(
            f"jobledger: the task backend's database {alias!r} is not in DATABASES"
        )
    connection = connections[alias]
    settings = connection.settings_dict
    options: dict[str, Any] = dict(settings.get("OPTIONS") or {})
    if connection.vendor == "sqlite":
        if schema is not None:
            raise ImproperlyConfigured("jobledger: the 'schema' option is for PostgreSQL only")
        return _sqlite_url(alias, str(settings.get("NAME") or ""), options)
    if connection.vendor == "postgresql":
        return _postgres_url(settings, options, schema)
    raise ImproperlyConfigured(
        f"jobledger: database {alias!r} is {connection.vendor}; the ledger can share SQLite and "
        "PostgreSQL databases only. Set OPTIONS['url'] to a jobledger database instead."
    )


def _sqlite_url(alias: str, name: str, options: dict[str, Any]) -> str:
    if not name or name == ":memory:" or name.startswith("file:") or "mode=memory" in name:
        raise ImproperlyConfigured(
            f"jobledger: database {alias!r} is an in-memory SQLite database, which workers in "
            "other processes cannot share; give it a file NAME (for tests too: "
            "DATABASES[...]['TEST']['NAME'])"
        )
    url = "sqlite:///" + os.path.abspath(name)
    timeout = options.get("timeout")
    if timeout is not None:
        url += "?" + urlencode({"busy_timeout": int(float(timeout) * 1000)})
    return url


def _postgres_url(settings: dict[str, Any], options: dict[str, Any], schema: str | None) -> str:
    user = settings.get("USER") or ""
    password = settings.get("PASSWORD") or ""
    host = settings.get("HOST") or ""
    port = settings.get("PORT") or ""
    name = settings.get("NAME") or ""
    query: dict[str, str] = {}
    userinfo = quote(str(user), safe="")
    if password:
        userinfo += ":" + quote(str(password), safe="")
    netloc = userinfo + "@" if userinfo else ""
    # A Unix socket directory is percent-encoded in the host part, as libpq reads it.
    netloc += quote(str(host), safe="") if str(host).startswith("/") else str(host)
    if port:
        netloc += f":{port}"
    for key, value in options.items():
        if key in _DJANGO_ONLY or not isinstance(value, str | int | float):
            continue
        query[key] = str(value)
    if schema is not None:
        query["schema"] = schema
    url = f"postgresql://{netloc}/{quote(str(name), safe='')}"
    return url + ("?" + urlencode(query) if query else "")
