"""Legacy report folder (``db.sqlite`` + ``tensors/``) -> one self-contained report database: :func:`migrate`
runs the steps of the other ``reportdb.legacy`` modules in order.

``migrate`` builds the new database as a partial file beside its destination
(``<folder>/.db.sqlite.reportdb-partial``): the source tables are copied verbatim (``tables``); every tensor file
is decoded (``decode``) and stored under its tensor id and rank (``importer``); then every stored blob is re-hashed
(``verification``), and only then is the partial file renamed over the destination ``db.sqlite`` (``finish``). The
source is opened read-only and never written. A killed run leaves the partial file behind on purpose: running the
same command again reopens it and skips tensors already stored (they are committed in groups of up to 256 files,
64 MiB or 0.5 s, so only the last, unfinished group is decoded again).

Throughput: with ``jobs > 1`` the worker processes also compute each shard's chunk digests and statistics
and hand the bytes over through spool files beside the partial file, so this process only writes; the partial
file uses a rollback journal with ``synchronous=OFF``, so each tensor byte is written once (see
``tables.write_once`` for why that is safe for a file renamed into place only after verification).

The folder is someone else's, read as hostile input (see ``inventory``): no symbolic link is followed, no special
file opened, nothing deleted through a link; the source database is read through ``engine.connect(readonly=True)``,
which changes no byte or mtime of it or its side files; its triggers are not copied unless asked
(``copy_triggers``), and copying its tables is bounded in time (``tables.COPY_SECONDS``). What was left out is
listed in the summary and the migration log. A write the disk refuses (full, file size limit) is a one-line
``MigrationWriteError`` naming the partial file that a rerun resumes from.
"""

from __future__ import annotations

import contextlib
import errno
import os
import sqlite3
import time
import uuid
from dataclasses import replace
from pathlib import Path
from typing import Any, Iterable

from .. import report as report_mod
from ..store import engine
from ..store.codec import Compression, codec_for
from .common import (
    DB_NAME, PARTIAL_NAME, MigrationError, MigrationLog, MigrationWriteError, Progress, VerificationError, kept,
    user_tables,
)
from .finish import copy_side_files, finish_already_migrated, make_self_contained, remove_imported_files, replace_destination
from .importer import import_tensors
from .sidecars import find_sidecars, import_sidecars, read_sidecars
from .inventory import TensorFile, record_inventory, report_folder, scan_side_files, scan_tensor_files
from .tables import create_triggers, prepare_partial, schema_left_out, table_counts, trigger_plan, write_once
from .summary import ByteCounts, MigrationSummary, Skipped, TensorCounts
from .verification import VerifyResult, verify, verify_report


