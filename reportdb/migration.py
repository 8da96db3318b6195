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

``verify`` re-reads every stored tensor, checks its digests and, with ``against``, compares its
values with the legacy files.

Test hook: when the environment variable ``REPORTDB_MIGRATE_PAUSE`` holds a number of seconds,
``migrate`` sleeps that long after each step (table copy, each tensor file, verification), so tests can
kill it at chosen points. It changes nothing else.
"""

from __future__ import annotations

import collections
import concurrent.futures
import contextlib
import json
import multiprocessing
import os
import re
import shutil
import sqlite3
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterator

import numpy as np

from . import report as report_mod
from .dtypes import canonical, dtype_name
from .errors import NotAReportError, ReportDBError, ReportNotFoundError
from .prepare import DecodedFile, decode_file, exit_with_parent
from .memconfig import parse_dtype, parse_layout, parse_memory_config, parse_shape
from .spec import TensorSpec
from .store.codec import Compression, codec_for
from .store.engine import BUSY_TIMEOUT_MS
from .store.schema import VERSION_TABLE

__all__ = ["migrate", "verify", "MigrationError", "NotAReportFolderError", "VerificationError"]

DB_NAME = report_mod.DB_NAME
PARTIAL_NAME = ".db.sqlite.reportdb-partial"
TENSORS_DIR = "tensors"
_SQLITE_SIDE = ("-wal", "-shm", "-journal")
_FILE_NAME = re.compile(r"^(\d+)(?:[._-]r(?:ank)?(\d+))?\.(bin|tensorbin|pt)$")
_FORMAT_ORDER = {"bin": 0, "tensorbin": 1, "pt": 2}
_REPORT_TABLES = ("operations", "tensors", "devices")
_INFLIGHT_BYTES = 256 << 20
_PAUSE_ENV = "REPORTDB_MIGRATE_PAUSE"

Progress = Callable[[int, int, int, int], None]  # files done, files total, bytes done, bytes total


class MigrationError(ReportDBError):
    """A legacy report folder cannot be migrated as asked; nothing was changed."""


class NotAReportFolderError(MigrationError, ReportNotFoundError):
    """The path is not a report folder (a folder holding a TTNN ``db.sqlite``)."""


class VerificationError(MigrationError):
    """Stored tensors failed verification; the destination was not replaced."""


class UnreadableTensorFileError(MigrationError):
    """A tensor file could not be read and ``strict`` was asked for."""


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
) -> dict[str, Any]:
    """Turn the report folder ``src`` into a self-contained report; return a summary.

    With ``dst``, ``dst`` becomes a new report folder (its ``db.sqlite`` plus the side files, never
    ``tensors/``) and ``src`` is not touched. Without it, ``src/db.sqlite`` is replaced atomically
    after success, and ``remove_legacy_files`` then deletes the imported tensor files, only after
    their values were compared with the stored ones. ``jobs`` processes decode files while this
    process writes. An unreadable file is logged and skipped unless ``strict``. ``stats=False`` skips
    the per-tensor statistics, which cost more CPU than decoding and storing together. ``compression="zstd"``
    stores compressible tensors zstd-compressed (see ``reportdb.store.codec``); this process compresses them.
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
    files, unnamed = _scan_tensor_files(src_dir / TENSORS_DIR)
    resumed = _prepare_partial(src_dir / DB_NAME, partial, run_id)
    with report_mod.Report(partial, "a", compression=compression) as report, report.connection() as conn:
        _write_once(conn, report.path)
        log = _Log(conn, run_id)
        tables = _table_counts(conn)
        problems = _record_inventory(report, conn, log, src_dir, files, unnamed)
        imported = _import_tensors(report, conn, log, src_dir, files, jobs, strict, stats, problems, progress)
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
        log.add("summary", message="migration complete", detail=summary)
    if remove_legacy_files:
        against = verify(partial, against=src_dir)
        if not against["ok"]:
            raise VerificationError(f"{partial}: values differ from the legacy files: {against['problems'][:5]}")
        summary["verified_against_legacy"] = _brief(against)
    _make_self_contained(partial)
    if not in_place:
        _copy_side_files(src_dir, dst_dir)
    _replace(partial, dst_dir / DB_NAME)
    if remove_legacy_files:
        summary["legacy_files_removed"] = _remove_imported_files(src_dir, files, problems)
    summary["bytes"]["after"] = (dst_dir / DB_NAME).stat().st_size
    summary["seconds"] = round(time.perf_counter() - started, 3)
    return summary


