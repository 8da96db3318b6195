"""What a report's files must be before SQLite opens them, and how to open one without writing.

SQLite trusts the files it is given: a FIFO or a device where the database or a side file should be blocks or reads
endless bytes, and a hot ``-journal`` that names a super-journal makes SQLite delete the named file wherever it is.
:func:`check_files` looks at them first with ``stat`` and reads (never opens blocking) what SQLite would act on;
:func:`readonly_uri` picks the URI that reads a database, in either journal mode, without creating or changing a file.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from ..errors import ReadOnlyError, ReportDBError, UnsafeReportError, excerpt

#: The side files SQLite may open beside a database: every one must be a regular file (:func:`check_files`).
SIDE_FILES = ("-journal", "-wal", "-shm")
_HEADER = b"SQLite format 3\x00"


def _side(path: Path, suffix: str) -> Path:
    return Path(f"{path}{suffix}")


def readonly_uri(path: Path) -> str:
    """The URI that reads ``path`` without writing or creating anything.

    A rollback-journal file opens with ``mode=ro&readonly_shm=1``: should a writer put it in WAL mode while this
    connection is open (:func:`share_file`), it reads through the writer's ``-shm`` without writing its read mark
    there (another process's connection; within one process SQLite shares one mapping of the ``-shm``). A WAL file
    (header bytes 18/19 == 2) would make ``mode=ro`` create ``-wal`` and ``-shm`` (or fail where the folder is not
    writable), so: with no side files, or an empty
    ``-wal`` and no ``-shm`` (no connection is live, all is in the file), it opens ``immutable=1``; with both
    side files it reads through the existing ``-shm`` opened read-only (``readonly_shm=1``), which also sees
    what a live writer has committed. A ``-wal`` holding content with no ``-shm`` to read it through cannot be
    read without creating a file: that is refused rather than silently reading stale data.
    """
    wal, shm = _side(path, "-wal"), _side(path, "-shm")
    base = path.resolve().as_uri()
    header = _header(path)
    is_wal = len(header) == 100 and header.startswith(_HEADER) and header[18] == 2 and header[19] == 2
    wal_size = wal.stat().st_size if wal.exists() else None
    if wal_size is not None and shm.exists():
        return f"{base}?mode=ro&readonly_shm=1"
    if wal_size:
        raise ReadOnlyError(
            f"{path}: its {wal.name} holds {wal_size} bytes of committed changes not yet copied into the database, "
            f"and there is no {shm.name} to read them through without creating a file (a writer crashed, or the file "
            f"was copied without it). Open it once with write access (`reportdb upgrade {path}`, or "
            f"reportdb.open(path, 'a')) to fold them in, then read it"
        )
    if is_wal or wal_size is not None:
        return f"{base}?immutable=1"
    return f"{base}?mode=ro&readonly_shm=1"


def _kind_of(mode: int) -> str:
    for test, name in ((stat.S_ISFIFO, "a FIFO (named pipe)"), (stat.S_ISCHR, "a character device"),
                       (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"), (stat.S_ISDIR, "a folder"),
                       (stat.S_ISLNK, "a symbolic link")):
        if test(mode):
            return name
    return "not a regular file"


def check_files(path: Path) -> None:
    """Refuse a database, or a side file SQLite would open beside it (``-journal``, ``-wal``, ``-shm``), that is not a
    regular file: opening a FIFO blocks until someone writes to it (every command hung), and a device reads as
    anything (``/dev/zero`` read as an empty report). Looked at with ``stat``, which opens nothing: the database may be
    a symbolic link to a regular file (SQLite then keeps its side files beside the link's target, looked at too), a
    side file must be a regular file itself. UnsafeReportError names what was found and what to do."""
    try:
        found = path.stat()
    except FileNotFoundError:
        found = None
    except OSError as exc:
        raise ReportDBError(f"{path}: cannot be read ({exc.strerror or exc})") from exc
    if found is not None and not stat.S_ISREG(found.st_mode):
        raise UnsafeReportError(
            f"{path}: is {_kind_of(found.st_mode)}, not a regular file; reportdb reads a report only from a regular "
            "file (reading this one could block forever or read endless bytes). Check what put it there"
        )
    real = os.path.realpath(path) if found is not None and os.path.islink(path) else str(path)
    for base in {str(path), real}:
        for suffix in SIDE_FILES:
            try:
                mode = os.lstat(base + suffix).st_mode
            except OSError:
                continue
            if not stat.S_ISREG(mode):
                raise UnsafeReportError(
                    f"{base}{suffix}: is {_kind_of(mode)}, not a regular file, where SQLite keeps the database's "
                    f"{suffix[1:]} file; opening it could block forever or write elsewhere. Remove it (nothing of the "
                    f"report is in it), then open {path} again"
                )
        named = _super_journal(base + "-journal")
        if named is not None:
            raise UnsafeReportError(
                f"{base}-journal: names {excerpt(named.decode('utf-8', 'replace'))} as its super-journal (a transaction "
                "across several databases, which reportdb never writes): rolling it back makes SQLite read that file "
                "and delete it, wherever it is. If you trust the report, remove its -journal and run `reportdb verify` "
                "(the unfinished transaction the journal would undo may be left half-written); else ask for a copy "
                "made after its writer finished"
            )


#: The magic number that begins every journal header and ends a super-journal record (SQLite's pager.c).
_JOURNAL_MAGIC = bytes.fromhex("d9d505f920a163d7")


def _super_journal(journal: str) -> bytes | None:
    """The super-journal name a rollback journal ends with, or None. SQLite (``readSuperJournal``) finds it at the
    journal's end: the name, its length, its checksum and the journal magic; a journal with one is rolled back by
    reading the named file as a list of journals and then deleting it. Read without blocking; every name SQLite could
    take is found (its page-number and checksum checks are not needed to refuse one)."""
    try:
        fd = os.open(journal, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOCTTY", 0))
    except OSError:
        return None  # no journal (or none readable, which SQLite could not roll back either)
    try:
        found = os.fstat(fd)
        size = found.st_size
        if not stat.S_ISREG(found.st_mode) or size < 20:
            return None
        tail = os.pread(fd, 16, size - 16)
        length = int.from_bytes(tail[:4], "big")
        if tail[8:] != _JOURNAL_MAGIC or not 0 < length <= min(size - 20, 1 << 16):
            return None
        return os.pread(fd, length, size - 16 - length).rstrip(b"\0") or None
    finally:
        os.close(fd)


def _header(path: Path) -> bytes:
    """The first 100 bytes of the database file, read without blocking (``O_NONBLOCK``: a FIFO swapped in after
    :func:`check_files` looked would block an ordinary open)."""
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOCTTY", 0))
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise UnsafeReportError(f"{path}: is not a regular file; reportdb reads a report only from a regular file")
        return os.read(fd, 100)
    finally:
        os.close(fd)
