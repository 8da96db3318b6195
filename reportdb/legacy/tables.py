"""The partial database a migration builds, and the copy of the source's tables into it.

The source tables are copied verbatim (DDL, indexes, rowids, unknown tables too), so ttnn-visualizer's queries give
the same answers; the copy is bounded in time (``COPY_SECONDS``) and never copies the source's triggers unless asked
(they are created by :func:`create_triggers` as the very last step). A partial file built from the same source is
reused, so a killed run resumes.
"""

from __future__ import annotations

import contextlib
import json
import re
import sqlite3
import time
from pathlib import Path
from typing import Any, Iterator

from .. import report as report_mod
from ..errors import QueryTimeoutError
from ..store import engine, files
from ..store.engine import BUSY_TIMEOUT_MS, quoted
from ..store.schema import VERSION_TABLE, folded
from .common import SQLITE_SIDE, MigrationError, UnsafeFolderError, leave_wal, user_tables
from .inventory import path_kind

_OURS = ("rdb_", "reportdb_")  # compared with folded() names: SQLite's names ignore ASCII case
_REFERENCES_OURS = re.compile(r"(?i)(?<![A-Za-z0-9_])(rdb_|reportdb_)")
_CREATE = re.compile(r"(?is)\s*CREATE\s")

# Time allowed to copy one source table (its rows, then each index, view or trigger): COPY_SECONDS plus
# COPY_SECONDS_PER_ROW for each row. A source's CHECK constraints, expression indexes and generated columns are
# someone else's SQL that the copy evaluates row by row (a pathological LIKE pattern alone can take hours); a real
# report copies at well over 10,000 rows a second, so the bound stops only a hostile or damaged schema.
COPY_SECONDS = 60.0
COPY_SECONDS_PER_ROW = 0.001
# VM instructions between two looks at the clock during the copy: a few rows, since one hostile expression can
# take a second a row; costs ~30% of the table copy's time (400,000 rows: 0.25 -> 0.34 s), little next to tensors.
_COPY_PROGRESS_STEPS = 100


def _fingerprint(db: Path) -> str:
    """What identifies the source database a partial file was built from."""
    stat = db.stat()
    return json.dumps({"path": str(db.resolve()), "size": stat.st_size, "mtime_ns": stat.st_mtime_ns})


def prepare_partial(src_db: Path, partial: Path, run_id: str) -> bool:
    """Reuse a partial file built from this very source (True), or build a new one with every table copied.

    In place, the partial file sits in someone else's folder: a partial file (or journal) that is a link or not a
    regular file was not made by a run of ours and is removed (the link itself, never its target), not opened.
    A failed table copy removes the new file: it holds nothing worth resuming.
    """
    fingerprint = _fingerprint(src_db)
    kinds = {suffix: path_kind(Path(f"{partial}{suffix}")) for suffix in ("", *SQLITE_SIDE)}
    if kinds[""] == "file" and all(k in (None, "file") for k in kinds.values()):
        # A read-write connection, so that a hot journal left by a killed run is rolled back first. The partial
        # file is written with synchronous=OFF (see write_once): after an OS crash it may be damaged, so its
        # structure is checked before reuse (the tensor bytes are re-hashed by the final verification anyway).
        # Triggers are created only as the last step of a run (copy_triggers); one killed after that step left
        # them in the file, and they are dropped here (the next run creates them again, from the source).
        try:
            conn = engine.connect_plain(partial)
            try:
                conn.execute(f"PRAGMA busy_timeout={BUSY_TIMEOUT_MS}")
                row = conn.execute("SELECT value FROM rdb_meta WHERE key='migration_source'").fetchone()
                if row is not None and row[0] == fingerprint:
                    row = row if conn.execute("PRAGMA quick_check").fetchall() == [("ok",)] else None
                if row is not None and row[0] == fingerprint:
                    for (name,) in conn.execute("SELECT name FROM sqlite_master WHERE type='trigger'").fetchall():
                        conn.execute(f"DROP TRIGGER {quoted(name)}")
            finally:
                conn.close()
        except sqlite3.Error:
            row = None
        if row is not None and row[0] == fingerprint:
            return True
    _remove_db_file(partial)
    report_mod.Report(partial, "a").close()  # an empty file with 64 KiB pages and reportdb's tables
    try:
        _copy_tables(src_db, partial, fingerprint, run_id)
    except BaseException:
        _remove_db_file(partial)
        raise
    return False