def verify(path: str | os.PathLike[str], *, against: str | os.PathLike[str] | None = None) -> dict[str, Any]:
    """Re-hash every stored tensor's chunks; with ``against`` (a legacy report folder) compare values too.

    Returns ``{"ok", "tensors", "blobs", "bytes_checked", "compared", "problems": [...]}``; never
    raises for a bad tensor, so one damaged tensor does not hide the others.
    """
    problems: list[dict[str, Any]] = []
    seen_blobs: set[int] = set()
    checked = compared = 0
    legacy = _legacy_files_by_key(_report_folder(against)) if against is not None else {}
    with report_mod.open(path, "r") as report, concurrent.futures.ThreadPoolExecutor(2) as hashers:
        keys = report.tensor_keys()
        for tensor_id, rank in keys:
            try:
                checked += report.verify_tensor(tensor_id, rank, pool=hashers, skip=seen_blobs)
                if (tensor_id, rank) in legacy:
                    _compare_with_file(report, tensor_id, rank, legacy[tensor_id, rank])
                    compared += 1
            except Exception as exc:  # noqa: BLE001 - every failure is reported, none stops the rest
                problems.append({"tensor_id": tensor_id, "rank": rank, "error": f"{type(exc).__name__}: {exc}"})
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


# --- checks on the way in ---------------------------------------------------------------------


def _report_folder(path: str | os.PathLike[str]) -> Path:
    """The report folder ``path`` names (a folder, or its ``db.sqlite``); raises if it is not one."""
    p = Path(path)
    if p.is_file() and p.name == DB_NAME:
        p = p.parent
    if not p.exists():
        raise NotAReportFolderError(f"{p}: no such report folder")
    if not p.is_dir():
        raise NotAReportFolderError(f"{p}: not a report folder (expected a folder holding {DB_NAME})")
    db = p / DB_NAME
    if not db.is_file():
        raise NotAReportFolderError(f"{p}: not a report folder (no {DB_NAME} in it)")
    try:
        with _readonly(db) as conn:
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
    with _readonly(db) as conn:
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
        against = verify(src_dir, against=src_dir)
        if not against["ok"]:
            raise VerificationError(f"{src_dir / DB_NAME}: values differ from the legacy files: {against['problems'][:5]}")
        summary["verified_against_legacy"] = _brief(against)
        files, _ = _scan_tensor_files(src_dir / TENSORS_DIR)
        with report_mod.open(src_dir, "r") as report:
            stored = set(report.tensor_keys())
        unreadable = {str(f.path) for f in files if (f.tensor_id, f.rank) not in stored}
        summary["legacy_files_removed"] = _remove_imported_files(
            src_dir, files, {"unreadable_files": [{"path": p} for p in unreadable]}
        )
    summary["bytes"] = dict(summary.get("bytes", {}), after=(src_dir / DB_NAME).stat().st_size)
    return summary


# --- the partial database and the table copy ----------------------------------------------------


