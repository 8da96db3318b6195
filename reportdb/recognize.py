"""What a report database is, decided before reportdb reads a report's tables or adds its own to a file.

A report is a SQLite database that either reportdb wrote (its ``reportdb_alembic_version`` or ``rdb_*`` tables), or
TTNN wrote: every TTNN release since the first report (2024) creates ``operations(operation_id, name, ...)`` and
``tensors(tensor_id, ...)``, beside tables that came and went (buffers, devices, captured_graph, errors...). Anything
else (someone's database with a ``users`` table) is refused, untouched, by :func:`check`: ``upgrade`` and ``open(..,
"a")`` would otherwise add reportdb's tables to it, and ``info`` would call it a legacy report. An empty database (no
tables, a 0-byte file among them) is where a new report is written (mode ``"a"``), and no report to read.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

from .errors import NotAReportError, ReportDBError
from .store import engine as engine_mod
from .store.files import write_open_advice
from .store.schema import VERSION_TABLE

#: The tables (and their columns) that make a database a TTNN report: what every TTNN release has written.
TTNN_TABLES: dict[str, frozenset[str]] = {
    "operations": frozenset({"operation_id", "name"}),
    "tensors": frozenset({"tensor_id"}),
}

#: At most this many of a database's table names are listed in the error refusing it.
_LISTED = 8


def _is_reportdbs(name: str) -> bool:
    return name == VERSION_TABLE or name.startswith("rdb_")


def check(conn: sqlite3.Connection, path: Path, *, empty_ok: bool) -> None:
    """Raise :class:`NotAReportError` unless the database on ``conn`` is a report (``empty_ok``: or has no table yet).
    Reads ``sqlite_master`` and two table definitions; writes nothing."""
    tables = sorted(
        str(name) for (name,) in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")
        if not str(name).startswith("sqlite_")
    )
    if not tables:
        if empty_ok:
            return
        raise NotAReportError(write_open_advice(
            path,
            f"{path}: an empty database (no tables), not a report: a run stopped before it wrote anything leaves one. "
            "Nothing to read or upgrade; remove it (reportdb.open(path, 'a') or a Writer writes a new report there)"
        ))
    if any(_is_reportdbs(name) for name in tables):
        return
    missing = []
    for table, columns in TTNN_TABLES.items():
        have = {str(row[1]) for row in conn.execute(f"PRAGMA table_info({table})")} if table in tables else set()
        if not columns <= have:
            missing.append(f"{table}({', '.join(sorted(columns - have))})")
    if not missing:
        return
    listed = ", ".join(tables[:_LISTED]) + (f" and {len(tables) - _LISTED} more" if len(tables) > _LISTED else "")
    raise NotAReportError(
        f"{path}: a SQLite database, but not a TTNN report: it lacks {' and '.join(missing)}, which every report has "
        f"(its tables: {listed}). reportdb reads and writes only reports; the file was not changed"
    )


def check_file(path: Path, *, empty_ok: bool = True) -> None:
    """:func:`check` on an existing file through a read-only connection of its own, before a connection that may write
    opens it. A file SQLite cannot read read-only (a hot journal to roll back) is left to that open,
    which says what is wrong with it."""
    try:
        conn = engine_mod.connect(path, readonly=True)
    except (sqlite3.Error, OSError, ReportDBError):
        return
    try:
        check(conn, path, empty_ok=empty_ok)
    except sqlite3.Error:
        return
    finally:
        conn.close()
