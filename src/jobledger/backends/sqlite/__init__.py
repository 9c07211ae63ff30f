"""The SQLite backend: the database object, and one module per storage role."""

from __future__ import annotations

from .backend import SqliteBackend

__all__ = ["SqliteBackend"]
