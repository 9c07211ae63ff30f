"""Loading the SQL that lives beside the backends: numbered migrations and named queries.

``sql/<dialect>/migrations/NNN_name.sql`` are the migrations, applied in order. Every other
``sql/<dialect>/<file>.sql`` holds named blocks (``-- name: <name>``), one file per storage role
(``jobs.sql``, ``leader.sql``, …) and one for the grouped claim (``grouped.sql``); a name is
unique across a dialect's files. A block may include another with ``{@name}``: what several
statements must say alike (how a claim leases a job, which leases are still held) is written
once.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import cache
from importlib import resources

__all__ = ["Migration", "fill", "migrations", "queries"]

_MIGRATION_NAME = re.compile(r"^(\d{3})_([a-z0-9_]+)\.sql$")
_QUERY_HEADER = re.compile(r"^-- name: ([a-z_]+)\s*$", re.MULTILINE)
_INCLUDE = re.compile(r"\{@([a-z_]+)\}")


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
    """The numbered migrations of a dialect, in order. Numbers are unique and increasing."""
    found = []
    for entry in (_sql_dir(dialect) / "migrations").iterdir():
        match = _MIGRATION_NAME.match(entry.name)
        if match:
            found.append(Migration(int(match[1]), match[2], entry.read_text(encoding="utf-8")))
    found.sort(key=lambda m: m.version)
    versions = [m.version for m in found]
    if len(set(versions)) != len(versions):
        raise RuntimeError(f"{dialect} migrations reuse a number: {versions}")
    return tuple(found)


@cache
def queries(dialect: str) -> dict[str, str]:
    """The named blocks of every ``sql/<dialect>/<file>.sql``, by name (comments removed)."""
    named: dict[str, str] = {}
    where: dict[str, str] = {}
    files = [e for e in _sql_dir(dialect).iterdir() if e.name.endswith(".sql")]
    for entry in sorted(files, key=lambda e: e.name):
        parts = _QUERY_HEADER.split(entry.read_text(encoding="utf-8"))
        for name, body in zip(parts[1::2], parts[2::2], strict=True):
            if name in named:
                raise RuntimeError(
                    f"{dialect} query {name!r} is in both {where[name]} and {entry.name}"
                )
            lines = [line for line in body.strip().splitlines() if not line.startswith("--")]
            named[name] = "\n".join(lines).strip()
            where[name] = entry.name
    return {name: _expand(named, name, ()) for name in named}


def _expand(named: dict[str, str], name: str, seen: tuple[str, ...]) -> str:
    """A block with the blocks it includes (``{@name}``) written in, recursively."""
    if name in seen:
        raise RuntimeError(f"query {name!r} includes itself: {' -> '.join((*seen, name))}")
    if name not in named:
        raise RuntimeError(f"query {seen[-1]!r} includes {name!r}, which is not defined")
    return _INCLUDE.sub(lambda m: _expand(named, m[1], (*seen, name)), named[name])


def schema_problem(dialect: str, applied: set[int], where: str) -> str | None:
    """What is wrong with a database whose applied migrations are ``applied``, or None."""
    known = {m.version for m in migrations(dialect)}
    if not applied:
        return f"{where} has no jobledger schema; run `jobledger migrate`"
    newer = sorted(applied - known)
    if newer:
        return (
            f"{where} has migrations {newer} from a newer jobledger than this one "
            f"(which knows up to {max(known)}); upgrade jobledger"
        )
    missing = sorted(known - applied)
    if missing:
        names = ", ".join(m.label for m in migrations(dialect) if m.version in missing)
        return f"{where} lacks migrations {names}; run `jobledger migrate`"
    return None


def fill(text: str, values: dict[str, int | str]) -> str:
    """A statement with its per-call ``{name}`` placeholders filled: a whole number written in
    as a literal (a limit), or SQL text the caller built from fixed clauses."""
    for key, value in values.items():
        mark = "{" + key + "}"
        if mark not in text:
            raise KeyError(f"no placeholder {mark} in the statement (a name of a table?)")
        text = text.replace(mark, value if isinstance(value, str) else str(int(value)))
    return text
