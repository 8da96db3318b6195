"""Legacy report folder (``db.sqlite`` + ``tensors/``) -> one self-contained report database.

``migrate`` builds the new database as a partial file beside its destination
(``<folder>/.db.sqlite.reportdb-partial``): the source tables are copied verbatim (DDL, indexes,
rowids, unknown tables too), so ttnn-visualizer's queries give the same answers; every tensor file
is decoded and stored under its tensor id and rank; then every stored blob is re-hashed, and only
then is the partial file renamed over the destination ``db.sqlite``. The source is opened read-only
and never written. A killed run leaves the partial file behind on purpose: running the same command
again reopens it and skips tensors already stored (they are committed in groups of up to 256 files, 64 MiB
or 0.5 s, so only the last, unfinished group is decoded again).

Throughput: with ``jobs > 1`` the worker processes also compute each shard's chunk digests and statistics
(``reportdb.prepare``) and hand the bytes over through spool files beside the partial file, so this process
only writes; the partial file uses a rollback journal with ``synchronous=OFF``, so each tensor byte is
written once (see ``_write_once`` for why that is safe for a file renamed into place only after verification).

The folder is someone else's, read as hostile input (see "the report folder, read without following links"
below): no symbolic link is followed, no special file opened, nothing deleted through a link; the source database
is read through ``engine.connect(readonly=True)``, which changes no byte or mtime of it or its side files; its
triggers are not copied unless asked (``copy_triggers``), and copying its tables is bounded in time
(``COPY_SECONDS``). What was left out is listed in the summary and the migration log. A write the disk refuses
(full, file size limit) is a one-line ``MigrationWriteError`` naming the partial file that a rerun resumes from.

``verify`` proves every stored tensor complete, re-reads it and checks its digests and, with ``against``,
compares its values with the legacy files and requires each of them to be stored.

Test hook: when the environment variable ``REPORTDB_MIGRATE_PAUSE`` holds a number of seconds,
``migrate`` sleeps that long after each step (table copy, each tensor file, verification), so tests can
kill it at chosen points. It changes nothing else.
"""

from __future__ import annotations

import collections
import concurrent.futures
import contextlib
import errno
import json
import multiprocessing
import os
import re
import shutil
import sqlite3
import stat
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Collection, Iterator

import numpy as np

from . import report as report_mod
from .dtypes import canonical, dtype_name
from .errors import NotAReportError, QueryTimeoutError, ReportDBError, ReportNotFoundError, UnsafeReportError
from .prepare import DecodedFile, decode_file, exit_with_parent
from .memconfig import parse_dtype, parse_layout, parse_memory_config, parse_shape
from .spec import TensorSpec
from .store import engine
from .store.codec import Compression, codec_for
from .store.engine import BUSY_TIMEOUT_MS
from .store.schema import VERSION_TABLE

__all__ = [
    "migrate", "verify", "pending_legacy_files", "MigrationError", "NotAReportFolderError", "VerificationError",
    "UnsafeFolderError", "MigrationWriteError",
]

DB_NAME = report_mod.DB_NAME
PARTIAL_NAME = ".db.sqlite.reportdb-partial"
TENSORS_DIR = "tensors"
_SQLITE_SIDE = ("-wal", "-shm", "-journal")
_FILE_NAME = re.compile(r"^(\d+)(?:[._-]r(?:ank)?(\d+))?\.(bin|tensorbin|pt)$")
_FORMAT_ORDER = {"bin": 0, "tensorbin": 1, "pt": 2}
_REPORT_TABLES = ("operations", "tensors", "devices")
_INFLIGHT_BYTES = 256 << 20
_PAUSE_ENV = "REPORTDB_MIGRATE_PAUSE"
_OURS = ("rdb_", "reportdb_")
_REFERENCES_OURS = re.compile(r"(?i)(?<![A-Za-z0-9_])(rdb_|reportdb_)")
_CREATE = re.compile(r"(?is)\s*CREATE\s")
_CONFIG_MAX_BYTES = 16 << 20

# Time allowed to copy one source table (its rows, then each index, view or trigger): COPY_SECONDS plus
# COPY_SECONDS_PER_ROW for each row. A source's CHECK constraints, expression indexes and generated columns are
# someone else's SQL that the copy evaluates row by row (a pathological LIKE pattern alone can take hours); a real
# report copies at well over 10,000 rows a second, so the bound stops only a hostile or damaged schema.
COPY_SECONDS = 60.0
COPY_SECONDS_PER_ROW = 0.001
# VM instructions between two looks at the clock during the copy: a few rows, since one hostile expression can
# take a second a row; costs ~30% of the table copy's time (400,000 rows: 0.25 -> 0.34 s), little next to tensors.
_COPY_PROGRESS_STEPS = 100

Progress = Callable[[int, int, int, int], None]  # files done, files total, bytes done, bytes total


class MigrationError(ReportDBError):
    """A legacy report folder cannot be migrated as asked; nothing was changed."""


class NotAReportFolderError(MigrationError, ReportNotFoundError):
    """The path is not a report folder (a folder holding a TTNN ``db.sqlite``)."""


class VerificationError(MigrationError):
    """Stored tensors failed verification; the destination was not replaced."""


class UnreadableTensorFileError(MigrationError):
    """A tensor file could not be read and ``strict`` was asked for."""


class UnsafeFolderError(MigrationError, UnsafeReportError):
    """The report folder holds something reportdb refuses to read through: its ``db.sqlite`` is a symbolic link or
    not a regular file (a FIFO would block forever), or its schema puts a view under one of reportdb's names."""


class MigrationWriteError(MigrationError):
    """Writing the new database failed (disk full, file size limit, I/O error); the message names what was kept."""


@dataclass(frozen=True)
class TensorFile:
    """One legacy tensor file and the key it is stored under."""

    path: Path
    tensor_id: int
    rank: int
    format: str
    nbytes: int


# --- public API -------------------------------------------------------------------------------


