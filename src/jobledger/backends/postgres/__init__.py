"""The PostgreSQL backend: the database object, and one module per storage role."""

from __future__ import annotations

from .backend import PostgresBackend

__all__ = ["PostgresBackend"]