def write_once(conn: sqlite3.Connection, path: Path) -> None:
    """Write the partial file's tensor bytes once: a rollback journal instead of WAL (whose checkpoint writes every
    byte a second time; pages appended to the file are not journaled at all), and no fsync per commit.

    Safe for this file only: a killed process leaves a consistent file (the journal reaches the OS before the
    pages it protects, and the next run rolls it back); an OS crash may damage it, which the next run's
    ``quick_check`` and the final re-hash of every tensor detect; and it becomes the report only after
    verification, through ``replace_destination``, which fsyncs it before the rename.
    """
    leave_wal(conn, path)
    conn.execute("PRAGMA synchronous=OFF")


def _remove_db_file(db: Path) -> None:
    """Delete a database file and its journal files (a link itself, never its target)."""
    for suffix in ("", *SQLITE_SIDE):
        Path(f"{db}{suffix}").unlink(missing_ok=True)


def _copy_tables(src_db: Path, partial: Path, fingerprint: str, run_id: str) -> None:
    """Copy every source table (DDL, rows with their rowids, indexes, views) in one transaction, bounded in time.

    The empty report tables reportdb created are dropped first, so legacy tables keep exactly their
    own columns and a table the source lacks stays absent (the visualizer probes for tables and
    columns; an added one would change its answers). A source that already carries reportdb tables
    (its alembic version table) replaces them all; in any other source, tables under reportdb's names are not
    copied. No trigger is copied here (see ``migrate(copy_triggers=...)``), nor a view naming reportdb's tables;
    what is left out is recorded in ``rdb_meta`` (``migration_schema_skipped``) for the summary. The source is
    attached through the URI ``engine.connect(readonly=True)`` uses, which never writes to it or beside it (no
    ``-shm`` rewritten), and rows go across with ``INSERT ... SELECT``, byte for byte.
    """
    conn = engine.connect_plain(partial)
    try:
        conn.execute(f"PRAGMA busy_timeout={BUSY_TIMEOUT_MS}")
        conn.execute("PRAGMA trusted_schema=OFF")  # the copied DDL is the source's
        leave_wal(conn, partial)
        conn.execute("ATTACH DATABASE ? AS src", (files.readonly_uri(src_db),))
        src_tables = user_tables(conn, "src")
        reportdb_source = VERSION_TABLE in src_tables  # as reportdb writes it; another case is a stranger's table
        objects = conn.execute(
            "SELECT type, name, tbl_name, sql FROM src.sqlite_master WHERE sql IS NOT NULL AND name NOT LIKE 'sqlite_%' "
            "ORDER BY CASE type WHEN 'table' THEN 0 WHEN 'index' THEN 1 WHEN 'view' THEN 2 ELSE 3 END, rowid"
        ).fetchall()
        copy, skipped = _schema_plan(src_db, objects, reportdb_source)
        conn.execute("BEGIN IMMEDIATE")
        for name in sorted(user_tables(conn)):
            if reportdb_source or not folded(name).startswith(_OURS):
                conn.execute(f"DROP TABLE main.{quoted(name)}")
        counts: dict[str, int] = {}
        for kind, name, table, sql in copy:
            if kind == "table":
                conn.execute(sql)
                counts[name] = _copy_rows(conn, name)
            else:
                seconds = COPY_SECONDS + counts.get(table, 0) * COPY_SECONDS_PER_ROW
                with _time_bound(conn, seconds, f"{src_db}: {kind} {name!r}"):
                    conn.execute(sql)
        if not reportdb_source:
            now = time.time()
            conn.executemany(
                "INSERT INTO rdb_migration_log(run_id, created_at, kind, message, detail) VALUES (?, ?, 'table', ?, ?)",
                [(run_id, now, name, json.dumps({"rows": n})) for name, n in counts.items()],
            )
        conn.executemany(
            "INSERT INTO rdb_meta(key, value) VALUES (?, ?) ON CONFLICT(key) DO UPDATE SET value=excluded.value",
            [("migration_source", fingerprint), ("migration_schema_skipped", json.dumps(skipped))],
        )
        conn.execute("COMMIT")
    except BaseException:
        if conn.in_transaction:
            conn.execute("ROLLBACK")
        raise
    finally:
        conn.close()