def migrate(
    src: str | os.PathLike[str],
    dst: str | os.PathLike[str] | None = None,
    *,
    jobs: int = 1,
    strict: bool = False,
    remove_legacy_files: bool = False,
    progress: Progress | None = None,
    stats: bool = True,
    compression: Compression = "none",
    copy_triggers: bool = False,
) -> dict[str, Any]:
    """Turn the report folder ``src`` into a self-contained report; return a summary.

    With ``dst``, ``dst`` becomes a new report folder (its ``db.sqlite`` plus the side files, never
    ``tensors/``) and ``src`` is not touched. Without it, ``src/db.sqlite`` is replaced atomically
    after success, and ``remove_legacy_files`` then deletes the imported tensor files, only after
    their values were compared with the stored ones. ``jobs`` processes decode files while this
    process writes. An unreadable file is logged and skipped unless ``strict``. ``stats=False`` skips
    the per-tensor statistics, which cost more CPU than decoding and storing together. ``compression="zstd"``
    stores compressible tensors zstd-compressed (see ``reportdb.store.codec``); this process compresses them.

    The source's triggers are not copied: a trigger is report-supplied SQL that would run on every later write
    to its table (reportdb refuses to write to a report that has one). ``copy_triggers=True`` copies them, except
    those on or naming reportdb's own tables, as the very last step, once every row and tensor is stored and
    verified, so none fires during the migration. Symbolic links and special files in the folder are never
    followed, copied or deleted; they, and any schema object not copied, are listed in ``summary["skipped"]``
    (entries ``{"kind", "name", "reason"}``) and in the migration log.
    """
    started = time.perf_counter()
    if jobs < 1:
        raise MigrationError(f"jobs must be at least 1, not {jobs}")
    codec_for(compression)  # an unknown name or a missing zstd library fails before anything is written
    src_dir = _report_folder(src)
    in_place = dst is None
    if not in_place and remove_legacy_files:
        raise MigrationError("--remove-legacy-files applies to in-place migration only: with -o, SRC is never touched")
    dst_dir = src_dir if dst is None else Path(dst)
    if not in_place:
        _check_destination(src_dir, dst_dir)
    else:
        _check_in_place(src_dir)
        done = _already_migrated(src_dir / DB_NAME)
        if done is not None:
            return _finish_already_migrated(src_dir, done, remove_legacy_files)

    partial = dst_dir / PARTIAL_NAME
    run_id = uuid.uuid4().hex
    files, unnamed, skipped = _scan_tensor_files(src_dir)
    side_files, side_skipped = _scan_side_files(src_dir) if not in_place else ([], [])
    skipped += side_skipped
    try:
        resumed = _prepare_partial(src_dir / DB_NAME, partial, run_id)
        with report_mod.Report(partial, "a", compression=compression) as report, report.connection() as conn:
            _write_once(conn, report.path)
            log = _Log(conn, run_id)
            tables = _table_counts(conn)
            stored = set(report.tensor_keys())  # carried over with the tables, or imported by an earlier run
            triggers, schema_skipped = _trigger_plan(src_dir / DB_NAME, conn, copy_triggers)
            skipped = _schema_skipped(conn) + schema_skipped + skipped
            for entry in skipped:
                message = f"{entry['kind']} {entry['name']}: {entry['reason']}"
                log.add("skipped", path=entry["name"], message=message, detail=entry)
            problems = _record_inventory(report, conn, log, src_dir, files, unnamed, stored)
            imported = _import_tensors(report, conn, log, src_dir, files, jobs, strict, stats, problems, progress)
            imported["carried_over"] = len(stored - {(f.tensor_id, f.rank) for f in files})
            by_format = dict(
                conn.execute(
                    "SELECT json_extract(source, '$.format'), COUNT(*) FROM rdb_tensor GROUP BY 1 ORDER BY 1"
                ).fetchall()
            )
            checked = verify(partial)
            if not checked["ok"]:
                raise VerificationError(f"{partial}: verification failed: {checked['problems'][:5]}")
            log.add("verified", message=f"{checked['tensors']} tensors, {checked['bytes_checked']} bytes re-hashed", detail=checked)
            _pause()
            summary = _summary(src_dir, dst_dir, in_place, run_id, resumed, tables, files, imported, by_format, problems, checked)
            summary["skipped"] = skipped
            summary["triggers_copied"] = [name for name, _ in triggers]
            log.add("summary", message="migration complete", detail=summary)
        if remove_legacy_files:
            unreadable = {p["path"] for p in problems["unreadable_files"] if "path" in p}
            against = _verify(partial, src_dir, excused=unreadable)
            if not against["ok"]:
                raise VerificationError(f"{partial}: values differ from the legacy files: {against['problems'][:5]}")
            summary["verified_against_legacy"] = _brief(against)
        _create_triggers(partial, triggers)
        _make_self_contained(partial)
        if not in_place:
            _copy_side_files(src_dir, dst_dir, side_files)
        _replace(partial, dst_dir / DB_NAME)
    except Exception as exc:
        failure = _write_failure(exc)
        if failure is None:
            raise
        raise MigrationWriteError(f"{dst_dir / DB_NAME}: {failure} while migrating; {_kept(partial)}") from exc
    if remove_legacy_files:
        summary["legacy_files_removed"] = _remove_imported_files(src_dir, files, problems)
    summary["bytes"]["after"] = (dst_dir / DB_NAME).stat().st_size
    summary["seconds"] = round(time.perf_counter() - started, 3)
    return summary


def verify(path: str | os.PathLike[str], *, against: str | os.PathLike[str] | None = None) -> dict[str, Any]:
    """Prove every stored tensor complete and re-hash its chunks (``Report.verify_tensor``), check the store's
    references (``Report.check_store``); with ``against`` (a legacy report folder) compare values too, and
    require every legacy tensor file there to be stored.

    Returns ``{"ok", "tensors", "blobs", "bytes_checked", "compared", "problems": [...]}``; never
    raises for a bad tensor, so one damaged tensor does not hide the others. A problem names its
    ``tensor_id`` and ``rank`` (None for the store as a whole) and says what is wrong in ``error``. A legacy
    report folder that was never migrated (tensor files beside a database that stores none) is not "0 tensors,
    ok": it raises :class:`VerificationError` pointing to ``reportdb migrate``.
    """
    return _verify(path, against)


def _verify(
    path: str | os.PathLike[str], against: str | os.PathLike[str] | None, excused: Collection[str] = ()
) -> dict[str, Any]:
    """:func:`verify`; legacy files whose relative paths are in ``excused`` (the unreadable ones a migration
    logged and kept) may be missing from the database."""
    problems: list[dict[str, Any]] = []
    seen_blobs: set[int] = set()
    checked = compared = 0
    pending = pending_legacy_files(path)
    src_dir = _report_folder(against) if against is not None else None
    legacy = _scan_tensor_files(src_dir)[0] if src_dir is not None else []
    by_key = {(f.tensor_id, f.rank): f.path for f in legacy}
    with report_mod.open(path, "r") as report, concurrent.futures.ThreadPoolExecutor(2) as hashers:
        keys = report.tensor_keys()
        if pending and not keys and not _has_migration_log(report):
            folder = _legacy_folder_of(path)
            names = ", ".join(pending[:3]) + (", ..." if len(pending) > 3 else "")
            raise VerificationError(
                f"{folder}: {len(pending)} legacy tensor files ({names})"
                f" and no tensor stored in {DB_NAME}: this report folder was never migrated; run "
                f"`reportdb migrate {folder} -o NEW_FOLDER` (or without -o to convert it in place), then verify that"
            )
        for tensor_id, rank in keys:
            try:
                checked += report.verify_tensor(tensor_id, rank, pool=hashers, skip=seen_blobs)
                if (tensor_id, rank) in by_key:
                    _compare_with_file(report, tensor_id, rank, by_key[tensor_id, rank])
                    compared += 1
            except Exception as exc:  # noqa: BLE001 - every failure is reported, none stops the rest
                problems.append({"tensor_id": tensor_id, "rank": rank, "error": f"{type(exc).__name__}: {exc}"})
        problems += [{"tensor_id": None, "rank": None, "error": text} for text in report.check_store()]
        stored = set(keys)
    if src_dir is not None:
        for f in legacy:
            rel = _rel(src_dir, f.path)
            if (f.tensor_id, f.rank) not in stored and rel not in excused:
                problems.append({
                    "tensor_id": f.tensor_id, "rank": f.rank, "path": rel,
                    "error": f"{rel} is not stored in the database (unreadable or not migrated: see rdb_migration_log)",
                })
    return {
        "path": str(report_mod.resolve_path(path)),
        "ok": not problems,
        "tensors": len(keys),
        "blobs": len(seen_blobs),
        "bytes_checked": checked,
        "against": None if against is None else str(against),
        "compared": compared,
        "problems": problems,
    }


