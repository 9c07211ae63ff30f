"""Loading the SQL that lives beside the backends: numbered migrations and named queries."""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import cache
from importlib import resources

__all__ = ["Migration", "migrations", "queries"]

_MIGRATION_NAME = re.compile(r"^(\d{3})_([a-z0-9_]+)\.sql$")
_QUERY_HEADER = re.compile(r"^-- name: ([a-z_]+)\s*$", re.MULTILINE)


@dataclass(frozen=True, slots=True)
class Migration:
    version: int
    name: str
    sql: str

    @property
    def label(self) -> str:
        return f"{self.version:03d}_{self.name}"


def _sql_dir(dialect: str) -> resources.abc.Traversable:
    return resources.files("jobledger.backends") / "sql" / dialect


@cache
def migrations(dialect: str) -> tuple[Migration, ...]:
    """The numbered migrations of a dialect, in order. Numbers must run 1, 2, 3, … without gaps."""
    found = []
    for entry in _sql_dir(dialect).iterdir():
        match = _MIGRATION_NAME.match(entry.name)
        if match:
            found.append(Migration(int(match[1]), match[2], entry.read_text(encoding="utf-8")))
    found.sort(key=lambda m: m.version)
    for expected, migration in enumerate(found, start=1):
        if migration.version != expected:
            raise RuntimeError(f"{dialect} migrations skip from {expected - 1} to {migration.version}")
    return tuple(found)


@cache
def queries(dialect: str) -> dict[str, str]:
    """The named blocks of ``sql/<dialect>/queries.sql``, by name."""
    text = (_sql_dir(dialect) / "queries.sql").read_text(encoding="utf-8")
    parts = _QUERY_HEADER.split(text)
    named: dict[str, str] = {}
    for name, body in zip(parts[1::2], parts[2::2], strict=True):
        lines = [line for line in body.strip().splitlines() if not line.startswith("--")]
        named[name] = "\n".join(lines).strip()
    return named