def _schema_plan(
    src_db: Path, objects: list[tuple[str, str, str, str]], reportdb_source: bool
) -> tuple[list[tuple[str, str, str, str]], list[dict[str, Any]]]:
    """The source's schema objects to copy, in order, and the ones left out with why (triggers are all left to
    :func:`trigger_plan`). A view or other non-table under reportdb's names is refused: reading through it could
    make any query on reportdb's tables spin."""
    copy: list[tuple[str, str, str, str]] = []
    skipped: list[dict[str, Any]] = []
    left_out: set[str] = set()
    for kind, name, table, sql in objects:
        reason = None
        if kind != "table" and folded(name).startswith(_OURS):
            raise UnsafeFolderError(
                f"{src_db}: {kind} {name!r} uses the name of one of reportdb's tables; migrate copies no report "
                "whose schema does that (the file is damaged or hostile)"
            )
        if not _CREATE.match(sql):
            raise UnsafeFolderError(f"{src_db}: {kind} {name!r} is not a CREATE statement; the file is damaged or hostile")
        if kind == "table" and sql.upper().startswith("CREATE VIRTUAL"):
            raise MigrationError(f"{src_db}: table {name!r} is a virtual table, which migrate cannot copy")
        if kind == "trigger":
            continue
        if kind == "table" and folded(name).startswith(_OURS) and not (reportdb_source and name == folded(name)):
            reason = "a table under reportdb's own names (in any letter case) that reportdb did not write: not copied"
        elif table in left_out:
            reason = f"on table {table!r}, which is not copied"
        elif kind == "view" and _REFERENCES_OURS.search(sql):
            reason = "a view that reads reportdb's tables: not copied"
        if reason is None:
            copy.append((kind, name, table, sql))
        else:
            left_out.add(name)
            skipped.append({"kind": kind, "name": name, "reason": reason})
    return copy, skipped


def schema_left_out(conn: sqlite3.Connection) -> list[dict[str, Any]]:
    """What the table copy left out of the partial file (``_schema_plan``), as recorded in ``rdb_meta``."""
    row = conn.execute("SELECT value FROM rdb_meta WHERE key='migration_schema_skipped'").fetchone()
    return [] if row is None else list(json.loads(row[0]))


def trigger_plan(
    src_db: Path, conn: sqlite3.Connection, copy_triggers: bool
) -> tuple[list[tuple[str, str]], list[dict[str, Any]]]:
    """The source's triggers to create at the end (``copy_triggers``: all but those on or naming reportdb's tables,
    or on a table not copied) and the ones left out, with why."""
    with contextlib.closing(engine.connect(src_db, readonly=True)) as src:
        rows = src.execute(
            "SELECT name, tbl_name, sql FROM sqlite_master WHERE type='trigger' AND sql IS NOT NULL ORDER BY rowid"
        ).fetchall()
    present = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type IN ('table', 'view')")}
    create: list[tuple[str, str]] = []
    skipped: list[dict[str, Any]] = []
    for name, table, sql in rows:
        if not copy_triggers:
            reason = (
                "not copied: a trigger runs report-supplied SQL on every later write to its table "
                "(copy_triggers=True copies it)"
            )
        elif folded(table).startswith(_OURS) or _REFERENCES_OURS.search(sql):
            reason = "on or naming reportdb's tables: never copied"
        elif table not in present:
            reason = f"on {table!r}, which is not copied"
        elif not _CREATE.match(sql):
            raise UnsafeFolderError(f"{src_db}: trigger {name!r} is not a CREATE statement; the file is damaged or hostile")
        else:
            create.append((name, sql))
            continue
        skipped.append({"kind": "trigger", "name": name, "reason": reason})
    return create, skipped