def _has_migration_log(report: report_mod.Report) -> bool:
    """Whether a migration made this database (one whose every tensor file was unreadable stores none)."""
    with report.connection() as conn:
        return "rdb_migration_log" in _user_tables(conn)


def pending_legacy_files(path: str | os.PathLike[str]) -> list[str]:
    """Relative paths (``tensors/5.bin``, ...) of the legacy tensor files of the report folder ``path`` (or of the
    folder of its ``db.sqlite``) whose tensors its database does not store: what ``reportdb migrate`` would import.

    ``[]`` for a database file not named ``db.sqlite`` and for a folder without ``tensors/``. Cheap and safe on
    someone else's folder: names and lstat only (no file opened or decoded, no link followed) and one read-only
    query; a ``db.sqlite`` that is a link or a FIFO raises :class:`UnsafeFolderError`.
    """
    folder = _legacy_folder_of(path)
    if folder is None:
        return []
    files = _scan_tensor_files(folder)[0]
    if not files:
        return []
    db = folder / DB_NAME
    _check_db_file(db)
    try:
        with contextlib.closing(engine.connect(db, readonly=True)) as conn:
            kind = conn.execute("SELECT type FROM sqlite_master WHERE name='rdb_tensor'").fetchone()
            stored = set(conn.execute("SELECT tensor_id, rank FROM rdb_tensor")) if kind == ("table",) else set()
    except sqlite3.Error as exc:
        raise NotAReportError(f"{db}: not a readable SQLite report database ({exc})") from exc
    return [_rel(folder, f.path) for f in files if (f.tensor_id, f.rank) not in stored]


def _legacy_folder_of(path: str | os.PathLike[str]) -> Path | None:
    """The folder that may hold legacy tensor files for ``path``: the folder itself, or the folder of its
    ``db.sqlite``; None for a database file of another name (a report that is one file has no ``tensors/``)."""
    p = Path(path)
    if p.is_dir():
        return p
    return p.parent if p.name == DB_NAME else None


# --- checks on the way in ---------------------------------------------------------------------


def _report_folder(path: str | os.PathLike[str]) -> Path:
    """The report folder ``path`` names (a folder, or its ``db.sqlite``); raises if it is not one, or if its
    ``db.sqlite`` is a link or not a regular file (a FIFO would block the open forever)."""
    p = Path(path)
    if p.name == DB_NAME and not p.is_dir():
        p = p.parent
    if not p.exists():
        raise NotAReportFolderError(f"{p}: no such report folder")
    if not p.is_dir():
        raise NotAReportFolderError(f"{p}: not a report folder (expected a folder holding {DB_NAME})")
    db = p / DB_NAME
    _check_db_file(db)
    try:
        with contextlib.closing(engine.connect(db, readonly=True)) as conn:
            tables = _user_tables(conn)
    except sqlite3.Error as exc:
        raise NotAReportError(f"{db}: not a readable SQLite report database ({exc})") from exc
    if not tables & set(_REPORT_TABLES) and VERSION_TABLE not in tables:
        raise NotAReportFolderError(f"{db}: no report tables ({', '.join(_REPORT_TABLES)}); not a TTNN report")
    return p


def _check_destination(src_dir: Path, dst_dir: Path) -> None:
    if dst_dir.exists() and dst_dir.resolve() == src_dir.resolve():
        raise MigrationError(f"{dst_dir}: -o names the source folder; leave -o out to convert in place")
    if dst_dir.exists() and not dst_dir.is_dir():
        raise MigrationError(f"{dst_dir}: exists and is not a folder")
    if (dst_dir / DB_NAME).exists():
        raise MigrationError(f"{dst_dir / DB_NAME} already exists; choose a new folder or remove it")
    dst_dir.mkdir(parents=True, exist_ok=True)


def _check_in_place(src_dir: Path) -> None:
    """In place, a leftover WAL or hot journal of the old file must not be applied to the new one."""
    for suffix in ("-wal", "-journal"):
        side = src_dir / f"{DB_NAME}{suffix}"
        if side.exists() and side.stat().st_size > 0:
            raise MigrationError(
                f"{side} holds uncommitted or uncheckpointed changes; open {src_dir / DB_NAME} once with sqlite3 "
                "(or migrate with -o) first"
            )


def _already_migrated(db: Path) -> dict[str, Any] | None:
    """The stored summary when ``db`` is already the result of a migration, else None."""
    with contextlib.closing(engine.connect(db, readonly=True)) as conn:
        if "rdb_migration_log" not in _user_tables(conn):
            return None
        row = conn.execute(
            "SELECT detail FROM rdb_migration_log WHERE kind='summary' ORDER BY id DESC LIMIT 1"
        ).fetchone()
    return None if row is None else json.loads(row[0])


def _finish_already_migrated(src_dir: Path, summary: dict[str, Any], remove_legacy_files: bool) -> dict[str, Any]:
    """A rerun after success: nothing to import; optionally remove the legacy files once values compare equal."""
    summary = dict(summary, already_migrated=True)
    if remove_legacy_files and (src_dir / TENSORS_DIR).is_dir():
        against = _verify(src_dir, src_dir, excused=pending_legacy_files(src_dir))
        if not against["ok"]:
            raise VerificationError(f"{src_dir / DB_NAME}: values differ from the legacy files: {against['problems'][:5]}")
        summary["verified_against_legacy"] = _brief(against)
        files = _scan_tensor_files(src_dir)[0]
        with report_mod.open(src_dir, "r") as report:
            stored = set(report.tensor_keys())
        unreadable = {_rel(src_dir, f.path) for f in files if (f.tensor_id, f.rank) not in stored}
        summary["legacy_files_removed"] = _remove_imported_files(
            src_dir, files, {"unreadable_files": [{"path": p} for p in unreadable]}
        )
    summary["bytes"] = dict(summary.get("bytes", {}), after=(src_dir / DB_NAME).stat().st_size)
    return summary


# --- the partial database and the table copy ----------------------------------------------------


def _user_tables(conn: sqlite3.Connection, schema: str = "main") -> set[str]:
    return {
        r[0]
        for r in conn.execute(f"SELECT name FROM {schema}.sqlite_master WHERE type='table' AND name NOT LIKE 'sqlite_%'")
    }


def _fingerprint(db: Path) -> str:
    """What identifies the source database a partial file was built from."""
    stat = db.stat()
    return json.dumps({"path": str(db.resolve()), "size": stat.st_size, "mtime_ns": stat.st_mtime_ns})