#: Suffixes of a database file, which a destination folder is not given (``-o r.sqlite`` made a folder of that name).
_FILE_SUFFIXES = (".sqlite", ".sqlite3", ".db")


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
    sidecars: Iterable[str | os.PathLike[str]] | None = None,
) -> MigrationSummary:
    """Turn the report folder ``src`` into a self-contained report; return a summary of what was done.

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
    followed, copied or deleted; they, and any schema object not copied, are listed in ``summary.skipped`` and in
    the migration log.

    ttnn 0.81's comparison-records and tensor-lifetime sidecars (``sidecars``, by default those in ``src``:
    ``*.comparison_records.json``, ``comparison_records.json``, ``*.tensor_lifetime.json``) are read into the
    report's tables (``reportdb.legacy.sidecars``); a malformed one, or one whose rows contradict the tables, is a
    SidecarError raised before anything is written.
    """
    started = time.perf_counter()
    if jobs < 1:
        raise MigrationError(f"jobs must be at least 1, not {jobs}")
    codec_for(compression)  # an unknown name or a missing zstd library fails before anything is written
    src_dir = report_folder(src)
    cars = read_sidecars(find_sidecars(src_dir) if sidecars is None else sidecars)
    with contextlib.closing(engine.connect(src_dir / DB_NAME, readonly=True)) as source:
        import_sidecars(source, cars, write=False)  # a contradiction is refused before anything is written
    in_place = dst is None
    if not in_place and remove_legacy_files:
        raise MigrationError("--remove-legacy-files applies to in-place migration only: with -o, SRC is never touched")
    dst_dir = src_dir if dst is None else Path(dst)
    if not in_place and dst_dir.suffix.lower() in _FILE_SUFFIXES and not dst_dir.is_dir():
        raise MigrationError(
            f"{dst_dir}: migrate writes a report folder (its db.sqlite, with the source's config.json and other side "
            f"files beside it), not a lone database file: name a folder, such as {dst_dir.with_suffix('')}; its "
            "db.sqlite alone holds every table and tensor"
        )
    if not in_place:
        _check_destination(src_dir, dst_dir)
    else:
        _check_in_place(src_dir)
        done = _already_migrated(src_dir / DB_NAME)
        if done is not None:
            return replace(
                finish_already_migrated(src_dir, done, remove_legacy_files), seconds=round(time.perf_counter() - started, 3)
            )

    partial = dst_dir / PARTIAL_NAME
    run_id = uuid.uuid4().hex
    files, unnamed, skipped = scan_tensor_files(src_dir)
    side_files, side_skipped = scan_side_files(src_dir) if not in_place else ([], [])
    skipped += side_skipped
    try:
        resumed = prepare_partial(src_dir / DB_NAME, partial, run_id)
        with report_mod.Report(partial, "a", compression=compression) as report, report.connection() as conn:
            write_once(conn, report.path)
            log = MigrationLog(conn, run_id)
            tables = table_counts(conn)
            stored = set(report.tensor_keys())  # carried over with the tables, or imported by an earlier run
            triggers, schema_skipped = trigger_plan(src_dir / DB_NAME, conn, copy_triggers)
            skipped = schema_left_out(conn) + schema_skipped + skipped
            for entry in skipped:
                message = f"{entry['kind']} {entry['name']}: {entry['reason']}"
                log.add("skipped", path=entry["name"], message=message, detail=entry)
            summary_skipped = tuple(Skipped(**entry) for entry in skipped)
            problems = record_inventory(report, conn, log, src_dir, files, unnamed, stored)
            imported = import_tensors(report, conn, log, src_dir, files, jobs, strict, stats, problems, progress)
            with report.batch():
                sidecar_rows = import_sidecars(conn, cars).to_dict() if cars else None
                if sidecar_rows is not None:
                    log.add("sidecars", message=f"{len(cars)} sidecar(s) read into the tables", detail=sidecar_rows)
            by_format = {
                "unknown" if fmt is None else str(fmt): n
                for fmt, n in conn.execute(
                    "SELECT json_extract(source, '$.format'), COUNT(*) FROM rdb_tensor GROUP BY 1 ORDER BY 1"
                )
            }
            counts = TensorCounts(
                **imported, carried_over=len(stored - {(f.tensor_id, f.rank) for f in files}),
                stored=sum(by_format.values()), by_format=by_format,
            )
            checked = verify(partial)
            if not checked.ok:
                raise VerificationError(f"{partial}: verification failed: {checked.problems_text()}")
            log.add("verified", message=f"{checked.tensors} tensors, {checked.bytes_checked} bytes re-hashed", detail=checked.to_dict())
            summary = _summary(src_dir, dst_dir, in_place, run_id, resumed, tables, files, counts, problems, checked)
            summary = replace(summary, skipped=summary_skipped, triggers_copied=tuple(name for name, _ in triggers),
                              sidecars=sidecar_rows)
            log.add("summary", message="migration complete", detail=summary.to_dict())
        if remove_legacy_files:
            unreadable = {p["path"] for p in problems["unreadable_files"] if "path" in p}
            against = verify_report(partial, src_dir, excused=unreadable)
            if not against.ok:
                raise VerificationError(f"{partial}: values differ from the legacy files: {against.problems_text()}")
            summary = replace(summary, verified_against_legacy=replace(against, path=str(dst_dir / DB_NAME)))
        create_triggers(partial, triggers)
        make_self_contained(partial)
        if not in_place:
            copy_side_files(src_dir, dst_dir, side_files)
        replace_destination(partial, dst_dir / DB_NAME)
    except Exception as exc:
        failure = _write_failure(exc)
        if failure is None:
            raise
        raise MigrationWriteError(f"{dst_dir / DB_NAME}: {failure} while migrating; {kept(partial)}") from exc
    if remove_legacy_files:
        summary = replace(summary, legacy_files_removed=remove_imported_files(src_dir, files, problems))
    return replace(
        summary, bytes=replace(summary.bytes, after=(dst_dir / DB_NAME).stat().st_size),
        seconds=round(time.perf_counter() - started, 3),
    )


def _check_destination(src_dir: Path, dst_dir: Path) -> None:
    """Refuse a ``-o`` folder that is the source, a file, or already holds a database; create it otherwise."""
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


def _already_migrated(db: Path) -> MigrationSummary | None:
    """The stored summary when ``db`` is already the result of a migration, else None."""
    with contextlib.closing(engine.connect(db, readonly=True)) as conn:
        if "rdb_migration_log" not in user_tables(conn):
            return None
        row = conn.execute(
            "SELECT detail FROM rdb_migration_log WHERE kind='summary' ORDER BY id DESC LIMIT 1"
        ).fetchone()
    return None if row is None else MigrationSummary.from_json(row[0], f"{db}: table rdb_migration_log")


def _summary(
    src_dir: Path,
    dst_dir: Path,
    in_place: bool,
    run_id: str,
    resumed: bool,
    tables: dict[str, int],
    files: list[TensorFile],
    counts: TensorCounts,
    problems: dict[str, list[dict[str, Any]]],
    checked: VerifyResult,
) -> MigrationSummary:
    """The summary :func:`migrate` returns and logs, from what each step counted (the verification of the partial
    file named by the database it becomes)."""
    db_bytes = (src_dir / DB_NAME).stat().st_size
    tensor_bytes = sum(f.nbytes for f in files)
    return MigrationSummary(
        source=str(src_dir), destination=str(dst_dir), in_place=in_place, run_id=run_id, resumed=resumed,
        tables_copied=len(tables), rows_copied=sum(tables.values()), tables=tables, tensors=counts,
        problems={k: tuple(v) for k, v in problems.items()},
        problem_count=sum(len(v) for k, v in problems.items() if k != "golden_without_file"),
        verified=replace(checked, path=str(dst_dir / DB_NAME)),
        bytes=ByteCounts(before=db_bytes + tensor_bytes, before_db=db_bytes, before_tensors=tensor_bytes, after=None),
    )


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