def create_triggers(partial: Path, triggers: list[tuple[str, str]]) -> None:
    """Create the copied triggers in the finished partial file, after every row and tensor is in (none fires)."""
    if not triggers:
        return
    conn = engine.connect_plain(partial)
    try:
        conn.execute(f"PRAGMA busy_timeout={BUSY_TIMEOUT_MS}")
        conn.execute("BEGIN IMMEDIATE")
        for _, sql in triggers:
            conn.execute(sql)
        conn.execute("COMMIT")
    finally:
        conn.close()


@contextlib.contextmanager
def _time_bound(conn: sqlite3.Connection, seconds: float, what: str) -> Iterator[None]:
    """Abort what runs on ``conn`` in this block once it took ``seconds`` in all (see ``COPY_SECONDS``), with a
    QueryTimeoutError."""
    deadline = time.monotonic() + seconds

    def expired() -> int:
        return int(time.monotonic() > deadline)

    conn.set_progress_handler(expired, _COPY_PROGRESS_STEPS)
    try:
        yield
    except sqlite3.OperationalError as exc:
        if not expired():
            raise
        raise QueryTimeoutError(
            f"{what}: copying took longer than {seconds:.0f} s and was stopped; the source schema (a CHECK "
            "constraint, an expression index or a generated column) makes it too slow to evaluate, so the file is "
            "damaged or hostile; nothing was written"
        ) from exc
    finally:
        conn.set_progress_handler(None, 0)


def _copy_rows(conn: sqlite3.Connection, table: str) -> int:
    """Copy a table's rows from ``src`` with their rowids (when it has them), within the table's time bound
    (``COPY_SECONDS`` plus ``COPY_SECONDS_PER_ROW`` a row); check the count."""
    columns = [r[1] for r in conn.execute(f"PRAGMA src.table_xinfo({quoted(table)})") if r[6] == 0]
    names = ", ".join(quoted(c) for c in columns)
    rowid = _rowid_alias(conn, table, columns)
    expected = int(conn.execute(f"SELECT COUNT(*) FROM src.{quoted(table)}").fetchone()[0])
    seconds = COPY_SECONDS + expected * COPY_SECONDS_PER_ROW
    with _time_bound(conn, seconds, f"table {table!r}"):
        if rowid is None:
            conn.execute(f"INSERT INTO main.{quoted(table)} ({names}) SELECT {names} FROM src.{quoted(table)}")
        else:
            conn.execute(
                f"INSERT INTO main.{quoted(table)} ({rowid}, {names}) SELECT {rowid}, {names} FROM src.{quoted(table)} ORDER BY {rowid}"
            )
    copied = conn.execute(f"SELECT COUNT(*) FROM main.{quoted(table)}").fetchone()[0]
    if copied != expected:
        raise MigrationError(f"table {table}: copied {copied} of {expected} rows")
    return int(copied)


def _rowid_alias(conn: sqlite3.Connection, table: str, columns: list[str]) -> str | None:
    """A name for the hidden rowid not shadowed by a column; None for WITHOUT ROWID or INTEGER PRIMARY KEY tables."""
    info = conn.execute(f"PRAGMA src.table_info({quoted(table)})").fetchall()
    pks = [r for r in info if r[5] > 0]
    if len(pks) == 1 and str(pks[0][2]).upper() == "INTEGER":
        return None  # the column is the rowid and is copied with the others
    lowered = {c.lower() for c in columns}
    for alias in ("rowid", "_rowid_", "oid"):
        if alias not in lowered:
            try:
                conn.execute(f"SELECT {alias} FROM src.{quoted(table)} LIMIT 0")
            except sqlite3.OperationalError:
                return None  # WITHOUT ROWID
            return alias
    return None


def table_counts(conn: sqlite3.Connection) -> dict[str, int]:
    """Row counts of the copied (non-reportdb) tables."""
    names = sorted(n for n in user_tables(conn) if not folded(n).startswith(_OURS))
    return {n: conn.execute(f"SELECT COUNT(*) FROM {quoted(n)}").fetchone()[0] for n in names}