def _prepare_partial(src_db: Path, partial: Path, run_id: str) -> bool:
    """Reuse a partial file built from this very source (True), or build a new one with every table copied.

    In place, the partial file sits in someone else's folder: a partial file (or journal) that is a link or not a
    regular file was not made by a run of ours and is removed (the link itself, never its target), not opened.
    A failed table copy removes the new file: it holds nothing worth resuming.
    """
    fingerprint = _fingerprint(src_db)
    kinds = {suffix: _lkind(Path(f"{partial}{suffix}")) for suffix in ("", *_SQLITE_SIDE)}
    if kinds[""] == "file" and all(k in (None, "file") for k in kinds.values()):
        # A read-write connection, so that a hot journal left by a killed run is rolled back first. The partial
        # file is written with synchronous=OFF (see _write_once): after an OS crash it may be damaged, so its
        # structure is checked before reuse (the tensor bytes are re-hashed by the final verification anyway).
        # Triggers are created only as the last step of a run (copy_triggers); one killed after that step left
        # them in the file, and they are dropped here (the next run creates them again, from the source).
        try:
            conn = sqlite3.connect(str(partial), isolation_level=None)
            try:
                conn.execute(f"PRAGMA busy_timeout={BUSY_TIMEOUT_MS}")
                row = conn.execute("SELECT value FROM rdb_meta WHERE key='migration_source'").fetchone()
                if row is not None and row[0] == fingerprint:
                    row = row if conn.execute("PRAGMA quick_check").fetchall() == [("ok",)] else None
                if row is not None and row[0] == fingerprint:
                    for (name,) in conn.execute("SELECT name FROM sqlite_master WHERE type='trigger'").fetchall():
                        conn.execute(f"DROP TRIGGER {_q(name)}")
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


def _lkind(path: Path) -> str | None:
    """``_kind`` of ``path`` without following a link; None when nothing is there."""
    try:
        return _kind(os.lstat(path).st_mode)
    except FileNotFoundError:
        return None


def _write_once(conn: sqlite3.Connection, path: Path) -> None:
    """Write the partial file's tensor bytes once: a rollback journal instead of WAL (whose checkpoint writes every
    byte a second time; pages appended to the file are not journaled at all), and no fsync per commit.

    Safe for this file only: a killed process leaves a consistent file (the journal reaches the OS before the
    pages it protects, and the next run rolls it back); an OS crash may damage it, which the next run's
    ``quick_check`` and the final re-hash of every tensor detect; and it becomes the report only after
    verification, through ``_replace``, which fsyncs it before the rename.
    """
    _leave_wal(conn, path)
    conn.execute("PRAGMA synchronous=OFF")


def _remove_db_file(db: Path) -> None:
    for suffix in ("", *_SQLITE_SIDE):
        Path(f"{db}{suffix}").unlink(missing_ok=True)


