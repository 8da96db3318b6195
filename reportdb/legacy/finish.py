"""The end of a migration: the verified partial file made self-contained and renamed over the destination, the
side files copied (holes kept, no link followed), and with ``remove_legacy_files`` the imported tensor files
deleted; also the rerun of a migration that already succeeded."""

from __future__ import annotations

import contextlib
import errno
import os
import stat
from dataclasses import replace
from pathlib import Path
from typing import Any, Iterator

from .. import report as report_mod
from ..store import engine
from ..store.engine import BUSY_TIMEOUT_MS
from .common import DB_NAME, TENSORS_DIR, VerificationError, leave_wal, rel_path
from .inventory import NOFOLLOW, TensorFile, open_regular, pending_legacy_files, scan_tensor_files
from .summary import MigrationSummary
from .verification import verify_report


def finish_already_migrated(src_dir: Path, summary: MigrationSummary, remove_legacy_files: bool) -> MigrationSummary:
    """A rerun after success: nothing to import; optionally remove the legacy files once values compare equal."""
    summary = replace(summary, already_migrated=True)
    if remove_legacy_files and (src_dir / TENSORS_DIR).is_dir():
        against = verify_report(src_dir, src_dir, excused=pending_legacy_files(src_dir))
        if not against.ok:
            raise VerificationError(f"{src_dir / DB_NAME}: values differ from the legacy files: {against.problems_text()}")
        files = scan_tensor_files(src_dir)[0]
        with report_mod.open(src_dir, "r") as report:
            stored = set(report.tensor_keys())
        unreadable = {rel_path(src_dir, f.path) for f in files if (f.tensor_id, f.rank) not in stored}
        removed = remove_imported_files(src_dir, files, {"unreadable_files": [{"path": p} for p in unreadable]})
        summary = replace(summary, verified_against_legacy=against, legacy_files_removed=removed)
    return replace(summary, bytes=replace(summary.bytes, after=(src_dir / DB_NAME).stat().st_size))


def make_self_contained(db: Path) -> None:
    """Checkpoint the WAL into the file and leave rollback-journal mode, so the file alone is the report."""
    conn = engine.connect_plain(db)
    try:
        conn.execute(f"PRAGMA busy_timeout={BUSY_TIMEOUT_MS}")
        leave_wal(conn, db)
    finally:
        conn.close()


def copy_side_files(src_dir: Path, dst_dir: Path, side_files: list[tuple[Path, bool]]) -> None:
    """Copy what ``scan_side_files`` found beside ``db.sqlite`` (folders first, then their files); an entry that
    stopped being a regular file since the scan is not copied."""
    for path, is_folder in side_files:
        target = dst_dir / path.relative_to(src_dir)
        if is_folder:
            target.mkdir(exist_ok=True)
        else:
            _copy_regular_file(path, target)


def _copy_regular_file(src: Path, dst: Path) -> bool:
    """Copy a regular file with its mode and times, holes kept as holes (a 100 GB sparse file costs what it costs
    in the source, not 100 GB); False, and nothing written, when ``src`` is no longer a regular file."""
    opened = open_regular(src)
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


def replace_destination(partial: Path, db: Path) -> None:
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


def remove_imported_files(src_dir: Path, files: list[TensorFile], problems: dict[str, list[dict[str, Any]]]) -> int:
    """Delete the tensor files that were imported (never an unreadable one); drop ``tensors/`` when it is empty.

    Through a descriptor of the real ``tensors/`` folder, opened without following a link, and only regular
    files: a ``tensors/`` that is (or became) a link to another folder never loses a file.
    """
    keep = {p["path"] for p in problems.get("unreadable_files", []) if "path" in p}
    folder = src_dir / TENSORS_DIR
    try:
        fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | NOFOLLOW)
    except OSError:
        return 0  # no tensors/ folder, or a link
    removed = 0
    try:
        for f in files:
            if rel_path(src_dir, f.path) in keep:
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
