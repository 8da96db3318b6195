"""The report folder, read without following links: its tensor files by key, the side files beside its database,
and how they match the rows of its ``tensors`` table.

A report folder is someone else's: every entry is looked at with lstat (os.scandir with follow_symlinks=False),
and only regular files and real folders are read, copied or deleted. Every symbolic link is skipped, wherever it
points: ttnn never writes one, a link that resolves inside the folder now may be retargeted before it is read,
and reading, copying or deleting through a link acts on something other than the entry the user sees (a
``tensors/`` link made ``--remove-legacy-files`` delete the files of another folder). FIFOs, sockets and devices
are skipped too: opening a FIFO waits forever, and /dev/zero never ends. Whatever is skipped is logged
(``rdb_migration_log``, kind ``skipped``) and listed in the summary (``summary["skipped"]``).
"""

from __future__ import annotations

import collections
import contextlib
import json
import os
import re
import sqlite3
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator

from .. import report as report_mod
from ..errors import NotAReportError
from ..store import engine
from ..store.schema import VERSION_TABLE, folded
from .common import (
    DB_NAME, PARTIAL_NAME, SQLITE_SIDE, TENSORS_DIR, MigrationLog, NotAReportFolderError, UnsafeFolderError, rel_path,
    user_tables,
)

_FILE_NAME = re.compile(r"^(\d+)(?:[._-]r(?:ank)?(\d+))?\.(bin|tensorbin|pt)$")
_FORMAT_ORDER = {"bin": 0, "tensorbin": 1, "pt": 2}
_REPORT_TABLES = ("operations", "tensors", "devices")
_CONFIG_MAX_BYTES = 16 << 20
_SPECIAL_KINDS = {
    stat.S_IFIFO: "FIFO", stat.S_IFSOCK: "socket", stat.S_IFCHR: "character device", stat.S_IFBLK: "block device"
}
NOFOLLOW = os.O_NOFOLLOW | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0)


@dataclass(frozen=True)
class TensorFile:
    """One legacy tensor file and the key it is stored under."""

    path: Path
    tensor_id: int
    rank: int
    format: str
    nbytes: int


def entry_kind(mode: int) -> str:
    """What an lstat mode describes: ``file``, ``folder``, ``symlink``, ``FIFO``, ``socket``, ``... device``."""
    if stat.S_ISREG(mode):
        return "file"
    if stat.S_ISDIR(mode):
        return "folder"
    if stat.S_ISLNK(mode):
        return "symlink"
    return _SPECIAL_KINDS.get(stat.S_IFMT(mode), "special file")


def path_kind(path: Path) -> str | None:
    """``entry_kind`` of ``path`` without following a link; None when nothing is there."""
    try:
        return entry_kind(os.lstat(path).st_mode)
    except FileNotFoundError:
        return None


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
    return {"kind": kind, "name": rel_path(root, path), "reason": reason}


def _check_db_file(db: Path) -> None:
    """Raise unless ``db`` is a regular file (not a link, not a FIFO that would block the open forever)."""
    try:
        kind = entry_kind(os.lstat(db).st_mode)
    except FileNotFoundError:
        raise NotAReportFolderError(f"{db.parent}: not a report folder (no {DB_NAME} in it)") from None
    if kind != "file":
        what = "a symbolic link" if kind == "symlink" else f"a {kind}"
        raise UnsafeFolderError(
            f"{db} is {what}, not a regular file; reportdb reads a report folder's {DB_NAME} only as a regular file "
            "(copy the real database file there)"
        )


def report_folder(path: str | os.PathLike[str]) -> Path:
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
            tables = user_tables(conn)
    except sqlite3.Error as exc:
        raise NotAReportError(f"{db}: not a readable SQLite report database ({exc})") from exc
    names = {folded(t) for t in tables}
    if not names & set(_REPORT_TABLES) and VERSION_TABLE not in names:
        raise NotAReportFolderError(f"{db}: no report tables ({', '.join(_REPORT_TABLES)}); not a TTNN report")
    return p


def legacy_folder_of(path: str | os.PathLike[str]) -> Path | None:
    """The folder that may hold legacy tensor files for ``path``: the folder itself, or the folder of its
    ``db.sqlite``; None for a database file of another name (a report that is one file has no ``tensors/``)."""
    p = Path(path)
    if p.is_dir():
        return p
    return p.parent if p.name == DB_NAME else None


def pending_legacy_files(path: str | os.PathLike[str]) -> list[str]:
    """Relative paths (``tensors/5.bin``, ...) of the legacy tensor files of the report folder ``path`` (or of the
    folder of its ``db.sqlite``) whose tensors its database does not store: what ``reportdb migrate`` would import.

    ``[]`` for a database file not named ``db.sqlite`` and for a folder without ``tensors/``. Cheap and safe on
    someone else's folder: names and lstat only (no file opened or decoded, no link followed) and one read-only
    query; a ``db.sqlite`` that is a link or a FIFO raises :class:`UnsafeFolderError`.
    """
    folder = legacy_folder_of(path)
    if folder is None:
        return []
    files = scan_tensor_files(folder)[0]
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
    return [rel_path(folder, f.path) for f in files if (f.tensor_id, f.rank) not in stored]