def _q(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


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
    conn = sqlite3.connect(str(partial), isolation_level=None)
    try:
        conn.execute(f"PRAGMA busy_timeout={BUSY_TIMEOUT_MS}")
        conn.execute("PRAGMA trusted_schema=OFF")  # the copied DDL is the source's
        _leave_wal(conn, partial)
        conn.execute("ATTACH DATABASE ? AS src", (engine.readonly_uri(src_db),))
        src_tables = _user_tables(conn, "src")
        reportdb_source = VERSION_TABLE in src_tables
        objects = conn.execute(
            "SELECT type, name, tbl_name, sql FROM src.sqlite_master WHERE sql IS NOT NULL AND name NOT LIKE 'sqlite_%' "
            "ORDER BY CASE type WHEN 'table' THEN 0 WHEN 'index' THEN 1 WHEN 'view' THEN 2 ELSE 3 END, rowid"
        ).fetchall()
        copy, skipped = _schema_plan(src_db, objects, reportdb_source)
        conn.execute("BEGIN IMMEDIATE")
        for name in sorted(_user_tables(conn)):
            if reportdb_source or not name.startswith(_OURS):
                conn.execute(f"DROP TABLE main.{_q(name)}")
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
    _pause()


def _schema_plan(
    src_db: Path, objects: list[tuple[str, str, str, str]], reportdb_source: bool
) -> tuple[list[tuple[str, str, str, str]], list[dict[str, Any]]]:
    """The source's schema objects to copy, in order, and the ones left out with why (triggers are all left to
    :func:`_trigger_plan`). A view or other non-table under reportdb's names is refused: reading through it could
    make any query on reportdb's tables spin."""
    copy: list[tuple[str, str, str, str]] = []
    skipped: list[dict[str, Any]] = []
    left_out: set[str] = set()
    for kind, name, table, sql in objects:
        reason = None
        if kind != "table" and name.startswith(_OURS):
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
        if kind == "table" and name.startswith(_OURS) and not reportdb_source:
            reason = "a table under reportdb's own names in a report that is not a reportdb database: not copied"
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


def _schema_skipped(conn: sqlite3.Connection) -> list[dict[str, Any]]:
    """What the table copy left out of the partial file (``_schema_plan``), as recorded in ``rdb_meta``."""
    row = conn.execute("SELECT value FROM rdb_meta WHERE key='migration_schema_skipped'").fetchone()
    return [] if row is None else list(json.loads(row[0]))


def _trigger_plan(
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
        elif table.startswith(_OURS) or _REFERENCES_OURS.search(sql):
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


def _create_triggers(partial: Path, triggers: list[tuple[str, str]]) -> None:
    """Create the copied triggers in the finished partial file, after every row and tensor is in (none fires)."""
    if not triggers:
        return
    conn = sqlite3.connect(str(partial), isolation_level=None)
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
    columns = [r[1] for r in conn.execute(f"PRAGMA src.table_xinfo({_q(table)})") if r[6] == 0]
    names = ", ".join(_q(c) for c in columns)
    rowid = _rowid_alias(conn, table, columns)
    expected = int(conn.execute(f"SELECT COUNT(*) FROM src.{_q(table)}").fetchone()[0])
    seconds = COPY_SECONDS + expected * COPY_SECONDS_PER_ROW
    with _time_bound(conn, seconds, f"table {table!r}"):
        if rowid is None:
            conn.execute(f"INSERT INTO main.{_q(table)} ({names}) SELECT {names} FROM src.{_q(table)}")
        else:
            conn.execute(
                f"INSERT INTO main.{_q(table)} ({rowid}, {names}) SELECT {rowid}, {names} FROM src.{_q(table)} ORDER BY {rowid}"
            )
    copied = conn.execute(f"SELECT COUNT(*) FROM main.{_q(table)}").fetchone()[0]
    if copied != expected:
        raise MigrationError(f"table {table}: copied {copied} of {expected} rows")
    return int(copied)


def _rowid_alias(conn: sqlite3.Connection, table: str, columns: list[str]) -> str | None:
    """A name for the hidden rowid not shadowed by a column; None for WITHOUT ROWID or INTEGER PRIMARY KEY tables."""
    info = conn.execute(f"PRAGMA src.table_info({_q(table)})").fetchall()
    pks = [r for r in info if r[5] > 0]
    if len(pks) == 1 and str(pks[0][2]).upper() == "INTEGER":
        return None  # the column is the rowid and is copied with the others
    lowered = {c.lower() for c in columns}
    for alias in ("rowid", "_rowid_", "oid"):
        if alias not in lowered:
            try:
                conn.execute(f"SELECT {alias} FROM src.{_q(table)} LIMIT 0")
            except sqlite3.OperationalError:
                return None  # WITHOUT ROWID
            return alias
    return None


def _table_counts(conn: sqlite3.Connection) -> dict[str, int]:
    """Row counts of the copied (non-reportdb) tables."""
    names = sorted(n for n in _user_tables(conn) if not n.startswith(("rdb_", "reportdb_")))
    return {n: conn.execute(f"SELECT COUNT(*) FROM {_q(n)}").fetchone()[0] for n in names}


# --- the report folder, read without following links ---------------------------------------------------------
#
# A report folder is someone else's: every entry is looked at with lstat (os.scandir with follow_symlinks=False),
# and only regular files and real folders are read, copied or deleted. Every symbolic link is skipped, wherever it
# points: ttnn never writes one, a link that resolves inside the folder now may be retargeted before it is read,
# and reading, copying or deleting through a link acts on something other than the entry the user sees (a
# ``tensors/`` link made ``--remove-legacy-files`` delete the files of another folder). FIFOs, sockets and devices
# are skipped too: opening a FIFO waits forever, and /dev/zero never ends. Whatever is skipped is logged
# (``rdb_migration_log``, kind ``skipped``) and listed in the summary (``summary["skipped"]``).

_SPECIAL_KINDS = {
    stat.S_IFIFO: "FIFO", stat.S_IFSOCK: "socket", stat.S_IFCHR: "character device", stat.S_IFBLK: "block device"
}
_NOFOLLOW = os.O_NOFOLLOW | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0)


def _kind(mode: int) -> str:
    """What an lstat mode describes: ``file``, ``folder``, ``symlink``, ``FIFO``, ``socket``, ``... device``."""
    if stat.S_ISREG(mode):
        return "file"
    if stat.S_ISDIR(mode):
        return "folder"
    if stat.S_ISLNK(mode):
        return "symlink"
    return _SPECIAL_KINDS.get(stat.S_IFMT(mode), "special file")


def _skipped(root: Path, path: Path, kind: str) -> dict[str, Any]:
    """The summary entry of a folder entry that was not read: what it is and why."""
    if kind == "symlink":
        try:
            target = os.readlink(path)
        except OSError:
            target = "?"
        reason = f"symbolic link to {target}: links are never followed"
    else:
        reason = f"{kind}: only regular files are read"
    return {"kind": kind, "name": _rel(root, path), "reason": reason}


def _check_db_file(db: Path) -> None:
    """Raise unless ``db`` is a regular file (not a link, not a FIFO that would block the open forever)."""
    try:
        kind = _kind(os.lstat(db).st_mode)
    except FileNotFoundError:
        raise NotAReportFolderError(f"{db.parent}: not a report folder (no {DB_NAME} in it)") from None
    if kind != "file":
        what = "a symbolic link" if kind == "symlink" else f"a {kind}"
        raise UnsafeFolderError(
            f"{db} is {what}, not a regular file; reportdb reads a report folder's {DB_NAME} only as a regular file "
            "(copy the real database file there)"
        )


def _scan_tensor_files(src_dir: Path) -> tuple[list[TensorFile], list[Path], list[dict[str, Any]]]:
    """Tensor files by key (``<id>.bin``, ``<id>_rank<r>.tensorbin``...), entries whose name gives no key (or
    folders), and the entries skipped (links, special files; ``tensors/`` itself when it is not a real folder).

    When one key has several files (``5.bin`` and ``5.pt``), the first in bin/tensorbin/pt order is
    the tensor and the others are listed as unusable. Names and lstat only: no file is opened.
    """
    folder = src_dir / TENSORS_DIR
    try:
        kind = _kind(os.lstat(folder).st_mode)
    except FileNotFoundError:
        return [], [], []
    if kind != "folder":
        return [], [], [_skipped(src_dir, folder, kind)]
    keyed: dict[tuple[int, int], list[TensorFile]] = collections.defaultdict(list)
    unnamed: list[Path] = []
    skipped: list[dict[str, Any]] = []
    with os.scandir(folder) as entries:
        found = sorted(((e.name, e.stat(follow_symlinks=False)) for e in entries), key=lambda t: t[0])
    for name, st in found:
        path = folder / name
        kind = _kind(st.st_mode)
        match = _FILE_NAME.match(name)
        if kind not in ("file", "folder"):
            skipped.append(_skipped(src_dir, path, kind))
        elif match is None or kind == "folder":
            unnamed.append(path)
        else:
            key = (int(match.group(1)), int(match.group(2) or 0))
            keyed[key].append(TensorFile(path, key[0], key[1], match.group(3), st.st_size))
    files: list[TensorFile] = []
    for key in sorted(keyed):
        candidates = sorted(keyed[key], key=lambda f: _FORMAT_ORDER[f.format])
        files.append(candidates[0])
        unnamed.extend(f.path for f in candidates[1:])
    return files, unnamed, skipped


def _scan_side_files(src_dir: Path) -> tuple[list[tuple[Path, bool]], list[dict[str, Any]]]:
    """The regular files and folders beside ``db.sqlite`` (config.json, cluster descriptors, per-rank configs...)
    that ``-o`` copies, recursively but never ``tensors/`` or the database's own files; and the entries skipped."""
    top_skip = {DB_NAME, TENSORS_DIR} | {f"{DB_NAME}{s}" for s in _SQLITE_SIDE}
    keep: list[tuple[Path, bool]] = []  # (path, is a folder), each folder before what it holds
    skipped: list[dict[str, Any]] = []

    def walk(folder: Path, top: bool) -> None:
        with os.scandir(folder) as entries:
            found = sorted(((e.name, e.stat(follow_symlinks=False)) for e in entries), key=lambda t: t[0])
        for name, st in found:
            if top and (name in top_skip or name.startswith(PARTIAL_NAME)):
                continue
            path = folder / name
            kind = _kind(st.st_mode)
            if kind in ("file", "folder"):
                keep.append((path, kind == "folder"))
            if kind == "folder":
                walk(path, False)
            elif kind != "file":
                skipped.append(_skipped(src_dir, path, kind))

    walk(src_dir, True)
    return keep, skipped


def _open_regular(path: Path) -> tuple[int, os.stat_result] | None:
    """A read descriptor of ``path`` and its stat when it is a regular file, opened without following a link or
    waiting on a FIFO (the check is on the opened file, so a swap after the scan changes nothing); else None."""
    try:
        fd = os.open(path, os.O_RDONLY | _NOFOLLOW)
    except OSError:
        return None  # a link (ELOOP), gone, or unreadable
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode):
        os.close(fd)
        return None
    return fd, st


def _read_small_file(path: Path, limit: int = _CONFIG_MAX_BYTES) -> bytes | None:
    """The bytes of a regular file of at most ``limit`` bytes (a config.json); None for anything else."""
    opened = _open_regular(path)
    if opened is None:
        return None
    fd, st = opened
    try:
        return os.read(fd, st.st_size) if st.st_size <= limit else None
    finally:
        os.close(fd)


def _copy_regular_file(src: Path, dst: Path) -> bool:
    """Copy a regular file with its mode and times, holes kept as holes (a 100 GB sparse file costs what it costs
    in the source, not 100 GB); False, and nothing written, when ``src`` is no longer a regular file."""
    opened = _open_regular(src)
    if opened is None:
        return False
    fd, st = opened
    try:
        out = os.open(dst, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0), 0o600)
        try:
            for start, end in _data_ranges(fd, st.st_size):
                _copy_range(fd, out, start, end)
            os.ftruncate(out, st.st_size)
            os.fchmod(out, stat.S_IMODE(st.st_mode))
            os.utime(out, ns=(st.st_atime_ns, st.st_mtime_ns))
        finally:
            os.close(out)
    finally:
        os.close(fd)
    return True