@contextlib.contextmanager
def _readonly(db: Path) -> Iterator[sqlite3.Connection]:
    """A read-only connection that can never write to ``db`` (or create a journal beside it); closed on exit."""
    conn = sqlite3.connect(f"{db.resolve().as_uri()}?mode=ro", uri=True, isolation_level=None)
    try:
        yield conn
    finally:
        conn.close()


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
    """Reuse a partial file built from this very source (True), or build a new one with every table copied."""
    fingerprint = _fingerprint(src_db)
    if partial.exists():
        # A read-write connection, so that a hot journal left by a killed run is rolled back first. The partial
        # file is written with synchronous=OFF (see _write_once): after an OS crash it may be damaged, so its
        # structure is checked before reuse (the tensor bytes are re-hashed by the final verification anyway).
        try:
            conn = sqlite3.connect(str(partial), isolation_level=None)
            try:
                conn.execute(f"PRAGMA busy_timeout={BUSY_TIMEOUT_MS}")
                row = conn.execute("SELECT value FROM rdb_meta WHERE key='migration_source'").fetchone()
                if row is not None and row[0] == fingerprint:
                    row = row if conn.execute("PRAGMA quick_check").fetchall() == [("ok",)] else None
            finally:
                conn.close()
        except sqlite3.Error:
            row = None
        if row is not None and row[0] == fingerprint:
            return True
    _remove_db_file(partial)
    report_mod.Report(partial, "a").close()  # an empty file with 64 KiB pages and reportdb's tables
    _copy_tables(src_db, partial, fingerprint, run_id)
    return False


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
    """Copy every source table (DDL, rows with their rowids, indexes, views, triggers) in one transaction.

    The empty report tables reportdb created are dropped first, so legacy tables keep exactly their
    own columns and a table the source lacks stays absent (the visualizer probes for tables and
    columns; an added one would change its answers). A source that already carries reportdb tables
    replaces them all. The rollback journal (not WAL) keeps the copy from being written twice.
    """
    conn = sqlite3.connect(partial.resolve().as_uri(), uri=True, isolation_level=None)
    try:
        conn.execute(f"PRAGMA busy_timeout={BUSY_TIMEOUT_MS}")
        _leave_wal(conn, partial)
        conn.execute("ATTACH DATABASE ? AS src", (f"{src_db.resolve().as_uri()}?mode=ro",))
        src_tables = _user_tables(conn, "src")
        reportdb_source = VERSION_TABLE in src_tables
        conn.execute("BEGIN IMMEDIATE")
        for name in sorted(_user_tables(conn)):
            if reportdb_source or name in src_tables or not name.startswith(("rdb_", "reportdb_")):
                conn.execute(f"DROP TABLE main.{_q(name)}")
        objects = conn.execute(
            "SELECT type, name, sql FROM src.sqlite_master WHERE sql IS NOT NULL AND name NOT LIKE 'sqlite_%' "
            "ORDER BY CASE type WHEN 'table' THEN 0 WHEN 'index' THEN 1 WHEN 'view' THEN 2 ELSE 3 END, rowid"
        ).fetchall()
        counts: dict[str, int] = {}
        for kind, name, sql in objects:
            if kind == "table":
                if sql.upper().startswith("CREATE VIRTUAL"):
                    raise MigrationError(f"{src_db}: table {name!r} is a virtual table, which migrate cannot copy")
                conn.execute(sql)
                counts[name] = _copy_rows(conn, name)
            else:
                conn.execute(sql)
        if not reportdb_source:
            now = time.time()
            conn.executemany(
                "INSERT INTO rdb_migration_log(run_id, created_at, kind, message, detail) VALUES (?, ?, 'table', ?, ?)",
                [(run_id, now, name, json.dumps({"rows": n})) for name, n in counts.items()],
            )
        conn.execute(
            "INSERT INTO rdb_meta(key, value) VALUES ('migration_source', ?) "
            "ON CONFLICT(key) DO UPDATE SET value=excluded.value",
            (fingerprint,),
        )
        conn.execute("COMMIT")
    except BaseException:
        if conn.in_transaction:
            conn.execute("ROLLBACK")
        raise
    finally:
        conn.close()
    _pause()