def scan_tensor_files(src_dir: Path) -> tuple[list[TensorFile], list[Path], list[dict[str, Any]]]:
    """Tensor files by key (``<id>.bin``, ``<id>_rank<r>.tensorbin``...), entries whose name gives no key (or
    folders), and the entries skipped (links, special files; ``tensors/`` itself when it is not a real folder).

    When one key has several files (``5.bin`` and ``5.pt``), the first in bin/tensorbin/pt order is
    the tensor and the others are listed as unusable. Names and lstat only: no file is opened.
    """
    folder = src_dir / TENSORS_DIR
    try:
        kind = entry_kind(os.lstat(folder).st_mode)
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
        kind = entry_kind(st.st_mode)
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


def scan_side_files(src_dir: Path) -> tuple[list[tuple[Path, bool]], list[dict[str, Any]]]:
    """The regular files and folders beside ``db.sqlite`` (config.json, cluster descriptors, per-rank configs...)
    that ``-o`` copies, recursively but never ``tensors/`` or the database's own files; and the entries skipped."""
    top_skip = {DB_NAME, TENSORS_DIR} | {f"{DB_NAME}{s}" for s in SQLITE_SIDE}
    keep: list[tuple[Path, bool]] = []  # (path, is a folder), each folder before what it holds
    skipped: list[dict[str, Any]] = []

    def walk(folder: Path, top: bool) -> None:
        with os.scandir(folder) as entries:
            found = sorted(((e.name, e.stat(follow_symlinks=False)) for e in entries), key=lambda t: t[0])
        for name, st in found:
            if top and (name in top_skip or name.startswith(PARTIAL_NAME)):
                continue
            path = folder / name
            kind = entry_kind(st.st_mode)
            if kind in ("file", "folder"):
                keep.append((path, kind == "folder"))
            if kind == "folder":
                walk(path, False)
            elif kind != "file":
                skipped.append(_skipped(src_dir, path, kind))

    walk(src_dir, True)
    return keep, skipped


def open_regular(path: Path) -> tuple[int, os.stat_result] | None:
    """A read descriptor of ``path`` and its stat when it is a regular file, opened without following a link or
    waiting on a FIFO (the check is on the opened file, so a swap after the scan changes nothing); else None."""
    try:
        fd = os.open(path, os.O_RDONLY | NOFOLLOW)
    except OSError:
        return None  # a link (ELOOP), gone, or unreadable
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode):
        os.close(fd)
        return None
    return fd, st


def _read_small_file(path: Path, limit: int = _CONFIG_MAX_BYTES) -> bytes | None:
    """The bytes of a regular file of at most ``limit`` bytes (a config.json); None for anything else."""
    opened = open_regular(path)
    if opened is None:
        return None
    fd, st = opened
    try:
        return os.read(fd, st.st_size) if st.st_size <= limit else None
    finally:
        os.close(fd)


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
    if "tensors" not in user_tables(conn):
        return
    has_rank = "rank" in {r[1] for r in conn.execute("PRAGMA table_info(tensors)")}
    query = "SELECT tensor_id, " + ("rank" if has_rank else "0") + " FROM tensors WHERE tensor_id IS NOT NULL"
    for tensor_id, rank in conn.execute(query):
        yield int(tensor_id), int(rank or 0)


def record_inventory(
    report: report_mod.Report, conn: sqlite3.Connection, log: MigrationLog, src_dir: Path, files: list[TensorFile],
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
                entry: dict[str, Any] = {"tensor_id": f.tensor_id, "rank": f.rank, "path": rel_path(src_dir, f.path)}
                problems["orphan_files"].append(entry)
                log.add("orphan_file", message="tensor file has no row in the tensors table", **entry)
        if _tensor_dump_enabled(src_dir, files):
            for tensor_id, rank in sorted(rows - keys):
                entry = {"tensor_id": tensor_id, "rank": rank}
                problems["missing_files"].append(entry)
                log.add("missing_file", message="tensors row has no tensor file", **entry)
        for path in unnamed:
            entry = {"path": rel_path(src_dir, path), "error": "file name gives no tensor id (or another file has it)"}
            problems["unreadable_files"].append(entry)
            log.add("unreadable_file", path=entry["path"], message=entry["error"])
        for golden, records in sorted(golden_links(conn).items()):
            if golden not in keys:
                entry = {"tensor_id": golden[0], "rank": golden[1], "golden_of": records}
                problems["golden_without_file"].append(entry)
    return problems


def golden_links(conn: sqlite3.Connection) -> dict[tuple[int, int], list[dict[str, Any]]]:
    """Golden tensor key -> the comparison records that name it."""
    links: dict[tuple[int, int], list[dict[str, Any]]] = collections.defaultdict(list)
    tables = user_tables(conn)
    for kind in ("local", "global"):
        table = f"{kind}_tensor_comparison_records"
        if table not in tables:
            continue
        has_rank = "rank" in {r[1] for r in conn.execute(f"PRAGMA table_info({table})")}
        query = f"SELECT tensor_id, golden_tensor_id, {'rank' if has_rank else '0'} FROM {table} WHERE golden_tensor_id IS NOT NULL"
        for tensor_id, golden, rank in conn.execute(query):
            links[int(golden), int(rank or 0)].append({"table": table, "tensor_id": tensor_id})
    return links