def _data_ranges(fd: int, size: int) -> Iterator[tuple[int, int]]:
    """The ``[start, end)`` ranges of a file that hold data (SEEK_DATA/SEEK_HOLE); the whole file where the file
    system cannot tell."""
    seek_data, seek_hole = getattr(os, "SEEK_DATA", None), getattr(os, "SEEK_HOLE", None)
    if seek_data is None or seek_hole is None:
        yield 0, size
        return
    pos = 0
    while pos < size:
        try:
            start = os.lseek(fd, pos, seek_data)
        except OSError as exc:
            if exc.errno == errno.ENXIO:
                return  # only a hole from pos to the end
            yield pos, size  # no hole support here: copy the rest
            return
        end = min(os.lseek(fd, start, seek_hole), size)
        if end > start:
            yield start, end
        pos = max(end, start + 1)


def _copy_range(src: int, dst: int, start: int, end: int) -> None:
    """Copy bytes ``[start, end)`` from ``src`` to the same offsets of ``dst`` in 1 MiB blocks."""
    pos = start
    while pos < end:
        block = os.pread(src, min(1 << 20, end - pos), pos)
        if not block:
            return  # the file shrank while being copied
        written = 0
        while written < len(block):
            written += os.pwrite(dst, block[written:], pos + written)
        pos += len(block)


# --- tensor files ----------------------------------------------------------------------------------


def _tensor_dump_enabled(src_dir: Path, files: list[TensorFile]) -> bool:
    """Whether the legacy writer dumped every tensor row: ``enable_detailed_tensor_report``, or files present."""
    for config in sorted(src_dir.glob("config*.json")):
        text = _read_small_file(config)  # not a link, FIFO or device, and not larger than a config can be
        try:
            value = json.loads(text or b"").get("enable_detailed_tensor_report")
        except (ValueError, AttributeError, RecursionError):
            continue
        if value is not None:
            return bool(value)
    return bool(files)


def _row_keys(conn: sqlite3.Connection) -> Iterator[tuple[int, int]]:
    """``(tensor_id, rank)`` of every ``tensors`` row."""
    if "tensors" not in _user_tables(conn):
        return
    has_rank = "rank" in {r[1] for r in conn.execute("PRAGMA table_info(tensors)")}
    query = "SELECT tensor_id, " + ("rank" if has_rank else "0") + " FROM tensors WHERE tensor_id IS NOT NULL"
    for tensor_id, rank in conn.execute(query):
        yield int(tensor_id), int(rank or 0)


def _record_inventory(
    report: report_mod.Report, conn: sqlite3.Connection, log: "_Log", src_dir: Path, files: list[TensorFile],
    unnamed: list[Path], stored: set[tuple[int, int]],
) -> dict[str, list[dict[str, Any]]]:
    """Log files without a row, rows without a file and files named unlike tensors; return them for the summary.

    A tensor already ``stored`` (carried over from a source that is itself a reportdb database, or imported by an
    earlier run) is neither missing nor a golden without a file.
    """
    rows = set(_row_keys(conn))
    keys = {(f.tensor_id, f.rank) for f in files} | stored
    problems: dict[str, list[dict[str, Any]]] = {
        "orphan_files": [], "missing_files": [], "unreadable_files": [], "golden_without_file": []
    }
    with report.batch():
        for f in files:
            if (f.tensor_id, f.rank) not in rows:
                entry: dict[str, Any] = {"tensor_id": f.tensor_id, "rank": f.rank, "path": _rel(src_dir, f.path)}
                problems["orphan_files"].append(entry)
                log.add("orphan_file", message="tensor file has no row in the tensors table", **entry)
        if _tensor_dump_enabled(src_dir, files):
            for tensor_id, rank in sorted(rows - keys):
                entry = {"tensor_id": tensor_id, "rank": rank}
                problems["missing_files"].append(entry)
                log.add("missing_file", message="tensors row has no tensor file", **entry)
        for path in unnamed:
            entry = {"path": _rel(src_dir, path), "error": "file name gives no tensor id (or another file has it)"}
            problems["unreadable_files"].append(entry)
            log.add("unreadable_file", path=entry["path"], message=entry["error"])
        for golden, records in sorted(_golden_links(conn).items()):
            if golden not in keys:
                entry = {"tensor_id": golden[0], "rank": golden[1], "golden_of": records}
                problems["golden_without_file"].append(entry)
    return problems


def _golden_links(conn: sqlite3.Connection) -> dict[tuple[int, int], list[dict[str, Any]]]:
    """Golden tensor key -> the comparison records that name it."""
    links: dict[tuple[int, int], list[dict[str, Any]]] = collections.defaultdict(list)
    tables = _user_tables(conn)
    for kind in ("local", "global"):
        table = f"{kind}_tensor_comparison_records"
        if table not in tables:
            continue
        has_rank = "rank" in {r[1] for r in conn.execute(f"PRAGMA table_info({table})")}
        query = f"SELECT tensor_id, golden_tensor_id, {'rank' if has_rank else '0'} FROM {table} WHERE golden_tensor_id IS NOT NULL"
        for tensor_id, golden, rank in conn.execute(query):
            links[int(golden), int(rank or 0)].append({"table": table, "tensor_id": tensor_id})
    return links


def _decoded(
    files: list[TensorFile], jobs: int, stats: bool, chunk_size: int, spool_dir: Path
) -> Iterator[tuple[TensorFile, DecodedFile]]:
    """Decode and prepare files in order; with ``jobs > 1`` in worker processes, at most ``2 * jobs`` files or
    ~256 MiB in flight, their bytes passed through spool files in ``spool_dir`` (removed on the way out; a
    killed run's leftovers are removed by the next one)."""
    shutil.rmtree(spool_dir, ignore_errors=True)  # what a killed run left
    if jobs == 1:
        for f in files:
            yield f, decode_file(str(f.path), stats, chunk_size)
        return
    spool_dir.mkdir()
    context = multiprocessing.get_context("spawn")
    try:
        with concurrent.futures.ProcessPoolExecutor(
            max_workers=jobs, mp_context=context, initializer=exit_with_parent, initargs=(os.getpid(),)
        ) as pool:
            pending: collections.deque[tuple[TensorFile, concurrent.futures.Future[Any]]] = collections.deque()
            queued = iter(enumerate(files))
            inflight = 0
            nxt = next(queued, None)
            while nxt is not None or pending:
                while nxt is not None and (
                    not pending or (len(pending) < 2 * jobs and inflight + nxt[1].nbytes <= _INFLIGHT_BYTES)
                ):
                    index, f = nxt
                    spool = str(spool_dir / f"{index}.bin")
                    pending.append((f, pool.submit(decode_file, str(f.path), stats, chunk_size, spool)))
                    inflight += f.nbytes
                    nxt = next(queued, None)
                f, future = pending.popleft()
                inflight -= f.nbytes
                decoded = future.result()
                decoded.unspool()
                yield f, decoded
    finally:
        shutil.rmtree(spool_dir, ignore_errors=True)