def _copy_rows(conn: sqlite3.Connection, table: str) -> int:
    """Copy a table's rows from ``src`` with their rowids (when it has them); check the count."""
    columns = [r[1] for r in conn.execute(f"PRAGMA src.table_xinfo({_q(table)})") if r[6] == 0]
    names = ", ".join(_q(c) for c in columns)
    rowid = _rowid_alias(conn, table, columns)
    if rowid is None:
        conn.execute(f"INSERT INTO main.{_q(table)} ({names}) SELECT {names} FROM src.{_q(table)}")
    else:
        conn.execute(
            f"INSERT INTO main.{_q(table)} ({rowid}, {names}) SELECT {rowid}, {names} FROM src.{_q(table)} ORDER BY {rowid}"
        )
    copied = conn.execute(f"SELECT COUNT(*) FROM main.{_q(table)}").fetchone()[0]
    expected = conn.execute(f"SELECT COUNT(*) FROM src.{_q(table)}").fetchone()[0]
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


# --- tensor files ----------------------------------------------------------------------------------


def _scan_tensor_files(folder: Path) -> tuple[list[TensorFile], list[Path]]:
    """Tensor files by key (``<id>.bin``, ``<id>_rank<r>.tensorbin``...), and files whose name gives no key.

    When one key has several files (``5.bin`` and ``5.pt``), the first in bin/tensorbin/pt order is
    the tensor and the others are listed as unusable.
    """
    if not folder.is_dir():
        return [], []
    keyed: dict[tuple[int, int], list[TensorFile]] = collections.defaultdict(list)
    unnamed: list[Path] = []
    for entry in sorted(folder.iterdir()):
        match = _FILE_NAME.match(entry.name)
        if match is None or not entry.is_file():
            unnamed.append(entry)
            continue
        key = (int(match.group(1)), int(match.group(2) or 0))
        keyed[key].append(TensorFile(entry, key[0], key[1], match.group(3), entry.stat().st_size))
    files: list[TensorFile] = []
    for key in sorted(keyed):
        candidates = sorted(keyed[key], key=lambda f: _FORMAT_ORDER[f.format])
        files.append(candidates[0])
        unnamed.extend(f.path for f in candidates[1:])
    return files, unnamed


def _legacy_files_by_key(src_dir: Path) -> dict[tuple[int, int], Path]:
    return {(f.tensor_id, f.rank): f.path for f in _scan_tensor_files(src_dir / TENSORS_DIR)[0]}


def _tensor_dump_enabled(src_dir: Path, files: list[TensorFile]) -> bool:
    """Whether the legacy writer dumped every tensor row: ``enable_detailed_tensor_report``, or files present."""
    for config in sorted(src_dir.glob("config*.json")):
        try:
            value = json.loads(config.read_text()).get("enable_detailed_tensor_report")
        except (OSError, ValueError, AttributeError):
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
    unnamed: list[Path],
) -> dict[str, list[dict[str, Any]]]:
    """Log files without a row, rows without a file and files named unlike tensors; return them for the summary."""
    rows = set(_row_keys(conn))
    keys = {(f.tensor_id, f.rank) for f in files}
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
                    raise UnreadableTensorFileError(f"{f.path}: {error} (without --strict it would be logged and skipped)")
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


def _copy_side_files(src_dir: Path, dst_dir: Path) -> None:
    """Copy everything beside ``db.sqlite`` (config.json, cluster descriptors, per-rank configs...) but ``tensors/``."""
    skip = {DB_NAME, TENSORS_DIR, PARTIAL_NAME} | {f"{DB_NAME}{s}" for s in _SQLITE_SIDE}
    for entry in sorted(src_dir.iterdir()):
        if entry.name in skip or entry.name.startswith(PARTIAL_NAME):
            continue
        target = dst_dir / entry.name
        if entry.is_dir():
            shutil.copytree(entry, target, dirs_exist_ok=True)
        else:
            shutil.copy2(entry, target)


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
    """Delete the tensor files that were imported (never an unreadable one); drop ``tensors/`` when it is empty."""
    keep = {str(src_dir / p["path"]) for p in problems.get("unreadable_files", []) if "path" in p}
    keep |= {p["path"] for p in problems.get("unreadable_files", []) if "path" in p}
    removed = 0
    for f in files:
        if str(f.path) not in keep and f.path.exists():
            f.path.unlink()
            removed += 1
    folder = src_dir / TENSORS_DIR
    if folder.is_dir() and not any(folder.iterdir()):
        folder.rmdir()
    return removed