def _import_tensors(
    report: report_mod.Report,
    conn: sqlite3.Connection,
    log: "_Log",
    src_dir: Path,
    files: list[TensorFile],
    jobs: int,
    strict: bool,
    stats: bool,
    problems: dict[str, list[dict[str, Any]]],
    progress: Progress | None,
) -> dict[str, int]:
    """Store every file not stored yet; log each tensor, and each unreadable file (which ``strict`` makes fatal).
    ``conn`` is the report's connection (``report.connection()``), for the source rows it reads."""
    todo = [f for f in files if not report.has_tensor(f.tensor_id, f.rank)]
    total_bytes = sum(f.nbytes for f in files)
    done_bytes = total_bytes - sum(f.nbytes for f in todo)
    done_files = len(files) - len(todo)
    counts = {"files": len(files), "already_stored": done_files, "imported": 0, "unreadable": 0, "golden_linked": 0}
    goldens = _golden_links(conn)
    rows = _TensorRows(conn)
    if progress is not None:
        progress(done_files, len(files), done_bytes, total_bytes)
    with _Commits(report) as commits:
        for f, decoded in _decoded(todo, jobs, stats, report.chunk_size, Path(f"{report.path}-spool")):
            rel = _rel(src_dir, f.path)
            commits.open()
            if decoded.loaded is None:
                error = decoded.error
                if strict:
                    commits.commit()  # the files imported so far stay imported
                    raise UnreadableTensorFileError(
                        f"{f.path}: {error}; stopped there (strict; without it the file would be logged and skipped). "
                        + _kept(Path(report.path), "fix or remove that file")
                    )
                problems["unreadable_files"].append({"path": rel, "tensor_id": f.tensor_id, "rank": f.rank, "error": error})
                log.add("unreadable_file", tensor_id=f.tensor_id, rank=f.rank, path=rel, message=error)
                counts["unreadable"] += 1
            else:
                links = goldens.get((f.tensor_id, f.rank), [])
                _store(report, log, f, rel, decoded, rows.get(f), links, stats)
                counts["imported"] += 1
                counts["golden_linked"] += bool(links)
            done_files += 1
            done_bytes += f.nbytes
            commits.step(f.nbytes)
            if progress is not None:
                progress(done_files, len(files), done_bytes, total_bytes)
            _pause()
    return counts


class _Commits:
    """One transaction for many tensors, committed every ``FILES`` files, ``BYTES`` bytes or ``SECONDS`` seconds.

    A commit of a 64 KiB-page file rewrites every page it touched (indexes, table leaves) in the journal and the
    file, so one per small tensor cost more than the tensor (4 KiB tensors: ~570/s); grouped, a crash loses at
    most the last group, which the next run imports again (the committed ones it skips).
    """

    FILES = 256
    BYTES = 64 << 20
    SECONDS = 0.5

    def __init__(self, report: report_mod.Report) -> None:
        self.report = report
        self.batch: contextlib.AbstractContextManager[None] | None = None
        self.files = self.nbytes = 0
        self.since = 0.0

    def __enter__(self) -> "_Commits":
        return self

    def open(self) -> None:
        """Start a group's transaction (before the writes it holds; put_tensor's own batches nest in it)."""
        if self.batch is None:
            self.batch = self.report.batch()
            self.batch.__enter__()
            self.files = self.nbytes = 0
            self.since = time.monotonic()

    def step(self, nbytes: int) -> None:
        """Count one file done (its writes are in the open transaction); commit when the group is full or old."""
        self.files += 1
        self.nbytes += nbytes
        if self.files >= self.FILES or self.nbytes >= self.BYTES or time.monotonic() - self.since >= self.SECONDS:
            self.commit()

    def commit(self) -> None:
        self.__exit__(None, None, None)

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        batch, self.batch = self.batch, None
        if batch is not None:
            batch.__exit__(exc_type, exc, tb)  # COMMIT, or ROLLBACK of the unfinished group on an error


class _TensorRows:
    """The source ``tensors`` rows by (tensor id, rank), looked up with one prepared query shape."""

    def __init__(self, conn: sqlite3.Connection) -> None:
        self.conn = conn
        self.present = "tensors" in _user_tables(conn)
        self.ranked = self.present and "rank" in [r[1] for r in conn.execute("PRAGMA table_info(tensors)")]

    def get(self, f: TensorFile) -> dict[str, Any] | None:
        """The file's ``tensors`` row as ``{column: value}``, or None."""
        if not self.present:
            return None
        if self.ranked:
            cursor = self.conn.execute("SELECT * FROM tensors WHERE tensor_id=? AND rank=? LIMIT 1", (f.tensor_id, f.rank))
        else:
            cursor = self.conn.execute("SELECT * FROM tensors WHERE tensor_id=? LIMIT 1", (f.tensor_id,))
        row = cursor.fetchone()
        return None if row is None else dict(zip([d[0] for d in cursor.description], row))


def _store(
    report: report_mod.Report,
    log: "_Log",
    f: TensorFile,
    rel: str,
    decoded: DecodedFile,
    row: dict[str, Any] | None,
    golden_of: list[dict[str, Any]],
    stats: bool,
) -> None:
    """Store one decoded file (digests and statistics already computed) with its merged metadata, and log it,
    in one transaction."""
    loaded = decoded.loaded
    assert loaded is not None
    metadata = _merge_metadata(loaded.spec, row)
    source = dict(loaded.source, path=rel, legacy_row=row)
    if golden_of:
        source["golden_of"] = golden_of
    with report.batch():
        report.put_tensor(
            f.tensor_id, rank=f.rank, shards=loaded.shards, if_exists="skip", stats=stats, source=source,
            _prepared=decoded.prepared, **metadata.as_metadata(),
        )
        detail = {"format": loaded.source.get("format"), "nbytes": f.nbytes, "golden_of": golden_of or None}
        log.add("tensor", tensor_id=f.tensor_id, rank=f.rank, path=rel, message="imported", detail=detail)


def _merge_metadata(spec: TensorSpec, row: dict[str, Any] | None) -> TensorSpec:
    """The file's spec, with gaps filled from its ``tensors`` row (ttnn dtype, layout, shapes, memory config).

    Torch rows (``torch.float32``, ``torch.strided``) describe no ttnn dtype or layout and fill nothing.
    """
    if row is None:
        return spec
    fill: dict[str, Any] = {}
    dtype_text = str(row.get("dtype") or "")
    layout_text = str(row.get("layout") or "")
    if spec.ttnn_dtype is None and dtype_text.startswith("DataType"):
        fill["ttnn_dtype"] = parse_dtype(dtype_text)
    if spec.layout is None and layout_text.startswith("Layout"):
        fill["layout"] = parse_layout(layout_text)
    shape = parse_shape(row.get("shape")) if isinstance(row.get("shape"), str) else None
    if shape is not None:
        if spec.logical_shape is None:
            fill["logical_shape"] = tuple(shape["shape"])
        if spec.padded_shape is None and shape["padded_shape"] is not None:
            fill["padded_shape"] = tuple(shape["padded_shape"])
    if spec.memory_config is None and isinstance(row.get("memory_config"), str):
        fill["memory_config"] = parse_memory_config(row["memory_config"])
    return TensorSpec.from_json(dict(spec.as_metadata(), **{k: v for k, v in fill.items() if v is not None}))


def _compare_with_file(report: report_mod.Report, tensor_id: int, rank: int, path: Path) -> None:
    """Raise unless the stored shards equal the legacy file's shards, byte for byte in canonical form."""
    from .formats import load_tensor_file

    stored = report.shards(tensor_id, rank)
    legacy = load_tensor_file(path).shards
    if len(stored) != len(legacy):
        raise VerificationError(f"{len(stored)} shards stored, {len(legacy)} in {path}")
    for (coord_a, a), (coord_b, b) in zip(stored, legacy):
        b = canonical(b)
        if tuple(coord_a) != tuple(coord_b) or a.shape != b.shape or dtype_name(a.dtype) != dtype_name(b.dtype):
            raise VerificationError(
                f"shard at {list(coord_a)} is {dtype_name(a.dtype)}{list(a.shape)}, "
                f"{path} has {dtype_name(b.dtype)}{list(b.shape)} at {list(coord_b)}"
            )
        if not np.array_equal(a.reshape(-1).view(np.uint8), b.reshape(-1).view(np.uint8)):
            raise VerificationError(f"shard at {list(coord_a)} differs from {path}")


# --- the migration log and the summary -------------------------------------------------------------


class _Log:
    """Rows of ``rdb_migration_log`` for one run."""

    def __init__(self, conn: sqlite3.Connection, run_id: str) -> None:
        self.conn = conn
        self.run_id = run_id

    def add(
        self,
        kind: str,
        *,
        tensor_id: int | None = None,
        rank: int | None = None,
        path: str | None = None,
        message: str | None = None,
        detail: Any = None,
    ) -> None:
        self.conn.execute(
            "INSERT INTO rdb_migration_log(run_id, created_at, kind, tensor_id, rank, path, message, detail)"
            " VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
            (self.run_id, time.time(), kind, tensor_id, rank, path, message, None if detail is None else json.dumps(detail)),
        )


def _summary(
    src_dir: Path,
    dst_dir: Path,
    in_place: bool,
    run_id: str,
    resumed: bool,
    tables: dict[str, int],
    files: list[TensorFile],
    imported: dict[str, int],
    by_format: dict[str, int],
    problems: dict[str, list[dict[str, Any]]],
    checked: dict[str, Any],
) -> dict[str, Any]:
    db_bytes = (src_dir / DB_NAME).stat().st_size
    tensor_bytes = sum(f.nbytes for f in files)
    return {
        "source": str(src_dir),
        "destination": str(dst_dir),
        "in_place": in_place,
        "run_id": run_id,
        "resumed": resumed,
        "tables_copied": len(tables),
        "rows_copied": sum(tables.values()),
        "tables": tables,
        "tensors": dict(imported, stored=sum(by_format.values()), by_format=by_format),
        "problems": problems,
        "problem_count": sum(len(v) for k, v in problems.items() if k != "golden_without_file"),
        "verified": _brief(checked),
        "bytes": {"before": db_bytes + tensor_bytes, "before_db": db_bytes, "before_tensors": tensor_bytes, "after": None},
        "legacy_files_removed": 0,
    }


def _brief(checked: dict[str, Any]) -> dict[str, Any]:
    return {k: checked[k] for k in ("ok", "tensors", "blobs", "bytes_checked", "compared", "problems")}


def _rel(root: Path, path: Path) -> str:
    try:
        return str(path.relative_to(root))
    except ValueError:
        return str(path)


def _write_failure(exc: BaseException) -> str | None:
    """What went wrong when ``exc`` (or an error it was raised from) is a write that the disk refused: a full
    disk, a file size limit, an I/O error; None for any other error."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if isinstance(current, OSError) and current.errno in (errno.ENOSPC, getattr(errno, "EDQUOT", errno.ENOSPC)):
            return "the disk is full"
        if isinstance(current, OSError) and current.errno == errno.EFBIG:
            return "the file size limit was reached"
        if isinstance(current, sqlite3.Error):
            text = str(current).lower()
            if "database or disk is full" in text:
                return "the disk is full (or the file size limit was reached)"
            if "disk i/o error" in text:
                return "a disk I/O error occurred (a full disk, a file size limit or a failing device)"
        current = current.__cause__ or current.__context__
    return None


def _kept(partial: Path, todo: str = "make room") -> str:
    """The end of an error message: which partial file keeps the work done so far, and how to resume."""
    try:
        size = os.lstat(partial).st_size
    except FileNotFoundError:
        return f"nothing was kept: {todo} and run the same command again"
    return (
        f"{partial} ({size / 2**20:.1f} MiB) keeps the work done so far: {todo} and run the same command again to "
        "resume, or delete that file to give up"
    )


def _pause() -> None:
    """The documented test hook: sleep ``REPORTDB_MIGRATE_PAUSE`` seconds after each step (a tensor file, say)."""
    delay = os.environ.get(_PAUSE_ENV)
    if delay:
        time.sleep(float(delay))


# --- finishing -----------------------------------------------------------------------------------------


def _make_self_contained(db: Path) -> None:
    """Checkpoint the WAL into the file and leave rollback-journal mode, so the file alone is the report."""
    conn = sqlite3.connect(str(db), isolation_level=None)
    try:
        conn.execute(f"PRAGMA busy_timeout={BUSY_TIMEOUT_MS}")
        _leave_wal(conn, db)
    finally:
        conn.close()


def _leave_wal(conn: sqlite3.Connection, db: Path) -> None:
    """Switch to the rollback journal; SQLite refuses (without waiting) while another connection reads, so retry."""
    deadline = time.monotonic() + BUSY_TIMEOUT_MS / 1000
    while True:
        try:
            if str(conn.execute("PRAGMA journal_mode=DELETE").fetchone()[0]).lower() == "delete":
                return
        except sqlite3.OperationalError:
            pass
        if time.monotonic() > deadline:
            raise MigrationError(f"{db}: could not leave WAL mode (another process keeps it open)")
        time.sleep(0.01)


def _copy_side_files(src_dir: Path, dst_dir: Path, side_files: list[tuple[Path, bool]]) -> None:
    """Copy what ``_scan_side_files`` found beside ``db.sqlite`` (folders first, then their files); an entry that
    stopped being a regular file since the scan is not copied."""
    for path, is_folder in side_files:
        target = dst_dir / path.relative_to(src_dir)
        if is_folder:
            target.mkdir(exist_ok=True)
        else:
            _copy_regular_file(path, target)


def _replace(partial: Path, db: Path) -> None:
    """Rename the finished file over ``db`` atomically and make the rename durable."""
    with open(partial, "rb+") as handle:
        os.fsync(handle.fileno())
    os.replace(partial, db)
    for suffix in ("-wal", "-shm"):
        Path(f"{db}{suffix}").unlink(missing_ok=True)
    fd = os.open(db.parent, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _remove_imported_files(src_dir: Path, files: list[TensorFile], problems: dict[str, list[dict[str, Any]]]) -> int:
    """Delete the tensor files that were imported (never an unreadable one); drop ``tensors/`` when it is empty.

    Through a descriptor of the real ``tensors/`` folder, opened without following a link, and only regular
    files: a ``tensors/`` that is (or became) a link to another folder never loses a file.
    """
    keep = {p["path"] for p in problems.get("unreadable_files", []) if "path" in p}
    folder = src_dir / TENSORS_DIR
    try:
        fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | _NOFOLLOW)
    except OSError:
        return 0  # no tensors/ folder, or a link
    removed = 0
    try:
        for f in files:
            if _rel(src_dir, f.path) in keep:
                continue
            try:
                if not stat.S_ISREG(os.stat(f.path.name, dir_fd=fd, follow_symlinks=False).st_mode):
                    continue
            except FileNotFoundError:
                continue
            os.unlink(f.path.name, dir_fd=fd)
            removed += 1
        empty = not os.listdir(fd)
    finally:
        os.close(fd)
    if empty:
        with contextlib.suppress(OSError):  # rmdir never follows a link; a folder refilled meanwhile stays
            folder.rmdir()
    return removed
